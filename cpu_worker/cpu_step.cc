#include "cpu_worker/cpu_step.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/process.h"
#include "common/status.h"
#include "kernels/attention.h"
#include "kernels/model/decoder_ops.h"

namespace writescope::cpu {
namespace {

// The tiles of one sequence's CPU blocks for one layer (all full blocks).
struct Tiles {
  std::vector<const uint16_t*> blocks;
  std::vector<int64_t> positions;
  kernels::KvBlockList list;
};

void MakeTiles(const KvRegionView& region, const std::vector<PlacedSlot>& slots, uint32_t layer,
               uint32_t block_tokens, Tiles* tiles) {
  tiles->blocks.clear();
  tiles->positions.clear();
  for (const PlacedSlot& placed : slots) {
    tiles->blocks.push_back(
        reinterpret_cast<const uint16_t*>(region.LayerBlock(placed.slot, layer).data()));
    tiles->positions.push_back(static_cast<int64_t>(placed.first_token));
  }
  tiles->list.blocks = tiles->blocks.data();
  tiles->list.num_blocks = static_cast<int32_t>(slots.size());
  tiles->list.last_block_tokens = slots.empty() ? 0 : static_cast<int32_t>(block_tokens);
  tiles->list.block_positions = tiles->positions.data();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuStep>> CpuStep::Create(const ModelConfig& model,
                                                         const KvCacheConfig& kv,
                                                         const ModelWeights& weights,
                                                         const KvRegionView& region,
                                                         const CpuStepOptions& options) {
  auto step = std::unique_ptr<CpuStep>(new CpuStep(model, kv, region, options));
  step->dims_ = StepDimsFor(model);
  step->softmax_scale_ = kernels::model::AttentionSoftmaxScale(
      model, kernels::model::MlaSoftmaxScale::kWithYarnMscale);
  step->experts_.resize(model.num_layers);
  kernels::experts::CpuExpertsOptions experts_options = options.experts;
  experts_options.prepack = options.prepack_policy == "on" ||
                            (options.prepack_policy == "auto" &&
                             weights.total_bytes() <= kPrepackLimitBytes);
  for (int64_t layer = 0; layer < model.num_layers; ++layer) {
    if (!model.IsMoeLayer(layer)) continue;
    WS_ASSIGN_OR_RETURN(step->experts_[layer],
                        kernels::experts::CpuExperts::ForLayer(weights, layer, experts_options));
  }
  return step;
}

uint64_t CpuStep::owned_expert_bytes() const {
  uint64_t bytes = 0;
  for (const auto& experts : experts_) {
    if (experts != nullptr) bytes += experts->owned_weight_bytes();
  }
  return bytes;
}

std::string CpuStep::experts_description() const {
  for (const auto& experts : experts_) {
    if (experts == nullptr) continue;
    return absl::StrCat(experts->bf16() ? "bf16" : "f32",
                        experts->prepacked() ? ", prepacked" : ", in place", ", oneDNN ",
                        experts->isa());
  }
  return "none (dense model)";
}

absl::Status CpuStep::Attention(const StepLayout& layout, uint32_t layer,
                                absl::Span<const std::byte> q, absl::Span<std::byte> out,
                                kernels::CpuAttentionPhases* phases) {
  const uint64_t rows = layout.cpu_tokens;
  if (q.size() != dims_.attention_bytes(rows) || out.size() != dims_.attention_result_bytes(rows)) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, ": attention message of ",
                                                   q.size(), " bytes for ", rows, " tokens"));
  }
  if (layer >= kv_.geometry.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " out of range"));
  }
  const int64_t heads = dims_.num_heads;
  const auto* q_all = reinterpret_cast<const uint16_t*>(q.data());
  auto* o_all = reinterpret_cast<float*>(out.data());
  float* lse_all = o_all + rows * heads * dims_.o_dim;
  const uint32_t bt = kv_.geometry.block_tokens;
  const kernels::CpuAttentionOptions& options = options_.attention;
  kernels::CpuAttentionOptions decode_options = options;  // the decode call's: its phases
  decode_options.phases = phases;

  for (const StepSequenceLayout& s : layout.sequences) {
    for (const PlacedSlot& placed : s.cpu_blocks) WS_RETURN_IF_ERROR(region_.Check(placed.slot, layer));
  }
  if (!model_.is_mla()) {
    kernels::GqaShape shape;
    shape.num_q_heads = static_cast<int32_t>(heads);
    shape.num_kv_heads = static_cast<int32_t>(model_.num_kv_heads);
    shape.head_dim = static_cast<int32_t>(model_.head_dim);
    shape.block_tokens = static_cast<int32_t>(bt);
    shape.softmax_scale = softmax_scale_;
    // Decode sequences in one batched call; their rows are not contiguous in general, so
    // gather them.
    std::vector<Tiles> decode_tiles;
    std::vector<kernels::KvBlockList> lists;
    std::vector<uint16_t> q_decode;
    std::vector<const StepSequenceLayout*> decode;
    for (const StepSequenceLayout& s : layout.sequences) {
      if (s.cpu_blocks.empty() || s.prefill) continue;
      decode.push_back(&s);
    }
    if (!decode.empty()) {
      const int64_t row = heads * dims_.q_dim;
      decode_tiles.resize(decode.size());
      q_decode.resize(decode.size() * row);
      for (size_t i = 0; i < decode.size(); ++i) {
        MakeTiles(region_, decode[i]->cpu_blocks, layer, bt, &decode_tiles[i]);
        lists.push_back(decode_tiles[i].list);
        std::memcpy(q_decode.data() + i * row, q_all + decode[i]->cpu_offset * row, row * 2);
      }
      std::vector<float> o(decode.size() * heads * dims_.o_dim), lse(decode.size() * heads);
      kernels::GqaDecodeArgs args;
      args.shape = shape;
      args.num_seqs = static_cast<int32_t>(decode.size());
      args.q = q_decode.data();
      args.seqs = lists.data();
      args.o = o.data();
      args.lse = lse.data();
      WS_RETURN_IF_ERROR(kernels::CpuGqaDecode(args, decode_options));
      for (size_t i = 0; i < decode.size(); ++i) {
        const uint64_t r = decode[i]->cpu_offset;
        std::memcpy(o_all + r * heads * dims_.o_dim, o.data() + i * heads * dims_.o_dim,
                    heads * dims_.o_dim * 4);
        std::memcpy(lse_all + r * heads, lse.data() + i * heads, heads * 4);
      }
    }
    for (const StepSequenceLayout& s : layout.sequences) {
      if (s.cpu_blocks.empty() || !s.prefill) continue;
      Tiles tiles;
      MakeTiles(region_, s.cpu_blocks, layer, bt, &tiles);
      kernels::GqaPrefillArgs args;
      args.shape = shape;
      args.num_queries = static_cast<int32_t>(s.num_tokens);
      args.query_position0 = static_cast<int64_t>(s.position);
      args.q = q_all + s.cpu_offset * heads * dims_.q_dim;
      args.keys = tiles.list;
      args.o = o_all + s.cpu_offset * heads * dims_.o_dim;
      args.lse = lse_all + s.cpu_offset * heads;
      WS_RETURN_IF_ERROR(kernels::CpuGqaPrefill(args, options));
    }
    return absl::OkStatus();
  }
  // MLA: one decode "sequence" per query row; rows of one sequence share its block list.
  std::vector<Tiles> tiles(layout.sequences.size());
  std::vector<kernels::KvBlockList> lists(rows);
  for (size_t i = 0; i < layout.sequences.size(); ++i) {
    const StepSequenceLayout& s = layout.sequences[i];
    if (s.cpu_blocks.empty()) continue;
    MakeTiles(region_, s.cpu_blocks, layer, bt, &tiles[i]);
    for (uint32_t t = 0; t < s.num_tokens; ++t) lists[s.cpu_offset + t] = tiles[i].list;
  }
  if (rows == 0) return absl::OkStatus();
  kernels::MlaDecodeArgs args;
  args.shape.num_heads = static_cast<int32_t>(heads);
  args.shape.kv_lora_rank = static_cast<int32_t>(model_.kv_lora_rank);
  args.shape.rope_dim = static_cast<int32_t>(model_.qk_rope_head_dim);
  args.shape.block_tokens = static_cast<int32_t>(bt);
  args.shape.softmax_scale = softmax_scale_;
  args.num_seqs = static_cast<int32_t>(rows);
  args.q = q_all;
  args.seqs = lists.data();
  args.o = o_all;
  args.lse = lse_all;
  return kernels::CpuMlaDecode(args, decode_options);
}

