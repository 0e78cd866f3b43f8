// Internal to kernels/cuda: plain parameter blocks shared by cuda_attention.cc (host
// planning, Status) and the .cu files (kernels). No absl and no CUDA headers, so both
// nvcc and the host compiler read it. Launchers return a cudaError_t as int.
#ifndef WRITESCOPE_KERNELS_CUDA_LAUNCH_H_
#define WRITESCOPE_KERNELS_CUDA_LAUNCH_H_

#include <cstdint>

namespace writescope::kernels::cuda::internal {

// One sequence's lists as a launch carries them in its parameters (KvParams::inline_lists).
struct InlineSeqLists {
  int32_t tile_begin, tile_count, last_tile_tokens, window_slot, window_tokens;
};

// Launches of at most this many sequences carry their lists inline (cuda_attention.h
// HostSeqLists): 80 bytes of parameters.
constexpr int32_t kInlineSeqs = 4;

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
  // Sequences [0, inline_seqs) read their lists from inline_lists (kernel parameters, with
  // the values the four device lists above hold), not from device memory; 0: none.
  int32_t inline_seqs;
  InlineSeqLists inline_lists[kInlineSeqs];
};

// The GQA tensor-core decode kernels (gqa_decode.cu; GqaParams::kernel):
//   kGqaRegisters: each warp loads its steps' K/V rows into registers (__ldg), 3 CTAs per SM;
//   kGqaBulk4: a producer warp stages 64-token K/V runs in shared memory by bulk copies
//     (cp.async.bulk, counted on mbarriers), a 128 KB ring (4 stages at head_dim 128, 8 at
//     64), 1 CTA per SM;
//   kGqaBulk3x2: the same with a 96 KB ring, 2 CTAs per SM.
enum GqaKernel : int32_t { kGqaRegisters = 0, kGqaBulk4 = 1, kGqaBulk3x2 = 2 };

