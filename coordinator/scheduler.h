// WriteScope's scheduler, the pure logic (ARCHITECTURE.md §3): the per-layer
// roofline model, online estimates of its four parameters, the CPU-share target
// with hysteresis, and the steering of new KV blocks toward that target. No
// threads, clocks or I/O: the coordinator feeds it the per-step timings the
// workers report and asks it where each new block goes.
//
// Model, per layer and decode step, with L = host-resident tokens of the batch
// (the D-window is on the GPU and not counted) and r = the CPU share of them:
//
//   T_cpu(r) = r·A·L + c_C          (CPU attention over the CPU-compute region)
//   T_gpu(r) = (1 − r)·B·L + c_G    (transfer + GPU attention over the transfer
//   region) step(r)  = max(T_cpu(r), T_gpu(r))          (the two paths run
//   concurrently)
//
// With A, B ≥ 0, T_cpu rises and T_gpu falls in r, so the max is smallest where
// they cross: r·A·L + c_C = (1 − r)·B·L + c_G  ⇔  r·(A + B)·L = B·L + c_G − c_C
// ⇔
//
//   r* = clamp(B / (A + B) + (c_G − c_C) / ((A + B)·L), 0, 1).
//
// When the crossing lies outside [0, 1] one path is slower for every r and the
// clamp gives the end that minimises it. Units: ns, tokens, ns/token.
#ifndef WRITESCOPE_COORDINATOR_SCHEDULER_H_
#define WRITESCOPE_COORDINATOR_SCHEDULER_H_

#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/kv_config.h"
#include "coordinator/explore_reason.h"
#include "coordinator/placement.h"
#include "coordinator/policy.h"

namespace writescope::coordinator {

// ---------------------------------------------------------------------------------------
// Roofline model.

// Costs of ONE layer in one decode step.
struct RooflineParams {
  double cpu_ns_per_token = 0.0;  // A
  double gpu_ns_per_token = 0.0;  // B
  double cpu_fixed_ns = 0.0;      // c_C
  double gpu_fixed_ns = 0.0;      // c_G
};

// INVALID_ARGUMENT, naming the field, for a negative or NaN value. +inf is
// allowed: a path that cannot be used (its r is then 0 or 1).
absl::Status ValidateRooflineParams(const RooflineParams& params);

// The share returned when the model cannot tell the two paths apart (A = B = 0,
// both infinite, or A or B NaN): every r gives the same prediction.
inline constexpr double kIndifferentCpuShare = 0.5;

// r*, always finite and in [0, 1]. Robust to bad inputs rather than failing,
// because it runs every step on estimates: negative A, B, c_C, c_G count as 0
// (noise around zero), NaN fixed costs as 0, NaN A or B give
// kIndifferentCpuShare, +inf A gives 0 and +inf B 1. `host_tokens` ≤ 0 or NaN
// is L = 0, where the L-term vanishes and the limit L → 0+ is returned: 1 if
// c_G > c_C (the first tokens are cheaper on the idle CPU), 0 if c_G < c_C, B /
// (A + B) on a tie.
double OptimalCpuShare(const RooflineParams& params, double host_tokens);

struct StepPrediction {
  double cpu_ns = 0.0;   // T_cpu(r)
  double gpu_ns = 0.0;   // T_gpu(r)
  double step_ns = 0.0;  // max(T_cpu, T_gpu)
};

// The model at a given r (clamped to [0, 1]; NaN counts as 0). Negative costs
// count as 0, NaN fixed costs as 0, L ≤ 0 or NaN as 0; a NaN A or B makes its
// path's time NaN (there is nothing to predict). A path with no share (r = 0
// for the CPU, r = 1 for the GPU) costs only its fixed cost, even when its
// per-token cost is infinite.
StepPrediction PredictStep(const RooflineParams& params, double cpu_share, double host_tokens);

// The roofline bound of one layer-step: the best split and what the single
// paths cost.
struct RooflineBound {
  double cpu_share = 0.0;        // r*
  double step_ns = 0.0;          // step(r*): no split does better under the model
  double transfer_all_ns = 0.0;  // step(0)
  double cpu_all_ns = 0.0;       // step(1)
  // min(step(0), step(1)) / step(r*) ≥ 1: the ideal speedup of the split over
  // the better single path; 1 when step(r*) is 0.
  double split_gain = 1.0;
};
RooflineBound ComputeRooflineBound(const RooflineParams& params, double host_tokens);

// ---------------------------------------------------------------------------------------
// Online estimation of one path's line: time_ns = slope · tokens + intercept.

// One measurement of one path, for ONE layer (the mean over layers of a step).
struct CostSample {
  double tokens = 0.0;  // host tokens this path attended (L_C = r·L or L_G = (1 − r)·L)
  double ns = 0.0;      // its time for one layer
};

struct EstimatorOptions {
  // Weight of the newest sample once the history is long (an EMA weight): the
  // fit decays older samples by (1 − ema_weight) per sample, so it follows
  // drift with a time constant of about 1 / ema_weight samples. In (0, 1].
  double ema_weight = 0.05;
  // Pull of the intercept toward its prior (the calibrated intercept, else 0),
  // relative to the total data weight. It only matters when recent samples have
  // too little spread in tokens to identify the intercept; the slope then
  // absorbs the rest. ≥ 0.
  double intercept_ridge = 1e-3;
  // A sample whose ratio to the current prediction is above outlier_factor ×
  // (or below 1 / outlier_factor ×) the median ratio of the last outlier_window
  // samples is ignored. Rejected samples still enter the window, so a lasting
  // change of regime (contention) moves the median and is accepted after about
  // half a window. > 1.
  double outlier_factor = 3.0;
  int outlier_window = 15;
  // The check starts once the window holds this many ratios.
  int outlier_min_history = 5;
};

absl::Status ValidateEstimatorOptions(const EstimatorOptions& options);

class LinearCostEstimator {
 public:
  // `options` must be valid (ValidateEstimatorOptions); programmer error
  // otherwise.
  explicit LinearCostEstimator(const EstimatorOptions& options = {});

  // Replaces the fit with the least-squares line through `points`: the start-up
  // probe and its periodic re-measurement, which run the path at several sizes
  // so slope and intercept are both identified. The fitted intercept becomes
  // the prior; the points enter the running sums with the weight of a full
  // history (1 / ema_weight samples), so later samples take over at the usual
  // rate. `weight_samples` > 0 gives the points that many samples' weight instead (a
  // probe of a path run in other conditions than its steps: a starting point and the
  // intercept's prior, soon taken over by the samples). INVALID_ARGUMENT (nothing changed)
  // for no points, a negative / non-finite point, fewer than two distinct token counts,
  // or a negative / non-finite weight.
  absl::Status Calibrate(absl::Span<const CostSample> points, double weight_samples = 0.0);

  // Adds one step's measurement. Returns false, changing nothing but the
  // outlier window, for an invalid sample (negative or non-finite) or an
  // outlier. A sample with 0 tokens is valid: it measures the intercept alone.
  // `elapsed`: the steps since the previous sample (≥ 1; a path measured only now and
  // then): older samples decay by (1 − ema_weight)^elapsed and the new one weighs what
  // `elapsed` equal samples would; after at least outlier_window steps the outlier window
  // starts afresh (its ratios are of another time).
  bool Observe(const CostSample& sample, double elapsed = 1.0);
  // Empties the outlier window: the next outlier_min_history samples are taken whatever
  // their ratio to the line. For samples of another regime than the window's ratios (a
  // batch the line was not fitted at: its predictions there are extrapolations).
  void RestartOutlierWindow() { recent_ratios_.clear(); }

  // Whether slope and intercept come from data (a calibration or ≥ 1 accepted
  // sample with tokens > 0).
  bool ready() const { return ready_; }
  double slope() const { return slope_; }          // ns per token, ≥ 0
  double intercept() const { return intercept_; }  // ns, ≥ 0
  double Predict(double tokens) const { return slope_ * tokens + intercept_; }
  int64_t accepted() const { return accepted_; }
  int64_t rejected() const { return rejected_; }

 private:
  bool IsOutlier(const CostSample& sample);
  void Refit();

