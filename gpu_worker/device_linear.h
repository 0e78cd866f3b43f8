// The gpu_worker's matrix products on the device (kernels/model/decoder_ops.h LinearBackend):
// y = x W^T for every 2-D attention-side weight (projections, routers, shared experts, dense
// MLPs, lm_head) on the weight's bf16 copy in DeviceWeights, on the compute stream, x and y
// copied through device staging buffers. x is split three ways into bf16 (kernels/cuda/
// cuda_convert.h SplitToBf16x3: hi + mid + lo == x) and one tensor-core product with fp32
// accumulation takes the three, the inner dimension in slices added in fp32: as accurate as
// the host path's (oneDNN fp32 on the widened bf16 weights; device_linear_test), at the
// weights' bf16 bytes of VRAM, held once.
//
// Null on the host device (the host Linear runs there).
#ifndef WRITESCOPE_GPU_WORKER_DEVICE_LINEAR_H_
#define WRITESCOPE_GPU_WORKER_DEVICE_LINEAR_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/logit_row_stats.h"
#include "common/model_weights.h"
#include "gpu_worker/device.h"
#include "gpu_worker/device_weights.h"
#include "kernels/model/decoder_ops.h"

namespace writescope::gpu {

class DeviceLinear {
 public:
  virtual ~DeviceLinear() = default;
  virtual absl::Status Linear(const float* x, int64_t tokens, const kernels::model::LinearWeight& w,
                              float* y) = 0;
  // stats[t] = the LogitRowStats (common/logit_row_stats.h) of row t of x W^T: the product
  // stays on the device, reduced there (kernels/cuda/cuda_logits.h), and only the stats come
  // back, synchronized. For lm_head at a greedy step: 24 bytes a row instead of the vocabulary.
  virtual absl::Status LinearRowStats(const float* x, int64_t tokens,
                                      const kernels::model::LinearWeight& w,
                                      LogitRowStats* stats) = 0;
  // MLA's per-head products with kv_b (kernels/model/mla.h MlaAbsorbQuery, MlaApplyUv): one
  // strided-batched product over the heads on the device's copy of kv_b.
  virtual absl::Status MlaAbsorb(const kernels::model::MlaDims& dims, const float* q, int64_t tokens,
                                 const kernels::model::LinearWeight& kv_b, float* q_absorbed) = 0;
  virtual absl::Status MlaUv(const kernels::model::MlaDims& dims, const float* o_latent,
                             int64_t tokens, const kernels::model::LinearWeight& kv_b,
                             float* out) = 0;
  // y[tokens, hidden] = down(silu(gate(x)) * up(x)) (kernels/model/layers.h SwiGluMlp) with
  // the intermediate products on the device: x up, y down, one synchronization. The
  // activation is computed as the host's SiluMul computes it (in double, rounded to fp32).
  virtual absl::Status SwiGlu(const float* x, int64_t tokens,
                              const kernels::model::LinearWeight& gate,
                              const kernels::model::LinearWeight& up,
                              const kernels::model::LinearWeight& down, float* y) = 0;
  // Device bytes of its staging buffers and split scratch (inside VramBudget's workspace):
  // the weights are DeviceWeights'.
  virtual uint64_t scratch_bytes() const = 0;
};

struct DeviceLinearOptions {
  // At most this many bytes of split scratch a product: the tokens go in chunks that fit (a
  // decode step's products are one chunk; a prefill's lm_head would need gigabytes at once).
  uint64_t split_scratch_bytes = uint64_t{64} << 20;
  // The inner dimension of a product in slices of this many (0: whole), each slice's result
  // accumulated on the tensor cores and the slices added in fp32 (cuda_linear.cc says why).
  // Not for the logits' product.
  int64_t k_slice = 512;
};

// The backend for `device` over the attention-side `weights` and their device copies
// `device_weights` (all must outlive it).
absl::StatusOr<std::unique_ptr<DeviceLinear>> CreateDeviceLinear(
    Device* device, const ModelWeights& weights, const DeviceWeights& device_weights,
    const DeviceLinearOptions& options = {});

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_DEVICE_LINEAR_H_