absl::StatusOr<internal::PathProbeResponse> CpuStep::ProbeAttention(
    const internal::PathProbeRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  const uint32_t bt = kv_.geometry.block_tokens;
  const uint64_t slots = region_.num_slots();
  WS_ASSIGN_OR_RETURN(
      const std::vector<uint64_t> point_blocks,  // each point's tokens in whole blocks
      PathProbeBlocks(request, bt, kv_.max_sequences, slots,
                      absl::StrCat("the ", slots, " slots of the CPU-compute region")));
  const uint32_t num_layers = kv_.geometry.num_layers;
  const uint32_t layers =
      request.layers() == 0 ? num_layers : std::min(request.layers(), num_layers);
  internal::PathProbeResponse response;
  // Each run reads the blocks after the last run's (around the region): where the region is
  // larger than the caches (the H200 host's L3 holds 300 MiB, the probe's smaller points
  // less), a run reads from DRAM, as a step's attention does once the other layers' KV and
  // the experts' weights have passed through the caches since its previous read.
  // Two passes over the points, smallest first and then largest first, and each point's
  // fastest run: a transient load at start-up (run 133: the first two points 4-7x slow, the
  // fit's c_C 3.1 ms) then costs a point one pass, not the line.
  uint64_t first_slot = 0;
  std::vector<double> best_ns(point_blocks.size(), std::numeric_limits<double>::infinity());
  std::vector<double> worst_ns(point_blocks.size(), 0.0);
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t k = 0; k < point_blocks.size(); ++k) {
      const size_t i = pass == 0 ? k : point_blocks.size() - 1 - k;
      const uint64_t blocks = point_blocks[i];
      const uint64_t sequences = std::min<uint64_t>(request.sequences(), blocks);
      // Small made-up queries (bf16; the values do not change the work).
      std::vector<uint16_t> q(dims_.attention_bytes(sequences) / 2);
      for (size_t j = 0; j < q.size(); ++j) q[j] = static_cast<uint16_t>(0x3c00 + j % 7);
      std::vector<std::byte> out(dims_.attention_result_bytes(sequences));
      const absl::Span<const std::byte> q_bytes(reinterpret_cast<const std::byte*>(q.data()),
                                                q.size() * 2);
      for (uint32_t run = 0; run <= request.repeats(); ++run) {  // run 0: the warm-up
        const StepLayout layout = PathProbeLayout(blocks, request.sequences(), bt,
                                                  KvRegion::kCpuCompute, first_slot, slots);
        first_slot = (first_slot + blocks) % slots;
        const auto run_start = std::chrono::steady_clock::now();
        for (uint32_t layer = 0; layer < layers; ++layer) {
          WS_RETURN_IF_ERROR(Attention(layout, layer, q_bytes, absl::MakeSpan(out)));
        }
        if (run == 0) continue;
        const double ns = MillisSince(run_start) * 1e6 / layers;
        best_ns[i] = std::min(best_ns[i], ns);
        worst_ns[i] = std::max(worst_ns[i], ns);
      }
    }
  }
  for (size_t i = 0; i < point_blocks.size(); ++i) {
    internal::PathProbePoint* point = response.add_points();
    point->set_tokens(point_blocks[i] * bt);
    point->set_ns_per_layer(best_ns[i]);
    point->set_slowest_ns_per_layer(worst_ns[i]);
  }
  response.set_ms(MillisSince(start));
  return response;
}

