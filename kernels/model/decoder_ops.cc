#include "kernels/model/decoder_ops.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/model_tensors.h"
#include "common/status.h"

namespace writescope::kernels::model {
namespace {

// DeepSeek's kv_a_layernorm / q_a_layernorm are built without the config's eps, so they take
// the RMSNorm default (transformers' DeepseekV2RMSNorm(kv_lora_rank) and DeepSeek's own code).
constexpr double kMlaLatentNormEps = 1e-6;

}  // namespace

float AttentionSoftmaxScale(const ModelConfig& config, MlaSoftmaxScale mode) {
  if (!config.is_mla()) return static_cast<float>(1.0 / std::sqrt(double(config.head_dim)));
  double scale = 1.0 / std::sqrt(double(config.qk_nope_head_dim + config.qk_rope_head_dim));
  if (mode == MlaSoftmaxScale::kWithYarnMscale && config.rope.type == RopeType::kYarn &&
      config.rope.mscale_all_dim != 0.0) {
    const double mscale = YarnGetMscale(config.rope.factor, config.rope.mscale_all_dim);
    scale *= mscale * mscale;
  }
  return static_cast<float>(scale);
}

DecoderOps::DecoderOps(const ModelConfig& config, const ModelWeights& weights,
                       const DecoderOpsOptions& options)
    : config_(config), weights_(weights), options_(options) {}

absl::StatusOr<std::unique_ptr<DecoderOps>> DecoderOps::Create(const ModelConfig& config,
                                                               const ModelWeights& weights,
                                                               const DecoderOpsOptions& options) {
  WS_RETURN_IF_ERROR(config.Validate());
  uint64_t attention_side_bytes = 0;
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    if (spec.side != WorkerSide::kGpu) continue;
    WS_ASSIGN_OR_RETURN(const Bf16Tensor* tensor, weights.Get(spec.name));
    if (tensor->shape != spec.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", spec.name, " is ", ShapeString(tensor->shape), ", the config ",
                       config.source, " needs ", ShapeString(spec.shape)));
    }
    attention_side_bytes += spec.bf16_bytes();
  }
  auto ops = std::unique_ptr<DecoderOps>(new DecoderOps(config, weights, options));
  if (config.is_mla()) {
    ops->rope_ = MakeRopeTable(config.rope, config.qk_rope_head_dim, RopeStyle::kInterleaved);
  } else {
    ops->rope_ = MakeRopeTable(config.rope, config.head_dim, RopeStyle::kHalf);
  }
  ops->router_ = RouterSpecFor(config);
  ops->softmax_scale_ = AttentionSoftmaxScale(config, options.mla_softmax_scale);
  // The cache may also serve the caller's routed experts (HostModel): size it by all weights.
  ops->use_cache_ =
      options.cache_f32_weights && 2 * weights.total_bytes() <= options.f32_cache_limit_bytes;
  if (options.cache_f32_weights && !ops->use_cache_) {
    WS_LOG(INFO) << "DecoderOps: fp32 weight cache off (" << 2 * weights.total_bytes()
                 << " bytes > limit " << options.f32_cache_limit_bytes
                 << "); weights are widened per call";
  }
  return ops;
}

MlaDims DecoderOps::mla_dims() const {
  MlaDims d;
  d.num_heads = config_.num_heads;
  d.qk_nope = config_.qk_nope_head_dim;
  d.qk_rope = config_.qk_rope_head_dim;
  d.v_dim = config_.v_head_dim;
  d.kv_lora_rank = config_.kv_lora_rank;
  return d;
}

int64_t DecoderOps::q_values() const { return config_.num_heads * config_.qk_head_dim(); }

int64_t DecoderOps::kv_row_values() const {
  return config_.is_mla() ? config_.kv_lora_rank + config_.qk_rope_head_dim
                          : 2 * config_.num_kv_heads * config_.head_dim;
}

int64_t DecoderOps::attn_values() const { return config_.num_heads * config_.attn_v_head_dim(); }

const Bf16Tensor& DecoderOps::W(int64_t layer, const char* suffix) const {
  return weights_.At(LayerTensorName(layer, suffix));
}

