#include "kernels/model/host_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/model_tensors.h"
#include "common/status.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/cpu_attention.h"
#include "kernels/model/mla.h"

namespace writescope::kernels::model {
namespace {

// The tiles a sequence's first `tokens` tokens occupy in one layer.
struct TileList {
  std::vector<const uint16_t*> blocks;
  std::vector<int64_t> positions;
  KvBlockList list;
};

TileList MakeTileList(const HostSequence& seq, int64_t layer, int64_t tokens) {
  const int64_t bt = seq.geometry().block_tokens;
  TileList t;
  const int64_t nb = (tokens + bt - 1) / bt;
  for (int64_t b = 0; b < nb; ++b) {
    t.blocks.push_back(seq.tile(layer, b));
    t.positions.push_back(b * bt);
  }
  t.list.blocks = t.blocks.data();
  t.list.num_blocks = static_cast<int32_t>(nb);
  t.list.last_block_tokens = nb == 0 ? 0 : static_cast<int32_t>(tokens - (nb - 1) * bt);
  t.list.block_positions = t.positions.data();
  return t;
}

// Causal GQA attention in fp32 with a double softmax (transformers' eager attention, the
// kFp32 reference mode): query i (position query_position0 + i) sees keys [0, position].
//   q     [num_queries][heads][dim]
//   rows  [num_keys][K kv_heads x dim | V kv_heads x dim]
//   out   [num_queries][heads][dim]
void GqaNaiveAttention(const float* q, int64_t num_queries, int64_t query_position0,
                       const float* rows, int64_t heads, int64_t kv_heads, int64_t dim,
                       float softmax_scale, float* out) {
  const int64_t group = heads / kv_heads, row = 2 * kv_heads * dim;
  // Serial for a tiny model's decode step, where a parallel region costs more than it saves.
  const bool parallel =
      num_queries * heads * (query_position0 + num_queries) * 2 * dim > (int64_t{1} << 20);
#pragma omp parallel for schedule(dynamic, 1) collapse(2) if (parallel)
  for (int64_t i = 0; i < num_queries; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = q + (i * heads + h) * dim;
      const int64_t kv = h / group, visible = query_position0 + i + 1;
      std::vector<double> scores(visible);
      double max = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        const float* k = rows + j * row + kv * dim;
        float dot = 0.0f;
        for (int64_t c = 0; c < dim; ++c) dot += qh[c] * k[c];
        scores[j] = double{dot} * softmax_scale;
        max = std::max(max, scores[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < visible; ++j) sum += (scores[j] = std::exp(scores[j] - max));
      std::vector<double> acc(dim, 0.0);
      for (int64_t j = 0; j < visible; ++j) {
        const float* v = rows + j * row + (kv_heads + kv) * dim;
        const double p = scores[j] / sum;
        for (int64_t c = 0; c < dim; ++c) acc[c] += p * v[c];
      }
      float* oh = out + (i * heads + h) * dim;
      for (int64_t c = 0; c < dim; ++c) oh[c] = static_cast<float>(acc[c]);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ForwardTrace

void ForwardTrace::Append(const ForwardTrace& part) {
  auto append = [](auto& all, const auto& next) {
    all.resize(std::max(all.size(), next.size()));
    for (size_t i = 0; i < next.size(); ++i) {
      all[i].insert(all[i].end(), next[i].begin(), next[i].end());
    }
  };
  append(hidden_states, part.hidden_states);
  append(router_margins, part.router_margins);
  append(router_experts, part.router_experts);
  replayed_decisions += part.replayed_decisions;
  changed_decisions += part.changed_decisions;
}

// ---------------------------------------------------------------------------------------------
// HostSequence

HostSequence::HostSequence(const KvGeometry& geometry)
    : geometry_(geometry), layers_(geometry.num_layers), f32_rows_(geometry.num_layers) {}

int64_t HostSequence::num_blocks() const {
  const uint64_t per_block = geometry_.values_per_token_layer() * geometry_.block_tokens;
  return layers_.empty() ? 0 : static_cast<int64_t>(layers_[0].size() / per_block);
}

uint16_t* HostSequence::tile(int64_t layer, int64_t block) {
  return layers_[layer].data() +
         block * geometry_.values_per_token_layer() * geometry_.block_tokens;
}

const uint16_t* HostSequence::tile(int64_t layer, int64_t block) const {
  return layers_[layer].data() +
         block * geometry_.values_per_token_layer() * geometry_.block_tokens;
}

void HostSequence::Reserve(int64_t tokens) {
  const int64_t bt = geometry_.block_tokens;
  const int64_t blocks = (tokens + bt - 1) / bt;
  if (blocks <= num_blocks()) return;
  for (auto& layer : layers_) {
    layer.resize(blocks * geometry_.values_per_token_layer() * bt, 0);
  }
}

// ---------------------------------------------------------------------------------------------
// HostModel

HostModel::HostModel(const ModelConfig& config, const ModelWeights& weights,
                     const HostModelOptions& options)
    : config_(config), weights_(weights), options_(options) {}

absl::StatusOr<std::unique_ptr<HostModel>> HostModel::Create(const ModelConfig& config,
                                                             const ModelWeights& weights,
                                                             const HostModelOptions& options) {
  WS_RETURN_IF_ERROR(config.Validate());
  if (options.block_tokens == 0) {
    return absl::InvalidArgumentError("HostModelOptions.block_tokens must be > 0");
  }
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    WS_ASSIGN_OR_RETURN(const Bf16Tensor* tensor, weights.Get(spec.name));
    if (tensor->shape != spec.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", spec.name, " is ", ShapeString(tensor->shape), ", the config ",
                       config.source, " needs ", ShapeString(spec.shape)));
    }
  }
  auto model = std::unique_ptr<HostModel>(new HostModel(config, weights, options));
  WS_RETURN_IF_ERROR(model->Init());
  return model;
}

absl::Status HostModel::Init() {
  geometry_ = config_.kv_geometry(options_.block_tokens);
  DecoderOpsOptions ops_options;
  ops_options.mla_softmax_scale = options_.mla_softmax_scale;
  ops_options.cache_f32_weights = options_.cache_f32_weights;
  ops_options.f32_cache_limit_bytes = options_.f32_cache_limit_bytes;
  WS_ASSIGN_OR_RETURN(ops_, DecoderOps::Create(config_, weights_, ops_options));
  return absl::OkStatus();
}

HostSequence HostModel::NewSequence() const { return HostSequence(geometry_); }

absl::Status HostModel::GqaAttention(HostSequence& seq, int64_t layer, const float* x,
                                     int64_t tokens, bool decode, float* out) {
  const int64_t heads = config_.num_heads, kv_heads = config_.num_kv_heads;
  const int64_t dim = config_.head_dim, p0 = seq.length();
  const int64_t row = 2 * kv_heads * dim;
  std::vector<float> q(tokens * heads * dim), kv(tokens * row);
  std::vector<int64_t> positions(tokens);
  for (int64_t t = 0; t < tokens; ++t) positions[t] = p0 + t;
  WS_RETURN_IF_ERROR(ops_->ProjectQkv(layer, x, tokens, positions.data(), q.data(), kv.data()));

  // Append K and V to the cache tiles.
  const int64_t bt = geometry_.block_tokens;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t pos = p0 + t;
    uint16_t* tile = seq.tile(layer, pos / bt);
    const uint32_t slot = static_cast<uint32_t>(pos % bt);
    for (int64_t h = 0; h < kv_heads; ++h) {
      ToBf16(kv.data() + t * row + h * dim, dim,
             tile + geometry_.k_offset(static_cast<uint32_t>(h), slot));
      ToBf16(kv.data() + t * row + (kv_heads + h) * dim, dim,
             tile + geometry_.v_offset(static_cast<uint32_t>(h), slot));
    }
  }

