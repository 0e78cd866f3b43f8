// The CUDA DeviceExperts (gpu_worker/device_experts.h), defined in gpu_worker/cuda/
// cuda_experts.cc, or as UNIMPLEMENTED by cuda_experts_unavailable.cc in builds without
// CUDA. CreateDeviceExperts calls it for a CUDA device; tests call it directly.
#ifndef WRITESCOPE_GPU_WORKER_CUDA_EXPERTS_H_
#define WRITESCOPE_GPU_WORKER_CUDA_EXPERTS_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/model_weights.h"
#include "gpu_worker/device.h"
#include "gpu_worker/device_experts.h"

namespace writescope::gpu {

// CreateDeviceExperts' contract on a CUDA `device` (FAILED_PRECONDITION for another
// device). Scratch is sized for `max_tokens` tokens at the config's top-k; a larger Forward
// grows it when the budget allows, else runs in chunks of what fits.
absl::StatusOr<std::unique_ptr<DeviceExperts>> CreateCudaExperts(Device* device,
                                                                 const ModelWeights& routed,
                                                                 int64_t max_tokens,
                                                                 uint64_t vram_bytes_available);

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_CUDA_EXPERTS_H_
