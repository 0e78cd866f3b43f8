// CPU backend of the attention ops (contracts in kernels/attention.h). Reads the
// CPU-compute region in place; outputs partial states (kernels/attention_state.h).
//
// Decode: OpenMP over (sequence x kv head x chunk of tiles); each chunk keeps an online
// softmax state in fp32 and the chunks are merged exactly. Inner kernels are AVX-512
// with an AVX2 and a scalar fallback, chosen at run time. On AVX-512, GQA with
// head_dim % 32 == 0 and group 1/2/4/8/16 takes a fast path (kernels/cpu/
// cpu_kernels_fast_avx512.inc): scores for 16/group tokens x the group's heads at once
// with one transpose-reduce, q.k by vdpbf16ps where the CPU has AVX-512 BF16 (exact
// bf16 products, fp32 accumulation) else FMA, online softmax on whole vectors, p.V as
// fp32 FMA on exactly widened bf16, and software prefetch of the next rows.
//
// MLA decode: our own kernel, not oneDNN. Scores are an outer product with the 16 heads
// in the 16 lanes (the [16 x 576] x [576 x tokens] GEMM without horizontal sums; by
// vdpbf16ps where available), the output a register-tiled [16 x tokens] x [tokens x 512]
// fp32 FMA product on exactly widened bf16. oneDNN's bf16 matmul would need the
// probabilities rounded to bf16 (breaking the fp32-rounding contract of the split) and
// a primitive per chunk shape. The p.V half (512 fp32 FMAs per token x 16 heads) bounds
// it: it is compute-bound on one core, not DRAM-bound. CpuAttentionOptions::mla_matmul
// takes the blocks to the CPU's matrix units instead (our AMX tile kernel, or oneDNN's
// matmuls), with P split into bf16 hi + lo so that the rounding stays at the fp32 level.
//
// Prefill: per (query, kv head) over the causally visible prefix of each tile; correct
// and parallel, not tiled for reuse across queries. MLA prefill runs the MLA decode with
// one row per query over the blocks it sees (a prefix of the blocks in position order).
//
// Queries and keys are finite (the model's own KV): a NaN score is not propagated on the
// vector ISAs (their exp clamps it and their running max may drop it, where the scalar path
// and the reference give NaN), so non-finite input gives an unspecified output there.
//
// All calls are thread-safe; OpenMP threads come from the calling thread's team.
#ifndef WRITESCOPE_KERNELS_CPU_ATTENTION_H_
#define WRITESCOPE_KERNELS_CPU_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention.h"

namespace writescope::kernels {

enum class CpuIsa { kAuto, kScalar, kAvx2, kAvx512 };

// The best instruction set this CPU supports (AVX-512 needs F/BW/VL/DQ; AVX2 needs FMA).
CpuIsa DetectCpuIsa();
const char* CpuIsaName(CpuIsa isa);

// How the MLA decode takes whole steps of latent rows: on the CPU's matrix units or not.
//   kAmx: our AMX tile kernel (kernels/cpu/mla_amx.h) over every 32 tokens of a block, the
//     vector kernels over a block's last tokens short of 32. INVALID_ARGUMENT where AMX is
//     not usable (MlaAmxUsable); shapes the kernel does not take (kv_lora_rank + rope_dim or
//     kv_lora_rank not a multiple of 32) run on the vector kernels.
//   kOneDnn: whole blocks through oneDNN bf16 matmuls (kernels/cpu/mla_matmul.h; AMX where
//     oneDNN runs it); partial blocks on the vector kernels. Where oneDNN has no bf16
//     matmul (below AVX-512) the vector kernels take every block (logged once).
//   kOff: the vector kernels (cpu_kernels.h).
//   kAuto (the cpu_worker's default): where AMX is usable, kAmx, or kOneDnn for a shape the
//     AMX kernel does not take; else kOff.
// P is split into bf16 hi + lo on both matrix paths, so all of them keep the contract's
// fp32-level tolerance.
enum class MlaMatmulMode { kAuto, kAmx, kOneDnn, kOff };

// Whether MlaMatmulMode::kAmx can run in this process: AVX-512 (DetectCpuIsa) and the AMX
// tiles (kernels/cpu/mla_amx.h AmxUsable).
bool MlaAmxUsable();
// INVALID_ARGUMENT, saying why, for kAmx where it cannot run (MlaAmxUsable); OK otherwise.
absl::Status CheckMlaMatmulMode(MlaMatmulMode mode);

// Where a decode call's time went, for the caller's profile: the ends of its phases as
// CLOCK_MONOTONIC nanoseconds (MonotonicNanos(), the clock of common/profile.h's spans).
//   prepare: validation, q in the kernels' layout, the work plan and the item states;
//   blocks:  the threads attending the blocks (the OpenMP region of work items);
//   merge:   the items' states merged into each row's output (ends at the call's return).
struct CpuAttentionPhases {
  uint64_t start_ns = 0, prepared_ns = 0, blocks_done_ns = 0, end_ns = 0;
};

inline constexpr int kMaxMlaAmxPrefetchSteps = 8;

struct CpuAttentionOptions {
  int num_threads = 0;          // 0: OpenMP's default
  CpuIsa isa = CpuIsa::kAuto;   // forcing an ISA the CPU lacks is INVALID_ARGUMENT
  // The decode's guided work plan (kernels/cpu/work_plan.h): each item takes 1 / (threads *
  // plan_divisor) of the blocks not yet planned. Larger: more, smaller items (balance
  // against each item's state to fill and merge).
  int plan_divisor = 1;
  // kOff here, so that the references (HostModel, ws_reference) stay on the vector kernels
  // wherever they run.
  MlaMatmulMode mla_matmul = MlaMatmulMode::kOff;
  // Tests only: the AMX kernel, whatever mla_matmul says, with the tile instructions emulated
  // in plain code (AmxTiles::kEmulated), so that the kernel's steps are tested on CPUs
  // without AMX (any with AVX-512).
  bool mla_amx_emulated = false;
  // CpuGqaDecode and CpuMlaDecode record their phases here where set (a successful call
  // writes all four times).
  CpuAttentionPhases* phases = nullptr;
  // How many 32-token steps ahead the AMX kernel prefetches its rows, 0 to
  // kMaxMlaAmxPrefetchSteps (cpu::MlaAmxArgs::prefetch_steps; 0: the next step's during its
  // P V only).
  int mla_amx_prefetch_steps = 2;
};

absl::Status CpuGqaDecode(const GqaDecodeArgs& args, const CpuAttentionOptions& options = {});
absl::Status CpuGqaPrefill(const GqaPrefillArgs& args, const CpuAttentionOptions& options = {});
absl::Status CpuMlaDecode(const MlaDecodeArgs& args, const CpuAttentionOptions& options = {});
absl::Status CpuMlaPrefill(const MlaPrefillArgs& args, const CpuAttentionOptions& options = {});

}  // namespace writescope::kernels

#endif  // WRITESCOPE_KERNELS_CPU_ATTENTION_H_