absl::StatusOr<double> CpuStep::MeasureExpertCost(int64_t tokens) {
  kernels::experts::CpuExperts* experts = nullptr;
  for (const auto& layer : experts_) {
    if (layer != nullptr) {
      experts = layer.get();
      break;
    }
  }
  if (experts == nullptr || tokens <= 0) return 0.0;
  const int64_t hidden = dims_.hidden, top_k = dims_.top_k, num_experts = experts->num_experts();
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal;
  std::vector<float> x(tokens * hidden), y(tokens * hidden), weights(tokens * top_k);
  std::vector<int32_t> ids(tokens * top_k);
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> order(num_experts);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    for (int64_t k = 0; k < top_k; ++k) {  // partial Fisher-Yates: k distinct experts
      std::swap(order[k], order[k + rng() % (num_experts - k)]);
      ids[t * top_k + k] = order[k];
      weights[t * top_k + k] = 1.0f / static_cast<float>(top_k);
    }
  }
  WS_RETURN_IF_ERROR(experts->Forward(x.data(), tokens, top_k, ids.data(), weights.data(), y.data()));
  const auto start = std::chrono::steady_clock::now();
  WS_RETURN_IF_ERROR(experts->Forward(x.data(), tokens, top_k, ids.data(), weights.data(), y.data()));
  return MillisSince(start) / static_cast<double>(tokens);
}

absl::Status CpuStep::Experts(const StepLayout& layout, uint32_t layer,
                              absl::Span<const std::byte> in, absl::Span<std::byte> out) {
  const uint64_t tokens = layout.total_tokens;
  if (layer >= experts_.size() || experts_[layer] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " has no routed experts"));
  }
  if (in.size() != dims_.experts_bytes(tokens) || out.size() != dims_.experts_result_bytes(tokens)) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, ": experts message of ",
                                                   in.size(), " bytes for ", tokens, " tokens"));
  }
  const auto* h = reinterpret_cast<const float*>(in.data());
  const auto* ids = reinterpret_cast<const int32_t*>(h + tokens * dims_.hidden);
  const auto* weights = reinterpret_cast<const float*>(ids + tokens * dims_.top_k);
  return experts_[layer]->Forward(h, static_cast<int64_t>(tokens), dims_.top_k, ids, weights,
                                  reinterpret_cast<float*>(out.data()));
}

}  // namespace writescope::cpu