struct GqaParams {
  int32_t num_seqs, num_q_heads, num_kv_heads, head_dim, block_tokens;
  float scale_log2;  // softmax_scale * log2(e): scores are kept in base 2 inside
  const uint16_t* q;
  KvParams kv;
  int32_t num_splits, tokens_per_split;
  int32_t kernel = kGqaRegisters;  // GqaKernel: the tensor-core kernel (SIMT shapes ignore it)
  float* part_o;    // [num_splits][num_seqs * num_q_heads][head_dim]
  float* part_lse;  // [num_splits][num_seqs * num_q_heads], natural log
  float* o;
  float* lse;
  uint64_t* timeline = nullptr;  // cuda_attention.h GqaGpuDecodeArgs::timeline
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

// Causal MLA (absorbed) prefill of one sequence's chunk over a list of tiles (mla_prefill.cu);
// the fields mean what GqaPrefillParams' do.
struct MlaPrefillParams {
  int32_t num_queries, num_heads, kv_lora_rank, rope_dim, block_tokens, num_tiles;
  int64_t query_position0;
  float scale_log2;
  const uint16_t* q;              // [num_queries][num_heads][kv_lora_rank + rope_dim]
  const uint16_t* const* tiles;   // [num_tiles] tile bases (latent [block_tokens][row])
  const int64_t* tile_positions;  // [num_tiles] absolute position of token 0
  const int32_t* tile_tokens;     // [num_tiles] valid tokens
  float* o;                       // [num_queries][num_heads][kv_lora_rank]
  float* lse;                     // [num_queries][num_heads], natural log
};

// Whether LaunchGqaDecode takes the tensor-core path for this shape (else SIMT).
bool GqaDecodeUsesTensorCores(int32_t head_dim, int32_t group);

// How a tensor-core decode kernel wants its keys split: `ctas_per_sm` of its CTAs are
// resident per SM, about `target_waves` waves when there are many pairs, splits of at least
// `min_tokens` (each split's partial is written and merged), a multiple of `multiple`.
struct SplitRule {
  int32_t ctas_per_sm, target_waves, min_tokens, multiple;
  // > 0: first about one CTA per SM (SMs / pairs splits a pair, no minimum but `multiple`)
  // for at most half as many pairs as SMs, where that makes splits of at most this many
  // tokens; 0: never.
  int32_t one_cta_max_tokens = 0;
};

// The GQA decode (gqa_decode.cu): 3 CTAs per SM, pairs = num_seqs * num_kv_heads; a
// split's partial costs ~8 KB of writes and reads per kv head, small against its >= 128 KB
// of K/V.
constexpr SplitRule kGqaTensorCoreSplits{3, 4, 256, 64};
// The bulk-copy GQA kernels: the same rule at their occupancy (their rings allow 1 or 2 CTAs
// per SM), so a batch-1 plan has 3x or 1.5x longer splits and fewer partials to merge. bulk4's
// one CTA per SM takes splits below 256 tokens too: in run 297 (H100) that was 5-11 % faster
// where the 256-token minimum left SMs idle (Qwen3 2K x 1: 32 CTAs, 11.0 us, against 9.8 with
// 64-token splits; Qwen3 2K x 2 and 4K x 1, Mixtral 2K x 1: 64 CTAs), and it plans as before
// everywhere else.
constexpr SplitRule kGqaBulk4Splits{1, 4, 256, 64, 1024};
constexpr SplitRule kGqaBulk3x2Splits{2, 4, 256, 64};
constexpr const SplitRule& GqaSplitRuleOf(GqaKernel kernel) {
  return kernel == kGqaBulk4     ? kGqaBulk4Splits
         : kernel == kGqaBulk3x2 ? kGqaBulk3x2Splits
                                 : kGqaTensorCoreSplits;
}

// The MLA decode (mla_decode.cu): 2 CTAs per SM (86 KB of shared memory each), one CTA per
// (split, seq); a split's partial is 32 KB, against its >= 288 KB of latent rows at 256 tokens.
// About one CTA per SM where its splits are short: in run 295 (H100; docs/notes/
// cuda_decode_tuning.md, session 66), over 2K-128K x batch 1-32, that plan was faster than two
// CTAs per SM with splits of at least 256 tokens at 14 of the 17 points where it made splits of
// 1024 tokens or fewer (by 2.2-48 %: 2K x 1, 22.1 against 11.5 us) and level at the other 3
// (within 0.7 %), and from 0.3 % faster to 6.2 % slower at the 13 where it made splits of 2016
// tokens or more.
constexpr SplitRule kMlaTensorCoreSplits{2, 4, 256, 32, 1024};

// Split size (tokens) for a split-KV decode whose grid has `pairs` CTAs per split. Measured
// on the H200 (docs/notes/cuda_decode_tuning.md): a partial last wave costs most, so
//   - with rule.one_cta_max_tokens, about one CTA per SM where that makes short splits;
//   - few pairs (batch 1-8): one wave, up to ctas_per_sm * SMs CTAs in all;
//   - many pairs: about target_waves waves, where the tail is a small share;
// splits of at least rule.min_tokens (rule.multiple in the first case) and at most
// `max_splits`.
inline int32_t SplitTokens(const SplitRule& rule, int32_t max_seq_tokens, int64_t pairs,
                           int32_t sm_count, int32_t max_splits) {
  const int64_t resident = int64_t{sm_count} * rule.ctas_per_sm;
  if (pairs < 1) pairs = 1;
  if (rule.one_cta_max_tokens > 0 && 2 * pairs <= sm_count) {
    const int64_t splits = sm_count / pairs;
    int64_t per = (int64_t{max_seq_tokens} + splits - 1) / splits;
    per = (per + rule.multiple - 1) / rule.multiple * rule.multiple;
    if (per < rule.multiple) per = rule.multiple;
    if (per <= rule.one_cta_max_tokens && (max_seq_tokens + per - 1) / per <= max_splits) {
      return static_cast<int32_t>(per);
    }
  }
  int64_t splits = 2 * pairs <= resident ? resident / pairs
                                         : (rule.target_waves * resident + pairs - 1) / pairs;
  if (splits < 1) splits = 1;
  int64_t per = (int64_t{max_seq_tokens} + splits - 1) / splits;
  per = per < rule.min_tokens ? rule.min_tokens : per;
  const int64_t floor_for_max = (int64_t{max_seq_tokens} + max_splits - 1) / max_splits;
  per = per < floor_for_max ? floor_for_max : per;
  return static_cast<int32_t>((per + rule.multiple - 1) / rule.multiple * rule.multiple);
}

// The current device's SM count (132, the H200's, where the query fails): the split rule
// and the split merge's choice of kernel plan by it (cuda_attention.cc).
int SmCount();

int LaunchGqaDecode(const GqaParams& p, void* stream);
int LaunchMlaDecode(const MlaParams& p, void* stream);
// Returns cudaErrorNotSupported for a head_dim without a compiled kernel (64, 128).
int LaunchGqaPrefill(const GqaPrefillParams& p, void* stream);
// Returns cudaErrorNotSupported for an MLA shape without a compiled kernel (rank 512, rope
// 64, heads 1..16).
// ctas_per_sm picks the launch bounds: 0 the default, 1 or 2 (for the benchmark).
int LaunchMlaPrefill(const MlaPrefillParams& p, void* stream, int ctas_per_sm = 0);
// Merges `num_parts` partials laid out [num_parts][rows][dim] into out.
int LaunchMergeSplits(const float* part_o, const float* part_lse, int32_t num_parts,
                      int64_t rows, int32_t dim, float* o, float* lse, void* stream);
int LaunchMergeTwo(const float* o_a, const float* lse_a, const float* o_b, const float* lse_b,
                   float* o_out, float* lse_out, int64_t rows, int32_t dim, void* stream);

}  // namespace writescope::kernels::cuda::internal

#endif  // WRITESCOPE_KERNELS_CUDA_LAUNCH_H_