  std::vector<float> o(tokens * heads * dim), lse(tokens * heads);
  if (options_.attention_precision == AttentionPrecision::kFp32) {
    std::vector<float>& rows = seq.f32_rows_[layer];
    rows.resize((p0 + tokens) * row);
    std::copy_n(kv.data(), tokens * row, rows.data() + p0 * row);
    GqaNaiveAttention(q.data(), tokens, p0, rows.data(), heads, kv_heads, dim, softmax_scale(),
                      o.data());
    return ops_->OutputProjection(layer, o.data(), tokens, out);
  }
  std::vector<uint16_t> q_bf16(q.size());
  ToBf16(q.data(), q.size(), q_bf16.data());
  TileList tiles = MakeTileList(seq, layer, p0 + tokens);
  GqaShape shape;
  shape.num_q_heads = static_cast<int32_t>(heads);
  shape.num_kv_heads = static_cast<int32_t>(kv_heads);
  shape.head_dim = static_cast<int32_t>(dim);
  shape.block_tokens = static_cast<int32_t>(bt);
  shape.softmax_scale = softmax_scale();
  if (decode && tokens == 1) {
    GqaDecodeArgs args;
    args.shape = shape;
    args.num_seqs = 1;
    args.q = q_bf16.data();
    args.seqs = &tiles.list;
    args.o = o.data();
    args.lse = lse.data();
    WS_RETURN_IF_ERROR(CpuGqaDecode(args));
  } else {
    GqaPrefillArgs args;
    args.shape = shape;
    args.num_queries = static_cast<int32_t>(tokens);
    args.query_position0 = p0;
    args.q = q_bf16.data();
    args.keys = tiles.list;
    args.o = o.data();
    args.lse = lse.data();
    WS_RETURN_IF_ERROR(CpuGqaPrefill(args));
  }
  return ops_->OutputProjection(layer, o.data(), tokens, out);
}

absl::Status HostModel::MlaAttention(HostSequence& seq, int64_t layer, const float* x,
                                     int64_t tokens, bool decode, float* out) {
  const MlaDims d = ops_->mla_dims();
  const int64_t p0 = seq.length(), latent = d.latent_dim();
  std::vector<float> q(tokens * d.num_heads * d.q_head_dim()), kv_a(tokens * latent);
  std::vector<int64_t> positions(tokens);
  for (int64_t t = 0; t < tokens; ++t) positions[t] = p0 + t;
  WS_RETURN_IF_ERROR(ops_->ProjectQkv(layer, x, tokens, positions.data(), q.data(), kv_a.data()));

  // The cache row of each token: [c_kv | k_pe].
  const int64_t bt = geometry_.block_tokens;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t pos = p0 + t;
    ToBf16(kv_a.data() + t * latent, latent,
           seq.tile(layer, pos / bt) + geometry_.latent_offset(static_cast<uint32_t>(pos % bt)));
  }