  EstimatorOptions options_;
  // Exponentially weighted sums of the accepted samples: Σw, Σw·x, Σw·x², Σw·y,
  // Σw·x·y.
  double sum_w_ = 0.0, sum_x_ = 0.0, sum_xx_ = 0.0, sum_y_ = 0.0, sum_xy_ = 0.0;
  double intercept_prior_ = 0.0;
  double slope_ = 0.0;
  double intercept_ = 0.0;
  bool ready_ = false;
  std::deque<double> recent_ratios_;  // sample / prediction, newest last
  int64_t accepted_ = 0;
  int64_t rejected_ = 0;
};

// ---------------------------------------------------------------------------------------
// The scheduler: estimates, target, policy.

// What the workers report for one decode step, per layer (means over the
// layers).
struct StepSample {
  CostSample cpu;  // host tokens the CPU attended in place, CPU attention time (cpu_worker)
  CostSample gpu;  // host tokens the GPU streamed, transfer + GPU attention time (gpu_worker)
  // The whole step (planning to results) divided by the layers; 0: not measured. It
  // teaches the scheduler what the model of the attention phase leaves out (ReadDecision).
  double step_ns = 0.0;
  // The copy engine's time per layer on the KV rounds that streamed gpu.tokens (the
  // gpu_worker's StepResult.transfer_ms over the layers); 0: not measured.
  // SchedulerOptions::dma_bound.
  double dma_ns = 0.0;
  // What the CPU's chain spent per layer beyond cpu.ns, its waits for the GPU left out: the
  // step less each layer's later path (the GPU's attention and its wait for the CPU's
  // partial, StepResult.cpu_attention_wait_ms), over the layers (the experts and the serial
  // work), plus the CPU's attention over all layers less cpu.ns (the first layer, which
  // steady-layer samples leave out). The CPU's chain alone takes cpu.ns + this per layer. On
  // a GPU-only step (cpu.tokens 0): the step less the GPU's attention, per layer. 0: not
  // measured. SchedulerOptions::dma_bound.
  double cpu_chain_extra_ns = 0.0;
  // The gpu_worker could not use whole the KV rounds it queued early for this step
  // (StepResult.early_rounds_missed): the step read otherwise than queued and paid for it.
  bool early_rounds_missed = false;
};

// How a decode step reads the KV placed in the CPU-compute region. The placement fixes
// where each block lies, not who reads it: the blocks of both host regions have one layout
// and the gpu_worker pins both (the CPU-compute one where the device allows; else its
// reads are pageable copies, slower, and the GPU-only line measures that), so it can
// stream a CPU-compute block like a transfer block (SequenceStep.gpu_reads_cpu_blocks).
// The placed CPU share is thus an upper bound of the share the CPU attends in a step. The
// writescope policy compares two modes per step, each predicted per layer as the model's
// attention time plus an EMA of what the whole step measured beyond the model in that
// mode (the "rest": experts, serial GPU work, and what running both paths at once costs
// each of them — the DMA and the CPU attention share host memory bandwidth, so the GPU
// path streams slower while the CPU attends):
//
//   split:    the CPU attends r_s = min(r*, placed share) of the host tokens;
//             max(T_cpu(r_s), T_gpu(r_s)) + rest_split (an exploring split attends at
//             least the probe share)
//   GPU-only: the GPU streams every host token, the CPU attends none;
//             B₀·L + c_G₀ + rest_gpu_only, with B₀, c_G₀ measured on GPU-only steps (and
//             by CalibrateGpu: the gpu_worker's probe of the GPU path alone, at start-up
//             and every recalibration_period_steps steps, Engine::CalibrateGpuPath)
//
// and takes the cheaper. Now and then it runs the other mode, so that both stay measured
// (a CPU that was loaded is seen to be free again): each decision earns explore_cost_share
// of its predicted step time as credit, and the other mode runs once the credit covers
// its predicted extra cost over the exploration's steps (at least min_explore_period_steps
// decisions apart; the split at least every max_explore_period_steps, or as soon after as its
// predicted cost is max_period_cost_share of the time, GPU-only at least every
// max_gpu_only_explore_period_steps). So exploring costs about that share of the time (more
// where a maximum period forces an exploration of a mode far worse: GPU-only far behind the
// split, about 2.5 % per exploring step for a mode twice as costly): modes close together
// are compared often, a mode far worse is tried rarely. A change of mode costs its first
// steps something of their own (switch_settle_steps): those steps teach nothing, and an
// exploration lasts them plus one. An exploration whose measured step does better than the
// picked mode's prediction is repeated at the next chance (when the prediction now picks the
// explored mode, that runs the mode just left once more: a second sample of it, whose first
// may have been one high step), and each line weighs a sample by the steps since its previous
// one, so a few explorations carry a CPU that is free again back to the split.
// Only the writescope policy chooses its reads; the others read what they placed
// (monolithic models a cache of one physical state, whose split changes only by moving
// data).
struct ReadDecision {
  double cpu_share = 0.0;  // of the batch's host tokens, for the CPU to attend in place
  bool explore = false;    // the mode the prediction did not pick, to keep it measured
  // What started the exploration this decision is a step of (kNone when not exploring).
  ExploreReason explore_reason = ExploreReason::kNone;
  // An exploring decision that is not its exploration's last step: the next decision most
  // likely continues it in the same mode (SchedulerOptions::switch_settle_steps).
  bool exploration_continues = false;
  // The two predictions per layer, ns (NaN: not known yet, or no choice made).
  double split_ns = std::numeric_limits<double>::quiet_NaN();
  double gpu_only_ns = std::numeric_limits<double>::quiet_NaN();
  // The modes' rests in those predictions, per layer, ns (NaN: not measured yet, counted as
  // 0, or no prediction made).
  double rest_split_ns = std::numeric_limits<double>::quiet_NaN();
  double rest_gpu_only_ns = std::numeric_limits<double>::quiet_NaN();
  // The first decision of an exploration the credit pays for (all but a fallen rest's): the
  // extra cost over its steps that it was predicted at and paid (the gap to the picked mode
  // over its steps plus the switch cost), per layer, ns. NaN on every other decision, and
  // where a mode is not predicted yet.
  double explore_cost_ns = std::numeric_limits<double>::quiet_NaN();
  // What the explorations of the mode the prediction did not pick cost beyond what they paid,
  // still to be repaid by the credit before it covers another of them
  // (SchedulerOptions::charge_exploration_overrun), per layer, ns. 0 on a decision that
  // continues an exploration.
  double explore_debt_ns = 0.0;
  // Given the step's sequences (the overload with their CPU-compute tokens): which of them the
  // CPU attends in place, cpu_share being their share of the host tokens. Empty otherwise.
  std::vector<bool> cpu_readers;
};

struct SchedulerOptions {
  EstimatorOptions cpu_estimator;  // A, c_C
  EstimatorOptions gpu_estimator;  // B, c_G
  // The target until both estimators are ready (adaptive policies).
  double initial_cpu_share = 0.5;
  // Hysteresis: the target moves to a new r* only when |r* − target| > deadband
  // for hold_updates consecutive UpdateTarget calls on the same side; it then
  // jumps to r*.
  double deadband = 0.02;
  int hold_updates = 6;
  // The batch r* is computed for. Placement is long-lived (a placed block serves every later
  // step of its sequence), and r* at a small L is dominated by the fixed costs (it sits at a
  // clamp), so a few steps of a partial batch — sequences finishing and the next ones
  // being admitted — would swing the target, and the blocks placed then would keep that
  // swing for their whole life. UpdateTarget uses the larger of the step's host tokens and
  // their recent peak, which decays by this fraction per update (a batch that really
  // shrinks is followed within ~ln(ratio) / decay updates). In (0, 1]; 1: the step's own.
  double target_tokens_decay = 1.0 / 32;
  // Adaptive policies keep the target in [probe_share, 1 − probe_share]: a path that gets
  // no tokens is never measured, so a share of 0 chosen while the CPU was loaded would
  // stay 0 after the load ends. This small share keeps both estimates current. In [0, 0.25].
  double probe_share = 0.03;
  // Writescope writes new KV this far above its share (PlacementShare for prompts, FlushShare
  // for D-window flushes), within [probe_share, 1 − probe_share]. A step may read less of the
  // CPU-compute region than is placed there (the GPU streams the rest), never more, so a
  // placement at the estimate of the moment caps every later read at it: DeepSeek 32 x 32K on
  // the H200 (run 203) placed 0.497 at its fill, its target rose to 0.507, and it stepped 4.6 %
  // slower than static:0.5, with its copies binding the step (2 % of the step per 0.01 of
  // share there). With the headroom the reads follow r* up as far as it. In [0, 1); 0: write at
  // the share itself.
  double placement_headroom = 0.03;
  // Steps between re-measurements of B under contention (RecalibrationDue); 0:
  // never.
  uint64_t recalibration_period_steps = 2000;
  // A probe's weight in the lines of split steps, in samples: the GPU probe's in the split's
  // GPU line (CalibrateGpu), the CPU probe's in the CPU line (CalibrateCpu). Each probe runs
  // its path alone, while in a split the DMA and the CPU attention share host memory. > 0.
  double split_calibration_samples = 2.0;
  // ChooseDecodeReads (writescope): the share of the predicted step time spent, on average,
  // running the mode the prediction did not pick (ReadDecision). In [0, 1]; 0: a mode is
  // run by choice only once it has been measured (it is then not re-measured). At DeepSeek
  // 4 x 8K on the H200 (run 212, 6 rounds of 32 steps), where the split gains nothing,
  // writescope's exploring steps took 1.2 % of the time beyond transfer-all's. Halved (0.005,
  // run 213), the simulated steps took 0.3-0.5 % less at every gap between the modes
  // (DecodeReadsTest.ExploringCostsAboutItsShareWhereverTheModesLie), but on the H200 a split
  // chosen there ran on between the explorations that would have left it: 84 of 192 steps
  // split, 6-9 % slower than transfer-all's (38 at 0.01), writescope 0.948x of transfer-all.
  double explore_cost_share = 0.01;
  // Explorations are at least min_explore_period_steps decisions apart, and the split's at
  // most max_explore_period_steps while GPU-only is chosen (it bounds how long a CPU that was
  // loaded goes unnoticed once it is free). GPU-only, whose line the gpu_worker's probe
  // re-measures (recalibration_period_steps), is forced only every
  // max_gpu_only_explore_period_steps: where it is far behind, a forced exploration costs
  // far more than the credit's share (Qwen3 32 x 32K on the H200, every 40 decisions: 159 ms
  // per GPU-only step against the split's 88, their extra time 7 % of the round's, run 91);
  // the longer period keeps a GPU-only rest that one bad sample set from standing for good.
  // min ≤ max ≤ max_gpu_only.
  uint32_t min_explore_period_steps = 4;
  uint32_t max_explore_period_steps = 40;
  uint32_t max_gpu_only_explore_period_steps = 400;
  // The split's forced explorations (max_explore_period_steps) wait, up to GPU-only's period,
  // until their predicted extra cost is at most this share of the predicted time of the
  // decisions since the last exploration: where the split is far behind, forcing it every 40
  // decisions cost more than the aim of 0.98x of the best baseline allows (DeepSeek 4 and 16
  // x 8K on an H100, runs 246-247: split steps 12-13 ms over transfer-all's 8.4-14.3, 9-15 of
  // 240 steps, writescope 0.919-0.950x of transfer-all). Above explore_cost_share, so that a
  // forced exploration still comes before the credit's. In [0, 1]; 0: forced at
  // max_explore_period_steps whatever it costs.
  double max_period_cost_share = 0.015;
  // An exploration that reset the credit (the credit's, a maximum period's) and cost more than
  // it paid for leaves the overrun as a debt of its mode, which the credit repays before it
  // covers another exploration of that mode (one that cost less repays it by as much): so the
  // explorations' cost stays near explore_cost_share of the time even where their steps run
  // above their prediction (the change's first step above the switch cost learnt, a tail of
  // slow steps that the rests leave out as outliers). What it cost is its steps' time over
  // what the picked mode's steps would have taken: the picked mode's prediction at the
  // exploration's decision times what that mode's steps since the previous exploration (at the
  // same batch) took over their predictions. An exploring step counts at most
  // rest_outlier_factor times that, so that one slow step does not stop the credit for
  // hundreds of decisions. On an H100 (run 252, Qwen3 4 x 8K) the split's credit explorations
  // ran 3.5 ms a step over transfer-all's against a predicted gap of 1.3, and exploring took
  // 2.7 % of the time against the credit's 1 %; at DeepSeek 16 x 8K on the H200 (run 248) a
  // split credit exploration's first step ran 1.4-1.7 ms (the trios' medians) over the picked
  // mode's neighbouring steps where its predicted gap was 0.1-0.5, its second step near the
  // gap. A/B on H100s (runs 254-256, DeepSeek 4 and 16 x 8K, Qwen3 4 x 8K): 25-43 % fewer
  // exploring steps, their time 1.3 -> 0.9 % and 1.0 -> 0.6 % of transfer-all's at DeepSeek,
  // level at Qwen3; writescope's ratio to transfer-all moved within the noise (0.979 against
  // 0.976, 1.005 against 1.014, 0.983 against 0.987). The maximum periods still force theirs;
  // the rests' own explorations (guess, rest_shift) and the repeat of one that did better than
  // predicted do not wait for the debt (nor repay it). false: an exploration is charged what
  // it was predicted to cost.
  bool charge_exploration_overrun = true;
  // Where the chosen mode's rest fell, since the other mode's latest rest sample, by more
  // than this share of the chosen mode's predicted step and by more than the other is
  // predicted behind it, the other's rest is likely stale by as much (most of a rest, the
  // experts and the serial work, is the same work in both modes): it is explored at the
  // first decision the minimum period allows, and again while its explorations measure
  // nothing, up to rest_shift_explores in a row (a sample of the other mode ends the row).
  // These explorations neither pay from the exploration credit nor reset it, and none runs
  // during a mode hold or while an advance of the credit is paid back. On the H200 (run
  // 217, Qwen3 16 x 32K) GPU-only's rest fell from 65 to 33 ms within 2 s of a CPU load
  // ending, while the split's stayed at the 101 ms measured under the load; the split came
  // back 5.6 s after the load, at the exploration the maximum period forced (its first
  // exploration after the load and the repeat of it measured nothing). A rise is not acted
  // on: the other mode then looks better than it is and is chosen, which measures it. Moves
  // within the steps' noise stay below the share (the rests are EMAs). ≥ 0; 0: off.
  double rest_shift_explore = 0.1;
  uint32_t rest_shift_explores = 3;  // 0: off too
  // rest_shift_explore compares with the gap the larger of the chosen mode's fall and that
  // fall scaled to the other mode's rest (the other's rest times the chosen's fall over the
  // chosen's rest at the other's latest sample): a CPU load that ended had slowed the work
  // both rests hold (the experts; in the split's also the CPU's attention and the waits for
  // it), and where the other's rest was the larger under the load, more of it was that work.
  // On the H200 (run 221, Qwen3 16 x 32K) the split's rest stood at 117.6 ms after a load,
  // GPU-only's fell from 78.3 ms (at the split's latest sample) to 34.4: the fall passed
  // the gap the split was predicted behind 1.2 s after the load (43.8 ms), the scaled fall
  // 0.08 s after it (28.6 ms against a gap of 25.6; the minimum period permitting); the
  // split's next samples put its rest at 37.4 ms. false: the fall alone.
  bool rest_shift_scaled = true;
  // Where GPU-only is chosen, the split is explored for a fallen rest once the stale part
  // (rest_shift_scaled) passes this share of the gap, not all of it: a CPU load slows the
  // split's rest more than GPU-only's (its CPU attention and the waits for it: 1.4-7.7 times
  // GPU-only's rise, median 1.95, in 19 of the 21 loads of runs 220-273's contention runs), so
  // GPU-only's fall scaled to the split's rest understates how much of it the load made.
  // On an H100 (run 273, Qwen3 4 layers, 16 x 32K, the noisy host) one split exploration
  // under a load ran 1.47x its prediction, under rest_outlier_factor, and took the split's rest
  // from 130 to 189 ms against GPU-only's 117-121; after the load GPU-only's rest fell to 50
  // ms within 1.5 s, and the scaled fall stayed 1-4 ms under the gap (~115 ms) for 7.7 s, until
  // the split came back 7.98 s after the load. Simulated
  // (DecodeReadsTest.ASplitTheLoadSlowedMoreThanGpuOnlyIsExploredOnceTheLoadEnds): where the
  // load raised the split's rest by 1.2-4x GPU-only's rise, the split came back 6-17 decisions
  // after the load with 0.7 against 166 to over 200 with 1 (0.8 missed from 2.4x on); with
  // slow spells of the host in both modes, writescope's time over the better mode's moved by
  // at most 0.2 %. Where the split is chosen the whole gap counts (a slow spell of the host
  // slows both modes alike, and exploring GPU-only after it cost 0.2-0.3 % at 0.8 there).
  // In (0, 1]; 1: the gap.
  double rest_shift_split_gap_share = 0.7;
  // The other way round: where the other mode's rest rose, from the lowest rest it began a run
  // of samples at (its samples between two of the chosen mode's; since this rule last explored
  // it), by more than rest_shift_explore of the chosen mode's predicted step, and the chosen mode's
  // latest rest_rise_samples samples (the larger of the last two) did not rise with it, the
  // rise was likely a slow spell that has passed (a host that got slower raises both rests: a
  // CPU load the split's 1.4-7.7 times GPU-only's, session 59). The other is explored once the
  // part of its rise the chosen's does not explain (the chosen's rise scaled to the other's
  // rest, rest_shift_scaled) passes this share of the gap it is predicted behind the chosen
  // mode as its latest samples run (its rest lags a spell of its own). rest_shift_explores
  // bounds these with the falls' explorations; they neither pay from the credit nor reset it,
  // nor restart the maximum period's count (where one measures a spell still on, the
  // period's exploration comes when it would have). On an H100 (run 283, Qwen3 4 layers,
  // 4 x 32K) a few slow split steps under rest_outlier_factor raised the split's rest 2-2.7x
  // (e.g. 10.6 -> 18.95 ms) while GPU-only's stayed at 8.7-14.5 ms; GPU-only was then chosen
  // in spells of 12-49 steps until the maximum period forced the split back (at ~10-11 ms):
  // +2.3 % of the time over monolithic's. Simulated (DecodeReadsTest.ASplitRestASlowSpell...,
  // ExploringARiseThatPassed...): a spell of the split's steps kept GPU-only 12 decisions
  // against 84; over 32 settings of slow spells, 0.22 % less time on average, at most 0.4 %
  // more. On the device (runs 285-287, an H100 lease without such spells) neutral. In [0, 1];
  // 0: off.
  double rest_rise_gap_share = 1.0;
  // The chosen mode's rest samples since its run began that rest_rise_gap_share waits for
  // (a spell of the host's that slowed both modes shows in them while it lasts). ≥ 2.
  uint32_t rest_rise_samples = 8;
  // Not for a split whose CPU attention ran slower than its line by this factor since its
  // reference was set: that is a CPU load (or the line still learning one), which GPU-only's
  // rest does not show where the load slows only the CPU's attention, and an early
  // exploration under it only raises the split's rest further (its CPU line rejects the
  // first loaded samples as outliers). ≥ 1.
  double rest_rise_cpu_factor = 1.25;
  // Steps whose measurements carry a change of read mode: a step that reads otherwise than
  // the KV rounds the gpu_worker queued early for it (GpuStep: the step's before it, or
  // after an exploration's last step the rounds of the last step that did not explore)
  // wastes them, and its first rounds wait behind them (DeepSeek 16 x 8K on the H200: the
  // first GPU-only step after split ones 20.3 ms, the next ones 15.7-18.3, median 15.9, run
  // 84). That step and the switch_settle_steps - 1 after it teach neither the mode's rest
  // nor its GPU line, and an exploration runs this many steps more than one, so that it
  // measures the mode settled (a one-step exploration of GPU-only measured 21.6-21.9 ms
  // there, kept the split at 21 and lost 15 % to transfer-all, run 82). The first step at a
  // batch that re-levels the rests (rest_batch_tolerance, at most one per
  // min_explore_period_steps steps) settles too: a new batch's first step pays for more than
  // its reads (most likely its new sequences' first reads in the cpu_worker and the rounds
  // queued for the old batch; not measured apart), and taken as the new level it stood for
  // the mode until the mode ran again (DeepSeek 16 -> 32 x 8K on the H200, run 95: the split
  // predicted at 50.7 ms per step through a point's warm-up and 26 measured steps, GPU-only
  // chosen at 26.5, until a forced exploration measured the split at 24.5-25.0). 0: every
  // step teaches, explorations are one step.
  uint32_t switch_settle_steps = 1;
  // A split exploration's later steps read the share its first step read while the
  // prediction for that share is at most this fraction of the split's predicted step above
  // the prediction for the share the estimates now give. The first step (it settles)
  // teaches the CPU line, which moves r*; a step that reads another share than the rounds
  // queued for it finds them wasted (Mixtral 32 x 8K on the H200, run 100: the read share
  // moved 0.377 -> 0.354 and 0.307 -> 0.263 within an exploration, whose measured step then
  // took 26.6 and 34.6 ms of GPU attention, where the steady split's took 16.5-22.5 in run
  // 99, and GPU-only was chosen for the point; Qwen3 16 and 32 x 8K, run 98: split steps
  // whose share changed from the step before took 1.8 and 3.2 ms more, medians 19.3 vs
  // 17.4 and 34.0 vs 30.7). A CPU found loaded moves r* further than this allows. No gain
  // from it showed at Mixtral's noise (run 103). ≥ 0; 0: never held.
  double exploration_share_hold = 0.05;
  // A step the gpu_worker reports missing its early KV rounds (StepSample::
  // early_rounds_missed) settles like a change of mode, at most min_explore_period_steps in
  // a row (ObserveStep). false: such steps teach (to measure what the rule does).
  bool settle_missed_rounds = true;
  // A decision that does not explore keeps the mode whose KV rounds are queued for its step
  // unless the other mode is predicted to save, over this many steps, more than a change of
  // mode costs, or the savings the decisions held in a row gave up add up to that cost (so
  // a mode a little worse for good is left after switch cost / gain decisions, at most twice
  // the cost of the best choice in hindsight); the switch cost is an EMA of what the steps
  // that paid for a change (a change of mode, missed early rounds; they settle) measured
  // above their mode's prediction.
  // Where the two modes predict within noise of each other the choice flipped step by step
  // and each flip paid for it (Mixtral on the H200, run 107: 16 x 8K ran g g s s g g g s ...
  // at 60.8 / 60.7 ms predicted, the flips' steps taking 7-8 ms more GPU attention than
  // their mode's median: 15.7 against the split's 7.9, 17.3 against GPU-only's 10.1; 4 x 32K
  // 16.2 against GPU-only's 9.4). While the hold keeps a mode the
  // prediction ranks second, the credit does not explore the other (the prediction already
  // has it ahead); the maximum periods still do. 0: no hold (every decision takes the
  // cheaper prediction).
  uint32_t mode_switch_hold_steps = 4;
  // A split that does not explore keeps the sequences the CPU attended in the last step that
  // did not explore, by the same rule and switch cost (ChooseDecodeReads' queued_readers;
  // needs mode_switch_hold_steps > 0). false: the readers follow r* at every step.
  bool hold_queued_readers = true;
  // Weight of the newest step in each mode's "rest" EMA. In (0, 1]. A sample taken k steps
  // that did not explore after the mode's previous sample weighs 1 − (1 − w)^k, what k equal
  // samples would: an exploration's sample weighs the steps the other mode was chosen since
  // the last one (and any steps that taught nothing); the chosen mode's step after an
  // exploration weighs one step's.
  double rest_ema_weight = 0.25;
  // A mode's rest sample that follows its previous one by one step (the chosen mode's, step
  // after step) enters the EMA as the median of it and the two before it, so that one slow
  // step below rest_outlier_factor moves nothing and a new level counts from its second step.
  // Such steps are common on the GPU machine's host (DeepSeek 4 x 8K on the H200, run 269:
  // steps of 42-74 ms among 36-40). Mixed in, one of 46 ms raised GPU-only's rest by 2.2 ms,
  // which put a split 0.2 ms ahead of it; where such steps flipped the choice (rounds 12 and
  // 17 of 23, the second on into round 18) the split ran 4-7 % slower than the round's
  // GPU-only steps and stayed chosen for up to 4 turns of 8 steps (145 chosen split steps in
  // 1840, 3.6-7.3 ms each over transfer-all's, 0.9 % of writescope's time). Simulated
  // (DecodeReadsTest.TheMedianKeepsOneSlowStepOutOfTheChoice): with 8 % of the steps 15-40 % slow,
  // writescope's time over the better mode's fell from 1.6-1.7 % to 0.95-1.0 % where the split is
  // 5-8 % behind, and from 1.5 % to 0.9 % where it is 5 % ahead; with +-8 % uniform noise it moved
  // by 0.1 % at most. A new level is taken a step later: a loaded split was left after 5 steps
  // against 3 (ModesWithinNoiseOfEachOtherAreNotFlippedEveryFewSteps). On an H100 (runs
  // 271-272, the same point, two pairs of trios, the arms' order swapped): writescope over
  // transfer-all 0.982 [0.975, 0.990] with it, 0.972 [0.962, 0.982] without (440 and 420
  // rounds); its chosen split steps 14-18 % of its steps against 20-28 %, costing 0.27-0.51 ms
  // a step against 0.63-0.69. An exploration's sample, and any after a gap, enter as they are.
  // false: every sample as it is.
  bool rest_median_of_three = true;
  // The split's GPU path is bounded by its transfers too: D, the copy engine's time on a
  // layer's KV rounds (StepSample::dma_ns, a line in the tokens streamed). Where the
  // transfers run all step, the step takes D per layer while the CPU's chain, its attention
  // and Q (an EMA of StepSample::cpu_chain_extra_ns, weight rest_ema_weight: the experts and
  // serial work, under which the transfers run on), takes less and the CPU waits for the GPU.
  // The attention lines (one share per batch) balance the paths' attention times there:
  // Mixtral 32 x 32K on the H200 (run 150), 165-185 ms of DMA in steps of 166-192 ms at
  // shares 0.41-0.48, the CPU's attention and Q 6-17 ms short of the DMA.
  // With this on, the split's GPU time at a share is the larger of the GPU line and D − Q, so
  // r* is at least where the CPU's attention and Q take as long as the transfers.
  // Until both are measured on split steps that settled, and false: the attention lines
  // alone. A/B on the H200 (run 151, fresh trios, 2 repeats each): Mixtral 32 x 32K 2.7 %
  // faster with it (reads 0.47-0.48 against 0.45-0.47), Qwen3 faster at 6 of 6 points
  // (1-9 %), DeepSeek level (3 of 6 points faster, the repeats' means 0.98-1.01x). Where the
  // GPU's attention hides under the transfers it is nearly flat in the share and the lines'
  // crossing collapses (Qwen3 16 x 32K, run 152: 0.057), while the bound held 0.42-0.44.
  // Q grows with the batch (the experts, the serial work): at a batch more than
  // rest_batch_tolerance away from the one the rests were measured at, writescope's Q is
  // stale, and what GPU-only steps measure (the step less the GPU's attention) stands in for
  // it until a split step that settled measures it at the new batch; that sample replaces it.
  // A Q kept from another batch had placed and explored the split far from the step's
  // least: in one runtime on the H200 (run 207), Qwen3 32 x 8K ran GPU-only with Q still
  // batch 16's, 6.2 ms a layer against the 10.6 its steps took beyond their attention, so r*
  // sat at 0.23 (the transfers bound nothing there: the swept least was 0.05-0.10, run 209),
  // and writescope took 0.94x of monolithic's tokens/s; Mixtral 16 x 8K (Q 20.3 against 29.5
  // ms) 0.93x.
  // (Session 26's overlap model set the GPU probe's line, the transfers run alone, against
  // the CPU's attention and experts: it placed larger, slower shares on Qwen3 and DeepSeek,
  // run 146, and was removed.)
  bool dma_bound = true;
  // A step that took more than this factor times its mode's prediction (the attention lines
  // and a measured rest) is held: its rest sample teaches only if the mode's next sample is
  // above its prediction by the factor too (a level that changed), and is dropped otherwise
  // (a lone spike). DeepSeek 4 x 32K on the H200 (run 162): one split step took 24.0 ms
  // where its neighbours took 7.4-7.9 (the GPU waited 18.2 ms for the CPU, whose attention
  // took 3.9), its rest sample of 20.1 ms took the split's rest from 3.8 to 7.9, and
  // GPU-only, predicted at 11.5 ms against the split's 11.8, ran 7 of the next 12 steps at
  // 11.3-14.5: writescope 0.88x of monolithic at the point. Over runs 130-163, of 6126
  // measured writescope steps that settled and did not explore, 8 took more than 1.5x their
  // prediction, 1 (that one) more than 2x. A guessed rest, or one a new batch re-levels, is
  // not held. 0: off (every sample mixes in); else > 1.
  double rest_outlier_factor = 1.5;
  // A level that two held steps in a row set (rest_outlier_factor) is tentative: the mode's
  // next rest sample undoes it, before mixing in, where that sample is back below the factor
  // times the mode's prediction from the rest before the level (the slow spell was two steps),
  // and keeps it otherwise; until then the mode is kept, as a mode hold keeps it
  // (mode_switch_hold_steps), unless the other mode's rest is a guess (its own exploration
  // measures it). A re-level (rest_batch_tolerance) drops such levels. On an H100 (run 271,
  // DeepSeek 4 x 8K, 27 layers) two GPU-only steps of 50.6 and 64.2 ms among 26-28 raised
  // GPU-only's rest from 22.2 to 38.4 ms, and the split, 4 % slower there, stayed chosen for 46
  // steps until the credit explored GPU-only; in an earlier round the same for 64 steps, 12 %
  // slower. Of the slow spells (steps over 1.5x their round's median) in runs 271-272, 207 were one
  // step, 54 two and 14 three or more. Simulated
  // (DecodeReadsTest.ALevelTwoStalledStepsSetIsCheckedByTheNextSample: 2-step stalls of 2-2.5x
  // starting at 1 % of the steps): writescope over the better mode 1.0321 -> 1.0090, 1.0200
  // -> 1.0078 and 1.0188 -> 1.0076 (split 8 % and 4 % behind, 5 % ahead); without stalls identical.
  // Its cost: a real level is taken a step later (a loaded split left after 6 steps against 5). On
  // H100s (runs 273-276, the same point, three pairs of trios): writescope over transfer-all 0.9873
  // [0.9833, 0.9914] with it, 0.9878 [0.9842, 0.9914] without (890 and 900 rounds), its chosen
  // split steps fewer in each pair (70 against 131 of ~1300, 46 against 69 and 27 against 87 of
  // 2640-3200). false: two held steps set the level.
  bool rest_level_check = true;
  // A guessed rest's measurement (guessed_rest_mode_ below: a mode only moved along at a
  // re-level, GPU-only after a GPU calibration, an explored mode's first sample) is not held by
  // rest_outlier_factor, which judges a step against a measured rest. With this on, where an
  // exploration measures the guess after a timed settling step (switch_settle_steps > 0), a
  // measurement over rest_outlier_factor times both that settling step and the guess's
  // prediction is held as a lone spike: the guess stays, and the exploration counts as one that
  // measured nothing (its advance, or what it took of the credit and the periods, is given back
  // once), so the guess is measured again soon. A guess wrong by more than the factor leaves its
  // settling step slow too (it runs the same mode), so that one is taken as before; so is a
  // guess measured by a chosen step or without a settling step, and a measurement that comes
  // after the batch changed again (it re-levels the rests). On an H100 (run 289, Mixtral 4 x 32512,
  // 4 layers) a round's re-level made GPU-only's rest a guess, and its exploration's second step
  // took 131.4 ms (its first 61.0, the guess predicted 67.1; GPU-only's chosen steps at the point
  // 0.1 ms a step above transfer-all's): GPU-only's rest became 122 ms, and the split ran the next
  // 120 decisions, its 72 measured steps 2.2 ms a step above transfer-all's, until the credit
  // explored GPU-only. Of 3491 two-step explorations in the committed step CSVs (runs 200-289), the
  // second step took over 1.5x the first in 68, 47 of them at Qwen3 4 x 8K and 14 at DeepSeek
  // 4 x 8K, run after run: the settling step alone is no reference. false: a guess takes its
  // first measurement whatever it is.
  bool rest_guess_check = true;
  // Relative change of the batch (decode sequences) that re-levels the rests. ≥ 0.
  double rest_batch_tolerance = 0.25;
  // Relative change of the batch's host tokens that re-levels the rests, as a batch change
  // does (Q, measured per batch, stays). ≥ 0; 0: off. GPU-only's rest holds the transfers
  // that outlast the experts (its line is the GPU's attention, which they hide at short
  // contexts), so it grows with the context: in one runtime on the H200 (run 229), Qwen3
  // 32 x 32K left GPU-only's rest at 122-146 ms a step; back at 32 x 8K in the next round,
  // with the batch unchanged, GPU-only was predicted at 127-151 ms against steps of ~50, and
  // none of 32 steps explored it: the split ran 6-8 % behind transfer-all there (three
  // trios).
  double rest_tokens_tolerance = 0.5;
};

absl::Status ValidateSchedulerOptions(const SchedulerOptions& options);

// One instance per policy the coordinator runs (its --policy, and each a bench named),
// called under the placement mutex (not thread-safe). Per step: ObserveStep(what the
// workers measured), then UpdateTarget(L); new blocks are steered toward PlacementShare
// (a prefill) or FlushShare (a D-window flush) through a SteeringChooser.
class Scheduler {
 public:
  // INVALID_ARGUMENT for a bad policy string (ParsePolicy) or bad options.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(absl::string_view policy,
                                                           const SchedulerOptions& options);
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const PolicySpec& policy,
                                                           const SchedulerOptions& options);

  const PolicySpec& policy() const { return policy_; }
  const SchedulerOptions& options() const { return options_; }

  // The start-up / periodic probes (see LinearCostEstimator::Calibrate). A GPU
  // calibration restarts the RecalibrationDue period. The GPU probe runs the GPU path alone,
  // as a GPU-only step does: it replaces the GPU-only line's fit with a full history's
  // weight. The split's GPU line runs beside the CPU's attention, which shares host memory
  // with its DMA, so the probe is only its starting point there (split_calibration_samples
  // samples' weight) and fixes its intercept's prior.
  absl::Status CalibrateGpu(absl::Span<const CostSample> points);
  // The cpu_worker's probe of its attention alone (Engine::CalibrateCpuPath): the CPU line's
  // starting point (split_calibration_samples samples' weight) and its intercept's prior.
  // The steps of one batch read one share, so their samples sit at one token count and
  // cannot separate c_C from A: the prior does, and the probe's points keep the slope from
  // taking the whole fixed cost (EstimatorTest.WithoutSpreadTheSlopeIsAnEmaThroughThe-
  // CalibratedIntercept).
  absl::Status CalibrateCpu(absl::Span<const CostSample> points);
  // Whether recalibration_period_steps steps have passed since the last GPU
  // calibration.
  bool RecalibrationDue() const;
  // A due re-measurement could not run (the worker failed it): the next is a period away.
  void SkipRecalibration() { last_gpu_calibration_step_ = steps_; }

  // One step's timings. Every policy estimates (the bench reports the bound for
  // all); only the adaptive ones act on it. A step where the CPU attended host tokens
  // teaches A, c_C and the split's B, c_G; one where it did not, the GPU-only line (and,
  // for the policies that do not choose their reads, B and c_G too).
  void ObserveStep(const StepSample& sample);

  // Who reads a decode step's CPU-compute tokens (ReadDecision), for a batch of
  // `host_tokens` host tokens of which `placed_cpu_tokens` lie in the CPU-compute region.
  // Policies other than writescope, and writescope before both lines are ready: the placed
  // share, all read in place. Each writescope decision past that counts
  // (read_decisions()).
  // `sequences`: the step's decode sequences. The rest of a step grows with them (experts,
  // sampling), so for a batch more than rest_batch_tolerance away from the one the rests were
  // measured at (or host tokens more than rest_tokens_tolerance away: GPU-only's rest holds the
  // transfers the experts do not hide), the next step's measurement replaces its mode's rest and
  // moves the other's by as much (their difference is kept), and the next decision at least
  // min_explore_period_steps after the last exploration explores the other mode (when exploring is
  // on, and its predicted gap is at most its guessed rest: a guess wrong by all of itself could
  // turn no wider gap, and running a mode far worse costs its whole gap, GPU-only at 32 x 32K on
  // the H200 +60 %; wider gaps wait for the exploration credit), whose measurement then replaces
  // its rest. A mode's first sample taken on an exploration is such a guess too (the runtime's
  // first steps pay for one-time work). Such a measurement runs on an advance of the credit when
  // the credit does not cover it (the credit goes negative), and no other runs until later
  // decisions have paid it back or the batch has held for max_explore_period_steps: batches that
  // change often (serving) cannot make these measurements cost more than the credit's share in the
  // long run. What the split costs beyond its model changes with the batch, so a difference carried
  // over from another batch would stand until the next exploration credit.
  ReadDecision ChooseDecodeReads(uint64_t host_tokens, uint64_t placed_cpu_tokens,
                                 uint32_t sequences);
  // The same for a step whose CPU reads whole sequences (the engine): `cpu_tokens` holds each
  // decode sequence's tokens in the CPU-compute region (their sum the placed tokens, their
  // count the sequences). The split is predicted and run at the share whole sequences make
  // for min(r*, placed) (ChooseCpuReaders, at least one sequence), not at r* itself: where
  // r* is at most half the smallest sequence's share, a split at r* attends nothing, runs as
  // GPU-only and is never measured (DeepSeek 4 x 32K on the H200, run 115: r* 0.011, each
  // sequence 0.038 of the host tokens; 48 of 48 steps predicted the split 2.4 ms shorter
  // and ran GPU-only, 0.86x of monolithic, which read 0.107). The decision names the
  // sequences (ReadDecision::cpu_readers).
  // `queued_readers` (empty, or one per sequence): the sequences the CPU attended in the last
  // step that did not explore, whose KV rounds the gpu_worker queued early for this one (its
  // GPU streams the others' CPU-compute blocks). A split that does not explore keeps them
  // unless the whole-sequence readers it would choose now are predicted to save more than a
  // change costs, as the mode hold keeps a mode (SchedulerOptions::mode_switch_hold_steps,
  // the same switch cost and rule): other readers make the step's first rounds miss, and
  // where r* sits near the middle between two subsets the choice flipped step by step
  // (Qwen3 32 x 8K on the H200, run 120: 27 changes of the read share in 95 split steps at
  // one target, the steps that missed their rounds 7.3 % longer, 16 x 32K 11.2 %).
  ReadDecision ChooseDecodeReads(uint64_t host_tokens, absl::Span<const uint64_t> cpu_tokens,
                                 absl::Span<const bool> queued_readers = {});

  // Recomputes the target for a batch of `host_tokens` host-resident tokens and
  // returns it: the fixed share of a fixed policy; for an adaptive one r* (at the larger of
  // `host_tokens` and their decaying peak: target_tokens_decay), kept
  // within [probe_share, 1 − probe_share], through the hysteresis (the first r*
  // after the estimators become ready is taken at once). A monolithic policy's engine moves
  // the placed blocks to every new target (coordinator/resplit.h).
  double UpdateTarget(uint64_t host_tokens);

  double target_cpu_share() const { return target_; }
  // The share a prompt's blocks are steered towards: for writescope, r* at the host tokens
  // the batch will hold once the prompt has landed (`host_tokens_after`, or the decaying
  // peak when larger), plus placement_headroom, clamped as the target is, so that a long
  // prompt lands for the batch it makes rather than the one before it (r* grows with the
  // tokens: the fixed costs weigh less). The state is unchanged. Other policies, and
  // writescope before its estimators are ready: the target.
  double PlacementShare(uint64_t host_tokens_after) const;
  // The share a D-window flush's block is steered towards: for writescope once its target
  // comes from the estimates, the target plus placement_headroom, clamped as the target is;
  // other policies (and writescope before): the target.
  double FlushShare() const;
  // The latest unfiltered r* (NaN before the estimators are ready), at target_tokens().
  double optimal_cpu_share() const { return optimal_; }
  // The host tokens the latest UpdateTarget computed r* for.
  double target_tokens() const { return target_tokens_; }
  bool estimates_ready() const { return cpu_.ready() && gpu_.ready(); }
  // The split's attention lines: A and c_C from the CPU line, B and c_G from the split's GPU
  // line.
  RooflineParams estimates() const;
  // r* of the split for `host_tokens` (before the target's clamps and hysteresis): the
  // crossing of the attention lines (OptimalCpuShare of estimates()), under the DMA bound at
  // least the crossing of the CPU line plus Q with the DMA line (SchedulerOptions::
  // dma_bound).
  double SplitShare(double host_tokens) const;
  // The split's attention time per layer at `cpu_share` of `host_tokens` (PredictStep of
  // estimates(); under the DMA bound the GPU path at least the DMA line less Q).
  StepPrediction PredictSplit(double cpu_share, double host_tokens) const;
  // The DMA line and Q, learned whatever dma_bound says (Q NaN until measured).
  const LinearCostEstimator& dma_estimator() const { return dma_; }
  double cpu_chain_extra_ns() const { return chain_extra_ns_; }
  // Whether the split's model includes the DMA bound now (dma_bound, both measured).
  bool DmaBound() const {
    return options_.dma_bound && dma_.ready() && !std::isnan(chain_extra_ns_);
  }
  RooflineBound Bound(uint64_t host_tokens) const {
    return ComputeRooflineBound(estimates(), static_cast<double>(host_tokens));
  }

  uint64_t steps() const { return steps_; }
  int64_t target_changes() const { return target_changes_; }
  const LinearCostEstimator& cpu_estimator() const { return cpu_; }
  const LinearCostEstimator& gpu_estimator() const { return gpu_; }
  const LinearCostEstimator& gpu_only_estimator() const { return gpu_only_; }
  // What the lines predict, as they are now, for the paths of a step with `sample`'s tokens:
  // the CPU line, and the GPU-only line for a step the CPU sat out (once it is ready), else
  // the split's GPU line. step_ns: the larger of the two.
  StepPrediction PredictPaths(const StepSample& sample) const;
  // The attention time the lines, as they are now, predict for `sample`'s mode (a split step:
  // the larger path; a GPU-only step: the GPU-only line); NaN until that mode's lines are
  // ready. What a step measured beyond it once the lines have learnt from the step is its
  // rest; beyond it before, a change's cost, and whether the step is an outlier.
  double PredictedAttentionNs(const StepSample& sample) const;
  // The rest EMAs per layer, ns (NaN until a step of that mode was measured).
  double rest_split_ns() const { return rest_split_; }
  double rest_gpu_only_ns() const { return rest_gpu_only_; }
  // Rest samples held as outliers so far (SchedulerOptions::rest_outlier_factor).
  uint64_t rest_outliers_held() const { return rest_outliers_held_; }
  int64_t read_decisions() const { return read_decisions_; }
  // What a change of mode costs a step, per layer, ns (SchedulerOptions::
  // mode_switch_hold_steps; NaN until a step that paid for one was measured).
  double switch_cost_ns() const { return switch_cost_; }
  // What the explorations of the split (`split`) or of GPU-only cost beyond what they paid,
  // still to be repaid (SchedulerOptions::charge_exploration_overrun), per layer, ns.
  double explore_debt_ns(bool split) const { return explore_debt_ns_[split ? 0 : 1]; }

 private:
  Scheduler(const PolicySpec& policy, const SchedulerOptions& options);
  void SetTarget(double target);
  // The split's GPU path under the DMA bound with `gpu_tokens` streamed: the DMA line less
  // Q; -inf while DmaBound() is false (it bounds nothing).
  double TransferBoundNs(double gpu_tokens) const;
  // `share` + placement_headroom within [probe_share, 1 - probe_share]: where writescope
  // writes new KV (PlacementShare, FlushShare).
  double WithHeadroom(double share) const;
  // Both ChooseDecodeReads: `cpu_tokens` per sequence where the reads are whole sequences,
  // nullptr where the placed tokens divide at any share.
  // `queued_readers`: the public overload's (empty without `cpu_tokens`).
  ReadDecision DecideReads(uint64_t host_tokens, uint64_t placed_cpu_tokens, uint32_t sequences,
                           const absl::Span<const uint64_t>* cpu_tokens,
                           absl::Span<const bool> queued_readers);
  // Learns Q from a settled step's sample: `split` or GPU-only (SchedulerOptions::dma_bound).
  void ObserveChainExtra(bool split, double sample_ns);

  PolicySpec policy_;
  SchedulerOptions options_;
  LinearCostEstimator cpu_;
  LinearCostEstimator gpu_;       // the GPU path on split steps
  LinearCostEstimator gpu_only_;  // the GPU path when the CPU attends nothing
  LinearCostEstimator dma_;  // the copy engine's time on a split step's rounds (dma_bound)
  double chain_extra_ns_ = std::numeric_limits<double>::quiet_NaN();  // Q (dma_bound)
  // Where Q comes from: nothing yet; split steps at the current batch; split steps at another
  // batch (stale); GPU-only steps standing in for a stale one.
  enum class ChainExtraSource { kNone, kSplit, kStale, kGpuOnly };
  ChainExtraSource chain_extra_source_ = ChainExtraSource::kNone;
  double rest_split_;
  double rest_gpu_only_;
  // rest_median_of_three: each mode's latest raw rest samples taken one step apart (the older
  // first; count of them valid), the split's then GPU-only's.
  struct RecentRests {
    double values[2] = {0.0, 0.0};
    int count = 0;
  };
  RecentRests recent_rests_[2];
  double switch_cost_ = std::numeric_limits<double>::quiet_NaN();
  // What the decisions held in a row gave up by the predictions (the other mode's savings
  // summed): a change pays for itself once it reaches the switch cost.
  double held_regret_ns_ = 0.0;
  // The same for the queued readers kept by a split (ChooseDecodeReads).
  double readers_regret_ns_ = 0.0;
  // Steps that did not explore, and its value at each mode's latest rest sample: a rest
  // sample weighs as many steps as did not explore since then.
  uint64_t rest_clock_ = 0, rest_split_clock_ = 0, rest_gpu_only_clock_ = 0;
  // Each mode's latest rest sample was held as an outlier (rest_outlier_factor).
  bool rest_split_held_ = false, rest_gpu_only_held_ = false;
  // rest_level_check: each mode's (the split's, GPU-only's) level that a held pair set and no
  // sample since has confirmed, and the rest before it.
  struct TentativeLevel {
    bool pending = false;
    double rest_before_ns = 0.0;
  };
  TentativeLevel tentative_levels_[2];
  uint64_t rest_outliers_held_ = 0;
  // The exploration under way: the shortest of its settling steps so far (NaN: none, or no
  // exploration; rest_guess_check).
  double explore_settle_ns_ = std::numeric_limits<double>::quiet_NaN();
  // The step of each line's latest sample (Observe's `elapsed`).
  uint64_t cpu_sample_step_ = 0, gpu_sample_step_ = 0, gpu_only_sample_step_ = 0;
  uint64_t dma_sample_step_ = 0;
  // The latest decision explored: its measurement, if cheaper than the prediction for the
  // mode picked, makes the next eligible decision explore again.
  bool explore_pending_ = false;
  double explore_chosen_ns_ = 0.0;
  uint32_t rest_batch_ = 0;  // the decode sequences the rests were measured with
  double rest_tokens_ = 0;   // and the host tokens (rest_tokens_tolerance)
  bool rest_stale_ = false;  // the batch changed: the next rest sample replaces, not mixes
  // After a re-level: the mode whose rest was only moved along; after a GPU calibration
  // GPU-only; after an explored mode's first sample that mode (0: none, 1: split, 2:
  // GPU-only). The next decision explores it, and its sample replaces that rest.
  int guessed_rest_mode_ = 0;
  // That guess was carried over from the other mode's rest at the re-level (not a GPU
  // calibration's, nor an older value kept) and no GPU calibration came since: it moves as
  // that rest's EMA moves.
  bool guess_follows_ = false;
  // The credit advanced for the exploration now measuring the guess (0: none, or it was due),
  // and whether this guess had that advance given back once: an exploration all of whose
  // steps settled measured nothing (Qwen3 16 x 8K on the H200, run 161: the split's second
  // step read another share than its first and missed its early rounds), and paying its
  // advance back kept the split, predicted 5.3 ms a step behind GPU-only, out of the point
  // where it would have been 3 ms a step ahead.
  double guess_advance_ns_ = 0.0;
  bool guess_refunded_ = false;
  double explore_credit_ns_ = 0.0;
  uint32_t decisions_since_explore_ = 0;
  // charge_exploration_overrun: the picked mode's steps since the previous exploration at
  // this batch (their time per layer and their predictions, summed, and counted); for the
  // exploration under way what the picked mode's step would have taken (NaN: too few steps to
  // judge it), what it paid for (NaN: it paid nothing), and its steps' time so far; the debt
  // its predecessors left.
  double chosen_steps_ns_ = 0.0;
  double chosen_predicted_ns_ = 0.0;
  uint32_t chosen_steps_ = 0;
  double explore_reference_ns_ = std::numeric_limits<double>::quiet_NaN();
  double explore_paid_ns_ = std::numeric_limits<double>::quiet_NaN();
  double explore_spent_ns_ = 0.0;
  uint32_t explore_spent_steps_ = 0;
  double explore_debt_ns_[2] = {0.0, 0.0};  // the split's explorations', GPU-only's
  // What the exploration under way took of the credit and of the periods (their values when
  // it began; none for a guess's, which has its advance): given back when it measures
  // nothing, so that it runs again at the next decision, unless it was itself such a retry.
  bool explore_refundable_ = false;
  double explore_credit_taken_ns_ = 0.0;
  uint32_t explore_decisions_taken_ = 0;
  bool explore_is_retry_ = false;  // the exploration under way repeats one that measured nothing
  ExploreReason explore_reason_ = ExploreReason::kNone;  // of the exploration under way
  bool retry_pending_ = false;     // the next decision repeats one (explore_is_retry_)
  // Each mode's rest at the other mode's latest rest sample (NaN: none since the rests were
  // re-levelled), and the explorations in a row that rest_shift_explore ran without a sample
  // of the mode they explored.
  double split_rest_at_gpu_only_sample_ = std::numeric_limits<double>::quiet_NaN();
  double gpu_only_rest_at_split_sample_ = std::numeric_limits<double>::quiet_NaN();
  uint32_t shift_explores_ = 0;
  int last_rest_sample_mode_ = 0;  // of the latest rest sample (1: split, 2: GPU-only)
  // Per mode (split, GPU-only), for rest_rise_gap_share: the lowest rest it started a run of
  // rest samples at (its first sample not held after a sample of the other mode) since an
  // exploration for a rise last measured it, and the other mode's rest then (NaN: none since
  // the rests were re-levelled); whether such an exploration of it is under way; its latest
  // samples in the run under way (as the EMA took them), newest first, and how many it has had
  // (at most rest_rise_samples).
  double rise_reference_[2] = {std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::quiet_NaN()};
  double chosen_at_reference_[2] = {std::numeric_limits<double>::quiet_NaN(),
                                    std::numeric_limits<double>::quiet_NaN()};
  bool rise_explored_[2] = {false, false};
  double run_samples_[2][2] = {};
  uint32_t run_samples_count_[2] = {0, 0};
  // Whether a settled split step's CPU attention ran slow (rest_rise_cpu_factor) since the
  // split's rise reference was set.
  bool split_cpu_slow_ = false;
  // The exploration under way: decisions still to run it, and its mode.
  uint32_t explore_steps_left_ = 0;
  bool explore_split_ = false;
  double explore_share_ = 0.0;  // the CPU share its latest split step read
  // It ran a step more because a step read other sequences than the one before it, and the
  // next continuing decision is that step (it reads the readers of the step before).
  bool explore_extended_ = false;
  bool explore_hold_readers_ = false;
  std::vector<bool> explore_readers_;  // the sequences its latest split step read
  // Read modes (0: none, 1: split, 2: GPU-only): of the KV rounds the gpu_worker queued
  // early for the next step, and of the last observed step that did not explore. The latest
  // decision's marks, for the step ObserveStep sees next. Steps still settling.
  int queued_mode_ = 0;
  int chosen_mode_ = 0;
  bool decided_explore_ = false;
  bool decided_continues_ = false;
  bool decided_new_batch_ = false;  // the latest decision's step settles: a new batch
  uint64_t relevel_step_ = 0;       // steps_ at the latest batch change
  uint32_t settle_steps_left_ = 0;
  uint32_t missed_in_a_row_ = 0;  // steps whose early rounds missed (StepSample), to this one
  int64_t read_decisions_ = 0;
  double target_;
  double optimal_;
  bool target_from_estimates_ = false;
  double target_tokens_ = 0.0;  // the decaying peak of UpdateTarget's host tokens
  int pending_side_ = 0;  // −1 / +1: the side r* has been on; 0: inside the deadband
  int pending_count_ = 0;
  uint64_t steps_ = 0;
  uint64_t last_gpu_calibration_step_ = 0;
  int64_t target_changes_ = 0;
};

