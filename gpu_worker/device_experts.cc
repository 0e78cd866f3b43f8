#include "gpu_worker/device_experts.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process.h"
#include "common/status.h"
#include "gpu_worker/cuda_experts.h"
#include "kernels/experts/cpu_experts.h"

namespace writescope::gpu {
namespace {

using Clock = std::chrono::steady_clock;

// The host device's routed experts: CpuExperts per MoE layer on the borrowed host weights
// (no copy, no stream: "device memory" is host memory there). Same numerics as the
// cpu_worker's default (bf16 where oneDNN has native bf16).
class HostExperts final : public DeviceExperts {
 public:
  static absl::StatusOr<std::unique_ptr<HostExperts>> Create(const ModelWeights& routed) {
    auto experts = std::unique_ptr<HostExperts>(new HostExperts());
    const ModelConfig& config = routed.config();
    experts->layers_.resize(config.num_layers);
    for (int64_t layer = 0; layer < config.num_layers; ++layer) {
      if (!config.IsMoeLayer(layer)) continue;
      WS_ASSIGN_OR_RETURN(experts->layers_[layer],
                          kernels::experts::CpuExperts::ForLayer(
                              routed, layer, {.precision = kernels::experts::ExpertPrecision::kAuto,
                                              .prepack = false}));
    }
    return experts;
  }

  absl::Status Prefetch(int64_t layer) override {
    WS_RETURN_IF_ERROR(Check(layer));
    return absl::OkStatus();
  }

  absl::Status Forward(int64_t layer, const float* x, int64_t tokens, int64_t top_k,
                       const int32_t* ids, const float* weights, float* y) override {
    const auto start = Clock::now();
    WS_RETURN_IF_ERROR(Check(layer));
    WS_RETURN_IF_ERROR(layers_[layer]->Forward(x, tokens, top_k, ids, weights, y));
    stats_ = {.bytes_streamed = 0, .wait_ms = 0, .total_ms = MillisSince(start)};
    return absl::OkStatus();
  }

  absl::Status EndStep() override { return absl::OkStatus(); }
  const DeviceExpertsStats& last_stats() const override { return stats_; }
  uint64_t device_bytes() const override { return 0; }
  double calibrated_bytes_per_ms() const override { return 0; }

 private:
  HostExperts() = default;

  absl::Status Check(int64_t layer) const {
    if (layer < 0 || layer >= static_cast<int64_t>(layers_.size()) || layers_[layer] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("routed experts on the device: layer ", layer, " has none"));
    }
    return absl::OkStatus();
  }

  std::vector<std::unique_ptr<kernels::experts::CpuExperts>> layers_;
  DeviceExpertsStats stats_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceExperts>> CreateDeviceExperts(Device* device,
                                                                   const ModelWeights& routed,
                                                                   int64_t max_tokens,
                                                                   uint64_t vram_bytes_available) {
  if (routed.config().n_routed_experts == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(routed.config().source, " has no routed experts to stream"));
  }
  if (device->is_cuda()) {
    return CreateCudaExperts(device, routed, max_tokens, vram_bytes_available);
  }
  WS_ASSIGN_OR_RETURN(std::unique_ptr<HostExperts> host, HostExperts::Create(routed));
  return std::unique_ptr<DeviceExperts>(std::move(host));
}

}  // namespace writescope::gpu