  const LinearWeight kv_b = ops_->KvB(layer);
  std::vector<float> attn(tokens * d.num_heads * d.v_dim);
  const int64_t keys = p0 + tokens;
  if (options_.attention_precision == AttentionPrecision::kFp32) {
    std::vector<float>& rows = seq.f32_rows_[layer];
    rows.resize(keys * latent);
    std::copy_n(kv_a.data(), tokens * latent, rows.data() + p0 * latent);
    WS_RETURN_IF_ERROR(MlaNaiveAttention(d, q.data(), tokens, p0, rows.data(), keys, kv_b,
                                         softmax_scale(), attn.data(), cache()));
  } else if ((decode && tokens == 1 && options_.mla_decode == MlaDecodeMode::kAbsorbed) ||
             (!decode && options_.mla_prefill == MlaPrefillMode::kAbsorbed)) {
    // One absorbed query per token over its causal prefix of the cache.
    std::vector<float> q_abs(tokens * d.num_heads * latent);
    WS_RETURN_IF_ERROR(ops_->MlaAbsorb(layer, q.data(), tokens, q_abs.data()));
    std::vector<uint16_t> q_bf16(q_abs.size());
    ToBf16(q_abs.data(), q_abs.size(), q_bf16.data());
    TileList tiles = MakeTileList(seq, layer, keys);
    std::vector<KvBlockList> rows(tokens, tiles.list);
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t visible = p0 + t + 1;
      rows[t].num_blocks = static_cast<int32_t>((visible + bt - 1) / bt);
      rows[t].last_block_tokens = static_cast<int32_t>(visible - (rows[t].num_blocks - 1) * bt);
    }
    MlaDecodeArgs args;
    args.shape.num_heads = static_cast<int32_t>(d.num_heads);
    args.shape.kv_lora_rank = static_cast<int32_t>(d.kv_lora_rank);
    args.shape.rope_dim = static_cast<int32_t>(d.qk_rope);
    args.shape.block_tokens = static_cast<int32_t>(bt);
    args.shape.softmax_scale = softmax_scale();
    args.num_seqs = static_cast<int32_t>(tokens);
    args.q = q_bf16.data();
    args.seqs = rows.data();
    std::vector<float> o_lat(tokens * d.num_heads * d.kv_lora_rank), lse(tokens * d.num_heads);
    args.o = o_lat.data();
    args.lse = lse.data();
    WS_RETURN_IF_ERROR(CpuMlaDecode(args));
    WS_RETURN_IF_ERROR(ops_->MlaUv(layer, o_lat.data(), tokens, attn.data()));
  } else {
    // Naive: every cached latent, widened, expanded through kv_b.
    std::vector<float> latents(keys * latent);
    for (int64_t j = 0; j < keys; ++j) {
      const uint16_t* row =
          seq.tile(layer, j / bt) + geometry_.latent_offset(static_cast<uint32_t>(j % bt));
      for (int64_t c = 0; c < latent; ++c) latents[j * latent + c] = Bf16ToFloat(row[c]);
    }
    WS_RETURN_IF_ERROR(MlaNaiveAttention(d, q.data(), tokens, p0, latents.data(), keys, kv_b,
                                         softmax_scale(), attn.data(), cache()));
  }
  return ops_->OutputProjection(layer, attn.data(), tokens, out);
}

