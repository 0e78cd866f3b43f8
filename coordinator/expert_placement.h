// Where a step's routed experts run: on the cpu_worker (oneDNN on the weights in host
// memory, nothing moves) or on the gpu_worker (each MoE layer's expert weights streamed
// over PCIe into VRAM, then GEMMs there; gpu_worker/device_experts.h). The pure logic: no
// threads, clocks or I/O; the engine feeds it the workers' measurements.
//
// Cost of ONE MoE layer for a step of T tokens:
//
//   cpu(T) = a_cpu · T
//   gpu(T) = S / R · g
//     S    = one layer's routed-expert bytes: the gpu_worker streams the whole layer (the
//            next layer's copy starts before its router has run, so it cannot pick the
//            experts a batch touches);
//     R    = the stream's rate (bytes/ms, measured by the gpu_worker at load with the
//            copies it uses);
//     g    = an online correction, an exponential moving average of measured / modelled GPU
//            time (what the stream-only model leaves out: the GEMMs and activation copies —
//            small beside the stream at prefill sizes —, a stream slower under load). It
//            is learned at the sizes the GPU runs, so it mostly refines large T.
//
// The CPU's cost is learned online in two regimes. Steps of >= kMinLearnTokens tokens
// (prefill chunks) are compute: cpu(T) = a_cpu · T, a_cpu from the cpu_worker's measurement
// at load (a 512-token batch), then an EMA of what it reports for such steps. Smaller steps
// (decode) are bandwidth-bound, their cost per token far higher and not proportional: cpu(T)
// is an EMA of their measured time per layer (before any is measured, a_cpu · T), so that
// another tenant slowing the CPU down shows within a few decode steps.
// Decision per step: the GPU iff gpu(T) + k < cpu(T), k the step's own KV transfers per
// layer on the host-to-device link (the ping-pong rounds of the host blocks the GPU attends,
// at the stream's rate R). The experts' stream shares that link: with the experts on the
// CPU the transfers run under them, with the experts on the GPU a layer waits for both
// (Mixtral 32 x 32K on the H200, run 236: the rule without k sent 8 decode steps' experts to
// the GPU when the CPU's took 44-47 ms a layer, the stream of a layer's 2.8 GB modelled
// below that. Those steps took 104-133 ms a layer, their KV rounds 47-79 ms of it, against
// 68-78 ms a layer for the split steps around them, whose rounds ran under the CPU's
// experts. With k, run 237: no step's experts went to the GPU, also under an 8-thread load
// that made the CPU's 65 ms a layer.) A decode step of a few tokens would pay a whole
// layer's stream and stays on the CPU, unless the CPU is much slower than usual (a competing
// load); a long prefill chunk (thousands of tokens) is compute the CPU does at ~5 TFLOP/s
// and the GPU at hundreds.
//
// Probes: a path that is not used is not measured, so a CPU once judged slow would stay
// judged slow after the competing load ends. After kProbeEvery consecutive steps on the GPU,
// a step of at most kProbeMaxTokens tokens runs on the CPU once (a decode step: the probe
// costs one step of CPU experts, not a prefill chunk's).
#ifndef WRITESCOPE_COORDINATOR_EXPERT_PLACEMENT_H_
#define WRITESCOPE_COORDINATOR_EXPERT_PLACEMENT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace writescope::coordinator {

enum class ExpertMode { kAuto, kCpu, kGpu };
// "auto" | "cpu" | "gpu"; INVALID_ARGUMENT otherwise.
absl::StatusOr<ExpertMode> ParseExpertMode(absl::string_view text);
std::string ExpertModeName(ExpertMode mode);

struct ExpertPlacementParams {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t moe_layers = 0;
  // From the workers' load responses (0: the gpu_worker cannot stream experts).
  bool gpu_streams = false;
  double stream_bytes_per_ms = 0;
  uint64_t layer_bytes = 0;
  double cpu_ms_per_token = 0;
};

class ExpertPlacement {
 public:
  static constexpr int64_t kMinLearnTokens = 64;
  static constexpr double kKeep = 0.75;       // EMA weight of the old value (a_cpu, g)
  static constexpr double kSmallKeep = 0.5;   // ... of the small-step time (probes count)
  static constexpr uint64_t kProbeEvery = 8;
  static constexpr int64_t kProbeMaxTokens = kMinLearnTokens - 1;

  // INVALID_ARGUMENT for mode gpu without a streaming gpu_worker, or nonsensical params.
  static absl::StatusOr<ExpertPlacement> Create(ExpertMode mode,
                                                const ExpertPlacementParams& params);

  // Whether a step of `tokens` tokens runs its routed experts on the gpu_worker (a CPU
  // probe is due: false). `link_ms`: per MoE layer, the step's own KV transfers on the
  // host-to-device link (LinkMs of their bytes; 0: none), which the experts' stream would
  // delay.
  bool OnGpu(int64_t tokens, double link_ms = 0.0) const;
  // The link's time for `bytes` at the stream's rate, ms (0 where nothing streams: the host
  // device).
  double LinkMs(uint64_t bytes) const;

  // Modelled ms per MoE layer.
  double CpuMs(int64_t tokens) const;
  double GpuMs(int64_t tokens) const;

  // A step ran: its tokens and the worker's routed-expert time summed over the layers.
  void ObserveCpu(int64_t tokens, double expert_ms);
  void ObserveGpu(int64_t tokens, double expert_ms);

  ExpertMode mode() const { return mode_; }
  const ExpertPlacementParams& params() const { return params_; }
  double gpu_correction() const { return gpu_correction_; }
  uint64_t gpu_steps() const { return gpu_steps_; }
  uint64_t cpu_steps() const { return cpu_steps_; }

 private:
  ExpertPlacement(ExpertMode mode, const ExpertPlacementParams& params);
  double GpuModelMs(int64_t tokens) const;  // without the correction

  ExpertMode mode_;
  ExpertPlacementParams params_;
  double small_step_ms_ = 0;  // per MoE layer, steps of < kMinLearnTokens tokens
  uint64_t small_steps_ = 0;
  double gpu_correction_ = 1.0;  // g
  uint64_t gpu_steps_ = 0;
  uint64_t cpu_steps_ = 0;
  uint64_t gpu_since_cpu_ = 0;  // consecutive steps on the GPU
};

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_EXPERT_PLACEMENT_H_