// Whether the gpu_worker reads a prefill chunk's earlier CPU-compute blocks (over PCIe,
// through the ping-pong buffers like transfer blocks) instead of the cpu_worker attending
// them in place. Per key token and layer the CPU pays chunk_tokens x A (every query of the
// chunk attends every key; A is one query's cost), the GPU about B (one transfer of the
// key, whatever the chunk). Before the estimators are ready: chunks of at least
// kPrefillReadMinTokens. Nothing placed moves; decode steps choose their reads apart
// (Scheduler::ChooseDecodeReads).
inline constexpr uint32_t kPrefillReadMinTokens = 16;
bool PrefillReadsOnGpu(uint32_t chunk_tokens, const Scheduler& scheduler);

// ---------------------------------------------------------------------------------------
// Placement steering.

// Placed blocks per region (KvRegionIndex).
using RegionCounts = std::array<uint64_t, kNumKvRegions>;

// The decision for one new block, given the placed counts of the batch (c CPU
// blocks of n) and of its sequence. The batch decides: CPU iff that leaves its
// placed CPU share closer to `target` r, i.e. c + ½ < r·(n + 1). Per-sequence
// balance breaks ties, where a tie is "both choices keep the batch's CPU count
// within `batch_slack_blocks` of r·(n + 1)": then the block goes where it
// brings its sequence's share closer to r (the same rule on the sequence's
// counts), so that sequences flushing in a fixed round-robin order do not end
// up all-CPU or all-GPU, and finishing one does not swing the batch.
// batch_slack_blocks = ½ is the strict rule (ties only when exactly
// equidistant); values below ½, and NaN, count as ½. Remaining ties: the batch's rule,
// then r ≥ ½ picks the CPU. target ≤ 0 always picks the transfer region, ≥ 1
// the CPU one, NaN counts as ½. A region with no free slot is avoided when the
// other has one (if neither has, the preferred one is returned and the
// placement reports RESOURCE_EXHAUSTED).
inline constexpr double kDefaultBatchSlackBlocks = 1.0;
KvRegion SteerBlock(const RegionCounts& batch, const RegionCounts& sequence, double target,
                    const std::array<uint32_t, kNumKvRegions>& free_slots,
                    double batch_slack_blocks = kDefaultBatchSlackBlocks);