absl::Status HostModel::Mlp(int64_t layer, int64_t position0, const float* x, int64_t tokens,
                            float* out, ForwardTrace* trace) {
  if (!config_.IsMoeLayer(layer)) return ops_->DenseMlp(layer, x, tokens, out);
  return Moe(layer, position0, x, tokens, out, trace);
}

absl::Status HostModel::Moe(int64_t layer, int64_t position0, const float* x, int64_t tokens,
                            float* out, ForwardTrace* trace) {
  const int64_t hidden = config_.hidden_size, experts = config_.n_routed_experts;
  const RouterSpec& router = ops_->router();
  const int64_t k = router.top_k;
  std::vector<float> logits(tokens * experts);
  WS_RETURN_IF_ERROR(ops_->RouterLogits(layer, x, tokens, logits.data()));
  std::vector<int32_t> ids(tokens * k);
  std::vector<float> weights(tokens * k), margins(tokens);
  RouteTokens(logits.data(), tokens, router, ids.data(), weights.data(), margins.data());
  const RoutingReplay* replay = options_.routing_replay;
  if (replay != nullptr && layer < static_cast<int64_t>(replay->experts.size())) {
    const std::vector<int32_t>& replayed = replay->experts[layer];
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t position = position0 + t;
      if (!(margins[t] < replay->below_margin) ||
          (position + 1) * k > static_cast<int64_t>(replayed.size())) {
        continue;
      }
      int32_t* own = ids.data() + t * k;
      const int32_t* theirs = replayed.data() + position * k;
      for (int64_t i = 0; i < k; ++i) {
        if (theirs[i] < 0 || theirs[i] >= experts) {
          return absl::InvalidArgumentError(absl::StrCat("RoutingReplay: layer ", layer,
                                                         " position ", position, " expert ",
                                                         theirs[i], " of ", experts));
        }
      }
      if (trace != nullptr) {
        ++trace->replayed_decisions;
        if (!std::is_permutation(own, own + k, theirs)) ++trace->changed_decisions;
      }
      std::copy_n(theirs, k, own);
      RouterWeights(logits.data() + t * experts, 1, router, own, weights.data() + t * k);
    }
  }
  if (trace != nullptr) {
    trace->router_margins.back() = std::move(margins);
    trace->router_experts.back() = ids;
  }

  // Tokens of each expert, in token order.
  std::vector<std::vector<std::pair<int64_t, float>>> routed(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < k; ++i) routed[ids[t * k + i]].push_back({t, weights[t * k + i]});
  }
  std::fill(out, out + tokens * hidden, 0.0f);
  std::vector<float> xs, ys;
  for (int64_t e = 0; e < experts; ++e) {
    const auto& list = routed[e];
    if (list.empty()) continue;
    const int64_t n = static_cast<int64_t>(list.size());
    xs.resize(n * hidden);
    ys.resize(n * hidden);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(x + list[i].first * hidden, hidden, xs.data() + i * hidden);
    }
    WS_RETURN_IF_ERROR(
        SwiGluMlp(xs.data(), n, AsLinear(weights_.RoutedExpert(layer, e, MlpMatrix::kGate)),
                  AsLinear(weights_.RoutedExpert(layer, e, MlpMatrix::kUp)),
                  AsLinear(weights_.RoutedExpert(layer, e, MlpMatrix::kDown)), ys.data(), cache()));
    for (int64_t i = 0; i < n; ++i) {
      float* dst = out + list[i].first * hidden;
      const float w = list[i].second;
      for (int64_t c = 0; c < hidden; ++c) dst[c] += ys[i * hidden + c] * w;
    }
  }
  return ops_->AddSharedExperts(layer, x, tokens, out);
}

