// The gpu_worker's weights in device memory: every attention-side tensor (embeddings,
// attention projections, norms, routers, shared experts, dense layers, lm_head) copied
// once into one device allocation, within the VRAM budget. The host device uses the
// loaded views in place.
#ifndef WRITESCOPE_GPU_WORKER_DEVICE_WEIGHTS_H_
#define WRITESCOPE_GPU_WORKER_DEVICE_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/model_weights.h"
#include "gpu_worker/device.h"

namespace writescope::gpu {

// What the gpu_worker may hold in VRAM: weights + KV budget + a reserve for
// activations and kernel workspaces.
struct VramBudget {
  uint64_t total_bytes = uint64_t{32} << 30;       // --vram_budget_gib
  uint64_t workspace_bytes = uint64_t{512} << 20;  // activations, split-KV partials
};

class DeviceWeights {
 public:
  // RESOURCE_EXHAUSTED (with the numbers) unless weights + kv_bytes + workspace fit the
  // budget and the device's free memory.
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Upload(const ModelWeights& weights,
                                                               Device* device,
                                                               const VramBudget& budget,
                                                               uint64_t kv_bytes);

  // Device address of a tensor (bf16, same shape as the host view); nullptr if absent.
  // With the host device, the loaded host view itself (no copy).
  const uint16_t* Find(absl::string_view name) const;
  // Bytes of weights the device holds (counted against the VRAM budget).
  uint64_t bytes() const { return bytes_; }

 private:
  DeviceBuffer buffer_;  // CUDA only
  uint64_t bytes_ = 0;
  absl::flat_hash_map<std::string, const uint16_t*> tensors_;
};

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_DEVICE_WEIGHTS_H_
