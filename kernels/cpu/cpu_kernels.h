// Internal to the CPU backend: the per-ISA inner kernels. One table per instruction
// set; each table's functions are compiled with that set's target options in their own
// source file (cpu_kernels_avx512.cc, cpu_kernels_avx2.cc, cpu_kernels_scalar.cc), so
// the base build stays portable and the choice is made at run time.
//
// The kernels keep an UNNORMALIZED running state per head: m (running max of scaled
// scores), l (sum of exp(score - m)), acc (sum of exp(score - m) * v). Start from
// m = -inf, l = 0, acc = 0; the dispatcher merges chunk states and normalizes.
#ifndef WRITESCOPE_KERNELS_CPU_CPU_KERNELS_H_
#define WRITESCOPE_KERNELS_CPU_CPU_KERNELS_H_

#include <cstdint>

namespace writescope::kernels::cpu {

// Tokens scored at once; scratch sizes below depend on it.
inline constexpr int32_t kGqaSubTokens = 64;
inline constexpr int32_t kMlaSubTokens = 32;

// Floats of per-thread scratch the kernels need.
inline int64_t GqaScratchFloats(int32_t group, int32_t head_dim) {
  return int64_t{group} * kGqaSubTokens + head_dim + 64;
}
inline int64_t MlaScratchFloats(int32_t padded_heads, int32_t row_dim) {
  return int64_t{kMlaSubTokens} * (padded_heads + row_dim) + 64;
}

// Attends `group` query heads sharing one kv head to `num_tokens` keys.
//   q     [group][head_dim] fp32, already multiplied by the softmax scale
//   k, v  [num_tokens][head_dim] bf16 (rows of one kv head inside a tile)
//   m, l  [group]; acc [group][head_dim]: running state, updated in place
using GqaSegmentFn = void (*)(const float* q, int32_t group, int32_t head_dim,
                              const uint16_t* k, const uint16_t* v, int32_t num_tokens,
                              float* m, float* l, float* acc, float* scratch);

// MLA absorbed: `padded_heads` (a multiple of the ISA's lanes; extra heads have q = 0
// and are discarded) against latent rows.
//   q_t   [row_dim][padded_heads] fp32, TRANSPOSED, already scaled
//   rows  [num_tokens][row_dim] bf16
//   m, l  [padded_heads]; acc [padded_heads][out_dim] (out_dim = kv_lora_rank)
using MlaSegmentFn = void (*)(const float* q_t, int32_t padded_heads, int32_t row_dim,
                              int32_t out_dim, const uint16_t* rows, int32_t num_tokens,
                              float* m, float* l, float* acc, float* scratch);

// Fast GQA decode over whole tiles (AVX-512 builds; null elsewhere). Scores are computed
// for several tokens x all heads of the group at once and reduced with one transpose,
// so there is no horizontal sum per (head, token).
inline constexpr int32_t kGqaFastSubTokens = 128;
inline int64_t GqaTilesScratchFloats(int32_t group, int32_t head_dim) {
  return int64_t{group} * kGqaFastSubTokens + 2 * int64_t{group} * head_dim + 128;
}
struct GqaTilesArgs {
  const uint16_t* q = nullptr;  // [group][head_dim] bf16, NOT scaled
  float scale = 0;              // softmax scale, applied to the fp32 dot products
  int32_t group = 0;
  int32_t head_dim = 0;
  const uint16_t* const* tiles = nullptr;  // [num_tiles] tile bases
  int32_t num_tiles = 0;
  int32_t block_tokens = 0;
  int32_t last_tile_tokens = 0;  // valid tokens of tiles[num_tiles - 1]
  int64_t k_offset = 0, v_offset = 0;  // of the kv head inside a tile, in values
  // Output: the unnormalized state of these tiles (overwritten, not accumulated).
  float* m = nullptr;    // [group]
  float* l = nullptr;    // [group]
  float* acc = nullptr;  // [group][head_dim]
};
// Whether gqa_tiles handles (group, head_dim).
using GqaTilesSupportedFn = bool (*)(int32_t group, int32_t head_dim);
using GqaTilesFn = void (*)(const GqaTilesArgs& args, float* scratch);

// MLA with bf16 dot products for the scores (null where the CPU lacks AVX-512 BF16).
//   q_pairs [row_dim / 2][padded_heads] bf16 pairs (q[h][2k] low, q[h][2k+1] high), NOT
//   scaled; row_dim must be even. next_rows / next_tokens (nullable / 0): the rows the
//   next call will read, prefetched at the end of this one. Everything else as
//   MlaSegmentFn.
using MlaSegmentBf16Fn = void (*)(const uint32_t* q_pairs, float scale, int32_t padded_heads,
                                  int32_t row_dim, int32_t out_dim, const uint16_t* rows,
                                  int32_t num_tokens, const uint16_t* next_rows,
                                  int32_t next_tokens, float* m, float* l, float* acc,
                                  float* scratch);

// The matmul MLA path's softmax of one block (kernels/cpu/mla_matmul.h): s [hp][n] raw
// q.k (row stride s_ld, unscaled); updates m, l; writes alpha [hp] (the factor for acc)
// and bf16 p_hi, p_lo [hp][p_ld] with p_hi + p_lo = p to ~2^-17. scratch >= n floats.
using MlaSoftmaxHiLoFn = void (*)(const float* s, int32_t s_ld, int32_t hp, int32_t n,
                                  float scale, float* m, float* l, float* alpha,
                                  uint16_t* p_hi, uint16_t* p_lo, int32_t p_ld,
                                  float* scratch);

struct KernelTable {
  const char* name;
  int32_t lanes;  // fp32 lanes of one vector (MLA pads heads to a multiple of it)
  GqaSegmentFn gqa_segment;
  MlaSegmentFn mla_segment;
  GqaTilesSupportedFn gqa_tiles_supported = nullptr;
  GqaTilesFn gqa_tiles = nullptr;
  MlaSegmentBf16Fn mla_segment_bf16 = nullptr;
  MlaSoftmaxHiLoFn mla_softmax_hilo = nullptr;
};

const KernelTable& ScalarKernels();
const KernelTable& Avx2Kernels();    // callable only where AVX2 + FMA exist
// Callable only where AVX-512 F/BW/VL/DQ exist. Uses AVX-512 BF16 dot products where the
// CPU has them, unless the environment sets WS_CPU_NO_AVX512BF16 (to test the other path).
const KernelTable& Avx512Kernels();

}  // namespace writescope::kernels::cpu

#endif  // WRITESCOPE_KERNELS_CPU_CPU_KERNELS_H_