// A RegionChooser for one KvPlacement::PlanPrefill or Flush call:
//
//   SteeringChooser chooser(*placement, scheduler->target_cpu_share());
//   auto plan = placement->Flush(id, chooser);
//
// It snapshots the placed counts (all live sequences are the batch) and adds
// its own choices as the plan proceeds. Build a new one per call: a failed plan
// allocates nothing, and the next snapshot reads the truth again. Placed blocks
// never move; only new ones are steered. The counts are `mutable` because a
// RegionChooser (absl::FunctionRef) invokes its callable through a const
// reference.
class SteeringChooser {
 public:
  SteeringChooser(const KvPlacement& placement, double target_cpu_share,
                  double batch_slack_blocks = kDefaultBatchSlackBlocks);

  KvRegion operator()(const PlacementRequest& request) const;

  // The batch counts including this chooser's choices.
  const RegionCounts& batch_counts() const { return batch_; }

 private:
  const KvPlacement& placement_;
  double target_;
  double batch_slack_blocks_;
  mutable RegionCounts batch_{};
  mutable absl::flat_hash_map<SequenceId, RegionCounts> sequences_;
};

// Placed CPU share of one sequence's blocks (0 with no blocks).
double SequenceCpuShare(const SequencePlacement& sequence);

// Which sequences of a decode step the CPU attends in place, given each one's tokens in
// the CPU-compute region and the tokens the CPU should attend in all (ReadDecision's
// share times the host tokens): a subset whose sum is close to `wanted_tokens` (greedy,
// largest first: a sequence is taken when it brings the sum closer). All of them when
// wanted_tokens ≥ their sum, none when it is ≤ 0 or NaN. `at_least_one` (a split, which
// must attend something to be one): when that leaves none but wanted_tokens > 0, the
// sequence with the fewest CPU tokens (> 0; ties: the first). The others' CPU-compute blocks
// are streamed by the GPU (SequenceStep.gpu_reads_cpu_blocks).
std::vector<bool> ChooseCpuReaders(absl::Span<const uint64_t> cpu_tokens, double wanted_tokens,
                                   bool at_least_one = false);

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_SCHEDULER_H_
