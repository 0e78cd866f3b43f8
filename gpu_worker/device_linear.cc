#include "gpu_worker/device_linear.h"

#include "common/log.h"

namespace writescope::gpu {

// cuda/cuda_linear.cc, or cuda_attention_unavailable.cc in builds without CUDA.
absl::StatusOr<std::unique_ptr<DeviceLinear>> CreateCudaDeviceLinear(Device* device,
                                                                     const ModelWeights& weights,
                                                                     uint64_t vram_bytes_available);

absl::StatusOr<std::unique_ptr<DeviceLinear>> CreateDeviceLinear(Device* device,
                                                                 const ModelWeights& weights,
                                                                 uint64_t vram_bytes_available) {
  if (!device->is_cuda()) return std::unique_ptr<DeviceLinear>();
  absl::StatusOr<std::unique_ptr<DeviceLinear>> linear =
      CreateCudaDeviceLinear(device, weights, vram_bytes_available);
  if (absl::IsResourceExhausted(linear.status())) {
    WS_LOG(WARNING) << linear.status().message()
                    << ": the matrix products of the attention side run on the host";
    return std::unique_ptr<DeviceLinear>();
  }
  return linear;
}

}  // namespace writescope::gpu