absl::Status DecoderOps::Matmul(const float* x, int64_t tokens, const LinearWeight& w, float* y) {
  if (backend_) return backend_(x, tokens, w, y);
  return Linear(x, tokens, w, y, cache());
}

absl::Status DecoderOps::SwiGlu(const float* x, int64_t tokens, const LinearWeight& gate,
                                const LinearWeight& up, const LinearWeight& down, float* y) {
  if (swiglu_backend_) return swiglu_backend_(x, tokens, gate, up, down, y);
  return SwiGluMlp(x, tokens, gate, up, down, y,
                   [this](const float* in, int64_t n, const LinearWeight& w, float* out) {
                     return Matmul(in, n, w, out);
                   });
}

const LinearWeight DecoderOps::KvB(int64_t layer) const {
  return AsLinear(W(layer, "self_attn.kv_b_proj.weight"));
}

absl::Status DecoderOps::Embed(absl::Span<const int32_t> tokens, float* x) const {
  return model::Embed(weights_.At("model.embed_tokens.weight"), tokens, x);
}

void DecoderOps::InputNorm(int64_t layer, const float* x, int64_t tokens, float* h) const {
  RmsNorm(x, tokens, config_.hidden_size, W(layer, "input_layernorm.weight").data,
          config_.rms_norm_eps, h);
}

void DecoderOps::PostAttentionNorm(int64_t layer, const float* x, int64_t tokens,
                                   float* h) const {
  RmsNorm(x, tokens, config_.hidden_size, W(layer, "post_attention_layernorm.weight").data,
          config_.rms_norm_eps, h);
}

absl::Status DecoderOps::ProjectQkv(int64_t layer, const float* h, int64_t tokens,
                                    const int64_t* positions, float* q, float* kv_rows) {
  if (tokens == 0) return absl::OkStatus();
  if (!config_.is_mla()) {
    const int64_t heads = config_.num_heads, kv_heads = config_.num_kv_heads;
    const int64_t dim = config_.head_dim;
    std::vector<float> k(tokens * kv_heads * dim), v(tokens * kv_heads * dim);
    WS_RETURN_IF_ERROR(Matmul(h, tokens, AsLinear(W(layer, "self_attn.q_proj.weight")), q));
    WS_RETURN_IF_ERROR(Matmul(h, tokens, AsLinear(W(layer, "self_attn.k_proj.weight")), k.data()));
    WS_RETURN_IF_ERROR(Matmul(h, tokens, AsLinear(W(layer, "self_attn.v_proj.weight")), v.data()));
    if (config_.arch == ModelArch::kQwen3Moe) {
      RmsNorm(q, tokens * heads, dim, W(layer, "self_attn.q_norm.weight").data,
              config_.rms_norm_eps, q);
      RmsNorm(k.data(), tokens * kv_heads, dim, W(layer, "self_attn.k_norm.weight").data,
              config_.rms_norm_eps, k.data());
    }
    ApplyRope(rope_, q, tokens, heads, dim, positions);
    ApplyRope(rope_, k.data(), tokens, kv_heads, dim, positions);
    const int64_t half = kv_heads * dim;
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy_n(k.data() + t * half, half, kv_rows + t * 2 * half);
      std::copy_n(v.data() + t * half, half, kv_rows + t * 2 * half + half);
    }
    return absl::OkStatus();
  }
  const MlaDims d = mla_dims();
  const int64_t qd = d.q_head_dim(), latent = d.latent_dim();
  if (config_.q_lora_rank.has_value()) {
    const int64_t rank = *config_.q_lora_rank;
    std::vector<float> q_a(tokens * rank);
    WS_RETURN_IF_ERROR(
        Matmul(h, tokens, AsLinear(W(layer, "self_attn.q_a_proj.weight")), q_a.data()));
    RmsNorm(q_a.data(), tokens, rank, W(layer, "self_attn.q_a_layernorm.weight").data,
            kMlaLatentNormEps, q_a.data());
    WS_RETURN_IF_ERROR(
        Matmul(q_a.data(), tokens, AsLinear(W(layer, "self_attn.q_b_proj.weight")), q));
  } else {
    WS_RETURN_IF_ERROR(Matmul(h, tokens, AsLinear(W(layer, "self_attn.q_proj.weight")), q));
  }
  // Through the backend like every other product (on the gpu_worker: the GPU, not a host
  // oneDNN product whose threads would share the cpu_worker's cores).
  WS_RETURN_IF_ERROR(
      Matmul(h, tokens, AsLinear(W(layer, "self_attn.kv_a_proj_with_mqa.weight")), kv_rows));
  const uint16_t* kv_norm = W(layer, "self_attn.kv_a_layernorm.weight").data;
  for (int64_t t = 0; t < tokens; ++t) {
    RmsNorm(kv_rows + t * latent, 1, d.kv_lora_rank, kv_norm, kMlaLatentNormEps,
            kv_rows + t * latent);
  }
  ApplyRope(rope_, q + d.qk_nope, tokens, d.num_heads, qd, positions);
  ApplyRope(rope_, kv_rows + d.kv_lora_rank, tokens, 1, latent, positions);
  return absl::OkStatus();
}

