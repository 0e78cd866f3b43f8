// A single-process host forward of DeepSeek-V2 / Qwen3-MoE / Mixtral that matches Hugging Face
// transformers' DeepseekV2ForCausalLM, Qwen3MoeForCausalLM and MixtralForCausalLM (fp32
// compute on bf16 weights), over a KV cache in the tile layout the real workers use
// (common/kv_layout.h), attended with kernels/cpu_attention.h.
//
//   auto model = HostModel::Create(weights->config(), *weights);   // weights: all sides
//   HostSequence seq = (*model)->NewSequence();
//   auto logits = (*model)->Prefill(seq, prompt, /*chunk_tokens=*/256);  // [T, vocab]
//   auto next = (*model)->Decode(seq, token);                            // [vocab]
//
// Per layer (pre-norm residual blocks, as all three HF models):
//   x += o_proj(Attention(input_layernorm(x)));  x += Mlp(post_attention_layernorm(x))
//   GQA (Qwen3, Mixtral): q/k/v projections; Qwen3 RMSNorms each q and k head (q_norm/k_norm
//     over head_dim) BEFORE RoPE; RoPE rotate_half; K/V appended to the cache as bf16; prefill
//     chunks through CpuGqaPrefill, decode through CpuGqaDecode (q rounded to bf16, as the GPU
//     ships it); scale 1/sqrt(head_dim).
//   MLA (DeepSeek-V2): see kernels/model/mla.h. The cache holds the latent [c_kv | k_pe]
//     (bf16); prefill attends in the naive form over the cached latents, decode in the
//     absorbed form through CpuMlaDecode (or naive, by option). RoPE interleaved, with YaRN.
//   MLP: dense SwiGLU, or MoE: router (layers.h RouteTokens), routed SwiGLU experts batched
//     per expert over the tokens routed to it, weighted sum; DeepSeek adds its shared experts.
// Attention always reads the bf16 cache (also for a chunk's own tokens), so one-shot prefill,
// chunked prefill and token-by-token decode see the same keys and agree to fp32 rounding.
// (AttentionPrecision::kFp32, a reference mode for tests, reads fp32 copies instead.)
//
// Numerics against transformers (tests/kernels/model/hf_fixture_test.cc): in the kFp32 mode
// the log-probs agree to ~4e-6; with the bf16 cache to ~0.02, except that the bf16 rounding
// (~1e-3 on router probabilities) can flip a router whose top-k margin is smaller, which moves
// that token (and whatever attends to it) by a whole expert: the fixture test holds such near
// ties to the fp32 run's decision (RoutingReplay) to compare every position.
#ifndef WRITESCOPE_KERNELS_MODEL_HOST_MODEL_H_
#define WRITESCOPE_KERNELS_MODEL_HOST_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kv_layout.h"
#include "common/model_config.h"
#include "common/model_weights.h"
#include "kernels/model/decoder_ops.h"
#include "kernels/model/layers.h"

