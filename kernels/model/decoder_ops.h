// The attention side of a decoder layer (everything but the routed experts and the attention
// kernel itself), written once and shared by the single-process HostModel and the gpu_worker's
// step runner, so that both compute the same thing.
//
//   auto ops = DecoderOps::Create(config, weights, {});   // weights: SideFilter::kGpu or kAll
//   ops->Embed(tokens, x);
//   per layer:
//     ops->InputNorm(layer, x, T, h);
//     ops->ProjectQkv(layer, h, T, positions, q, kv_rows);     // q roped; kv_rows = cache rows
//     ... attention over the cache (the caller's) -> attn [T][heads][v_dim]
//     ops->OutputProjection(layer, attn, T, y);  x += y
//     ops->PostAttentionNorm(layer, x, T, h);
//     dense layer: ops->DenseMlp(layer, h, T, y)
//     MoE layer:   ops->RouterLogits -> RouteTokens -> routed experts (the caller's) [+ SharedExperts]
//     x += y
//   ops->FinalLogits(x, T, logits);
//
// Conventions as kernels/model/layers.h: fp32 activations, bf16 weights, row-major.
// The cache row of one token in one layer (what ProjectQkv writes to kv_rows, fp32, the values
// the cache stores as bf16):
//   GQA  K[kv_heads][head_dim] then V[kv_heads][head_dim]  (K after Qwen3's k_norm and RoPE)
//   MLA  [c_kv = kv_a_layernorm(kv_a)[:kv_lora_rank] | k_pe = RoPE(kv_a[kv_lora_rank:])]
// It is KvGeometry::values_per_token_layer() values: the gpu_worker's "token row".
#ifndef WRITESCOPE_KERNELS_MODEL_DECODER_OPS_H_
#define WRITESCOPE_KERNELS_MODEL_DECODER_OPS_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model_config.h"
#include "common/model_weights.h"
#include "kernels/model/layers.h"
#include "kernels/model/mla.h"