absl::Status DecoderOps::MlaAbsorb(int64_t layer, const float* q, int64_t tokens,
                                   float* q_absorbed) const {
  if (mla_backend_.absorb) return mla_backend_.absorb(mla_dims(), q, tokens, KvB(layer), q_absorbed);
  MlaAbsorbQuery(mla_dims(), q, tokens, KvB(layer), q_absorbed);
  return absl::OkStatus();
}

absl::Status DecoderOps::MlaUv(int64_t layer, const float* o_latent, int64_t tokens,
                               float* attn) const {
  if (mla_backend_.uv) return mla_backend_.uv(mla_dims(), o_latent, tokens, KvB(layer), attn);
  MlaApplyUv(mla_dims(), o_latent, tokens, KvB(layer), attn);
  return absl::OkStatus();
}

absl::Status DecoderOps::OutputProjection(int64_t layer, const float* attn, int64_t tokens,
                                          float* out) {
  return Matmul(attn, tokens, AsLinear(W(layer, "self_attn.o_proj.weight")), out);
}

absl::Status DecoderOps::DenseMlp(int64_t layer, const float* h, int64_t tokens, float* out) {
  return SwiGlu(h, tokens, AsLinear(weights_.At(DenseMlpTensorName(layer, MlpMatrix::kGate))),
                AsLinear(weights_.At(DenseMlpTensorName(layer, MlpMatrix::kUp))),
                AsLinear(weights_.At(DenseMlpTensorName(layer, MlpMatrix::kDown))), out);
}

absl::Status DecoderOps::RouterLogits(int64_t layer, const float* h, int64_t tokens,
                                      float* logits) {
  return Matmul(h, tokens, AsLinear(weights_.Router(layer)), logits);
}

absl::Status DecoderOps::AddSharedExperts(int64_t layer, const float* h, int64_t tokens,
                                          float* out) {
  if (config_.arch != ModelArch::kDeepseekV2 || config_.n_shared_experts == 0) {
    return absl::OkStatus();
  }
  const int64_t n = tokens * config_.hidden_size;
  std::vector<float> shared(n);
  WS_RETURN_IF_ERROR(
      SwiGlu(h, tokens, AsLinear(weights_.At(SharedExpertTensorName(layer, MlpMatrix::kGate))),
             AsLinear(weights_.At(SharedExpertTensorName(layer, MlpMatrix::kUp))),
             AsLinear(weights_.At(SharedExpertTensorName(layer, MlpMatrix::kDown))),
             shared.data()));
  AddInPlace(out, shared.data(), n);
  return absl::OkStatus();
}

absl::Status DecoderOps::FinalLogits(const float* x, int64_t tokens, float* logits,
                                     float* normed) {
  std::vector<float> own;
  if (normed == nullptr) {
    own.resize(tokens * config_.hidden_size);
    normed = own.data();
  }
  FinalNorm(x, tokens, normed);
  return Matmul(normed, tokens, LmHead(), logits);
}

void DecoderOps::FinalNorm(const float* x, int64_t tokens, float* normed) const {
  RmsNorm(x, tokens, config_.hidden_size, weights_.At("model.norm.weight").data,
          config_.rms_norm_eps, normed);
}

LinearWeight DecoderOps::LmHead() const { return AsLinear(weights_.At("lm_head.weight")); }

}  // namespace writescope::kernels::model