namespace writescope::kernels::model {

enum class MlaDecodeMode { kAbsorbed, kNaive };

// MLA prefill: transformers' naive form (fp32 queries over the widened latents expanded
// through kv_b) or the absorbed form the workers compute for every query (bf16 absorbed
// queries over the latents, CpuMlaDecode per query row over its causal prefix): the two
// differ by the bf16 rounding of the absorbed query.
enum class MlaPrefillMode { kNaive, kAbsorbed };

// What attention reads.
//   kBf16Cache  the bf16 cache tiles (K/V, or the MLA latent) and a bf16 query, through the
//               kernels the workers run (kernels/cpu_attention.h); MLA prefill naive over the
//               widened latents unless MlaPrefillMode::kAbsorbed (the workers' form).
//   kFp32       fp32 copies of the same K/V / latents kept beside the cache and the unrounded
//               query, attended in the naive form (double softmax) for prefill and decode:
//               transformers' own fp32 numerics. A reference mode (3x the KV memory), for
//               telling bf16 rounding apart from a semantic difference.
enum class AttentionPrecision { kBf16Cache, kFp32 };

// Router decisions to follow at near ties instead of the run's own (test support). bf16
// rounding of the attention inputs perturbs the router's probabilities by ~1e-3, which flips
// the experts of a token whose top-k margin is smaller, and a flipped expert changes that
// token's output by a whole expert's contribution. The fixture tests replay the decisions of
// an AttentionPrecision::kFp32 run (which reproduces transformers' routing) wherever the bf16
// run's own margin is below `below_margin`, so that the two can be compared at every position.
struct RoutingReplay {
  // [layer][position * top_k + i]: the experts of each absolute position, as
  // ForwardTrace::router_experts records them; positions past a layer's end (and dense
  // layers' empty vectors) route by themselves.
  std::vector<std::vector<int32_t>> experts;
  // A token follows `experts` where its own margin (RouteTokens) is below this.
  float below_margin = 0.0f;
};

struct HostModelOptions {
  uint32_t block_tokens = 256;  // KV tile tokens (KvGeometry::block_tokens)
  MlaSoftmaxScale mla_softmax_scale = MlaSoftmaxScale::kWithYarnMscale;
  MlaDecodeMode mla_decode = MlaDecodeMode::kAbsorbed;
  MlaPrefillMode mla_prefill = MlaPrefillMode::kNaive;
  AttentionPrecision attention_precision = AttentionPrecision::kBf16Cache;
  // Not owned; must outlive the model. Null: every token routes by itself (the product).
  const RoutingReplay* routing_replay = nullptr;
  // Widen each weight to fp32 once and keep it (2x the weights' bytes) instead
  // of per call, while that stays within f32_cache_limit_bytes (else widened
  // per call, with a log line).
  bool cache_f32_weights = true;
  uint64_t f32_cache_limit_bytes = uint64_t{8} << 30;
};

// One sequence's KV: per layer, contiguous tiles of `block_tokens` tokens in
// the common/kv_layout.h (slot, layer) layout, grown as tokens are appended.
class HostSequence {
 public:
  int64_t length() const { return length_; }
  const KvGeometry& geometry() const { return geometry_; }
  int64_t num_blocks() const;
  // Base of tile `block` of `layer` (layer_block values of bf16).
  uint16_t* tile(int64_t layer, int64_t block);
  const uint16_t* tile(int64_t layer, int64_t block) const;

 private:
  friend class HostModel;
  explicit HostSequence(const KvGeometry& geometry);
  void Reserve(int64_t tokens);

  KvGeometry geometry_;
  int64_t length_ = 0;
  std::vector<std::vector<uint16_t>> layers_;  // [layer] -> [blocks * layer_block values]
  // AttentionPrecision::kFp32 only: [layer] -> [tokens][values_per_token_layer] fp32, each
  // token's row as GQA [K heads x head_dim | V heads x head_dim] or MLA [c_kv | k_pe].
  std::vector<std::vector<float>> f32_rows_;
};

// Hidden states of one forward call, as transformers' output_hidden_states
// returns them: [0] the embeddings, [l] after decoder layer l (the last one
// after the final norm).
struct ForwardTrace {
  std::vector<std::vector<float>> hidden_states;  // [num_layers + 1][tokens * hidden]
  // Per layer, per token: how far the router was from choosing another set of experts, the
  // k-th chosen expert's score minus the best unchosen one's (RouteTokens' margins, of the
  // token's own choice; +inf when every expert is chosen). [num_layers][tokens]; empty for a
  // dense layer.
  std::vector<std::vector<float>> router_margins;
  // The experts each token used (its own choice, or the replayed one), [num_layers][tokens *
  // top_k]; empty for a dense layer.
  std::vector<std::vector<int32_t>> router_experts;
  // Token-layers that followed a RoutingReplay, and those of them whose replayed experts differ
  // (as a set) from the token's own choice.
  int64_t replayed_decisions = 0;
  int64_t changed_decisions = 0;

