// Partial attention states and their exact merge.
//
// Convention (every kernel in kernels/ follows it, CPU and CUDA alike):
//   o   [tokens, heads, head_dim] fp32: the softmax-NORMALIZED output over the keys the
//       partial covered, i.e. sum_j softmax_j * v_j restricted to those keys.
//   lse [tokens, heads] fp32: NATURAL log of sum_j exp(score_j), where score_j is the
//       already SCALED score (q . k_j * softmax_scale).
//   Empty state (no keys): lse = -inf, o = 0. It is the identity of the merge.
//
// Merging A and B (same rows) gives exactly the state of the union of their keys:
//   m = max(lse_a, lse_b); w_a = exp(lse_a - m); w_b = exp(lse_b - m)
//   o = (w_a * o_a + w_b * o_b) / (w_a + w_b);  lse = m + log(w_a + w_b)
// When both are empty the result is empty (o = 0, lse = -inf) and no NaN appears:
// the -inf - -inf case is never evaluated. Merge is commutative and associative up to
// fp32 rounding, so a split of the keys into any number of parts, merged in any order,
// equals single-pass attention to fp32 rounding.
#ifndef WRITESCOPE_KERNELS_ATTENTION_STATE_H_
#define WRITESCOPE_KERNELS_ATTENTION_STATE_H_

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/types/span.h"

namespace writescope::kernels {

inline constexpr float kEmptyLse = -std::numeric_limits<float>::infinity();

// One partial state over `rows` = tokens * heads rows of `head_dim` values.
struct AttentionStateView {
  float* o = nullptr;    // [rows, head_dim]
  float* lse = nullptr;  // [rows]
};
struct ConstAttentionStateView {
  const float* o = nullptr;    // [rows, head_dim]
  const float* lse = nullptr;  // [rows]
};

// Merge weights of two log-sum-exps: out_lse and the factors multiplying o_a and o_b.
// Empty + empty gives (-inf, 0, 0). Inline so kernels can use it per row.
struct MergeWeights {
  float lse;
  float weight_a;
  float weight_b;
};
inline MergeWeights ComputeMergeWeights(float lse_a, float lse_b) {
  if (lse_a == kEmptyLse && lse_b == kEmptyLse) return {kEmptyLse, 0.0f, 0.0f};
  const float m = lse_a > lse_b ? lse_a : lse_b;
  const float exp_a = std::exp(lse_a - m);  // one of the two is exactly 1
  const float exp_b = std::exp(lse_b - m);
  const float sum = exp_a + exp_b;
  return {m + std::log(sum), exp_a / sum, exp_b / sum};
}

// Sets `rows` rows to the empty state.
void SetEmptyState(AttentionStateView state, int64_t rows, int32_t head_dim);

// out = merge(a, b), row by row. `out` may alias `a` or `b` exactly.
void MergeStates(ConstAttentionStateView a, ConstAttentionStateView b, AttentionStateView out,
                 int64_t rows, int32_t head_dim);

// out = merge of all `parts` (any number, including zero: then out is empty). Done in
// one pass per row with the global max, so the result does not depend on the order of
// `parts` beyond fp32 summation order. `out` must not alias a part.
void MergeStatesN(absl::Span<const ConstAttentionStateView> parts, AttentionStateView out,
                  int64_t rows, int32_t head_dim);

}  // namespace writescope::kernels

#endif  // WRITESCOPE_KERNELS_ATTENTION_STATE_H_
