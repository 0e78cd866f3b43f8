#include "coordinator/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"

namespace writescope::coordinator {
namespace {

constexpr int kCpu = static_cast<int>(KvRegion::kCpuCompute);
constexpr int kGpu = static_cast<int>(KvRegion::kGpuTransfer);

// Fixed costs and token counts: NaN and negative values count as 0.
double NonNegative(double value) { return std::isnan(value) || value < 0.0 ? 0.0 : value; }

bool ValidSample(const CostSample& sample) {
  return std::isfinite(sample.tokens) && std::isfinite(sample.ns) && sample.tokens >= 0.0 &&
         sample.ns >= 0.0;
}

// An EMA that a first value seeds: `ema` NaN takes `value`, else moves `weight` of the way.
void MixEma(double& ema, double value, double weight) {
  ema = std::isnan(ema) ? value : ema + weight * (value - ema);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Roofline model.

absl::Status ValidateRooflineParams(const RooflineParams& params) {
  const std::pair<const char*, double> fields[] = {
      {"cpu_ns_per_token (A)", params.cpu_ns_per_token},
      {"gpu_ns_per_token (B)", params.gpu_ns_per_token},
      {"cpu_fixed_ns (c_C)", params.cpu_fixed_ns},
      {"gpu_fixed_ns (c_G)", params.gpu_fixed_ns}};
  for (const auto& [name, value] : fields) {
    if (std::isnan(value) || value < 0.0) {
      return absl::InvalidArgumentError(
          absl::StrCat("roofline parameter ", name, " = ", value, " must be >= 0 (or +inf)"));
    }
  }
  return absl::OkStatus();
}

double OptimalCpuShare(const RooflineParams& params, double host_tokens) {
  if (std::isnan(params.cpu_ns_per_token) || std::isnan(params.gpu_ns_per_token)) {
    return kIndifferentCpuShare;
  }
  const double a = std::max(params.cpu_ns_per_token, 0.0);
  const double b = std::max(params.gpu_ns_per_token, 0.0);
  const double fixed_difference =
      NonNegative(params.gpu_fixed_ns) - NonNegative(params.cpu_fixed_ns);
  const double tokens = NonNegative(host_tokens);
  if (std::isinf(a) && std::isinf(b)) return kIndifferentCpuShare;
  if (std::isinf(a)) return 0.0;  // any CPU share costs forever
  if (std::isinf(b)) return 1.0;
  const double slope_sum = a + b;
  // Both paths free per token: the time does not depend on r.
  if (slope_sum == 0.0) return kIndifferentCpuShare;
  if (std::isinf(tokens)) return b / slope_sum;
  if (tokens * slope_sum == 0.0) {
    // L = 0: the limit L → 0+ of the crossing, i.e. where the first tokens go.
    if (fixed_difference > 0.0) return 1.0;
    if (fixed_difference < 0.0) return 0.0;
    return b / slope_sum;
  }
  const double share = b / slope_sum + fixed_difference / (slope_sum * tokens);
  if (std::isnan(share)) return kIndifferentCpuShare;  // inf − inf fixed costs
  return std::clamp(share, 0.0, 1.0);
}

StepPrediction PredictStep(const RooflineParams& params, double cpu_share, double host_tokens) {
  const double r = std::isnan(cpu_share) ? 0.0 : std::clamp(cpu_share, 0.0, 1.0);
  const double tokens = NonNegative(host_tokens);
  const double a = std::isnan(params.cpu_ns_per_token) ? params.cpu_ns_per_token
                                                       : std::max(params.cpu_ns_per_token, 0.0);
  const double b = std::isnan(params.gpu_ns_per_token) ? params.gpu_ns_per_token
                                                       : std::max(params.gpu_ns_per_token, 0.0);
  StepPrediction prediction;
  // A path without a share does no per-token work: skip the product, which
  // would be 0 · inf = NaN for an unusable path.
  prediction.cpu_ns =
      (r == 0.0 || tokens == 0.0 ? 0.0 : r * a * tokens) + NonNegative(params.cpu_fixed_ns);
  prediction.gpu_ns =
      (r == 1.0 || tokens == 0.0 ? 0.0 : (1.0 - r) * b * tokens) + NonNegative(params.gpu_fixed_ns);
  prediction.step_ns = std::isnan(prediction.cpu_ns) || std::isnan(prediction.gpu_ns)
                           ? std::numeric_limits<double>::quiet_NaN()
                           : std::max(prediction.cpu_ns, prediction.gpu_ns);
  return prediction;
}

RooflineBound ComputeRooflineBound(const RooflineParams& params, double host_tokens) {
  RooflineBound bound;
  bound.cpu_share = OptimalCpuShare(params, host_tokens);
  bound.step_ns = PredictStep(params, bound.cpu_share, host_tokens).step_ns;
  bound.transfer_all_ns = PredictStep(params, 0.0, host_tokens).step_ns;
  bound.cpu_all_ns = PredictStep(params, 1.0, host_tokens).step_ns;
  const double best_single = std::min(bound.transfer_all_ns, bound.cpu_all_ns);
  bound.split_gain = bound.step_ns > 0.0 && std::isfinite(best_single)
                         ? std::max(1.0, best_single / bound.step_ns)
                         : 1.0;
  return bound;
}

// ---------------------------------------------------------------------------------------
// Estimator.

absl::Status ValidateEstimatorOptions(const EstimatorOptions& options) {
  if (!(options.ema_weight > 0.0 && options.ema_weight <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ema_weight = ", options.ema_weight, " must be in (0, 1]"));
  }
  if (!(options.intercept_ridge >= 0.0 && std::isfinite(options.intercept_ridge))) {
    return absl::InvalidArgumentError(
        absl::StrCat("intercept_ridge = ", options.intercept_ridge, " must be finite and >= 0"));
  }
  if (!(options.outlier_factor > 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("outlier_factor = ", options.outlier_factor, " must be > 1"));
  }
  if (options.outlier_window < 1 || options.outlier_min_history < 1 ||
      options.outlier_min_history > options.outlier_window) {
    return absl::InvalidArgumentError(
        absl::StrCat("outlier_window = ", options.outlier_window, " and outlier_min_history = ",
                     options.outlier_min_history, " must satisfy 1 <= min_history <= window"));
  }
  return absl::OkStatus();
}

LinearCostEstimator::LinearCostEstimator(const EstimatorOptions& options) : options_(options) {
  const absl::Status valid = ValidateEstimatorOptions(options);
  WS_CHECK(valid.ok()) << valid;
}

absl::Status LinearCostEstimator::Calibrate(absl::Span<const CostSample> points,
                                            double weight_samples) {
  if (points.empty()) return absl::InvalidArgumentError("calibration needs points, got none");
  if (!(weight_samples >= 0.0) || !std::isfinite(weight_samples)) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration weight ", weight_samples, " must be finite and >= 0"));
  }
  double min_tokens = std::numeric_limits<double>::infinity();
  double max_tokens = -min_tokens;
  for (size_t i = 0; i < points.size(); ++i) {
    if (!ValidSample(points[i])) {
      return absl::InvalidArgumentError(absl::StrCat("calibration point ", i, " (tokens ",
                                                     points[i].tokens, ", ns ", points[i].ns,
                                                     ") must be finite and >= 0"));
    }
    min_tokens = std::min(min_tokens, points[i].tokens);
    max_tokens = std::max(max_tokens, points[i].tokens);
  }
  if (!(max_tokens > min_tokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration needs at least two distinct token counts to "
                     "separate the per-token and "
                     "fixed costs; all ",
                     points.size(), " points have ", min_tokens, " tokens"));
  }
  // Ordinary least squares on the probe, centred for accuracy.
  double mean_x = 0, mean_y = 0;
  for (const CostSample& p : points) {
    mean_x += p.tokens;
    mean_y += p.ns;
  }
  mean_x /= static_cast<double>(points.size());
  mean_y /= static_cast<double>(points.size());
  double sxx = 0, sxy = 0;
  for (const CostSample& p : points) {
    sxx += (p.tokens - mean_x) * (p.tokens - mean_x);
    sxy += (p.tokens - mean_x) * (p.ns - mean_y);
  }
  const double slope = sxy / sxx;
  const double intercept = mean_y - slope * mean_x;
  intercept_prior_ = std::max(intercept, 0.0);

  // The probe becomes `weight_samples` samples' worth of weight (by default a full
  // history), spread over its points.
  const double weight = (weight_samples > 0.0 ? weight_samples : 1.0 / options_.ema_weight) /
                        static_cast<double>(points.size());
  sum_w_ = sum_x_ = sum_xx_ = sum_y_ = sum_xy_ = 0.0;
  for (const CostSample& p : points) {
    sum_w_ += weight;
    sum_x_ += weight * p.tokens;
    sum_xx_ += weight * p.tokens * p.tokens;
    sum_y_ += weight * p.ns;
    sum_xy_ += weight * p.tokens * p.ns;
  }
  Refit();
  ready_ = true;
  recent_ratios_.clear();
  return absl::OkStatus();
}

bool LinearCostEstimator::IsOutlier(const CostSample& sample) {
  const double predicted = Predict(sample.tokens);
  if (!ready_ || !(predicted > 0.0)) return false;  // nothing to compare against yet
  const double ratio = sample.ns / predicted;
  bool outlier = false;
  if (recent_ratios_.size() >= static_cast<size_t>(options_.outlier_min_history)) {
    std::vector<double> sorted(recent_ratios_.begin(), recent_ratios_.end());
    const auto middle = sorted.begin() + static_cast<ptrdiff_t>(sorted.size() / 2);
    std::nth_element(sorted.begin(), middle, sorted.end());
    const double median = *middle;
    outlier = median > 0.0 && (ratio > options_.outlier_factor * median ||
                               ratio < median / options_.outlier_factor);
  }
  // Rejected ratios enter the window too: a lasting change of regime moves the
  // median.
  recent_ratios_.push_back(ratio);
  if (recent_ratios_.size() > static_cast<size_t>(options_.outlier_window)) {
    recent_ratios_.pop_front();
  }
  return outlier;
}

bool LinearCostEstimator::Observe(const CostSample& sample, double elapsed) {
  elapsed = std::isfinite(elapsed) ? std::max(elapsed, 1.0) : 1.0;
  // After a window's worth of steps without a sample, its ratios are of another time.
  if (elapsed >= options_.outlier_window) recent_ratios_.clear();
  if (!ValidSample(sample) || IsOutlier(sample)) {
    ++rejected_;
    return false;
  }
  // The sample stands for the `elapsed` steps since the previous one: it weighs what that
  // many equal samples would have (1 for consecutive steps).
  const double decay = std::pow(1.0 - options_.ema_weight, elapsed);
  const double weight = elapsed == 1.0 ? 1.0 : (1.0 - decay) / options_.ema_weight;
  sum_w_ = sum_w_ * decay + weight;
  sum_x_ = sum_x_ * decay + weight * sample.tokens;
  sum_xx_ = sum_xx_ * decay + weight * sample.tokens * sample.tokens;
  sum_y_ = sum_y_ * decay + weight * sample.ns;
  sum_xy_ = sum_xy_ * decay + weight * sample.tokens * sample.ns;
  ++accepted_;
  if (sample.tokens > 0.0) ready_ = true;
  Refit();
  return true;
}

// Minimises Σ w·(y − a·x − c)² + μ·(c − c0)² with μ = intercept_ridge · Σw, c0
// the prior:
//
//   a·Σwx² + c·Σwx        = Σwxy
//   a·Σwx  + c·(Σw + μ)   = Σwy + μ·c0
//
// Then a, c ≥ 0: a negative intercept refits through the origin, a negative
// slope keeps the weighted mean as the intercept.
void LinearCostEstimator::Refit() {
  if (sum_w_ <= 0.0) return;
  const double mu = options_.intercept_ridge * sum_w_;
  const double rhs_c = sum_y_ + mu * intercept_prior_;
  if (!(sum_xx_ > 0.0)) {  // only zero-token samples: they measure the intercept alone
    intercept_ = std::max(rhs_c / (sum_w_ + mu), 0.0);
    return;
  }
  double slope = 0.0;
  double intercept = 0.0;
  const double det = sum_xx_ * (sum_w_ + mu) - sum_x_ * sum_x_;
  if (det > 1e-12 * sum_xx_ * (sum_w_ + mu)) {
    slope = (sum_xy_ * (sum_w_ + mu) - sum_x_ * rhs_c) / det;
    intercept = (sum_xx_ * rhs_c - sum_x_ * sum_xy_) / det;
  } else {
    // No spread and no ridge: the line through the prior intercept (an EMA of
    // (y − c0) / x when every x is equal).
    intercept = intercept_prior_;
    slope = (sum_xy_ - intercept * sum_x_) / sum_xx_;
  }
  if (intercept < 0.0) {
    intercept = 0.0;
    slope = sum_xy_ / sum_xx_;
  }
  if (slope < 0.0) {
    slope = 0.0;
    intercept = std::max(sum_y_ / sum_w_, 0.0);
  }
  slope_ = slope;
  intercept_ = intercept;
}

// ---------------------------------------------------------------------------------------
// Scheduler.

absl::Status ValidateSchedulerOptions(const SchedulerOptions& options) {
  absl::Status status = ValidateEstimatorOptions(options.cpu_estimator);
  if (!status.ok())
    return absl::InvalidArgumentError(absl::StrCat("cpu_estimator: ", status.message()));
  status = ValidateEstimatorOptions(options.gpu_estimator);
  if (!status.ok())
    return absl::InvalidArgumentError(absl::StrCat("gpu_estimator: ", status.message()));
  if (!(options.initial_cpu_share >= 0.0 && options.initial_cpu_share <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("initial_cpu_share = ", options.initial_cpu_share, " must be in [0, 1]"));
  }
  if (!(options.deadband >= 0.0 && options.deadband < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("deadband = ", options.deadband, " must be in [0, 1)"));
  }
  if (!(options.target_tokens_decay > 0.0 && options.target_tokens_decay <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target_tokens_decay = ", options.target_tokens_decay, " must be in (0, 1]"));
  }
  if (options.hold_updates < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("hold_updates = ", options.hold_updates, " must be >= 1"));
  }
  if (!(options.probe_share >= 0.0 && options.probe_share <= 0.25)) {
    return absl::InvalidArgumentError(
        absl::StrCat("probe_share = ", options.probe_share, " must be in [0, 0.25]"));
  }
  if (!(options.placement_headroom >= 0.0 && options.placement_headroom < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement_headroom = ", options.placement_headroom, " must be in [0, 1)"));
  }
  if (!(options.rest_ema_weight > 0.0 && options.rest_ema_weight <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rest_ema_weight = ", options.rest_ema_weight, " must be in (0, 1]"));
  }
  if (!(options.explore_cost_share >= 0.0 && options.explore_cost_share <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "explore_cost_share = ", options.explore_cost_share, " must be in [0, 1]"));
  }
  if (!(options.max_period_cost_share >= 0.0 && options.max_period_cost_share <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_period_cost_share = ", options.max_period_cost_share, " must be in [0, 1]"));
  }
  if (options.min_explore_period_steps < 1 ||
      options.max_explore_period_steps < options.min_explore_period_steps ||
      options.max_gpu_only_explore_period_steps < options.max_explore_period_steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "explore periods: min_explore_period_steps = ", options.min_explore_period_steps,
        ", max_explore_period_steps = ", options.max_explore_period_steps,
        " and max_gpu_only_explore_period_steps = ", options.max_gpu_only_explore_period_steps,
        " must satisfy 1 <= min <= max <= max_gpu_only"));
  }
  if (options.switch_settle_steps > 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "switch_settle_steps = ", options.switch_settle_steps, " must be at most 16"));
  }
  if (!(options.exploration_share_hold >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "exploration_share_hold = ", options.exploration_share_hold, " must be >= 0"));
  }
  if (!(options.rest_shift_explore >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rest_shift_explore = ", options.rest_shift_explore, " must be >= 0"));
  }
  if (!(options.rest_shift_split_gap_share > 0.0 && options.rest_shift_split_gap_share <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rest_shift_split_gap_share = ", options.rest_shift_split_gap_share, " must be in (0, 1]"));
  }
  if (!(options.rest_rise_gap_share >= 0.0 && options.rest_rise_gap_share <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rest_rise_gap_share = ", options.rest_rise_gap_share, " must be in [0, 1]"));
  }
  if (!(options.rest_rise_cpu_factor >= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rest_rise_cpu_factor = ", options.rest_rise_cpu_factor, " must be >= 1"));
  }
  if (options.rest_rise_samples < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("rest_rise_samples = ", options.rest_rise_samples, " must be at least 2"));
  }
  if (options.mode_switch_hold_steps > 1000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mode_switch_hold_steps = ", options.mode_switch_hold_steps, " must be at most 1000"));
  }
  if (!(options.rest_outlier_factor == 0.0 || options.rest_outlier_factor > 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rest_outlier_factor = ", options.rest_outlier_factor, " must be 0 (off) or > 1"));
  }
  if (!(options.rest_batch_tolerance >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rest_batch_tolerance = ", options.rest_batch_tolerance, " must be >= 0"));
  }
  if (!(options.rest_tokens_tolerance >= 0.0) || !std::isfinite(options.rest_tokens_tolerance)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rest_tokens_tolerance = ", options.rest_tokens_tolerance, " must be >= 0 (0: off)"));
  }
  if (!(options.split_calibration_samples > 0.0) ||
      !std::isfinite(options.split_calibration_samples)) {
    return absl::InvalidArgumentError(absl::StrCat("split_calibration_samples = ",
                                                   options.split_calibration_samples,
                                                   " must be finite and > 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(absl::string_view policy,
                                                             const SchedulerOptions& options) {
  WS_ASSIGN_OR_RETURN(const PolicySpec spec, ParsePolicy(policy));
  return Create(spec, options);
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const PolicySpec& policy,
                                                             const SchedulerOptions& options) {
  WS_RETURN_IF_ERROR(ValidateSchedulerOptions(options));
  if (policy.kind == PolicyKind::kStatic &&
      !(policy.static_cpu_share >= 0.0 && policy.static_cpu_share <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("static policy CPU share ", policy.static_cpu_share, " must be in [0, 1]"));
  }
  return std::unique_ptr<Scheduler>(new Scheduler(policy, options));
}

Scheduler::Scheduler(const PolicySpec& policy, const SchedulerOptions& options)
    : policy_(policy),
      options_(options),
      cpu_(options.cpu_estimator),
      gpu_(options.gpu_estimator),
      gpu_only_(options.gpu_estimator),
      dma_(options.gpu_estimator),
      rest_split_(std::numeric_limits<double>::quiet_NaN()),
      rest_gpu_only_(std::numeric_limits<double>::quiet_NaN()),
      target_(policy.adaptive() ? options.initial_cpu_share : policy.fixed_cpu_share()),
      optimal_(std::numeric_limits<double>::quiet_NaN()) {}

absl::Status Scheduler::CalibrateGpu(absl::Span<const CostSample> points) {
  const absl::Status status = gpu_.Calibrate(points, options_.split_calibration_samples);
  if (!status.ok()) return absl::InvalidArgumentError(absl::StrCat("GPU path: ", status.message()));
  // The probe runs the GPU path alone: it is the GPU-only line's measurement too. The next
  // samples count their steps from now (the calibration is not an old sample to decay).
  WS_CHECK(gpu_only_.Calibrate(points).ok());
  // The GPU-only rest was measured against the old line: measure that mode again soon (the
  // probe runs the layers back to back, with nothing for the next layer's transfer to
  // overlap, so its line sits above what steps report; the rest absorbs the difference).
  if (!std::isnan(rest_gpu_only_) && guessed_rest_mode_ == 0) {
    guessed_rest_mode_ = 2;
    guess_refunded_ = false;
  }
  // A rest measured against the old line moves with it: a guess stops following it (and
  // GPU-only's, which no longer stands against the split's).
  guess_follows_ = false;
  gpu_sample_step_ = gpu_only_sample_step_ = steps_;
  last_gpu_calibration_step_ = steps_;
  return absl::OkStatus();
}

absl::Status Scheduler::CalibrateCpu(absl::Span<const CostSample> points) {
  const absl::Status status = cpu_.Calibrate(points, options_.split_calibration_samples);
  if (!status.ok()) return absl::InvalidArgumentError(absl::StrCat("CPU path: ", status.message()));
  cpu_sample_step_ = steps_;
  return absl::OkStatus();
}

bool Scheduler::RecalibrationDue() const {
  return options_.recalibration_period_steps > 0 &&
         steps_ - last_gpu_calibration_step_ >= options_.recalibration_period_steps;
}

StepPrediction Scheduler::PredictPaths(const StepSample& sample) const {
  const LinearCostEstimator& gpu_line =
      sample.cpu.tokens == 0.0 && gpu_only_.ready() ? gpu_only_ : gpu_;
  StepPrediction p;
  p.cpu_ns = cpu_.Predict(sample.cpu.tokens);
  p.gpu_ns = gpu_line.Predict(sample.gpu.tokens);
  p.step_ns = std::max(p.cpu_ns, p.gpu_ns);
  return p;
}

double Scheduler::PredictedAttentionNs(const StepSample& sample) const {
  if (sample.cpu.tokens > 0.0) {
    // The split's model at this step's tokens (PredictSplit's).
    return estimates_ready()
               ? std::max(PredictPaths(sample).step_ns, TransferBoundNs(sample.gpu.tokens))
               : std::numeric_limits<double>::quiet_NaN();
  }
  return gpu_only_.ready() ? PredictPaths(sample).gpu_ns
                           : std::numeric_limits<double>::quiet_NaN();
}

void Scheduler::ObserveStep(const StepSample& sample) {
  ++steps_;
  const bool split = sample.cpu.tokens > 0.0;
  // A step that reads otherwise than the KV rounds queued early for it, and the
  // switch_settle_steps - 1 after it, carry the change: they teach neither the mode's rest
  // nor its GPU line (the CPU's attention runs on the data in place either way).
  const int mode = split ? 1 : 2;
  // The first step at a new batch most likely pays for its sequences' first reads on the CPU
  // too (in place, pages the cpu_worker has not touched yet), so it does not teach the CPU
  // line either.
  const bool new_batch = decided_new_batch_ && options_.switch_settle_steps > 0;
  // A step the gpu_worker reports reading otherwise than the rounds it queued early for it
  // (another CPU share than the step before: other sequences' CPU blocks streamed; a flush)
  // pays for them too (Mixtral 16 x 8K on the H200, run 104: 15.5 ms of GPU attention on
  // split steps whose share changed, 9.5 on those whose share held), unless the steps before
  // missed too, min_explore_period_steps of them: misses step after step are then what the
  // mode costs.
  const bool missed = options_.settle_missed_rounds && sample.early_rounds_missed &&
                      missed_in_a_row_ < options_.min_explore_period_steps;
  missed_in_a_row_ = sample.early_rounds_missed ? missed_in_a_row_ + 1 : 0;
  const bool changed = queued_mode_ != 0 && mode != queued_mode_;
  if (changed || new_batch || missed) {
    settle_steps_left_ = options_.switch_settle_steps;
  }
  // This step's mode as predicted before anything learns from the step: the model's attention
  // time (NaN: its lines not ready) and the mode's rest.
  const double attention_before = PredictedAttentionNs(sample);
  const double mode_before = attention_before + (split ? rest_split_ : rest_gpu_only_);
  // What paying for a change cost this step: its time above its mode's prediction, before
  // anything learns from it (SchedulerOptions::mode_switch_hold_steps). A new batch's first
  // step pays for other things as well.
  if ((changed || missed) && !new_batch && sample.step_ns > 0.0 && std::isfinite(sample.step_ns) &&
      std::isfinite(mode_before)) {
    MixEma(switch_cost_, sample.step_ns - mode_before, options_.rest_ema_weight);
  }
  decided_new_batch_ = false;
  const bool settling = settle_steps_left_ > 0;
  if (settling) --settle_steps_left_;
  // The rounds the gpu_worker queues for the next step (GpuStep): this step's, or after an
  // exploration's last step those of the last step that did not explore.
  if (!decided_explore_) chosen_mode_ = mode;
  queued_mode_ = decided_explore_ && !decided_continues_ ? chosen_mode_ : mode;
  // The rests' clock counts the steps that did not explore (below).
  if (!decided_explore_) ++rest_clock_;
  const bool explored = decided_explore_;
  const bool exploration_ends = decided_explore_ && !decided_continues_;
  // A guess's measurement far above both its exploration's settling step (the same mode, paying
  // for the change besides) and the guess's prediction is a lone spike
  // (SchedulerOptions::rest_guess_check): it is held below, and the exploration measured
  // nothing. Not where the batch changed since (rest_stale_): that sample re-levels the rests, as
  // any does. (A new batch's first step settles.)
  const bool step_timed = sample.step_ns > 0.0 && std::isfinite(sample.step_ns);
  const bool guess_spike =
      options_.rest_guess_check && options_.rest_outlier_factor > 0.0 && explored && !settling &&
      !rest_stale_ && guessed_rest_mode_ == mode &&
      !(split ? rest_split_held_ : rest_gpu_only_held_) && step_timed &&
      std::isfinite(explore_settle_ns_) && std::isfinite(mode_before) &&
      sample.step_ns > options_.rest_outlier_factor * std::max(explore_settle_ns_, mode_before);
  if (!explored || exploration_ends) {
    explore_settle_ns_ = std::numeric_limits<double>::quiet_NaN();
  } else if (settling && step_timed) {
    explore_settle_ns_ = std::isnan(explore_settle_ns_)
                             ? sample.step_ns
                             : std::min(explore_settle_ns_, sample.step_ns);
  }
  // What the exploration cost against the picked mode's steps around it, and what those
  // steps take (SchedulerOptions::charge_exploration_overrun).
  if (new_batch) {
    chosen_steps_ns_ = 0.0;
    chosen_predicted_ns_ = 0.0;
    chosen_steps_ = 0;
    explore_reference_ns_ = std::numeric_limits<double>::quiet_NaN();
  }
  if (step_timed) {
    if (!explored) {
      if (std::isfinite(mode_before) && mode_before > 0.0) {
        chosen_steps_ns_ += sample.step_ns;
        chosen_predicted_ns_ += mode_before;
        ++chosen_steps_;
      }
    } else if (std::isfinite(explore_reference_ns_)) {
      const double cap = options_.rest_outlier_factor > 0.0
                             ? options_.rest_outlier_factor * explore_reference_ns_
                             : std::numeric_limits<double>::infinity();
      explore_spent_ns_ += std::min(sample.step_ns, cap);
      ++explore_spent_steps_;
    }
  }
  if (exploration_ends) {
    if (options_.charge_exploration_overrun && std::isfinite(explore_paid_ns_) &&
        std::isfinite(explore_reference_ns_) && explore_spent_steps_ > 0) {
      const double overrun =
          explore_spent_ns_ - explore_spent_steps_ * explore_reference_ns_ - explore_paid_ns_;
      // One that cost less than it paid repays the debt by as much (the explorations' noise
      // alone leaves none).
      double& debt = explore_debt_ns_[explore_split_ ? 0 : 1];
      debt = std::max(0.0, debt + overrun);
    }
    explore_paid_ns_ = std::numeric_limits<double>::quiet_NaN();
  }
  decided_explore_ = false;
  decided_continues_ = false;
  // What the step measured beyond the model's attention time (a mode's rest), learnt once the
  // lines have learnt from the step: the rest and the lines then add up to what the step
  // measured at its share. (Taken against the lines before they learnt, a sample that moved
  // them left the mode's prediction off by the move: DeepSeek 4 x 8K on the H200, run 212,
  // a split exploration's step took the split's GPU line from 12.5 to 1.8 ns a token, its
  // rest was taken against the old line's 342 us a layer where the new one gives 205, and the
  // split was predicted at 4.75 ms a step where its steps took 4.7-5.6, GPU-only's 4.4-5.0.)
  // Whether the step is far above its mode's prediction is judged against the prediction
  // the choice was made by.
  const double predicted_before =
      settling || !step_timed ? std::numeric_limits<double>::quiet_NaN() : attention_before;
  // An exploration that measured a guess on an advance of the credit, all of whose steps
  // settled (its last one too: it read another share than its first and missed its early
  // rounds), measured nothing: its advance is given back, once per guess, so that the guess
  // is measured at the next decision the minimum period allows (guess_advance_ns_). Not
  // where its last step settled as a new batch's first: the guess it was to measure is
  // gone (the new batch re-levels the rests and makes its own guess, measured on an advance
  // of its own), and refunding it let explorations that straddle batch changes measure
  // guesses on advances never paid back (DecodeReadsTest.AdvancesForGuessedModesArePaidBack:
  // the batch changing every five steps, GPU-only explored two steps in five, 3.1 % of the
  // time, once the credit's share was 0.005 and the explorations fell across the changes).
  // Any other exploration that measured nothing gets back what it took of the credit and of
  // the periods, so that it runs again at the next decision, once in a row: on the H200 (run
  // 216, Qwen3 16 x 32K) the first split exploration after a CPU load ended had its second
  // step on a new round of sequences, which missed its early rounds, and the split, whose
  // rest was still the loaded one, came back 43 steps later, at the maximum period
  // (DecodeReadsTest.AnExplorationThatMeasuredNothingIsRunAgainOnce).
  if (exploration_ends) {
    const bool measured_nothing = (settling && !new_batch) || guess_spike;
    if (measured_nothing && guess_advance_ns_ > 0.0 && guessed_rest_mode_ == mode &&
        !guess_refunded_) {
      explore_credit_ns_ += guess_advance_ns_;
      guess_refunded_ = true;
    } else if (measured_nothing && explore_refundable_ && !explore_is_retry_) {
      explore_credit_ns_ = std::max(explore_credit_ns_, explore_credit_taken_ns_);
      decisions_since_explore_ = std::max(decisions_since_explore_, explore_decisions_taken_);
      retry_pending_ = true;
    }
    guess_advance_ns_ = 0.0;
    explore_refundable_ = false;
  }
  // An exploration is judged on its settled step.
  if (!settling) {
    if (explore_pending_ && sample.step_ns > 0.0 && sample.step_ns < explore_chosen_ns_) {
      // The mode not picked did better than the picked one was predicted to: look again soon.
      explore_credit_ns_ = std::numeric_limits<double>::infinity();
    }
    explore_pending_ = false;
  }
  // Each line decays with the steps since its previous sample: a path measured only on
  // explorations follows them, not its history. A path that did not run this step (no
  // tokens, no time, e.g. the CPU under transfer-all) says nothing about its costs.
  const auto elapsed = [this](uint64_t& last) {
    const double steps = last == 0 ? 1.0 : static_cast<double>(steps_ - last);
    last = steps_;
    return steps;
  };
  const bool gpu_ran = !(sample.gpu.tokens == 0.0 && sample.gpu.ns == 0.0);
  // The CPU's attention ran slower than its line by rest_rise_cpu_factor: a CPU load (or the
  // line still learning one), not a spell that rest_rise_gap_share may take as passed.
  const bool cpu_slow =
      !new_batch && split && cpu_.ready() && sample.cpu.tokens > 0.0 &&
      sample.cpu.ns > options_.rest_rise_cpu_factor * cpu_.Predict(sample.cpu.tokens);
  if (!(sample.cpu.tokens == 0.0 && sample.cpu.ns == 0.0) && !new_batch) {
    cpu_.Observe(sample.cpu, elapsed(cpu_sample_step_));
  }
  if (settling) return;
  split_cpu_slow_ = split_cpu_slow_ || cpu_slow;
  // The DMA bound's two measures, from split steps that settled (one that reads otherwise
  // than its queued rounds copies other bytes than its tokens').
  if (split && sample.gpu.tokens > 0.0 && sample.dma_ns > 0.0 && std::isfinite(sample.dma_ns)) {
    dma_.Observe({sample.gpu.tokens, sample.dma_ns}, elapsed(dma_sample_step_));
  }
  if (sample.cpu_chain_extra_ns > 0.0 && std::isfinite(sample.cpu_chain_extra_ns)) {
    ObserveChainExtra(split, sample.cpu_chain_extra_ns);
  }
  if (gpu_ran && (split || policy_.kind != PolicyKind::kWriteScope)) {
    gpu_.Observe(sample.gpu, elapsed(gpu_sample_step_));
  }
  if (gpu_ran && !split) gpu_only_.Observe(sample.gpu, elapsed(gpu_only_sample_step_));
  if (std::isfinite(predicted_before)) {
    const double predicted = PredictedAttentionNs(sample);
    if (std::isfinite(predicted)) {
      double& rest = split ? rest_split_ : rest_gpu_only_;
      double& other = split ? rest_gpu_only_ : rest_split_;
      const double value = sample.step_ns - predicted;
      // A sample stands for the steps that did not explore since this mode's previous sample,
      // as the lines' do: a mode measured only on explorations follows them (a quarter of the
      // way per exploration, its rest lagged a change of several explorations: DeepSeek
      // 16 x 8K, run 89), while the chosen mode's sample after an exploration weighs one
      // step's. (The first sample sets the rest whatever its weight.)
      uint64_t& last = split ? rest_split_clock_ : rest_gpu_only_clock_;
      const double since = std::max(1.0, static_cast<double>(rest_clock_ - last));
      // The sample as the EMA takes it (rest_median_of_three): the median of it and the mode's
      // two samples before it where all three came one step apart. A sample after a gap (an
      // exploration's, the first after a held one or a re-level) starts them anew.
      RecentRests& recent = recent_rests_[split ? 0 : 1];
      if (!(last != 0 && rest_clock_ - last == 1 && !rest_stale_)) recent.count = 0;
      const double mixed =
          options_.rest_median_of_three && recent.count == 2
              ? std::max(std::min(recent.values[0], recent.values[1]),
                         std::min(std::max(recent.values[0], recent.values[1]), value))
              : value;
      if (recent.count == 2) recent.values[0] = recent.values[1];
      recent.values[std::min(recent.count, 1)] = value;
      recent.count = std::min(recent.count + 1, 2);
      // A step far above its mode's prediction from a measured rest waits for the mode's
      // next sample: a lone spike teaches nothing, two in a row are a new level
      // (SchedulerOptions::rest_outlier_factor). A held sample leaves the clock, so the next
      // one weighs both.
      bool& held = split ? rest_split_held_ : rest_gpu_only_held_;
      const bool after_held = held;
      // A level two held steps set (rest_level_check) is decided by the mode's next sample,
      // held or not: the slow spell that set it is over where the sample is back below the
      // factor from the rest before it, and the level is undone (a guess that follows this
      // mode's rest follows that too).
      TentativeLevel& level = tentative_levels_[split ? 0 : 1];
      if (level.pending) {
        level.pending = false;
        if (!(sample.step_ns >
              options_.rest_outlier_factor * (predicted_before + level.rest_before_ns))) {
          if (guess_follows_ && guessed_rest_mode_ == 3 - mode && !std::isnan(rest)) {
            other += level.rest_before_ns - rest;
          }
          rest = level.rest_before_ns;
        }
      }
      // The rest before this sample, where it was this batch's and measured
      // (rest_rise_gap_share).
      const double rest_at_entry = rest_stale_ || guessed_rest_mode_ == mode
                                       ? std::numeric_limits<double>::quiet_NaN()
                                       : rest;
      const bool hold =
          guess_spike ||
          (options_.rest_outlier_factor > 0.0 && !held && !rest_stale_ &&
           guessed_rest_mode_ != mode && !std::isnan(rest) && predicted_before + rest > 0.0 &&
           sample.step_ns > options_.rest_outlier_factor * (predicted_before + rest));
      held = hold;
      if (!hold) last = rest_clock_;
      if (hold) {
        ++rest_outliers_held_;  // nothing learnt: the rest stays, and a guess that follows it
      } else if (rest_stale_ && !std::isnan(rest)) {
        // A new batch size: the new level for this mode, the same difference to the other
        // until the other is measured at this batch too (the next decision explores it).
        // A rest that was itself a guess moves nothing: the other keeps its (older) value
        // and becomes the guess.
        if (!std::isnan(other)) {
          guess_follows_ = guessed_rest_mode_ != mode;
          if (guess_follows_) other += value - rest;
          guessed_rest_mode_ = 3 - mode;
          guess_refunded_ = false;
        } else {
          guessed_rest_mode_ = 0;
        }
        rest = value;
      } else if (guessed_rest_mode_ == mode) {
        rest = value;  // the first measurement of this mode at the new batch
        guessed_rest_mode_ = 0;
      } else {
        const double weight = 1.0 - std::pow(1.0 - options_.rest_ema_weight, since);
        const double before = rest;
        MixEma(rest, mixed, weight);
        // The second of two held steps in a row (the mode's steps one after the other) raised
        // the rest: tentative until the mode's next sample.
        if (options_.rest_level_check && after_held && since <= 2.0 && !std::isnan(before) &&
            rest > before &&
            sample.step_ns > options_.rest_outlier_factor * (predicted_before + before)) {
          level.pending = true;
          level.rest_before_ns = before;
        }
        // An explored mode's first sample is a guess: the runtime's first steps pay for
        // one-time work (Qwen3 4 x 8K on the H200, run 154: the trio's second step, a
        // GPU-only exploration's settled one, took 78.5 ms where GPU-only steps took ~10,
        // and its 72.9 ms rest kept GPU-only out of the point's 42 steps, which then ran the
        // split at 11.4 ms). It is measured once more at the first decision the minimum
        // period allows (ChooseDecodeReads' guessed rest), and that sample replaces it. (A
        // chosen mode's next samples mix in as usual.)
        if (explored && std::isnan(before) && guessed_rest_mode_ == 0) {
          guessed_rest_mode_ = mode;
          guess_follows_ = false;
          guess_refunded_ = false;
        }
        // A guess carried over at a re-level keeps its difference to this mode's level, not
        // to the one sample that re-levelled it, which is as noisy as any (Mixtral's steps
        // spread by +-10 % on the H200). That counts while the guess waits to be measured:
        // for an advance still being paid back, or behind a gap wider than the guess.
        if (guess_follows_ && guessed_rest_mode_ == 3 - mode && !std::isnan(before)) {
          other += rest - before;
        }
      }
      rest_stale_ = false;
      if (!hold) {
        // The other mode's rest at this sample (rest_shift_explore); a sample of the mode
        // not sampled before it ends a row of explorations that measured nothing.
        (split ? gpu_only_rest_at_split_sample_ : split_rest_at_gpu_only_sample_) = other;
        if (mode != last_rest_sample_mode_) {
          shift_explores_ = 0;
          run_samples_count_[mode - 1] = 0;
          // The rise's reference: the lowest rest this mode started a run at since the latest
          // exploration for a rise measured it (that one takes its level as it is).
          double& reference = rise_reference_[mode - 1];
          if (std::isnan(rest_at_entry) || std::isnan(reference) || rise_explored_[mode - 1] ||
              rest_at_entry < reference) {
            reference = rest_at_entry;
            chosen_at_reference_[mode - 1] = other;
            if (split) split_cpu_slow_ = cpu_slow;
          }
          rise_explored_[mode - 1] = false;
        }
        double* run = run_samples_[mode - 1];
        run[1] = run[0];
        run[0] = mixed;
        run_samples_count_[mode - 1] =
            std::min(run_samples_count_[mode - 1] + 1, options_.rest_rise_samples);
        last_rest_sample_mode_ = mode;
      }
    }
  }
}

void Scheduler::ObserveChainExtra(bool split, double sample_ns) {
  if (split) {
    // Split steps measure Q where the bound applies: the first since the batch changed (or
    // since GPU-only steps stood in for it) replaces, the next mix in.
    if (chain_extra_source_ == ChainExtraSource::kSplit) {
      MixEma(chain_extra_ns_, sample_ns, options_.rest_ema_weight);
    } else {
      chain_extra_ns_ = sample_ns;
      chain_extra_source_ = ChainExtraSource::kSplit;
    }
    return;
  }
  // A GPU-only step's Q (the step less the GPU's attention) stands in only for a Q the
  // split measured at another batch, until the split measures it at this one.
  if (chain_extra_source_ == ChainExtraSource::kStale) {
    chain_extra_ns_ = sample_ns;
    chain_extra_source_ = ChainExtraSource::kGpuOnly;
  } else if (chain_extra_source_ == ChainExtraSource::kGpuOnly) {
    MixEma(chain_extra_ns_, sample_ns, options_.rest_ema_weight);
  }
}

ReadDecision Scheduler::ChooseDecodeReads(uint64_t host_tokens, uint64_t placed_cpu_tokens,
                                          uint32_t sequences) {
  return DecideReads(host_tokens, placed_cpu_tokens, sequences, nullptr, {});
}

ReadDecision Scheduler::ChooseDecodeReads(uint64_t host_tokens,
                                          absl::Span<const uint64_t> cpu_tokens,
                                          absl::Span<const bool> queued_readers) {
  uint64_t placed = 0;
  for (uint64_t tokens : cpu_tokens) placed += tokens;
  return DecideReads(host_tokens, placed, static_cast<uint32_t>(cpu_tokens.size()),
                     &cpu_tokens, queued_readers);
}

ReadDecision Scheduler::DecideReads(uint64_t host_tokens, uint64_t placed_cpu_tokens,
                                    uint32_t sequences,
                                    const absl::Span<const uint64_t>* cpu_tokens,
                                    absl::Span<const bool> queued_readers) {
  const double tokens = static_cast<double>(host_tokens);
  const double placed =
      host_tokens == 0 ? 0.0
                       : std::min(1.0, static_cast<double>(placed_cpu_tokens) / tokens);
  ReadDecision decision;
  decision.cpu_share = placed;
  decided_explore_ = false;
  decided_continues_ = false;
  decided_new_batch_ = false;
  // The share of the host tokens that the CPU attends reading `chosen` (one per sequence of
  // cpu_tokens, which must be given).
  const auto share_of = [&](const std::vector<bool>& chosen) {
    uint64_t attended = 0;
    for (size_t i = 0; i < chosen.size(); ++i) attended += chosen[i] ? (*cpu_tokens)[i] : 0;
    return host_tokens == 0 ? 0.0
                            : static_cast<double>(attended) / static_cast<double>(host_tokens);
  };
  // The sequences the CPU attends for a wanted share, and the share they make (the wanted
  // one itself where the placed tokens divide at any share).
  const auto readers = [&](double wanted_share, bool at_least_one) {
    if (cpu_tokens == nullptr) return std::pair{wanted_share, std::vector<bool>()};
    std::vector<bool> chosen = ChooseCpuReaders(
        *cpu_tokens, wanted_share * static_cast<double>(host_tokens), at_least_one);
    const double share = share_of(chosen);
    return std::pair{share, std::move(chosen)};
  };
  // Also before the lines are ready: the runtime's first decode step pays for more than any
  // (the first reads of the KV in place, the workers' first calls; Qwen3 4 x 8K on the H200,
  // run 130: 5.2 ms of CPU attention per layer for 15.9K tokens, 0.2-0.6 ms for 4.0K in the
  // steps after), and taught alone, as the CPU line's one sample at another token count,
  // it held the slope at several times the CPU's for the next hundred steps.
  const bool batch_moved =
      std::abs(static_cast<double>(sequences) - static_cast<double>(rest_batch_)) >
      options_.rest_batch_tolerance * static_cast<double>(rest_batch_);
  const bool tokens_moved = options_.rest_tokens_tolerance > 0.0 && rest_tokens_ > 0.0 &&
                            std::abs(tokens - rest_tokens_) >
                                options_.rest_tokens_tolerance * rest_tokens_;
  if (policy_.kind == PolicyKind::kWriteScope && placed_cpu_tokens > 0 && host_tokens > 0 &&
      (batch_moved || tokens_moved)) {
    const bool first_batch = rest_batch_ == 0;
    rest_stale_ = true;
    rest_batch_ = sequences;
    rest_tokens_ = tokens;
    // Q grows with the batch as the rests do (the experts, the serial work), not with the
    // context.
    if (batch_moved && chain_extra_source_ != ChainExtraSource::kNone) {
      chain_extra_source_ = ChainExtraSource::kStale;
    }
    // The lines were fitted at the old batch: their predictions at this one are
    // extrapolations, and the outlier windows' ratios say nothing of this batch's samples
    // (a line off by more than the outlier factor here would reject them until half a window
    // of them had come, at the split's rare explorations when GPU-only is chosen).
    cpu_.RestartOutlierWindow();
    gpu_.RestartOutlierWindow();
    gpu_only_.RestartOutlierWindow();
    dma_.RestartOutlierWindow();
    // Its step settles (SchedulerOptions::switch_settle_steps), unless the batch changed
    // within the minimum exploration period already: a batch that changes at every step
    // would have no step teach.
    decided_new_batch_ =
        first_batch || steps_ - relevel_step_ >= options_.min_explore_period_steps;
    // A batch that held for a maximum exploration period has paid for its measurements: an
    // advance still owed is forgiven (ChooseDecodeReads' contract).
    if (steps_ - relevel_step_ >= options_.max_explore_period_steps) {
      explore_credit_ns_ = std::max(0.0, explore_credit_ns_);
    }
    relevel_step_ = steps_;
    // A level set at the old batch is not this one's to undo (rest_level_check).
    tentative_levels_[0] = tentative_levels_[1] = TentativeLevel{};
    split_rest_at_gpu_only_sample_ = std::numeric_limits<double>::quiet_NaN();
    gpu_only_rest_at_split_sample_ = std::numeric_limits<double>::quiet_NaN();
    shift_explores_ = 0;
    for (int i = 0; i < 2; ++i) {
      rise_reference_[i] = chosen_at_reference_[i] = std::numeric_limits<double>::quiet_NaN();
      run_samples_count_[i] = 0;
      rise_explored_[i] = false;
    }
    split_cpu_slow_ = false;
  }
  // Monolithic models a cache of one physical state, which changes its split only by
  // moving data (charged in SetTarget): it reads what it placed, as the fixed policies do.
  if (policy_.kind != PolicyKind::kWriteScope || placed_cpu_tokens == 0 || host_tokens == 0 ||
      !estimates_ready()) {
    if (explore_steps_left_ > 0) {  // an exploration under way ends here, unjudged
      explore_steps_left_ = 0;
      explore_pending_ = false;
    }
    if (cpu_tokens != nullptr) decision.cpu_readers = readers(placed, false).second;
    return decision;
  }
  ++read_decisions_;
  // An exploration whose step never reported (it failed) is not judged.
  if (explore_steps_left_ == 0) explore_pending_ = false;
  // The split runs at the share whole sequences make (at least one): predicted at r* that
  // rounds to no sequence, it would run as GPU-only and never be measured.
  const double split_wanted = std::min(SplitShare(tokens), placed);
  auto split_readers = readers(split_wanted, split_wanted > 0.0);
  // With no rest measured yet a mode counts as costing only its attention; the first
  // exploration measures it.
  const auto rest = [](double value) { return std::isnan(value) ? 0.0 : value; };
  decision.rest_split_ns = rest_split_;
  decision.rest_gpu_only_ns = rest_gpu_only_;
  // Without a calibration (the probe failed) the GPU-only line is unknown until a GPU-only
  // step (the exploration below runs one at once).
  if (gpu_only_.ready()) decision.gpu_only_ns = gpu_only_.Predict(tokens) + rest(rest_gpu_only_);
  // A split keeps the readers whose rounds are queued (a split's, the last step that did not
  // explore) while the ones above are predicted to save less than a change costs: over
  // mode_switch_hold_steps steps, and over the held decisions so far (their regret grows
  // below, where the held readers run), and while the split they make is not predicted worse
  // than GPU-only (where the readers above are not: a change of readers costs at most a
  // change of mode) (ChooseDecodeReads).
  const bool continuing = explore_steps_left_ > 0;
  bool readers_held = false;
  double readers_gain_ns = 0.0;
  if (options_.hold_queued_readers && cpu_tokens != nullptr &&
      queued_readers.size() == cpu_tokens->size() && !continuing && queued_mode_ == 1 &&
      split_readers.first > 0.0 && options_.mode_switch_hold_steps > 0 && switch_cost_ > 0.0 &&
      std::isfinite(switch_cost_)) {
    std::vector<bool> queued(cpu_tokens->size(), false);
    uint64_t queued_tokens = 0;
    for (size_t i = 0; i < queued.size(); ++i) {
      queued[i] = queued_readers[i] && (*cpu_tokens)[i] > 0;
      queued_tokens += queued[i] ? (*cpu_tokens)[i] : 0;
    }
    if (queued_tokens > 0 && queued != split_readers.second) {
      const double queued_share =
          static_cast<double>(queued_tokens) / static_cast<double>(host_tokens);
      const double held_ns = PredictSplit(queued_share, tokens).step_ns;
      const double new_ns = PredictSplit(split_readers.first, tokens).step_ns;
      const double gain_ns = std::max(0.0, held_ns - new_ns);
      const bool held_loses_to_gpu_only =
          decision.gpu_only_ns < held_ns + rest(rest_split_) &&
          !(decision.gpu_only_ns < new_ns + rest(rest_split_));
      if (gain_ns * options_.mode_switch_hold_steps < switch_cost_ &&
          readers_regret_ns_ + gain_ns < switch_cost_ && !held_loses_to_gpu_only) {
        readers_held = true;
        readers_gain_ns = gain_ns;
        split_readers = {queued_share, std::move(queued)};
      }
    }
  }
  const double split_share = split_readers.first;
  decision.split_ns = PredictSplit(split_share, tokens).step_ns + rest(rest_split_);
  // r* = 0 makes the split the GPU-only mode under the split's (contended) line.
  bool split = split_share > 0.0 && !(decision.gpu_only_ns < decision.split_ns);
  // The mode whose rounds are queued is kept unless the other saves more than a change costs
  // over mode_switch_hold_steps steps, or has saved it over the decisions held so far
  // (SchedulerOptions).
  bool held = false;
  if (explore_steps_left_ == 0) {
    if (options_.mode_switch_hold_steps > 0 && switch_cost_ > 0.0 &&
        queued_mode_ == (split ? 2 : 1) && (split || split_share > 0.0) &&
        std::isfinite(decision.split_ns) && std::isfinite(decision.gpu_only_ns)) {
      const double gain_ns = std::abs(decision.split_ns - decision.gpu_only_ns);
      if (gain_ns * options_.mode_switch_hold_steps < switch_cost_ &&
          held_regret_ns_ + gain_ns < switch_cost_) {
        split = !split;
        held = true;
        held_regret_ns_ += gain_ns;
      }
    }
    if (!held) held_regret_ns_ = 0.0;
    // The mode whose rounds are queued holds a level that two held steps set and none since
    // confirmed (SchedulerOptions::rest_level_check): it runs once more, and its sample
    // decides.
    if (!held && options_.rest_level_check && queued_mode_ == (split ? 2 : 1) &&
        tentative_levels_[split ? 1 : 0].pending && guessed_rest_mode_ != (split ? 1 : 2) &&
        (split || split_share > 0.0)) {
      split = !split;
      held = true;
    }
  }
  bool continues_exploration = false;
  if (explore_steps_left_ > 0) {
    continues_exploration = true;
    // The exploration under way runs on in its mode (the mode the prediction picks then
    // may be either; its step is what the exploration measures).
    --explore_steps_left_;
    decision.explore = true;
    decision.explore_reason = explore_reason_;
    decision.exploration_continues = explore_steps_left_ > 0;
    split = explore_split_;
  } else {
    // Exploration: at once while the other mode has never been measured, else when the
    // credit covers its predicted extra cost.
    const double chosen_ns = split ? decision.split_ns : decision.gpu_only_ns;
    const double other_ns = split ? decision.gpu_only_ns : decision.split_ns;
    const double unmeasured = split ? rest_gpu_only_ : rest_split_;
    if (std::isfinite(chosen_ns) && chosen_ns > 0.0) {
      explore_credit_ns_ += options_.explore_cost_share * chosen_ns;
    }
    ++decisions_since_explore_;
    // The other mode's predicted extra cost per step, and over an exploration's steps, with
    // the change of mode its first step pays for (mode_switch_hold_steps > 0).
    const double gap_ns = std::max(0.0, other_ns - chosen_ns);
    const double extra_ns =
        gap_ns * (1.0 + options_.switch_settle_steps) +
        (options_.mode_switch_hold_steps > 0 && switch_cost_ > 0.0 ? switch_cost_ : 0.0);
    // What the other mode's explorations cost beyond what they paid, still to be repaid.
    const double debt_ns = explore_debt_ns_[split ? 1 : 0];
    decision.explore_debt_ns = debt_ns;
    const bool may_explore = options_.explore_cost_share > 0.0 &&
                             decisions_since_explore_ >= options_.min_explore_period_steps;
    // The split is forced every max_explore_period_steps decisions (a CPU that was loaded is
    // seen to be free) once that costs at most max_period_cost_share of the decisions' time
    // since the last exploration (with the debt the explorations before left), and every
    // max_gpu_only_explore_period_steps whatever it costs; GPU-only every
    // max_gpu_only_explore_period_steps (SchedulerOptions).
    const uint32_t max_period =
        split ? options_.max_gpu_only_explore_period_steps : options_.max_explore_period_steps;
    const bool period_over =
        decisions_since_explore_ >= options_.max_gpu_only_explore_period_steps ||
        (decisions_since_explore_ >= max_period &&
         (options_.max_period_cost_share <= 0.0 || !std::isfinite(chosen_ns) ||
          decisions_since_explore_ * options_.max_period_cost_share * chosen_ns >=
              extra_ns + debt_ns));
    // Once the debt the explorations before left is repaid (charge_exploration_overrun).
    const bool by_credit = explore_credit_ns_ >= extra_ns + debt_ns && !held;
    const bool due = may_explore && (by_credit || period_over);
    // After a batch change (or a GPU calibration, or an explored mode's first sample) the
    // other mode's rest is a guess: measure it once, at the first decision the minimum
    // period allows, rather than at the next credit, unless the gap is wider than all of the
    // guessed rest or an earlier such measurement is still being paid for.
    const bool guess_may_hide = may_explore && guessed_rest_mode_ == (split ? 2 : 1) &&
                                explore_credit_ns_ >= 0.0 && gap_ns <= std::abs(unmeasured);
    // The chosen mode's rest fell since the other's latest sample by more than the gap
    // (SchedulerOptions::rest_shift_explore): the other's is likely stale, by as much or (a
    // load that ended, rest_shift_scaled) by as large a part of itself.
    const double chosen_rest_then =
        split ? split_rest_at_gpu_only_sample_ : gpu_only_rest_at_split_sample_;
    const double chosen_rest = split ? rest_split_ : rest_gpu_only_;
    const double fall_ns = chosen_rest_then - chosen_rest;
    const double other_rest = split ? rest_gpu_only_ : rest_split_;
    const double stale_ns = options_.rest_shift_scaled && chosen_rest_then > 0.0 &&
                                    std::isfinite(other_rest) && other_rest > 0.0
                                ? std::max(fall_ns, other_rest * fall_ns / chosen_rest_then)
                                : fall_ns;
    // Not while a mode hold keeps the other out (its gap reads 0 there), nor while an advance
    // of the credit is being paid back.
    const bool shifted = may_explore && !held && options_.rest_shift_explore > 0.0 &&
                         shift_explores_ < options_.rest_shift_explores &&
                         explore_credit_ns_ >= 0.0 && std::isfinite(fall_ns) &&
                         std::isfinite(chosen_ns) &&
                         fall_ns > options_.rest_shift_explore * chosen_ns &&
                         stale_ns > (split ? 1.0 : options_.rest_shift_split_gap_share) * gap_ns;
    // The other mode's rest rose from its reference (the lowest it began a run of samples at)
    // and the chosen mode's latest samples did not rise with it
    // (SchedulerOptions::rest_rise_gap_share): the part of the rise the chosen's does not
    // explain is likely a slow spell that has passed.
    const int chosen = split ? 0 : 1, other = 1 - chosen;  // the rise's arrays' indices
    const double other_before = rise_reference_[other];
    const double chosen_at_run = chosen_at_reference_[other];
    const double rise_ns = other_rest - other_before;
    // The chosen mode's rise by the larger of its latest two samples (once its run has had
    // rest_rise_samples), not by its rest: an EMA takes a few samples to show a slow spell
    // that is still on.
    const double chosen_recent = run_samples_count_[chosen] < options_.rest_rise_samples
                                     ? std::numeric_limits<double>::quiet_NaN()
                                     : std::max(run_samples_[chosen][0], run_samples_[chosen][1]);
    const double chosen_rise_ns =
        std::isnan(chosen_recent) ? chosen_recent : std::max(0.0, chosen_recent - chosen_at_run);
    // The gap against the chosen mode as its latest samples run, not its rest, which lags a
    // slow spell of its own that has passed: measured against that rest, the other would be
    // chosen after its sample and run behind until the chosen is explored again.
    const double recent_gap_ns = other_ns - (chosen_ns - chosen_rest + chosen_recent);
    const double unexplained_ns =
        rise_ns - (options_.rest_shift_scaled && chosen_at_run > 0.0 && other_before > 0.0
                       ? chosen_rise_ns * other_before / chosen_at_run
                       : chosen_rise_ns);
    const bool risen =
        may_explore && !held && !shifted && options_.rest_rise_gap_share > 0.0 &&
        options_.rest_shift_explore > 0.0 && shift_explores_ < options_.rest_shift_explores &&
        explore_credit_ns_ >= 0.0 && last_rest_sample_mode_ == chosen + 1 &&
        guessed_rest_mode_ != other + 1 && !(!split && split_cpu_slow_) && std::isfinite(rise_ns) &&
        std::isfinite(unexplained_ns) && std::isfinite(chosen_ns) &&
        rise_ns > options_.rest_shift_explore * chosen_ns && std::isfinite(recent_gap_ns) &&
        unexplained_ns > options_.rest_rise_gap_share * std::max(0.0, recent_gap_ns);
    const bool measure = std::isnan(unmeasured) || std::isnan(other_ns) || due || guess_may_hide;
    // A repeat of an exploration that measured nothing is due at this decision or not at all.
    const bool retry = std::exchange(retry_pending_, false);
    if (measure || shifted || risen) {
      decision.explore = true;
      split = !split;
      explore_is_retry_ = retry;
      explore_reason_ = std::isnan(unmeasured) || std::isnan(other_ns) ? ExploreReason::kUnmeasured
                        : retry && due                                 ? ExploreReason::kRepeat
                        : due && by_credit                             ? ExploreReason::kCredit
                        : due                                          ? ExploreReason::kMaxPeriod
                        : guess_may_hide                               ? ExploreReason::kGuess
                        : shifted                                      ? ExploreReason::kRestShift
                                                                       : ExploreReason::kRestRise;
      decision.explore_reason = explore_reason_;
      // A measurement of a guess beyond the credit (not due: the credit is short of extra_ns)
      // runs on an advance of it, paid back by the later decisions' credit. One for a fallen
      // rest alone leaves the credit as it is (rest_shift_explores bounds them) and is not
      // repeated when it measures nothing (its own rule repeats it).
      const bool advance = !due && guess_may_hide;
      if (!measure) ++shift_explores_;
      if (explore_reason_ == ExploreReason::kRestRise) rise_explored_[split ? 0 : 1] = true;
      guess_advance_ns_ = advance ? extra_ns : 0.0;
      explore_refundable_ = measure && guess_advance_ns_ == 0.0;
      explore_credit_taken_ns_ = explore_credit_ns_;
      explore_decisions_taken_ = decisions_since_explore_;
      // One that resets the credit pays extra_ns and what the credit has beyond it towards the
      // debt (a repeat, on an unbounded credit, repays none). It is judged against the picked
      // mode's prediction now, scaled by what that mode's steps since the previous exploration
      // took over their predictions (their tail of slow steps included).
      const bool charged = measure && !advance && std::isfinite(extra_ns);
      if (charged || advance) decision.explore_cost_ns = extra_ns;
      if (charged && std::isfinite(explore_credit_ns_)) {  // not a repeat's
        double& debt = explore_debt_ns_[split ? 0 : 1];
        debt = std::max(0.0, debt - std::max(0.0, explore_credit_ns_ - extra_ns));
      }
      explore_paid_ns_ = charged ? extra_ns : std::numeric_limits<double>::quiet_NaN();
      explore_reference_ns_ = chosen_steps_ >= 2 && std::isfinite(chosen_ns)
                                  ? chosen_ns * chosen_steps_ns_ / chosen_predicted_ns_
                                  : std::numeric_limits<double>::quiet_NaN();
      chosen_steps_ns_ = 0.0;
      chosen_predicted_ns_ = 0.0;
      chosen_steps_ = 0;
      explore_spent_ns_ = 0.0;
      explore_spent_steps_ = 0;
      if (measure) explore_credit_ns_ = advance ? explore_credit_ns_ - extra_ns : 0.0;
      // One for a risen rest alone leaves the maximum period's count as it is: where it
      // measured a spell still on, the period's exploration comes as it would have.
      if (measure || shifted) decisions_since_explore_ = 0;
      explore_pending_ = std::isfinite(chosen_ns);
      explore_chosen_ns_ = chosen_ns;
      // An exploration of the mode whose rounds are queued has nothing to settle.
      explore_steps_left_ = queued_mode_ == (split ? 1 : 2) ? 0 : options_.switch_settle_steps;
      explore_split_ = split;
      explore_extended_ = false;
      explore_hold_readers_ = false;
      decision.exploration_continues = explore_steps_left_ > 0;
    }
  }
  decided_explore_ = decision.explore;
  decided_continues_ = decision.exploration_continues;
  // Outside explorations under way, a decision that does not run the held readers ends their
  // hold (as a mode hold ends).
  if (!continuing && !(readers_held && split && !decision.explore)) readers_regret_ns_ = 0.0;
  if (split) {
    // An exploring split attends at least the probe share (within the placed one), so that
    // A is measured on a useful number of tokens.
    // (A split that does not explore runs the sequences it was predicted at.)
    auto [share, chosen] =
        decision.explore
            ? readers(std::min(placed, std::max(split_wanted, options_.probe_share)), true)
            : std::move(split_readers);
    // The step an exploration was extended by (below) reads the sequences the step before it
    // read, whatever the CPU line says now: it is the step that measures.
    const bool extension_step =
        continues_exploration && std::exchange(explore_hold_readers_, false);
    if (extension_step) {
      const double held_share =
          cpu_tokens != nullptr && explore_readers_.size() == cpu_tokens->size()
              ? share_of(explore_readers_)
              : 0.0;
      if (held_share > 0.0) {
        share = held_share;
        chosen = explore_readers_;
      } else if (explore_share_ > 0.0 && explore_share_ <= placed) {
        std::tie(share, chosen) = readers(explore_share_, true);
      }
    } else if (continues_exploration && explore_share_ > 0.0 && explore_share_ <= placed &&
               explore_share_ != share) {
      // A split exploration's later steps keep its share while that costs little
      // (SchedulerOptions::exploration_share_hold), judged at the share that would run for
      // it (whole sequences: the subset closest to the held share may make another share).
      auto [held_share, held_chosen] = readers(explore_share_, true);
      const double held_ns = PredictSplit(held_share, tokens).step_ns;
      const double new_ns = PredictSplit(share, tokens).step_ns;
      if (held_ns - new_ns <= options_.exploration_share_hold * (new_ns + rest(rest_split_))) {
        share = held_share;
        chosen = std::move(held_chosen);
      }
    }
    // A step that reads other sequences than the exploration's step before it misses the
    // rounds queued for that one and settles (settle_missed_rounds): the exploration then runs
    // one step more, on these sequences, once (its last step would otherwise measure nothing:
    // Qwen3 16 x 32K on the H200, run 218, a split exploration after a CPU load read 0.561 and
    // then 0.118).
    if (continues_exploration && !extension_step && !explore_extended_ &&
        options_.switch_settle_steps > 0 && options_.settle_missed_rounds) {
      const bool moved = cpu_tokens != nullptr && explore_readers_.size() == chosen.size()
                             ? chosen != explore_readers_
                             : share != explore_share_;
      if (moved) {
        explore_extended_ = true;
        explore_hold_readers_ = true;
        ++explore_steps_left_;
        decision.exploration_continues = true;
        decided_continues_ = true;
      }
    }
    decision.cpu_share = share;
    if (decision.explore) {
      explore_share_ = share;
      explore_readers_ = chosen;
    }
    decision.cpu_readers = std::move(chosen);
    // The held readers ran: what they gave up adds to the regret.
    if (readers_held && !decision.explore) readers_regret_ns_ += readers_gain_ns;
  } else {
    decision.cpu_share = 0.0;
    if (cpu_tokens != nullptr) decision.cpu_readers.assign(cpu_tokens->size(), false);
  }
  return decision;
}

RooflineParams Scheduler::estimates() const {
  return RooflineParams{.cpu_ns_per_token = cpu_.slope(),
                        .gpu_ns_per_token = gpu_.slope(),
                        .cpu_fixed_ns = cpu_.intercept(),
                        .gpu_fixed_ns = gpu_.intercept()};
}

double Scheduler::SplitShare(double host_tokens) const {
  const RooflineParams lines = estimates();
  const double share = OptimalCpuShare(lines, host_tokens);
  if (!DmaBound()) return share;
  // The GPU path is the larger of two falling lines, the CPU's a rising one: the larger of
  // the two paths is least at the later of the CPU line's crossings with each (C = G, and
  // C + Q = D).
  const RooflineParams transfers{.cpu_ns_per_token = lines.cpu_ns_per_token,
                                 .gpu_ns_per_token = dma_.slope(),
                                 .cpu_fixed_ns = lines.cpu_fixed_ns + chain_extra_ns_,
                                 .gpu_fixed_ns = dma_.intercept()};
  return std::max(share, OptimalCpuShare(transfers, host_tokens));
}

double Scheduler::TransferBoundNs(double gpu_tokens) const {
  return DmaBound() ? dma_.Predict(gpu_tokens) - chain_extra_ns_
                    : -std::numeric_limits<double>::infinity();
}

StepPrediction Scheduler::PredictSplit(double cpu_share, double host_tokens) const {
  StepPrediction p = PredictStep(estimates(), cpu_share, host_tokens);
  if (!DmaBound() || std::isnan(p.gpu_ns)) return p;
  const double r = std::isnan(cpu_share) ? 0.0 : std::clamp(cpu_share, 0.0, 1.0);
  const double tokens = std::isnan(host_tokens) ? 0.0 : std::max(0.0, host_tokens);
  p.gpu_ns = std::max(p.gpu_ns, TransferBoundNs((1.0 - r) * tokens));
  p.step_ns = std::max(p.cpu_ns, p.gpu_ns);
  return p;
}

double Scheduler::UpdateTarget(uint64_t host_tokens) {
  if (!policy_.adaptive()) return target_;
  if (!estimates_ready()) return target_;
  target_tokens_ = std::max(static_cast<double>(host_tokens),
                            target_tokens_ * (1.0 - options_.target_tokens_decay));
  optimal_ = SplitShare(target_tokens_);
  const double wanted =
      std::clamp(optimal_, options_.probe_share, 1.0 - options_.probe_share);
  if (!target_from_estimates_) {
    // The initial share was a guess: take the first estimate at once.
    target_from_estimates_ = true;
    pending_side_ = 0;
    pending_count_ = 0;
    SetTarget(wanted);
    return target_;
  }
  const double delta = wanted - target_;
  if (std::abs(delta) <= options_.deadband) {
    pending_side_ = 0;
    pending_count_ = 0;
    return target_;
  }
  const int side = delta > 0.0 ? 1 : -1;
  if (side == pending_side_) {
    ++pending_count_;
  } else {
    pending_side_ = side;
    pending_count_ = 1;
  }
  if (pending_count_ >= options_.hold_updates) {
    pending_side_ = 0;
    pending_count_ = 0;
    SetTarget(wanted);
  }
  return target_;
}

double Scheduler::PlacementShare(uint64_t host_tokens_after) const {
  if (policy_.kind != PolicyKind::kWriteScope || !estimates_ready() || !target_from_estimates_) {
    return target_;
  }
  const double tokens = std::max(static_cast<double>(host_tokens_after), target_tokens_);
  return WithHeadroom(SplitShare(tokens));
}

double Scheduler::FlushShare() const {
  if (policy_.kind != PolicyKind::kWriteScope || !target_from_estimates_) return target_;
  return WithHeadroom(target_);
}

double Scheduler::WithHeadroom(double share) const {
  return std::clamp(share + options_.placement_headroom, options_.probe_share,
                    1.0 - options_.probe_share);
}

void Scheduler::SetTarget(double target) {
  if (target == target_) return;
  ++target_changes_;
  target_ = target;
}

// ---------------------------------------------------------------------------------------
// Steering.

KvRegion SteerBlock(const RegionCounts& batch, const RegionCounts& sequence, double target,
                    const std::array<uint32_t, kNumKvRegions>& free_slots,
                    double batch_slack_blocks) {
  if (std::isnan(target)) target = kIndifferentCpuShare;
  // > 0: CPU brings these counts' share closer to r; < 0: the transfer region;
  // 0: tie.
  const auto closer_side = [target](const RegionCounts& counts) {
    const double wanted = target * static_cast<double>(counts[kCpu] + counts[kGpu] + 1);
    const double midpoint = static_cast<double>(counts[kCpu]) + 0.5;
    if (std::abs(wanted - midpoint) <= 1e-9 * std::max(1.0, wanted)) return 0;
    return midpoint < wanted ? 1 : -1;
  };
  KvRegion preferred;
  if (target <= 0.0) {
    preferred = KvRegion::kGpuTransfer;
  } else if (target >= 1.0) {
    preferred = KvRegion::kCpuCompute;
  } else {
    // NaN counts as 1/2 too (std::max would pass it on, and no side would keep the batch).
    const double slack = batch_slack_blocks >= 0.5 ? batch_slack_blocks : 0.5;
    const double wanted = target * static_cast<double>(batch[kCpu] + batch[kGpu] + 1);
    const double cpu_blocks = static_cast<double>(batch[kCpu]);
    // The two deviations sum to 1, so with slack >= 1/2 at least one choice is
    // allowed.
    const bool cpu_keeps_batch = cpu_blocks + 1.0 - wanted <= slack;
    const bool gpu_keeps_batch = wanted - cpu_blocks <= slack;
    int side;
    if (cpu_keeps_batch && gpu_keeps_batch) {
      side = closer_side(sequence);
      if (side == 0) side = closer_side(batch);
    } else {
      side = cpu_keeps_batch ? 1 : -1;
    }
    if (side == 0) side = target >= 0.5 ? 1 : -1;
    preferred = side > 0 ? KvRegion::kCpuCompute : KvRegion::kGpuTransfer;
  }
  const KvRegion other =
      preferred == KvRegion::kCpuCompute ? KvRegion::kGpuTransfer : KvRegion::kCpuCompute;
  if (free_slots[KvRegionIndex(preferred)] == 0 && free_slots[KvRegionIndex(other)] > 0) {
    return other;
  }
  return preferred;
}

SteeringChooser::SteeringChooser(const KvPlacement& placement, double target_cpu_share,
                                 double batch_slack_blocks)
    : placement_(placement), target_(target_cpu_share), batch_slack_blocks_(batch_slack_blocks) {
  batch_[kCpu] = placement.Usage(KvRegion::kCpuCompute).used_blocks;
  batch_[kGpu] = placement.Usage(KvRegion::kGpuTransfer).used_blocks;
}

KvRegion SteeringChooser::operator()(const PlacementRequest& request) const {
  auto [it, inserted] = sequences_.try_emplace(request.sequence);
  RegionCounts& sequence = it->second;
  if (inserted) {
    // The placement adds a plan's blocks to the sequence only after all are
    // chosen, so this reads the blocks placed before this call.
    if (const SequencePlacement* placed = placement_.Find(request.sequence)) {
      for (const PlacedBlock& block : placed->blocks) ++sequence[KvRegionIndex(block.ref.region)];
    }
  }
  const KvRegion region =
      SteerBlock(batch_, sequence, target_, request.free_slots, batch_slack_blocks_);
  ++batch_[KvRegionIndex(region)];
  ++sequence[KvRegionIndex(region)];
  return region;
}

double SequenceCpuShare(const SequencePlacement& sequence) {
  if (sequence.blocks.empty()) return 0.0;
  size_t cpu = 0;
  for (const PlacedBlock& block : sequence.blocks) {
    cpu += block.ref.region == KvRegion::kCpuCompute ? 1 : 0;
  }
  return static_cast<double>(cpu) / static_cast<double>(sequence.blocks.size());
}

std::vector<bool> ChooseCpuReaders(absl::Span<const uint64_t> cpu_tokens, double wanted_tokens,
                                   bool at_least_one) {
  std::vector<bool> chosen(cpu_tokens.size(), false);
  if (!(wanted_tokens > 0.0)) return chosen;
  // The common case, every step of a policy that reads what it placed: all of them (what
  // the greedy pass below would pick too), without the sort.
  double total = 0.0;
  for (uint64_t tokens : cpu_tokens) total += static_cast<double>(tokens);
  if (wanted_tokens >= total) {
    for (size_t i = 0; i < cpu_tokens.size(); ++i) chosen[i] = cpu_tokens[i] > 0;
    return chosen;
  }
  std::vector<size_t> order(cpu_tokens.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Largest first, ties in step order: deterministic.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return cpu_tokens[a] > cpu_tokens[b]; });
  double sum = 0.0;
  for (size_t i : order) {
    const double with = sum + static_cast<double>(cpu_tokens[i]);
    if (cpu_tokens[i] > 0 && std::abs(with - wanted_tokens) < std::abs(sum - wanted_tokens)) {
      chosen[i] = true;
      sum = with;
    }
  }
  if (at_least_one && sum == 0.0) {
    // The sequence with the fewest CPU tokens (> 0); ties: the first in step order, as the
    // greedy pass takes equal ones, so that a share held over steps keeps its sequence.
    size_t smallest = cpu_tokens.size();
    for (size_t i = 0; i < cpu_tokens.size(); ++i) {
      if (cpu_tokens[i] > 0 &&
          (smallest == cpu_tokens.size() || cpu_tokens[i] < cpu_tokens[smallest])) {
        smallest = i;
      }
    }
    if (smallest < cpu_tokens.size()) chosen[smallest] = true;
  }
  return chosen;
}

bool PrefillReadsOnGpu(uint32_t chunk_tokens, const Scheduler& scheduler) {
  if (!scheduler.estimates_ready()) return chunk_tokens >= kPrefillReadMinTokens;
  const RooflineParams p = scheduler.estimates();
  return static_cast<double>(chunk_tokens) * p.cpu_ns_per_token > p.gpu_ns_per_token;
}

}  // namespace writescope::coordinator
