// CUDA backend of the attention ops: the GPU's share of a decode step (tiles streamed
// into the ping-pong buffer + the D-window) as partial states, and the exact merge of
// the CPU's partial into the GPU's. Plain C++: no CUDA header; streams are `void*`
// (a cudaStream_t), pointers marked "device" must be device memory.
//
// Layouts (bf16 as uint16_t, see kernels/attention.h for the math and the LSE
// convention: o normalized fp32, lse natural log fp32, empty = (-inf, 0)):
//   Ping-pong: the tiles of one layer that the transfer packed contiguously, each in
//     the (slot, layer) layout of common/kv_layout.h. Sequence s owns tiles
//     [seq_tile_begin[s], seq_tile_begin[s + 1]); only its LAST tile may be partial,
//     with seq_last_tile_tokens[s] valid tokens.
//   D-window: window_slots slots, each laid out exactly like a tile of
//     `window_capacity` tokens (GQA: K [kv_heads][W][head_dim] then V likewise;
//     MLA: latent [W][kv_lora_rank + rope_dim]), so with W == block_tokens a full
//     window flushes to a region block with one copy. Sequence s uses slot
//     seq_window_slot[s] (nullptr: slot s) holding seq_window_tokens[s] tokens
//     (nullptr: no window).
//
// Alignment: every tile base (packed tiles, tile_ptrs entries), window slot and q must
// be 16-byte aligned (the kernels read rows with 16-byte loads and cp.async).
//
// Every launcher is asynchronous on `stream`, returns INVALID_ARGUMENT for a bad
// shape or a too small workspace, UNIMPLEMENTED for a head_dim/MLA shape without a
// compiled kernel, INTERNAL for a CUDA launch error.
#ifndef WRITESCOPE_KERNELS_CUDA_CUDA_ATTENTION_H_
#define WRITESCOPE_KERNELS_CUDA_CUDA_ATTENTION_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/attention.h"

