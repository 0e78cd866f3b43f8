// The cpu_worker's share of a step (common/step_layout.h): partial attention of the
// CPU-attended tokens over the blocks of the CPU-compute region, read in place, and the
// routed experts of every token.
//
// Attention per sequence:
//   decode  (GQA) one CpuGqaDecode over every decode sequence of the step;
//   prefill (GQA) CpuGqaPrefill of the chunk's queries over the sequence's CPU blocks (all
//           earlier than the chunk, so every key is visible to every query);
//   MLA     absorbed: CpuMlaDecode with one "sequence" per query token (a prefill chunk's
//           queries share the same block list).
// A sequence without CPU blocks is not in the message (the GPU side covers all its keys).
#ifndef WRITESCOPE_CPU_WORKER_CPU_STEP_H_
#define WRITESCOPE_CPU_WORKER_CPU_STEP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kv_config.h"
#include "common/model_config.h"
#include "common/model_weights.h"
#include "common/step_layout.h"
#include "cpu_worker/kv_view.h"
#include "kernels/cpu_attention.h"
#include "kernels/experts/cpu_experts.h"

namespace writescope::cpu {

struct CpuStepOptions {
  kernels::experts::CpuExpertsOptions experts;
  kernels::CpuAttentionOptions attention;
  // "on", "off", or "auto": prepack (a copy of the expert weights in oneDNN's layout) only
  // when the routed experts take at most kPrepackLimitBytes, so a real checkpoint's experts
  // are not held twice in host memory.
  std::string prepack_policy = "auto";
};
inline constexpr uint64_t kPrepackLimitBytes = uint64_t{4} << 30;

class CpuStep {
 public:
  // `weights` (the routed experts, SideFilter::kCpu or kAll) and `region` must outlive it.
  static absl::StatusOr<std::unique_ptr<CpuStep>> Create(const ModelConfig& model,
                                                         const KvCacheConfig& kv,
                                                         const ModelWeights& weights,
                                                         const KvRegionView& region,
                                                         const CpuStepOptions& options);

  const StepDims& dims() const { return dims_; }
  // Bytes the experts hold beyond the borrowed weights (prepacked or widened copies).
  uint64_t owned_expert_bytes() const;
  std::string experts_description() const;

  // q: the kAttention payload of `layer`; out: room for the kAttentionResult payload.
  // `phases` (nullable): the decode call's phases (kernels/cpu_attention.h), left as they
  // were where the layer had no decode rows on the CPU. MLA's one call covers the prefill
  // rows too, so there they are set whenever the layer has CPU rows of either kind.
  absl::Status Attention(const StepLayout& layout, uint32_t layer, absl::Span<const std::byte> q,
                         absl::Span<std::byte> out,
                         kernels::CpuAttentionPhases* phases = nullptr);
  // Times Attention alone (worker.proto's ProbeCpuPath): per point, `request.sequences()`
  // decode sequences (at most one per block) over n blocks of the CPU-compute region,
  // whatever they hold, each run the n after the last run's (around the region, so that a
  // region larger than the caches is read from DRAM), with made-up queries; the layers back
  // to back. Two passes over the points (smallest first, then largest first), each point
  // one warm-up run and `repeats` timed runs per pass; a point reports the fastest timed
  // run's mean time per layer. Reads only.
  // INVALID_ARGUMENT for no sizes, a size of 0 tokens or more than the region holds,
  // sequences outside [1, max_sequences], repeats outside [1, 100].
  absl::StatusOr<internal::PathProbeResponse> ProbeAttention(
      const internal::PathProbeRequest& request);
  // The routed experts' cost on this CPU, ms per (token, layer), measured on the first MoE
  // layer with `tokens` random tokens (after one warm-up run): the starting point of the
  // coordinator's expert placement rule. 0 for a dense model.
  absl::StatusOr<double> MeasureExpertCost(int64_t tokens);
  // in: the kExperts payload (layout.total_tokens tokens); out: the kExpertsResult payload.
  absl::Status Experts(const StepLayout& layout, uint32_t layer, absl::Span<const std::byte> in,
                       absl::Span<std::byte> out);

 private:
  CpuStep(const ModelConfig& model, const KvCacheConfig& kv, const KvRegionView& region,
          const CpuStepOptions& options)
      : model_(model), kv_(kv), region_(region), options_(options) {}

  ModelConfig model_;
  KvCacheConfig kv_;
  const KvRegionView& region_;
  CpuStepOptions options_;
  StepDims dims_;
  float softmax_scale_ = 0;
  // Per layer; null for dense layers.
  std::vector<std::unique_ptr<kernels::experts::CpuExperts>> experts_;
};

}  // namespace writescope::cpu

#endif  // WRITESCOPE_CPU_WORKER_CPU_STEP_H_
