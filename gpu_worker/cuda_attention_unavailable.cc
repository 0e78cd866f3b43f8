// The CUDA attention adapter of builds without CUDA.
#include "gpu_worker/device_attention.h"

namespace writescope::gpu {

absl::StatusOr<std::unique_ptr<DeviceAttention>> CreateCudaDeviceAttention(Device*) {
  return absl::UnimplementedError("this build has no CUDA attention");
}

}  // namespace writescope::gpu
