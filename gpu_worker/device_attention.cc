#include "gpu_worker/device_attention.h"

#include "kernels/cpu_attention.h"

namespace writescope::gpu {
namespace {

class HostDeviceAttention final : public DeviceAttention {
 public:
  absl::Status GqaDecode(const kernels::GqaDecodeArgs& args) override {
    return kernels::CpuGqaDecode(args);
  }
  absl::Status GqaPrefill(const kernels::GqaPrefillArgs& args) override {
    return kernels::CpuGqaPrefill(args);
  }
  absl::Status MlaDecode(const kernels::MlaDecodeArgs& args) override {
    return kernels::CpuMlaDecode(args);
  }
  absl::Status MlaPrefill(const kernels::MlaPrefillArgs& args) override {
    return kernels::CpuMlaPrefill(args);
  }
};

}  // namespace

// Defined in cuda/cuda_device_attention.cc when the build has CUDA.
absl::StatusOr<std::unique_ptr<DeviceAttention>> CreateCudaDeviceAttention(
    Device* device, const DeviceAttentionOptions& options);

absl::StatusOr<std::unique_ptr<DeviceAttention>> CreateDeviceAttention(
    Device* device, const DeviceAttentionOptions& options) {
  if (!device->is_cuda()) return std::make_unique<HostDeviceAttention>();
  return CreateCudaDeviceAttention(device, options);
}

}  // namespace writescope::gpu
