// MLA decode (absorbed form) on the CPU's AMX tiles: our own kernel for the matrix units,
// beside the vector kernels (cpu_kernels.h) and oneDNN's matmuls (mla_matmul.h).
//
// Per group of 16 heads and step of kMlaAmxTokens = 32 latent rows, every tile 16 rows of
// 64 bytes (tdpbf16ps: C[16 x 16] fp32 += A[16 x 32] bf16 . B[32 x 16] bf16, B in pairs):
//   1. S^T [32 tokens x 16 heads] = rows [32 x row_dim] . q^T: A = the latent rows as they
//      lie in the block (16 rows, the block's row stride), B = q as bf16 pairs
//      [row_dim / 2][heads] (the layout the vector kernels' q_pairs already have), so
//      neither operand is copied or transposed. Two C tiles, row_dim / 32 k-steps.
//   2. The online softmax on whole vectors, one token's 16 heads per vector (max, exp and
//      the row sums need no horizontal reduction); P split into bf16 hi + lo (p = hi + lo to
//      ~2^-17 relative, as the oneDNN path does: a bf16 P alone would break the split's
//      fp32-level contract), each transposed to [16 heads x 32 tokens] (two A tiles).
//   3. O [16 heads x out_dim] = (P_hi + P_lo) . V, V the rows' first out_dim values: per 32
//      dims, the 32 rows' values are interleaved in token pairs (the B layout; 2 KB that
//      stays in L1), two C tiles get P_hi . V + P_lo . V, and acc = acc * alpha + C. The
//      rows two steps ahead are prefetched meanwhile, a share per 32 dims (prefetch_steps).
// bf16 products are exact and the tiles accumulate in fp32, so the result matches the
// vector kernels' to fp32 rounding. A block's last tokens short of a whole step go to the
// caller's vector kernel, on the same running state.
#ifndef WRITESCOPE_KERNELS_CPU_MLA_AMX_H_
#define WRITESCOPE_KERNELS_CPU_MLA_AMX_H_

#include <cstdint>

namespace writescope::kernels::cpu {

// Tokens per softmax step of the AMX kernel.
inline constexpr int32_t kMlaAmxTokens = 32;

// Whether this process may run AMX-BF16 tile instructions: the CPU has AMX-TILE and
// AMX-BF16, the environment does not set WS_CPU_NO_AMX, and Linux granted the process the
// tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once). The kernel also needs
// AVX-512 F/BW/VL/DQ: callers check it with DetectCpuIsa (MlaAmxUsable does both).
bool AmxUsable();

// Whether the kernel takes this shape: padded_heads a positive multiple of 16, row_dim and
// out_dim positive multiples of 32, out_dim <= row_dim.
bool MlaAmxSupported(int32_t padded_heads, int32_t row_dim, int32_t out_dim);

// Where the tile instructions run: on the CPU's AMX unit (needs MlaAmxUsable()), or emulated
// in plain code with the same tile layouts and order of steps (any CPU with AVX-512 F/BW;
// slow: for tests on machines without AMX).
enum class AmxTiles { kHardware, kEmulated };

struct MlaAmxArgs {
  // [row_dim / 2][padded_heads]: q[h][2k] in the low and q[h][2k + 1] in the high half of
  // entry [k][h] (bf16), unscaled; heads past the real ones are zero.
  const uint32_t* q_pairs = nullptr;
  float scale = 0;  // softmax scale, applied to the fp32 scores
  int32_t padded_heads = 0;
  int32_t row_dim = 0;
  int32_t out_dim = 0;
  const uint16_t* rows = nullptr;  // [num_tokens][row_dim] bf16; rows' first out_dim = V
  int32_t num_tokens = 0;          // a multiple of kMlaAmxTokens (0: nothing to do)
  // The rows the caller reads next (nullable): the last steps prefetch the first of them
  // (at most next_tokens) as they prefetch the rows ahead of them (prefetch_steps).
  const uint16_t* next_rows = nullptr;
  int32_t next_tokens = 0;
  // Which rows each step prefetches: N >= 1, those N steps ahead (past num_tokens:
  // next_rows'), a share in each of the step's 32-dim chunks, into L1 for N = 1 and into L2
  // beyond; 0, the next step's during its P V only, into L1 (the kernel before session 31).
  // 16 threads at 32K x 32 on the H200 host (run 168): 66 GB/s of rows with 0, 82 with 2.
  int32_t prefetch_steps = 2;
  // The unnormalized running state of cpu_kernels.h, updated in place.
  float* m = nullptr;    // [padded_heads]
  float* l = nullptr;    // [padded_heads]
  float* acc = nullptr;  // [padded_heads][out_dim]
};

// 32-token steps MlaAmxRows has run in this process, on either tiles (tests use it to see
// that a path took the kernel).
uint64_t MlaAmxStepsRun();

// Adds the rows to the state. The shape must be MlaAmxSupported; thread-safe (scratch and
// tile state are per thread); configures the tiles on entry and releases them on return.
void MlaAmxRows(const MlaAmxArgs& args, AmxTiles tiles);

}  // namespace writescope::kernels::cpu

#endif  // WRITESCOPE_KERNELS_CPU_MLA_AMX_H_
