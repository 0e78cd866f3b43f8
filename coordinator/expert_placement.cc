#include "coordinator/expert_placement.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/flag_choice.h"

namespace writescope::coordinator {

absl::StatusOr<ExpertMode> ParseExpertMode(absl::string_view text) {
  return ParseFlagChoice<ExpertMode>(
      "routed_experts", text,
      {{"auto", ExpertMode::kAuto}, {"cpu", ExpertMode::kCpu}, {"gpu", ExpertMode::kGpu}});
}

std::string ExpertModeName(ExpertMode mode) {
  switch (mode) {
    case ExpertMode::kAuto:
      return "auto";
    case ExpertMode::kCpu:
      return "cpu";
    case ExpertMode::kGpu:
      return "gpu";
  }
  return "?";
}

absl::StatusOr<ExpertPlacement> ExpertPlacement::Create(ExpertMode mode,
                                                        const ExpertPlacementParams& params) {
  if (params.num_experts < 0 || params.top_k < 0 || params.top_k > params.num_experts ||
      params.moe_layers < 0) {
    return absl::InvalidArgumentError(absl::StrCat("expert placement: ", params.top_k, " of ",
                                                   params.num_experts, " experts, ",
                                                   params.moe_layers, " MoE layers"));
  }
  if (!(params.stream_bytes_per_ms >= 0) || !(params.cpu_ms_per_token >= 0) ||
      !std::isfinite(params.stream_bytes_per_ms) || !std::isfinite(params.cpu_ms_per_token)) {
    return absl::InvalidArgumentError("expert placement: negative, infinite or NaN rates");
  }
  if (mode == ExpertMode::kGpu && !params.gpu_streams && params.moe_layers > 0) {
    return absl::InvalidArgumentError(
        "--routed_experts=gpu, but the gpu_worker does not stream experts (start it with "
        "--stream_experts=on)");
  }
  return ExpertPlacement(mode, params);
}

ExpertPlacement::ExpertPlacement(ExpertMode mode, const ExpertPlacementParams& params)
    : mode_(mode), params_(params) {}

double ExpertPlacement::CpuMs(int64_t tokens) const {
  if (tokens < kMinLearnTokens && small_steps_ > 0) return small_step_ms_;
  return params_.cpu_ms_per_token * static_cast<double>(tokens);
}

double ExpertPlacement::LinkMs(uint64_t bytes) const {
  if (!(params_.stream_bytes_per_ms > 0)) return 0.0;
  return static_cast<double>(bytes) / params_.stream_bytes_per_ms;
}

double ExpertPlacement::GpuModelMs(int64_t tokens) const {
  if (!params_.gpu_streams) return INFINITY;
  // The host device (rate 0) streams nothing: 0.
  return tokens <= 0 ? 0.0 : LinkMs(params_.layer_bytes);
}

double ExpertPlacement::GpuMs(int64_t tokens) const {
  return GpuModelMs(tokens) * gpu_correction_;
}

bool ExpertPlacement::OnGpu(int64_t tokens, double link_ms) const {
  if (params_.moe_layers == 0 || !params_.gpu_streams || tokens <= 0) return false;
  switch (mode_) {
    case ExpertMode::kCpu:
      return false;
    case ExpertMode::kGpu:
      return true;
    case ExpertMode::kAuto:
      // The host device has no stream to pay for and no faster compute: keep the CPU.
      if (params_.stream_bytes_per_ms <= 0) return false;
      if (!(GpuMs(tokens) + std::max(0.0, link_ms) < CpuMs(tokens))) return false;
      return !(gpu_since_cpu_ >= kProbeEvery && tokens <= kProbeMaxTokens);
  }
  return false;
}

void ExpertPlacement::ObserveCpu(int64_t tokens, double expert_ms) {
  if (tokens <= 0 || params_.moe_layers == 0 || !(expert_ms >= 0) || !std::isfinite(expert_ms)) {
    return;
  }
  const double layer_ms = expert_ms / params_.moe_layers;
  if (tokens >= kMinLearnTokens) {
    const double sample = layer_ms / static_cast<double>(tokens);
    params_.cpu_ms_per_token = params_.cpu_ms_per_token > 0
                                   ? kKeep * params_.cpu_ms_per_token + (1 - kKeep) * sample
                                   : sample;
  } else {
    small_step_ms_ = small_steps_ == 0 ? layer_ms
                                       : kSmallKeep * small_step_ms_ + (1 - kSmallKeep) * layer_ms;
    ++small_steps_;
  }
  gpu_since_cpu_ = 0;
  ++cpu_steps_;
}

void ExpertPlacement::ObserveGpu(int64_t tokens, double expert_ms) {
  if (tokens <= 0 || params_.moe_layers == 0 || !(expert_ms >= 0) || !std::isfinite(expert_ms)) {
    return;  // one infinite report would hold the correction at infinity for good
  }
  const double model = GpuModelMs(tokens);
  if (model > 0 && std::isfinite(model)) {
    const double ratio = expert_ms / params_.moe_layers / model;
    gpu_correction_ = gpu_steps_ == 0 ? ratio : kKeep * gpu_correction_ + (1 - kKeep) * ratio;
  }
  ++gpu_steps_;
  ++gpu_since_cpu_;
}

}  // namespace writescope::coordinator