namespace writescope::kernels::cuda {

// Host copies of a GpuKvSource's per-sequence lists (host memory, the values the device lists
// hold), each given exactly where its device list is. A launch of at most
// internal::kInlineSeqs (4) sequences then carries the values in the kernel's parameters, so
// that a CTA's first K/V reads do not wait for a load of its lists from device memory; larger
// launches read the device lists. Read during the launch call only.
struct HostSeqLists {
  const int32_t* tile_begin = nullptr;        // [num_seqs + 1]
  const int32_t* last_tile_tokens = nullptr;  // [num_seqs]
  const int32_t* window_slot = nullptr;       // [num_seqs]
  const int32_t* window_tokens = nullptr;     // [num_seqs]
  bool given() const {
    return tile_begin != nullptr || last_tile_tokens != nullptr || window_slot != nullptr ||
           window_tokens != nullptr;
  }
};

struct GpuKvSource {
  const uint16_t* tiles = nullptr;                // device, packed ping-pong tiles, or
  // device [total tiles] -> device tile bases: sequence s's tiles are
  // tile_ptrs[seq_tile_begin[s] ..] wherever they lie (ping-pong positions in any order,
  // the D-window, a chunk's own blocks); `tiles` is then ignored.
  const uint16_t* const* tile_ptrs = nullptr;
  const int32_t* seq_tile_begin = nullptr;        // device [num_seqs + 1]
  const int32_t* seq_last_tile_tokens = nullptr;  // device [num_seqs]
  const uint16_t* window = nullptr;               // device [window_slots][slot values]
  int32_t window_capacity = 0;                    // W tokens per slot
  const int32_t* seq_window_slot = nullptr;       // device [num_seqs] or nullptr
  const int32_t* seq_window_tokens = nullptr;     // device [num_seqs] or nullptr
  // Host-side bound on tile tokens + window tokens of any sequence; sizes the grid.
  int32_t max_seq_tokens = 0;
  HostSeqLists host;  // optional (none given: the kernels read the device lists)
};

// Which GQA tensor-core decode kernel runs (head_dim 64/128, group <= 8; the other shapes
// take the SIMT kernel whatever this says). kDefault is the service's choice, bulk4
// (cuda_attention.cc GqaKernelOf says why); the others name one kernel, for the gpu_worker's
// flag, the tests and the benchmark (kernels/cuda/launch.h GqaKernel says what each does).
enum class GqaDecodeKernel { kDefault, kRegisters, kBulk4, kBulk3x2 };

// Split-KV: each sequence's keys are cut into splits of `tokens_per_split` (a multiple
// of 32; 0 picks one that fills the GPU), each split writes a partial to the workspace,
// and a second kernel merges the splits.
struct GpuSplitOptions {
  int32_t tokens_per_split = 0;
  GqaDecodeKernel gqa_kernel = GqaDecodeKernel::kDefault;
};

// A decode CTA's timeline (GqaGpuDecodeArgs::timeline): %globaltimer readings, ns.
enum GpuTimelineStamp : int32_t {
  kStampStart = 0,     // the CTA began
  kStampFirstData,     // its first stage of K/V had landed in shared memory (and its Q:
                       // the consumers load Q while the first copies are in flight)
  kStampLoopEnd,       // every stage had been read
  kStampEnd,           // its partial had been written (thread 0's share)
  kGpuTimelineStamps,  // stamps per CTA
};

struct GqaGpuDecodeArgs {
  GqaShape shape;  // head_dim 64, 128 or 256; group size 1..8
  int32_t num_seqs = 0;
  const uint16_t* q = nullptr;  // device [num_seqs][num_q_heads][head_dim] bf16
  GpuKvSource kv;
  float* o = nullptr;    // device [num_seqs][num_q_heads][head_dim]
  float* lse = nullptr;  // device [num_seqs][num_q_heads]
  void* workspace = nullptr;  // device, GqaGpuDecodeWorkspaceBytes() bytes
  size_t workspace_bytes = 0;
  GpuSplitOptions split;
  // For a bench's anatomy, else null: device memory where the bulk-copy kernels
  // (GqaDecodeKernel::kBulk4, kBulk3x2; the others ignore it) write each CTA's
  // kGpuTimelineStamps stamps, CTA c = split + splits * (kv head + kv heads * seq) at
  // [c * kGpuTimelineStamps, (c + 1) * kGpuTimelineStamps). A stamp not reached is left as it
  // was (a CTA with no keys has no first stage). It must hold every planned CTA's.
  uint64_t* timeline = nullptr;
};

struct MlaGpuDecodeArgs {
  MlaShape shape;  // kv_lora_rank 512, rope_dim 64, heads 1..16
  int32_t num_seqs = 0;
  const uint16_t* q = nullptr;  // device [num_seqs][num_heads][kv_lora_rank + rope_dim] bf16
  GpuKvSource kv;
  float* o = nullptr;    // device [num_seqs][num_heads][kv_lora_rank]
  float* lse = nullptr;  // device [num_seqs][num_heads]
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  GpuSplitOptions split;
};

// Causal chunked prefill, the GPU's share (kernels/attention.h GqaPrefillArgs, with
// device tiles): the queries of one chunk attend every listed key at a position <= their
// own. The list names each tile by pointer, so it can mix the ping-pong buffer's packed
// tiles of earlier chunks (transfer-region blocks) with the chunk's own tiles. Tile i
// holds tokens[i] valid tokens (0..block_tokens, any tile may be partial) at positions
// positions[i], positions[i] + 1, ...; every tile base must be 16-byte aligned. The
// partial merges exactly (GpuMergeStates) with CpuGqaPrefill over the CPU-region blocks.
struct GpuKvTileList {
  const uint16_t* const* tiles = nullptr;  // device [num_tiles] -> device tile bases
  const int64_t* positions = nullptr;      // device [num_tiles], absolute position of slot 0
  const int32_t* tokens = nullptr;         // device [num_tiles], valid tokens
  int32_t num_tiles = 0;
};

struct GqaGpuPrefillArgs {
  GqaShape shape;  // head_dim 64 or 128; group size 1..128
  int32_t num_queries = 0;      // 0: nothing to do
  int64_t query_position0 = 0;  // query i sits at query_position0 + i
  const uint16_t* q = nullptr;  // device [num_queries][num_q_heads][head_dim] bf16
  GpuKvTileList keys;
  float* o = nullptr;    // device [num_queries][num_q_heads][head_dim]
  float* lse = nullptr;  // device [num_queries][num_q_heads], natural log; no key: -inf
};

// The MLA form of GqaGpuPrefillArgs (kernels/attention.h MlaPrefillArgs, with device tiles):
// latent tiles [block_tokens][kv_lora_rank + rope_dim], 16 heads sharing each row.
struct MlaGpuPrefillArgs {
  MlaShape shape;  // kv_lora_rank 512, rope_dim 64, heads 1..16
  int32_t num_queries = 0;      // 0: nothing to do
  int64_t query_position0 = 0;  // query i sits at query_position0 + i
  const uint16_t* q = nullptr;  // device [num_queries][num_heads][kv_lora_rank + rope_dim] bf16
  GpuKvTileList keys;
  float* o = nullptr;    // device [num_queries][num_heads][kv_lora_rank]
  float* lse = nullptr;  // device [num_queries][num_heads], natural log; no key: -inf
};

// Workspace the decode needs for these args (depends on num_seqs, heads, head_dim,
// max_seq_tokens and the split option). Call on the same device as the launch.
size_t GqaGpuDecodeWorkspaceBytes(const GqaGpuDecodeArgs& args);
size_t MlaGpuDecodeWorkspaceBytes(const MlaGpuDecodeArgs& args);

absl::Status GqaGpuDecode(const GqaGpuDecodeArgs& args, void* stream);
absl::Status MlaGpuDecode(const MlaGpuDecodeArgs& args, void* stream);
// Needs no workspace; one launch, asynchronous on `stream`.
absl::Status GqaGpuPrefill(const GqaGpuPrefillArgs& args, void* stream);
// ctas_per_sm: the kernel's launch bounds, 0 the default (2), or 1 (the benchmark's variant).
absl::Status MlaGpuPrefill(const MlaGpuPrefillArgs& args, void* stream, int ctas_per_sm = 0);

// out = merge(a, b) over `rows` rows of `head_dim` (device pointers). `out` may alias
// `a` or `b` exactly: merging the CPU partial (copied to the GPU) into the GPU partial
// in place is the intended use.
absl::Status GpuMergeStates(const float* o_a, const float* lse_a, const float* o_b,
                            const float* lse_b, float* o_out, float* lse_out, int64_t rows,
                            int32_t head_dim, void* stream);

// Whether a CUDA device is usable (for tests and tools).
bool CudaDeviceAvailable();

}  // namespace writescope::kernels::cuda

#endif  // WRITESCOPE_KERNELS_CUDA_CUDA_ATTENTION_H_