absl::StatusOr<std::vector<float>> HostModel::Forward(HostSequence& seq,
                                                      absl::Span<const int32_t> tokens, bool decode,
                                                      ForwardTrace* trace) {
  const int64_t count = static_cast<int64_t>(tokens.size());
  const int64_t hidden = config_.hidden_size;
  std::vector<float> logits;
  if (count == 0) return logits;
  seq.Reserve(seq.length() + count);
  std::vector<float> x(count * hidden), h(count * hidden), y(count * hidden);
  WS_RETURN_IF_ERROR(ops_->Embed(tokens, x.data()));
  if (trace != nullptr) trace->hidden_states.push_back(x);
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    ops_->InputNorm(layer, x.data(), count, h.data());
    if (config_.is_mla()) {
      WS_RETURN_IF_ERROR(MlaAttention(seq, layer, h.data(), count, decode, y.data()));
    } else {
      WS_RETURN_IF_ERROR(GqaAttention(seq, layer, h.data(), count, decode, y.data()));
    }
    AddInPlace(x.data(), y.data(), count * hidden);
    ops_->PostAttentionNorm(layer, x.data(), count, h.data());
    if (trace != nullptr) {  // Moe() fills this layer's entries
      trace->router_margins.emplace_back();
      trace->router_experts.emplace_back();
    }
    WS_RETURN_IF_ERROR(Mlp(layer, seq.length(), h.data(), count, y.data(), trace));
    AddInPlace(x.data(), y.data(), count * hidden);
    if (trace != nullptr && layer + 1 < config_.num_layers) trace->hidden_states.push_back(x);
  }
  seq.length_ += count;
  logits.resize(count * config_.vocab_size);
  WS_RETURN_IF_ERROR(ops_->FinalLogits(x.data(), count, logits.data(), h.data()));
  if (trace != nullptr) trace->hidden_states.push_back(h);
  return logits;
}

