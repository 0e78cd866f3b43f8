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

struct KernelTable {
  const char* name;
  int32_t lanes;  // fp32 lanes of one vector (MLA pads heads to a multiple of it)
  GqaSegmentFn gqa_segment;
  MlaSegmentFn mla_segment;
};

const KernelTable& ScalarKernels();
const KernelTable& Avx2Kernels();    // callable only where AVX2 + FMA exist
const KernelTable& Avx512Kernels();  // callable only where AVX-512 F/BW/VL/DQ exist

}  // namespace writescope::kernels::cpu

#endif  // WRITESCOPE_KERNELS_CPU_CPU_KERNELS_H_
