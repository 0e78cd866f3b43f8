// The CUDA adapters of builds without CUDA.
#include "gpu_worker/device_attention.h"
#include "gpu_worker/device_linear.h"

namespace writescope::gpu {

absl::StatusOr<std::unique_ptr<DeviceAttention>> CreateCudaDeviceAttention(
    Device*, const DeviceAttentionOptions&) {
  return absl::UnimplementedError("this build has no CUDA attention");
}

absl::StatusOr<std::unique_ptr<DeviceLinear>> CreateCudaDeviceLinear(Device*, const ModelWeights&,
                                                                     const DeviceWeights&,
                                                                     const DeviceLinearOptions&) {
  return absl::UnimplementedError("this build has no cuBLAS");
}

}  // namespace writescope::gpu