absl::StatusOr<std::vector<float>> HostModel::Prefill(HostSequence& seq,
                                                      absl::Span<const int32_t> tokens,
                                                      int64_t chunk_tokens, ForwardTrace* trace) {
  if (seq.geometry().num_layers != geometry_.num_layers ||
      seq.geometry().block_tokens != geometry_.block_tokens) {
    return absl::InvalidArgumentError("Prefill: the sequence belongs to another model");
  }
  const int64_t count = static_cast<int64_t>(tokens.size());
  const int64_t chunk = chunk_tokens > 0 ? chunk_tokens : std::max<int64_t>(count, 1);
  std::vector<float> logits;
  logits.reserve(count * config_.vocab_size);
  for (int64_t begin = 0; begin < count; begin += chunk) {
    const int64_t n = std::min(chunk, count - begin);
    ForwardTrace chunk_trace;
    WS_ASSIGN_OR_RETURN(std::vector<float> part,
                        Forward(seq, tokens.subspan(begin, n), /*decode=*/false,
                                trace != nullptr ? &chunk_trace : nullptr));
    logits.insert(logits.end(), part.begin(), part.end());
    if (trace != nullptr) trace->Append(chunk_trace);
  }
  return logits;
}

absl::StatusOr<std::vector<float>> HostModel::Decode(HostSequence& seq, int32_t token,
                                                     ForwardTrace* trace) {
  if (seq.geometry().num_layers != geometry_.num_layers ||
      seq.geometry().block_tokens != geometry_.block_tokens) {
    return absl::InvalidArgumentError("Decode: the sequence belongs to another model");
  }
  const int32_t tokens[1] = {token};
  ForwardTrace step_trace;
  auto logits = Forward(seq, absl::MakeConstSpan(tokens, 1), /*decode=*/true,
                        trace != nullptr ? &step_trace : nullptr);
  if (logits.ok() && trace != nullptr) trace->Append(step_trace);
  return logits;
}

absl::StatusOr<std::vector<float>> HostModel::PromptLogProbs(absl::Span<const int32_t> tokens,
                                                             int64_t chunk_tokens) {
  HostSequence seq = NewSequence();
  WS_ASSIGN_OR_RETURN(std::vector<float> logits, Prefill(seq, tokens, chunk_tokens));
  const int64_t vocab = config_.vocab_size;
  LogSoftmax(logits.data(), static_cast<int64_t>(tokens.size()), vocab, logits.data());
  std::vector<float> result(tokens.size(), std::nanf(""));
  for (size_t i = 1; i < tokens.size(); ++i) result[i] = logits[(i - 1) * vocab + tokens[i]];
  return result;
}

absl::StatusOr<GreedyResult> HostModel::Greedy(absl::Span<const int32_t> prompt, int64_t steps,
                                               int64_t chunk_tokens) {
  if (prompt.empty()) return absl::InvalidArgumentError("Greedy: empty prompt");
  HostSequence seq = NewSequence();
  WS_ASSIGN_OR_RETURN(std::vector<float> logits, Prefill(seq, prompt, chunk_tokens));
  const int64_t vocab = config_.vocab_size;
  std::vector<float> last(logits.end() - vocab, logits.end());
  GreedyResult result;
  for (int64_t step = 0; step < steps; ++step) {
    LogSoftmax(last.data(), 1, vocab, last.data());
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; ++i) {
      if (last[i] > last[best]) best = i;
    }
    float second = -INFINITY;
    for (int32_t i = 0; i < vocab; ++i) {
      if (i != best) second = std::max(second, last[i]);
    }
    result.tokens.push_back(best);
    result.logprobs.push_back(last[best]);
    result.margins.push_back(last[best] - second);
    if (step + 1 < steps) {
      WS_ASSIGN_OR_RETURN(last, Decode(seq, best));
    }
  }
  return result;
}

}  // namespace writescope::kernels::model
