// CreateCudaExperts in builds without CUDA.
#include "gpu_worker/cuda_experts.h"

namespace writescope::gpu {

absl::StatusOr<std::unique_ptr<DeviceExperts>> CreateCudaExperts(Device*, const ModelWeights&,
                                                                 int64_t, uint64_t) {
  return absl::UnimplementedError("this build has no CUDA routed experts");
}

}  // namespace writescope::gpu