namespace writescope::kernels::model {

// How DeepSeek-V2's YaRN enters the softmax scale. DeepSeek's own code (and vLLM, SGLang, and
// transformers since PR #47435) use 1/sqrt(qk_head_dim) * mscale(factor, mscale_all_dim)^2;
// transformers' DeepseekV2Attention before that fix used 1/sqrt(qk_head_dim) alone.
enum class MlaSoftmaxScale { kWithYarnMscale, kPlain };

// The MLA softmax scale for `config`: 1/sqrt(qk_nope + qk_rope), times
// YarnGetMscale(factor, mscale_all_dim)^2 when YaRN is on, mscale_all_dim != 0
// and `mode` is kWithYarnMscale. GQA: 1/sqrt(head_dim).
float AttentionSoftmaxScale(const ModelConfig& config, MlaSoftmaxScale mode);

struct DecoderOpsOptions {
  MlaSoftmaxScale mla_softmax_scale = MlaSoftmaxScale::kWithYarnMscale;
  // Widen each weight to fp32 once and keep it (2x the weights' bytes) instead of per call,
  // while that stays within f32_cache_limit_bytes.
  bool cache_f32_weights = true;
  uint64_t f32_cache_limit_bytes = uint64_t{8} << 30;
};

// A matrix-product backend: y[tokens, out] = x[tokens, in] W^T for a weight `w` of the
// model's weights (its host view identifies it), x and y fp32 in host memory. The gpu_worker
// puts its GPU (cuBLAS) behind it; unset, the host Linear (oneDNN) runs.
using LinearBackend = std::function<absl::Status(const float* x, int64_t tokens,
                                                 const LinearWeight& w, float* y)>;

// MLA's per-head products with kv_b (DecoderOps::MlaAbsorb, MlaUv), with the arguments of
// MlaAbsorbQuery and MlaApplyUv (mla.h). The gpu_worker puts cuBLAS behind them; unset, those
// host loops run.
using MlaProduct = std::function<absl::Status(const MlaDims& dims, const float* in, int64_t tokens,
                                              const LinearWeight& kv_b, float* out)>;
struct MlaBackend {
  MlaProduct absorb;
  MlaProduct uv;
};

// A SwiGLU MLP backend: y[tokens, out] = down(silu(gate(x)) * up(x)) for weights of the
// model's weights (layers.h SwiGluMlp's contract), x and y fp32 in host memory. The
// gpu_worker keeps the intermediate products on its GPU (one upload and one download per
// MLP, not three of each); unset, SwiGluMlp runs through the linear backend.
using SwiGluBackend =
    std::function<absl::Status(const float* x, int64_t tokens, const LinearWeight& gate,
                               const LinearWeight& up, const LinearWeight& down, float* y)>;

class DecoderOps {
 public:
  // `weights` must hold the attention-side tensors (SideFilter::kGpu or kAll) with the shapes
  // `config` implies, and outlive the object. INVALID_ARGUMENT naming a missing or misshapen
  // tensor.
  static absl::StatusOr<std::unique_ptr<DecoderOps>> Create(const ModelConfig& config,
                                                            const ModelWeights& weights,
                                                            const DecoderOpsOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const RopeTable& rope() const { return rope_; }
  const RouterSpec& router() const { return router_; }
  float softmax_scale() const { return softmax_scale_; }
  MlaDims mla_dims() const;
  // Per token: query values (GQA heads*head_dim, MLA heads*(nope+rope)), cache-row values,
  // attention output values before o_proj (heads * v_dim).
  int64_t q_values() const;
  int64_t kv_row_values() const;
  int64_t attn_values() const;
  // The fp32 weight cache (null when off); routed experts on the host may share it.
  F32WeightCache* cache() { return use_cache_ ? &cache_ : nullptr; }
  // Every matrix product of these ops through `backend` (empty: the host Linear).
  void set_linear_backend(LinearBackend backend) { backend_ = std::move(backend); }
  // MLA's absorbed products through `backend` (empty members: the host loops).
  void set_mla_backend(MlaBackend backend) { mla_backend_ = std::move(backend); }
  // The dense MLPs' and DeepSeek's shared experts' SwiGLU through `backend` (empty: their
  // three products through the linear backend, the activation on the host).
  void set_swiglu_backend(SwiGluBackend backend) { swiglu_backend_ = std::move(backend); }

  // x [tokens, hidden]. INVALID_ARGUMENT for a token outside the vocabulary.
  absl::Status Embed(absl::Span<const int32_t> tokens, float* x) const;
  void InputNorm(int64_t layer, const float* x, int64_t tokens, float* h) const;
  void PostAttentionNorm(int64_t layer, const float* x, int64_t tokens, float* h) const;

  // q [tokens][q_values()] with RoPE applied (GQA: after Qwen3's q_norm) and kv_rows
  // [tokens][kv_row_values()] (the cache rows above), for tokens at `positions`.
  absl::Status ProjectQkv(int64_t layer, const float* h, int64_t tokens, const int64_t* positions,
                          float* q, float* kv_rows);
  // MLA: q [tokens][heads][nope + rope] -> absorbed query [tokens][heads][kv_lora_rank + rope];
  // latent-space output [tokens][heads][kv_lora_rank] -> v-space [tokens][heads][v_dim].
  absl::Status MlaAbsorb(int64_t layer, const float* q, int64_t tokens, float* q_absorbed) const;
  absl::Status MlaUv(int64_t layer, const float* o_latent, int64_t tokens, float* attn) const;
  const LinearWeight KvB(int64_t layer) const;

  // out [tokens, hidden] = o_proj(attn [tokens][attn_values()]).
  absl::Status OutputProjection(int64_t layer, const float* attn, int64_t tokens, float* out);
  // Dense SwiGLU of a non-MoE layer.
  absl::Status DenseMlp(int64_t layer, const float* h, int64_t tokens, float* out);
  // Router logits [tokens, n_routed_experts] of an MoE layer (fp32, as HF computes them).
  absl::Status RouterLogits(int64_t layer, const float* h, int64_t tokens, float* logits);
  // DeepSeek's shared experts, ADDED to out [tokens, hidden]; no-op for other models.
  absl::Status AddSharedExperts(int64_t layer, const float* h, int64_t tokens, float* out);
  // logits [tokens, vocab] = lm_head(norm(x)); `normed` (optional, [tokens, hidden]) receives
  // norm(x).
  absl::Status FinalLogits(const float* x, int64_t tokens, float* logits, float* normed = nullptr);
  // FinalLogits' two parts, for a caller that runs lm_head itself: normed [tokens, hidden] =
  // norm(x), and the lm_head weight.
  void FinalNorm(const float* x, int64_t tokens, float* normed) const;
  LinearWeight LmHead() const;

 private:
  DecoderOps(const ModelConfig& config, const ModelWeights& weights,
             const DecoderOpsOptions& options);
  const Bf16Tensor& W(int64_t layer, const char* suffix) const;
  absl::Status Matmul(const float* x, int64_t tokens, const LinearWeight& w, float* y);
  absl::Status SwiGlu(const float* x, int64_t tokens, const LinearWeight& gate,
                      const LinearWeight& up, const LinearWeight& down, float* y);

  ModelConfig config_;
  const ModelWeights& weights_;
  DecoderOpsOptions options_;
  RopeTable rope_;
  RouterSpec router_;
  float softmax_scale_ = 0;
  bool use_cache_ = false;
  F32WeightCache cache_;
  LinearBackend backend_;
  MlaBackend mla_backend_;
  SwiGluBackend swiglu_backend_;
};

}  // namespace writescope::kernels::model

#endif  // WRITESCOPE_KERNELS_MODEL_DECODER_OPS_H_
