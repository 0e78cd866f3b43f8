#include "kernels/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/status.h"
#include "kernels/attention_state.h"
#include "kernels/bf16.h"

namespace writescope::kernels {
namespace {

// One key: its row for the score and its row for the output.
struct KeyRef {
  const uint16_t* k;
  const uint16_t* v;
};

// Attends q[score_dim] to `keys`; writes o[out_dim] and *lse.
void AttendOne(const uint16_t* q, int32_t score_dim, int32_t out_dim, double scale,
               const std::vector<KeyRef>& keys, float* o, float* lse) {
  if (keys.empty()) {
    std::fill(o, o + out_dim, 0.0f);
    *lse = kEmptyLse;
    return;
  }
  std::vector<double> scores(keys.size());
  double m = -INFINITY;
  for (size_t j = 0; j < keys.size(); ++j) {
    double dot = 0;
    for (int32_t d = 0; d < score_dim; ++d) {
      dot += double{Bf16ToFloat(q[d])} * double{Bf16ToFloat(keys[j].k[d])};
    }
    scores[j] = dot * scale;
    m = std::max(m, scores[j]);
  }
  double sum = 0;
  std::vector<double> acc(out_dim, 0.0);
  for (size_t j = 0; j < keys.size(); ++j) {
    const double p = std::exp(scores[j] - m);
    sum += p;
    for (int32_t d = 0; d < out_dim; ++d) acc[d] += p * double{Bf16ToFloat(keys[j].v[d])};
  }
  for (int32_t d = 0; d < out_dim; ++d) o[d] = static_cast<float>(acc[d] / sum);
  *lse = static_cast<float>(m + std::log(sum));
}

}  // namespace

absl::Status ReferenceGqaDecode(const GqaDecodeArgs& args) {
  const GqaShape& s = args.shape;
  WS_RETURN_IF_ERROR(s.Validate());
  const int32_t group = s.group_size();
  std::vector<KeyRef> keys;
  for (int32_t seq = 0; seq < args.num_seqs; ++seq) {
    const KvBlockList& list = args.seqs[seq];
    WS_RETURN_IF_ERROR(ValidateBlockList(list, s.block_tokens, false));
    for (int32_t h = 0; h < s.num_q_heads; ++h) {
      const int32_t kvh = h / group;
      keys.clear();
      for (int32_t b = 0; b < list.num_blocks; ++b) {
        for (int32_t t = 0; t < list.BlockTokens(b, s.block_tokens); ++t) {
          keys.push_back({list.blocks[b] + s.k_offset(kvh) + int64_t{t} * s.head_dim,
                          list.blocks[b] + s.v_offset(kvh) + int64_t{t} * s.head_dim});
        }
      }
      const int64_t row = int64_t{seq} * s.num_q_heads + h;
      AttendOne(args.q + row * s.head_dim, s.head_dim, s.head_dim, s.softmax_scale, keys,
                args.o + row * s.head_dim, args.lse + row);
    }
  }
  return absl::OkStatus();
}

absl::Status ReferenceGqaPrefill(const GqaPrefillArgs& args) {
  const GqaShape& s = args.shape;
  WS_RETURN_IF_ERROR(s.Validate());
  WS_RETURN_IF_ERROR(ValidateBlockList(args.keys, s.block_tokens, true));
  const int32_t group = s.group_size();
  const KvBlockList& list = args.keys;
  std::vector<KeyRef> keys;
  for (int32_t i = 0; i < args.num_queries; ++i) {
    const int64_t position = args.query_position0 + i;
    for (int32_t h = 0; h < s.num_q_heads; ++h) {
      const int32_t kvh = h / group;
      keys.clear();
      for (int32_t b = 0; b < list.num_blocks; ++b) {
        for (int32_t t = 0; t < list.BlockTokens(b, s.block_tokens); ++t) {
          if (list.block_positions[b] + t > position) break;
          keys.push_back({list.blocks[b] + s.k_offset(kvh) + int64_t{t} * s.head_dim,
                          list.blocks[b] + s.v_offset(kvh) + int64_t{t} * s.head_dim});
        }
      }
      const int64_t row = int64_t{i} * s.num_q_heads + h;
      AttendOne(args.q + row * s.head_dim, s.head_dim, s.head_dim, s.softmax_scale, keys,
                args.o + row * s.head_dim, args.lse + row);
    }
  }
  return absl::OkStatus();
}

absl::Status ReferenceMlaDecode(const MlaDecodeArgs& args) {
  const MlaShape& s = args.shape;
  WS_RETURN_IF_ERROR(s.Validate());
  std::vector<KeyRef> keys;
  for (int32_t seq = 0; seq < args.num_seqs; ++seq) {
    const KvBlockList& list = args.seqs[seq];
    WS_RETURN_IF_ERROR(ValidateBlockList(list, s.block_tokens, false));
    keys.clear();
    for (int32_t b = 0; b < list.num_blocks; ++b) {
      for (int32_t t = 0; t < list.BlockTokens(b, s.block_tokens); ++t) {
        const uint16_t* row = list.blocks[b] + int64_t{t} * s.row_dim();
        keys.push_back({row, row});  // the latent is both key (all dims) and value (rank)
      }
    }
    for (int32_t h = 0; h < s.num_heads; ++h) {
      const int64_t r = int64_t{seq} * s.num_heads + h;
      AttendOne(args.q + r * s.row_dim(), s.row_dim(), s.kv_lora_rank, s.softmax_scale, keys,
                args.o + r * s.kv_lora_rank, args.lse + r);
    }
  }
  return absl::OkStatus();
}

absl::Status ReferenceMlaPrefill(const MlaPrefillArgs& args) {
  const MlaShape& s = args.shape;
  WS_RETURN_IF_ERROR(s.Validate());
  WS_RETURN_IF_ERROR(ValidateBlockList(args.keys, s.block_tokens, true));
  const KvBlockList& list = args.keys;
  std::vector<KeyRef> keys;
  for (int32_t i = 0; i < args.num_queries; ++i) {
    const int64_t position = args.query_position0 + i;
    keys.clear();
    for (int32_t b = 0; b < list.num_blocks; ++b) {
      for (int32_t t = 0; t < list.BlockTokens(b, s.block_tokens); ++t) {
        if (list.block_positions[b] + t > position) break;
        const uint16_t* row = list.blocks[b] + int64_t{t} * s.row_dim();
        keys.push_back({row, row});
      }
    }
    for (int32_t h = 0; h < s.num_heads; ++h) {
      const int64_t r = int64_t{i} * s.num_heads + h;
      AttendOne(args.q + r * s.row_dim(), s.row_dim(), s.kv_lora_rank, s.softmax_scale, keys,
                args.o + r * s.kv_lora_rank, args.lse + r);
    }
  }
  return absl::OkStatus();
}

}  // namespace writescope::kernels
