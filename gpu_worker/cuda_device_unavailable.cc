// Chosen by the build when CUDA is off: the CUDA device does not exist.
#include "gpu_worker/device.h"

namespace writescope::gpu {

bool BuiltWithCuda() { return false; }

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int) {
  return absl::UnavailableError("this build has no CUDA support (configured without nvcc)");
}

}  // namespace writescope::gpu
