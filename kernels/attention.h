// Attention op contracts shared by the reference, the CPU backend and (through
// kernels/cuda/cuda_attention.h) the CUDA backend.
//
// Every kernel produces a partial attention state (kernels/attention_state.h):
// o fp32 normalized, lse fp32 natural log of sum exp(scaled score), empty = (-inf, 0).
//
// KV is read in place through the block layout of common/kv_layout.h. A call gets, per
// sequence, the base pointers of the (slot, layer) tiles it covers, in any order; only
// the LAST tile of a list may be partially filled (`last_block_tokens` valid tokens).
// Decode attends all listed keys; causality only matters for prefill, where each block
// carries the absolute position of its token 0.
//
// Q is bf16 (the GPU projects it in bf16 and ships it as such), so bf16 x bf16 products
// are exact in fp32 and every backend agrees with the double reference to fp32 rounding.
// GQA: query head h reads kv head h / (num_q_heads / num_kv_heads) (HF repeat_kv order).
#ifndef WRITESCOPE_KERNELS_ATTENTION_H_
#define WRITESCOPE_KERNELS_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"

namespace writescope::kernels {

// The tiles of one sequence for one layer.
struct KvBlockList {
  const uint16_t* const* blocks = nullptr;  // [num_blocks] -> (slot, layer) tile bases
  int32_t num_blocks = 0;
  int32_t last_block_tokens = 0;  // valid tokens of blocks[num_blocks - 1], 1..block_tokens
  // Prefill only: absolute position of token 0 of each block, [num_blocks].
  const int64_t* block_positions = nullptr;

  int64_t NumTokens(int32_t block_tokens) const {
    return num_blocks == 0 ? 0 : int64_t{num_blocks - 1} * block_tokens + last_block_tokens;
  }
  // Valid tokens of block i.
  int32_t BlockTokens(int32_t i, int32_t block_tokens) const {
    return i + 1 == num_blocks ? last_block_tokens : block_tokens;
  }
};

struct GqaShape {
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_tokens = 0;  // tokens per tile (KvGeometry::block_tokens)
  float softmax_scale = 0;   // usually 1/sqrt(head_dim)

  int32_t group_size() const { return num_q_heads / num_kv_heads; }
  // Tile layout (common/kv_layout.h): K [kv_heads][block_tokens][head_dim], then V.
  int64_t k_offset(int32_t kv_head) const { return int64_t{kv_head} * block_tokens * head_dim; }
  int64_t v_offset(int32_t kv_head) const {
    return int64_t{num_kv_heads + kv_head} * block_tokens * head_dim;
  }
  absl::Status Validate() const;
};

// One decode query per sequence against the sequence's listed tiles.
struct GqaDecodeArgs {
  GqaShape shape;
  int32_t num_seqs = 0;
  const uint16_t* q = nullptr;        // [num_seqs][num_q_heads][head_dim] bf16
  const KvBlockList* seqs = nullptr;  // [num_seqs]
  float* o = nullptr;                 // [num_seqs][num_q_heads][head_dim]
  float* lse = nullptr;               // [num_seqs][num_q_heads]
};

// Causal chunked prefill of one sequence: query i sits at absolute position
// query_position0 + i and attends every listed key at a position <= its own (keys of
// earlier chunks and of its own chunk, wherever their blocks were placed). A query
// that sees no listed key gets the empty state.
struct GqaPrefillArgs {
  GqaShape shape;
  int32_t num_queries = 0;
  int64_t query_position0 = 0;
  const uint16_t* q = nullptr;  // [num_queries][num_q_heads][head_dim] bf16
  KvBlockList keys;             // block_positions required
  float* o = nullptr;           // [num_queries][num_q_heads][head_dim]
  float* lse = nullptr;         // [num_queries][num_q_heads]
};

// MLA, absorbed form (DeepSeek-V2-Lite: 16 heads, kv_lora_rank 512, rope_dim 64). The
// query of head h is [q_nope W_UK (kv_lora_rank) | q_pe (rope_dim)]; the score of
// token j is q . latent_j over all kv_lora_rank + rope_dim values, times
// softmax_scale; the output is sum_j p_j * latent_j[0:kv_lora_rank] (the caller applies
// W_UV). Tile layout: latent [block_tokens][kv_lora_rank + rope_dim].
struct MlaShape {
  int32_t num_heads = 16;
  int32_t kv_lora_rank = 512;
  int32_t rope_dim = 64;
  int32_t block_tokens = 0;
  float softmax_scale = 0;  // DeepSeek: 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) (* mscale)

  int32_t row_dim() const { return kv_lora_rank + rope_dim; }
  absl::Status Validate() const;
};

struct MlaDecodeArgs {
  MlaShape shape;
  int32_t num_seqs = 0;
  const uint16_t* q = nullptr;        // [num_seqs][num_heads][kv_lora_rank + rope_dim] bf16
  const KvBlockList* seqs = nullptr;  // [num_seqs]
  float* o = nullptr;                 // [num_seqs][num_heads][kv_lora_rank]
  float* lse = nullptr;               // [num_seqs][num_heads]
};

// Causal chunked prefill of one sequence, MLA absorbed form: query i (its 16 heads' rows as
// in MlaDecodeArgs) sits at absolute position query_position0 + i and attends every listed
// latent row at a position <= its own, as GqaPrefillArgs does. The blocks must hold
// disjoint position ranges, and a partial last block the highest positions (as in a
// sequence's KV): then every query sees a prefix of the blocks in position order, all
// whole but the last (the CPU backend refuses other lists with INVALID_ARGUMENT).
struct MlaPrefillArgs {
  MlaShape shape;
  int32_t num_queries = 0;
  int64_t query_position0 = 0;
  const uint16_t* q = nullptr;  // [num_queries][num_heads][kv_lora_rank + rope_dim] bf16
  KvBlockList keys;             // block_positions required
  float* o = nullptr;           // [num_queries][num_heads][kv_lora_rank]
  float* lse = nullptr;         // [num_queries][num_heads]
};

absl::Status ValidateBlockList(const KvBlockList& list, int32_t block_tokens, bool positions);

}  // namespace writescope::kernels

#endif  // WRITESCOPE_KERNELS_ATTENTION_H_