  // Appends `part` (the trace of the next tokens) to this one.
  void Append(const ForwardTrace& part);
};

struct GreedyResult {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // of each chosen token
  std::vector<float> margins;   // top-1 minus top-2 log-prob at each step
};

class HostModel {
 public:
  // `weights` must hold every tensor (SideFilter::kAll) and outlive the model.
  static absl::StatusOr<std::unique_ptr<HostModel>> Create(const ModelConfig& config,
                                                           const ModelWeights& weights,
                                                           const HostModelOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const HostModelOptions& options() const { return options_; }
  // The attention softmax scale in use (MLA: with or without YaRN mscale^2).
  float softmax_scale() const { return ops_->softmax_scale(); }
  const RopeTable& rope() const { return ops_->rope(); }
  // The attention-side ops this model runs (shared with the gpu_worker's step runner).
  DecoderOps& ops() { return *ops_; }

  HostSequence NewSequence() const;

  // Appends `tokens` to `seq` and returns the logits after each of them,
  // [tokens, vocab]. chunk_tokens > 0 runs the forward in chunks of that many
  // tokens (each attends to the earlier chunks' cached KV and causally to its
  // own). `trace` (optional) receives the hidden states of the whole call.
  absl::StatusOr<std::vector<float>> Prefill(HostSequence& seq, absl::Span<const int32_t> tokens,
                                             int64_t chunk_tokens = 0,
                                             ForwardTrace* trace = nullptr);
  // Appends one token through the decode path; returns its logits [vocab]. `trace` as in
  // Prefill.
  absl::StatusOr<std::vector<float>> Decode(HostSequence& seq, int32_t token,
                                            ForwardTrace* trace = nullptr);

  // log p(tokens[i] | tokens[<i]) for i >= 1 (index 0 is NaN: nothing predicts
  // it), natural log, from a fresh sequence.
  absl::StatusOr<std::vector<float>> PromptLogProbs(absl::Span<const int32_t> tokens,
                                                    int64_t chunk_tokens = 0);
  // Prefills `prompt` into a fresh sequence, then decodes `steps` greedy tokens
  // (argmax; ties to the lower id; no EOS stop).
  absl::StatusOr<GreedyResult> Greedy(absl::Span<const int32_t> prompt, int64_t steps,
                                      int64_t chunk_tokens = 0);

 private:
  HostModel(const ModelConfig& config, const ModelWeights& weights,
            const HostModelOptions& options);
  absl::Status Init();

  // One forward pass of `tokens` at positions [seq.length(), +tokens): writes
  // their KV and returns logits [tokens, vocab]. `decode` selects the decode
  // attention kernels.
  absl::StatusOr<std::vector<float>> Forward(HostSequence& seq, absl::Span<const int32_t> tokens,
                                             bool decode, ForwardTrace* trace);
  absl::Status GqaAttention(HostSequence& seq, int64_t layer, const float* x, int64_t tokens,
                            bool decode, float* out);
  absl::Status MlaAttention(HostSequence& seq, int64_t layer, const float* x, int64_t tokens,
                            bool decode, float* out);
  // Tokens at positions [position0, +tokens). `trace` (optional) gets this layer's router
  // entries (see ForwardTrace), appended by the caller's layer loop.
  absl::Status Mlp(int64_t layer, int64_t position0, const float* x, int64_t tokens, float* out,
                   ForwardTrace* trace);
  absl::Status Moe(int64_t layer, int64_t position0, const float* x, int64_t tokens, float* out,
                   ForwardTrace* trace);

  F32WeightCache* cache() { return ops_->cache(); }

  ModelConfig config_;
  const ModelWeights& weights_;
  HostModelOptions options_;
  KvGeometry geometry_;
  std::unique_ptr<DecoderOps> ops_;
};

}  // namespace writescope::kernels::model

#endif  // WRITESCOPE_KERNELS_MODEL_HOST_MODEL_H_
