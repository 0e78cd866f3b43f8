// The gpu_worker's attention over tiles in device memory (the ping-pong buffers, the
// D-window, a prefill chunk's own blocks), behind one interface so that the step runner
// is the same on both devices:
//   host device  the CPU kernels (kernels/cpu_attention.h): "device" memory is host memory;
//   CUDA device  the CUDA kernels (kernels/cuda/cuda_attention.h), q and the outputs copied
//                through device staging buffers.
// Arguments follow kernels/attention.h with one difference: the tile pointers of every
// KvBlockList are DEVICE addresses, while q, o, lse (and the lists themselves) live in
// host memory. Every call is synchronous: outputs are valid on return.
#ifndef WRITESCOPE_GPU_WORKER_DEVICE_ATTENTION_H_
#define WRITESCOPE_GPU_WORKER_DEVICE_ATTENTION_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu_worker/device.h"
#include "kernels/attention.h"
#include "kernels/cuda/cuda_attention.h"  // GqaDecodeKernel (plain C++, no CUDA header)

namespace writescope::gpu {

class DeviceAttention {
 public:
  virtual ~DeviceAttention() = default;
  virtual absl::Status GqaDecode(const kernels::GqaDecodeArgs& args) = 0;
  virtual absl::Status GqaPrefill(const kernels::GqaPrefillArgs& args) = 0;
  virtual absl::Status MlaDecode(const kernels::MlaDecodeArgs& args) = 0;
  virtual absl::Status MlaPrefill(const kernels::MlaPrefillArgs& args) = 0;
};

struct DeviceAttentionOptions {
  // The GQA tensor-core decode kernel on the CUDA device (kernels/cuda/cuda_attention.h;
  // kDefault: bulk4). The host device runs the CPU kernels whatever it says.
  kernels::cuda::GqaDecodeKernel gqa_decode_kernel = kernels::cuda::GqaDecodeKernel::kDefault;
};

// The implementation for `device` (not owned; must outlive the result).
absl::StatusOr<std::unique_ptr<DeviceAttention>> CreateDeviceAttention(
    Device* device, const DeviceAttentionOptions& options = {});

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_DEVICE_ATTENTION_H_
