// Host layer ops of the three MoE architectures (DeepSeek-V2, Qwen3-MoE, Mixtral), written to
// match Hugging Face transformers' modules computed in fp32 on bf16 weights (the fixtures'
// reference: the bf16 checkpoint loaded and `.float()`-ed).
//
// Conventions of every op here:
//   activations   fp32, row-major [tokens, width]
//   weights       bf16 bits (uint16_t), PyTorch layout: a Linear weight is [out, in], y = x W^T
//   accumulation  fp32 or better (norms, softmaxes and log-softmaxes accumulate in double)
// Correctness first: this is the host path the tests and the CI device run; it is parallel
// (OpenMP, oneDNN) but not tuned.
#ifndef WRITESCOPE_KERNELS_MODEL_LAYERS_H_
#define WRITESCOPE_KERNELS_MODEL_LAYERS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/model_config.h"
#include "common/model_weights.h"

namespace writescope::kernels::model {

// ---------------------------------------------------------------------------------------------
// Linear

// A bf16 Linear weight [out_features, in_features], row-major.
struct LinearWeight {
  const uint16_t* data = nullptr;
  int64_t out_features = 0;
  int64_t in_features = 0;
};
// A 2-D checkpoint tensor as a Linear weight.
LinearWeight AsLinear(const Bf16Tensor& tensor);
// Rows [row0, row0 + rows) of `w` (a slice of the output features).
LinearWeight SliceRows(const LinearWeight& w, int64_t row0, int64_t rows);

// fp32 copies of bf16 weights, made once on first use (thread-safe). Keeps the
// host forward from widening every weight on every call, at 2x the weights'
// bytes.
class F32WeightCache {
 public:
  const float* Get(const LinearWeight& w);
  uint64_t bytes() const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<const uint16_t*, std::unique_ptr<float[]>> map_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// y[tokens, out] = x[tokens, in] W^T in fp32 (oneDNN f32 matmul on the widened
// weight: exactly torch's fp32 Linear on an upcast bf16 weight, up to summation
// order). `cache` may be null: the weight is then widened into a scratch buffer
// for this call. `y` must not alias `x`.
absl::Status Linear(const float* x, int64_t tokens, const LinearWeight& w, float* y,
                    F32WeightCache* cache = nullptr);

// ---------------------------------------------------------------------------------------------
// Element loops over activations (on all cores for long inputs: a prefill chunk's
// activations are millions of values per layer; short ones stay on the calling thread).

// out[i] = bf16(x[i]), round to nearest even; n values.
void ToBf16(const float* x, int64_t n, uint16_t* out);
// x[i] += y[i]; n values.
void AddInPlace(float* x, const float* y, int64_t n);

// ---------------------------------------------------------------------------------------------
// Norms, activations, embeddings, log-softmax

// y[r] = weight * (x[r] / sqrt(mean(x[r]^2) + eps)) for rows of `dim` values;
// x, y [rows, dim], weight [dim] bf16. `y` may alias `x`. (HF: the variance in
// fp32, then weight * normalized.)
void RmsNorm(const float* x, int64_t rows, int64_t dim, const uint16_t* weight, double eps,
             float* y);

// silu(g) * u elementwise: gate, up [n] -> out [n] (out may alias gate or up).
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

// SwiGLU MLP: y[tokens, hidden] = down(silu(gate x) * up x); gate/up [inter,
// hidden], down [hidden, inter].
absl::Status SwiGluMlp(const float* x, int64_t tokens, const LinearWeight& gate,
                       const LinearWeight& up, const LinearWeight& down, float* y,
                       F32WeightCache* cache = nullptr);
// The same with every product y = x W^T through `matmul` (e.g. a GPU backend).
using MatmulFn =
    absl::FunctionRef<absl::Status(const float* x, int64_t tokens, const LinearWeight& w, float* y)>;
absl::Status SwiGluMlp(const float* x, int64_t tokens, const LinearWeight& gate,
                       const LinearWeight& up, const LinearWeight& down, float* y,
                       MatmulFn matmul);
// INVALID_ARGUMENT with the shapes unless gate, up and down chain as a SwiGLU MLP above.
absl::Status ValidateSwiGluShapes(const LinearWeight& gate, const LinearWeight& up,
                                  const LinearWeight& down);

// out[i] = table[tokens[i]] widened: table [vocab, hidden] bf16, out [tokens,
// hidden]. INVALID_ARGUMENT for a token outside [0, vocab).
absl::Status Embed(const Bf16Tensor& table, absl::Span<const int32_t> tokens, float* out);

// Natural-log softmax per row: x, y [rows, n] (y may alias x); max-subtracted,
// double sums.
void LogSoftmax(const float* x, int64_t rows, int64_t n, float* y);

// ---------------------------------------------------------------------------------------------
// RoPE

// How the rotary pairs are formed inside a head's rotary slice of `dim` values:
//   kHalf         (x[i], x[i + dim/2]) rotated by inv_freq[i]: transformers' rotate_half,
//                 used by Qwen3-MoE and Mixtral (and Llama).
//   kInterleaved  (x[2i], x[2i+1]) rotated by inv_freq[i]: transformers' DeepSeek-V2
//                 apply_rotary_emb (view_as_complex over adjacent pairs). DeepSeek's original
//                 code de-interleaves q_pe/k_pe to halves and then uses rotate_half; both
//                 orders give identical q.k; ours keeps k_pe in the checkpoint's order.
enum class RopeStyle { kHalf, kInterleaved };

// YaRN's magnitude correction (DeepSeek's yarn_get_mscale / transformers'
// get_mscale): 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1.
double YarnGetMscale(double scale, double mscale = 1.0);

// Frequencies and the cos/sin magnitude of one model's RoPE over `dim` rotary
// values.
struct RopeTable {
  RopeStyle style = RopeStyle::kHalf;
  int64_t dim = 0;              // rotary values per head (even)
  std::vector<float> inv_freq;  // [dim / 2], fp32 as transformers keeps it
  // transformers' `attention_scaling`: cos and sin are multiplied by it (so q.k
  // of the rope part scales by its square). Default RoPE: 1. YaRN: mscale(f,
  // mscale)/mscale(f, all_dim) when both are set and non-zero (DeepSeek-V2-Lite:
  // 1.0 exactly), else mscale(f, 1) (one of them missing from the config).
  float attention_scaling = 1.0f;
};

// transformers' _compute_default_rope_parameters / _compute_yarn_parameters (rope_utils):
//   default: inv_freq[i] = 1 / theta^(2i/dim)
//   yarn:    pos = theta^(2i/dim); extrapolation 1/pos, interpolation 1/(factor*pos);
//            low = floor(d(beta_fast)), high = ceil(d(beta_slow)) clamped to [0, dim-1] with
//            d(r) = dim * ln(original_max / (r * 2 pi)) / (2 ln theta);
//            ramp[i] = clamp((i - low) / (high - low), 0, 1) (high += 0.001 when equal);
//            inv_freq = interp * ramp + extrap * (1 - ramp).
RopeTable MakeRopeTable(const RopeConfig& rope, int64_t dim, RopeStyle style);

// Rotates, in place, the first `table.dim` values of each head of x laid out
// [tokens][heads][head_stride]; token t sits at absolute position positions[t].
// The angle is fp32(inv_freq * fp32(position)) and cos/sin are scaled by
// attention_scaling, as transformers computes them.
void ApplyRope(const RopeTable& table, float* x, int64_t tokens, int64_t heads, int64_t head_stride,
               const int64_t* positions);

// ---------------------------------------------------------------------------------------------
// Routers

enum class TopkMethod { kGreedy, kGroupLimitedGreedy };

// How one model turns router logits into (expert, weight) pairs:
//   probs = softmax(logits) in fp32 over all experts
//   pick top_k (greedy, or DeepSeek's group_limited_greedy: keep the topk_group groups of
//     highest max-prob, zero the rest, then top_k)
//   renormalize: weights /= sum(top-k weights)
//   weights *= scaling
// per model:
//   Mixtral:     renormalize always, scaling 1 (= softmax over the top-k logits)
//   Qwen3-MoE:   renormalize = norm_topk_prob (Qwen3-30B-A3B: true), scaling 1
//   DeepSeek-V2: renormalize = norm_topk_prob && top_k > 1 (V2-Lite: false; DeepSeek's own
//                code; transformers' port never renormalizes), scaling = routed_scaling_factor
// Ties: the higher probability first; equal probabilities go to the lower expert index.
struct RouterSpec {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  bool renormalize = false;
  double scaling = 1.0;
  TopkMethod method = TopkMethod::kGreedy;
  int64_t n_group = 1;
  int64_t topk_group = 1;
};
RouterSpec RouterSpecFor(const ModelConfig& config);

// logits [tokens, num_experts] (fp32, computed from fp32 activations and the
// fp32-widened router weight, as every one of the three HF modules does) ->
// expert_ids, weights [tokens, top_k], in descending probability order.
// margins (optional, [tokens]): the k-th chosen expert's score (probability, after the group
// mask) minus the best unchosen one's: how far the choice is from flipping (a difference of
// two probabilities, so in [0, 1]); +inf when top_k == num_experts.
void RouteTokens(const float* logits, int64_t tokens, const RouterSpec& spec, int32_t* expert_ids,
                 float* weights, float* margins = nullptr);

// The weights `spec` gives to the experts expert_ids [tokens, top_k] (any valid ids, e.g.
// another run's choice): their probabilities (softmax of logits [tokens, num_experts]),
// renormalized over the k if spec.renormalize, times spec.scaling -> weights [tokens, top_k].
// For the ids RouteTokens chose, the same weights it returns.
void RouterWeights(const float* logits, int64_t tokens, const RouterSpec& spec,
                   const int32_t* expert_ids, float* weights);

}  // namespace writescope::kernels::model

#endif  // WRITESCOPE_KERNELS_MODEL_LAYERS_H_
