#include "gpu_worker/device_experts.h"

#include <algorithm>
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
  static absl::StatusOr<std::unique_ptr<HostExperts>> Create(const ModelWeights& routed,
                                                             uint64_t budget) {
    auto experts = std::unique_ptr<HostExperts>(new HostExperts());
    const ModelConfig& config = routed.config();
    experts->config_ = &config;
    experts->budget_ = budget;
    experts->expert_bytes_ = config.routed_expert_bytes();
    experts->resident_.assign(config.num_layers,
                              std::vector<bool>(config.n_routed_experts, false));
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

  int64_t resident_capacity() const override {
    return static_cast<int64_t>(budget_ / std::max<uint64_t>(expert_bytes_, 1));
  }

  absl::Status SetResident(const std::vector<ExpertRef>& experts) override {
    WS_RETURN_IF_ERROR(CheckResidentSet(*config_, experts, resident_capacity()));
    for (std::vector<bool>& layer : resident_) std::fill(layer.begin(), layer.end(), false);
    for (const ExpertRef& ref : experts) resident_[ref.layer][ref.expert] = true;
    num_resident_ = static_cast<int64_t>(experts.size());
    return absl::OkStatus();
  }

  bool IsResident(int64_t layer, int32_t expert) const override {
    return layer >= 0 && layer < static_cast<int64_t>(resident_.size()) && expert >= 0 &&
           expert < static_cast<int64_t>(resident_[layer].size()) && resident_[layer][expert];
  }
  int64_t num_resident() const override { return num_resident_; }

  absl::Status ForwardResident(int64_t layer, const float* x, int64_t tokens, int64_t top_k,
                               const int32_t* ids, const float* weights, float* y) override {
    const auto start = Clock::now();
    WS_RETURN_IF_ERROR(Check(layer));
    if (tokens > 0 && ids != nullptr) {
      WS_RETURN_IF_ERROR(CheckResidentIds(
          ids, tokens, top_k, [&](int32_t e) { return IsResident(layer, e); }));
    }
    WS_RETURN_IF_ERROR(layers_[layer]->Forward(x, tokens, top_k, ids, weights, y));
    stats_ = {.bytes_streamed = 0, .wait_ms = 0, .total_ms = MillisSince(start)};
    return absl::OkStatus();
  }

  const DeviceExpertsStats& last_stats() const override { return stats_; }
  uint64_t device_bytes() const override { return 0; }
  uint64_t resident_bytes() const override { return 0; }
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
  const ModelConfig* config_ = nullptr;
  uint64_t budget_ = 0, expert_bytes_ = 0;
  std::vector<std::vector<bool>> resident_;  // [layer][expert]
  int64_t num_resident_ = 0;
};


}  // namespace

absl::Status CheckResidentSet(const ModelConfig& config,
                                        const std::vector<ExpertRef>& experts, int64_t capacity) {
  if (static_cast<int64_t>(experts.size()) > capacity) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "resident experts: ", experts.size(), " experts of ", config.routed_expert_bytes(),
        " bytes, room for ", capacity, " in the VRAM budget"));
  }
  std::vector<std::vector<bool>> seen(config.num_layers,
                                      std::vector<bool>(config.n_routed_experts, false));
  for (const ExpertRef& ref : experts) {
    if (ref.layer < 0 || ref.layer >= config.num_layers || !config.IsMoeLayer(ref.layer)) {
      return absl::InvalidArgumentError(absl::StrCat("resident experts: layer ", ref.layer, " of ",
                                                     config.source, " has no routed experts"));
    }
    if (ref.expert < 0 || ref.expert >= config.n_routed_experts) {
      return absl::InvalidArgumentError(absl::StrCat("resident experts: layer ", ref.layer,
                                                     " expert ", ref.expert, " outside [0, ",
                                                     config.n_routed_experts, ")"));
    }
    if (seen[ref.layer][ref.expert]) {
      return absl::InvalidArgumentError(absl::StrCat("resident experts: layer ", ref.layer,
                                                     " expert ", ref.expert, " given twice"));
    }
    seen[ref.layer][ref.expert] = true;
  }
  return absl::OkStatus();
}

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
  WS_ASSIGN_OR_RETURN(std::unique_ptr<HostExperts> host,
                      HostExperts::Create(routed, vram_bytes_available));
  return std::unique_ptr<DeviceExperts>(std::move(host));
}

}  // namespace writescope::gpu
