// Internal to kernels/cuda: plain parameter blocks shared by cuda_attention.cc (host
// planning, Status) and the .cu files (kernels). No absl and no CUDA headers, so both
// nvcc and the host compiler read it. Launchers return a cudaError_t as int.
#ifndef WRITESCOPE_KERNELS_CUDA_LAUNCH_H_
#define WRITESCOPE_KERNELS_CUDA_LAUNCH_H_

#include <cstdint>

namespace writescope::kernels::cuda::internal {

struct KvParams {
  const uint16_t* tiles;
  const uint16_t* const* tile_ptrs;  // or, when set, tile i's base is tile_ptrs[i]
  const int32_t* seq_tile_begin;
  const int32_t* seq_last_tile_tokens;
  const uint16_t* window;
  int32_t window_capacity;
  const int32_t* seq_window_slot;
  const int32_t* seq_window_tokens;
  int64_t tile_values;    // bf16 values of one ping-pong tile
  int64_t window_values;  // bf16 values of one window slot
};

struct GqaParams {
  int32_t num_seqs, num_q_heads, num_kv_heads, head_dim, block_tokens;
  float scale_log2;  // softmax_scale * log2(e): scores are kept in base 2 inside
  const uint16_t* q;
  KvParams kv;
  int32_t num_splits, tokens_per_split;
  float* part_o;    // [num_splits][num_seqs * num_q_heads][head_dim]
  float* part_lse;  // [num_splits][num_seqs * num_q_heads], natural log
  float* o;
  float* lse;
};

struct MlaParams {
  int32_t num_seqs, num_heads, kv_lora_rank, rope_dim, block_tokens;
  float scale_log2;
  const uint16_t* q;
  KvParams kv;
  int32_t num_splits, tokens_per_split;
  float* part_o;    // [num_splits][num_seqs * num_heads][kv_lora_rank]
  float* part_lse;
  float* o;
  float* lse;
};

// Causal prefill of one sequence's chunk over a list of tiles (gqa_prefill.cu).
struct GqaPrefillParams {
  int32_t num_queries, num_q_heads, num_kv_heads, head_dim, block_tokens, num_tiles;
  int64_t query_position0;
  float scale_log2;
  const uint16_t* q;              // [num_queries][num_q_heads][head_dim]
  const uint16_t* const* tiles;   // [num_tiles] tile bases (common/kv_layout.h)
  const int64_t* tile_positions;  // [num_tiles] absolute position of token 0
  const int32_t* tile_tokens;     // [num_tiles] valid tokens
  float* o;                       // [num_queries][num_q_heads][head_dim]
  float* lse;                     // [num_queries][num_q_heads], natural log
};

// Whether LaunchGqaDecode takes the tensor-core path for this shape (else SIMT).
bool GqaDecodeUsesTensorCores(int32_t head_dim, int32_t group);

// Split size (tokens, a multiple of `multiple`) for a split-KV decode whose grid has
// `pairs` CTAs per split, `ctas_per_sm` resident per SM. Measured on the H200
// (docs/notes/cuda_decode_tuning.md): a partial last wave costs most, so
//   - few pairs (batch 1-8): one wave, up to ctas_per_sm * SMs CTAs in all;
//   - many pairs: about `target_waves` waves, where the tail is a small share;
// splits of at least `min_tokens` (each split's partial is written and merged) and at
// most `max_splits`.
inline int32_t SplitTokens(int32_t max_seq_tokens, int64_t pairs, int32_t sm_count,
                           int32_t max_splits, int32_t ctas_per_sm, int32_t target_waves,
                           int32_t min_tokens, int32_t multiple) {
  const int64_t resident = int64_t{sm_count} * ctas_per_sm;
  if (pairs < 1) pairs = 1;
  int64_t splits = 2 * pairs <= resident ? resident / pairs
                                         : (target_waves * resident + pairs - 1) / pairs;
  if (splits < 1) splits = 1;
  int64_t per = (int64_t{max_seq_tokens} + splits - 1) / splits;
  per = per < min_tokens ? min_tokens : per;
  const int64_t floor_for_max = (int64_t{max_seq_tokens} + max_splits - 1) / max_splits;
  per = per < floor_for_max ? floor_for_max : per;
  return static_cast<int32_t>((per + multiple - 1) / multiple * multiple);
}

// The tensor-core GQA decode (gqa_decode.cu): 3 CTAs per SM, ~4 waves when many pairs
// (pairs = num_seqs * num_kv_heads), splits of >= 256 tokens (a split's partial costs
// ~8 KB of writes and reads per kv head, small against its >= 128 KB of K/V).
constexpr int32_t kGqaResidentCtasPerSm = 3;
constexpr int32_t kGqaTargetWaves = 4;
constexpr int32_t kGqaMinSplitTokens = 256;
inline int32_t GqaTensorCoreTokensPerSplit(int32_t max_seq_tokens, int64_t pairs,
                                           int32_t sm_count, int32_t max_splits) {
  return SplitTokens(max_seq_tokens, pairs, sm_count, max_splits, kGqaResidentCtasPerSm,
                     kGqaTargetWaves, kGqaMinSplitTokens, 64);
}

// The tensor-core MLA decode (mla_decode.cu): 2 CTAs per SM (86 KB of shared memory
// each), one CTA per (split, seq); splits of >= 256 tokens (a split's partial is 32 KB,
// against its >= 288 KB of latent rows).
constexpr int32_t kMlaResidentCtasPerSm = 2;
constexpr int32_t kMlaTargetWaves = 4;
constexpr int32_t kMlaMinSplitTokens = 256;
inline int32_t MlaTensorCoreTokensPerSplit(int32_t max_seq_tokens, int64_t num_seqs,
                                           int32_t sm_count, int32_t max_splits) {
  return SplitTokens(max_seq_tokens, num_seqs, sm_count, max_splits, kMlaResidentCtasPerSm,
                     kMlaTargetWaves, kMlaMinSplitTokens, 32);
}

int LaunchGqaDecode(const GqaParams& p, void* stream);
int LaunchMlaDecode(const MlaParams& p, void* stream);
// Returns cudaErrorNotSupported for a head_dim without a compiled kernel (64, 128).
int LaunchGqaPrefill(const GqaPrefillParams& p, void* stream);
// Merges `num_parts` partials laid out [num_parts][rows][dim] into out.
int LaunchMergeSplits(const float* part_o, const float* part_lse, int32_t num_parts,
                      int64_t rows, int32_t dim, float* o, float* lse, void* stream);
int LaunchMergeTwo(const float* o_a, const float* lse_a, const float* o_b, const float* lse_b,
                   float* o_out, float* lse_out, int64_t rows, int32_t dim, void* stream);

}  // namespace writescope::kernels::cuda::internal

#endif  // WRITESCOPE_KERNELS_CUDA_LAUNCH_H_
