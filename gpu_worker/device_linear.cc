#include "gpu_worker/device_linear.h"

namespace writescope::gpu {

// cuda/cuda_linear.cc, or cuda_attention_unavailable.cc in builds without CUDA.
absl::StatusOr<std::unique_ptr<DeviceLinear>> CreateCudaDeviceLinear(
    Device* device, const ModelWeights& weights, const DeviceWeights& device_weights,
    const DeviceLinearOptions& options);

absl::StatusOr<std::unique_ptr<DeviceLinear>> CreateDeviceLinear(
    Device* device, const ModelWeights& weights, const DeviceWeights& device_weights,
    const DeviceLinearOptions& options) {
  if (!device->is_cuda()) return std::unique_ptr<DeviceLinear>();
  return CreateCudaDeviceLinear(device, weights, device_weights, options);
}

}  // namespace writescope::gpu
