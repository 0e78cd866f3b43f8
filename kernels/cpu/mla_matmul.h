// MLA decode blocks through oneDNN bf16 matmuls (CpuAttentionOptions::mla_matmul): the
// CPU's matrix units (AMX tiles where the CPU has them, else oneDNN's AVX-512 / AVX2
// kernels) for the two products of a block of latent rows:
//   S = Q K^T          [hp x T] = [hp x row_dim] x [row_dim x T], fp32 out;
//   the online softmax (KernelTable::mla_softmax_hilo), P split into bf16 hi + lo;
//   O = [P_hi; P_lo] V  [2 hp x out_dim] = [2 hp x T] x [T x out_dim], fp32 out, V copied
//     dense first (with the rows' stride oneDNN 2.6 falls back from brgemm to gemm:jit);
//   acc = acc * alpha + O_hi + O_lo.
// bf16 products are exact and oneDNN accumulates in fp32; P_hi + P_lo keeps ~16 mantissa
// bits of P, so the result stays within the contract's fp32-level tolerance (a bf16 P
// alone would not). Only whole blocks of block_tokens rows take this path (one primitive
// pair per shape, created once per process); a sequence's partial last block takes the
// vector kernels. Measured (docs/measurements.md, session 10): on the H200 host's AMX
// (brg:avx512_core_amx_bf16 for both) 1.55-1.83x faster than the vector kernels; without
// AMX (2 cores, AVX-512 BF16: brg:avx512_core_bf16) 1.4-1.6x slower. Our own AMX kernel
// (mla_amx.h) is 1.37-1.57x faster again (run 84), so this path runs for
// MlaMatmulMode::kOneDnn, and for kAuto only at shapes the AMX kernel does not take.
#ifndef WRITESCOPE_KERNELS_CPU_MLA_MATMUL_H_
#define WRITESCOPE_KERNELS_CPU_MLA_MATMUL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/cpu/cpu_kernels.h"

namespace writescope::kernels::cpu {

class MlaMatmul {
 public:
  virtual ~MlaMatmul() = default;

  // The process-wide instance for this shape (created on first use; thread-safe). An error
  // (e.g. a CPU where oneDNN has no bf16 matmul: below AVX-512) is returned again on every
  // later call without retrying.
  // padded_heads: rows of q (extra ones zero), row_dim = kv_lora_rank + rope_dim,
  // out_dim = kv_lora_rank (the first out_dim values of a row are its V).
  static absl::StatusOr<const MlaMatmul*> Get(int32_t padded_heads, int32_t row_dim,
                                              int32_t out_dim, int32_t block_tokens);

  // Adds one whole block of block_tokens rows (rows [block_tokens][row_dim] bf16) to the
  // unnormalized state of cpu_kernels.h: m, l [padded_heads], acc [padded_heads][out_dim].
  // q: [padded_heads][row_dim] bf16, unscaled; scale: the softmax scale. Any thread may
  // call it concurrently (each calling thread has its own scratch). False after a oneDNN
  // error (logged).
  virtual bool Block(const KernelTable& kernels, const uint16_t* q, float scale,
                     const uint16_t* rows, float* m, float* l, float* acc) const = 0;

  // oneDNN's implementation names of the two products (e.g. "brg:avx512_core_amx").
  virtual std::string impl() const = 0;
};

}  // namespace writescope::kernels::cpu

#endif  // WRITESCOPE_KERNELS_CPU_MLA_MATMUL_H_
