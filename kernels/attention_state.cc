#include "kernels/attention_state.h"

#include <algorithm>
#include <vector>

namespace writescope::kernels {

// Rows are independent: a long prefill chunk's states (tokens x heads rows) merge in
// parallel; decode-sized ones stay on the calling thread. The gpu_worker merges while the
// cpu_worker's threads hold every other core (its attention, its experts): a parallel
// region there waits for cores the scheduler hands out a time slice at a time, ms instead
// of the µs the work takes (a decode step of DeepSeek-V2-Lite at batch 16, 16 heads x 512
// values per row, is 131072 values per merge). 1M values (4 MiB of o) is a prefill chunk.
constexpr int64_t kParallelValues = int64_t{1} << 20;

void SetEmptyState(AttentionStateView state, int64_t rows, int32_t head_dim) {
#pragma omp parallel for schedule(static) if (rows * head_dim > kParallelValues)
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(state.o + r * head_dim, state.o + (r + 1) * head_dim, 0.0f);
    state.lse[r] = kEmptyLse;
  }
}

void MergeStates(ConstAttentionStateView a, ConstAttentionStateView b, AttentionStateView out,
                 int64_t rows, int32_t head_dim) {
#pragma omp parallel for schedule(static) if (rows * head_dim > kParallelValues)
  for (int64_t r = 0; r < rows; ++r) {
    const MergeWeights w = ComputeMergeWeights(a.lse[r], b.lse[r]);
    const float* oa = a.o + r * head_dim;
    const float* ob = b.o + r * head_dim;
    float* oo = out.o + r * head_dim;
    // An empty side contributes weight 0; skip it so garbage-free zeros stay exact and
    // a NaN-free identity holds even if the empty side's o were not zero.
    if (w.weight_b == 0.0f) {
      for (int32_t d = 0; d < head_dim; ++d) oo[d] = w.weight_a == 0.0f ? 0.0f : oa[d];
    } else if (w.weight_a == 0.0f) {
      for (int32_t d = 0; d < head_dim; ++d) oo[d] = ob[d];
    } else {
      for (int32_t d = 0; d < head_dim; ++d) oo[d] = w.weight_a * oa[d] + w.weight_b * ob[d];
    }
    out.lse[r] = w.lse;
  }
}

void MergeStatesN(absl::Span<const ConstAttentionStateView> parts, AttentionStateView out,
                  int64_t rows, int32_t head_dim) {
  std::vector<float> weights(parts.size());
  for (int64_t r = 0; r < rows; ++r) {
    float m = kEmptyLse;
    for (const auto& p : parts) m = std::max(m, p.lse[r]);
    float* oo = out.o + r * head_dim;
    std::fill(oo, oo + head_dim, 0.0f);
    if (m == kEmptyLse) {
      out.lse[r] = kEmptyLse;
      continue;
    }
    float sum = 0.0f;
    for (size_t i = 0; i < parts.size(); ++i) {
      weights[i] = std::exp(parts[i].lse[r] - m);  // exp(-inf) = 0 for empty parts
      sum += weights[i];
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      if (weights[i] == 0.0f) continue;
      const float w = weights[i] / sum;
      const float* op = parts[i].o + r * head_dim;
      for (int32_t d = 0; d < head_dim; ++d) oo[d] += w * op[d];
    }
    out.lse[r] = m + std::log(sum);
  }
}

}  // namespace writescope::kernels
