// Device helpers shared by the CUDA kernels (CUDA only; never include from a public
// header).
#ifndef WRITESCOPE_KERNELS_CUDA_DEVICE_UTIL_CUH_
#define WRITESCOPE_KERNELS_CUDA_DEVICE_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace writescope::kernels::cuda::internal {

constexpr float kLn2 = 0.69314718055994531f;
constexpr float kNegInf = -__builtin_huge_valf();

__device__ __forceinline__ float Bf16Lo(uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float Bf16Hi(uint32_t pair) { return __uint_as_float(pair & 0xffff0000u); }
__device__ __forceinline__ float Bf16(uint16_t x) { return __uint_as_float(uint32_t{x} << 16); }
// fp32 -> bf16 bits, round to nearest even (the hardware conversion).
__device__ __forceinline__ uint16_t ToBf16Bits(float value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

__device__ __forceinline__ float WarpMax(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// The GPU's global nanosecond timer (%globaltimer), the same clock on every SM.
__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

// Programmatic dependent launch (sm_90; no-ops elsewhere and where the kernels are launched
// without the attribute). A split-KV decode lets its merge be launched as soon as every one of
// its CTAs has started (the merge's CTAs then wait in WaitForPrimaryGrid until the decode has
// finished and its writes are visible), so that the merge's launch overlaps the decode
// instead of following it.
__device__ __forceinline__ void LaunchDependentGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void WaitForPrimaryGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The keys of one sequence as a virtual token range: first its ping-pong tiles
// (all full but the last), then its window tokens.
struct SeqKeys {
  const uint16_t* tiles;             // first tile of the sequence (packed tiles), or
  const uint16_t* const* tile_ptrs;  // its tiles' bases (a tile pointer list)
  int64_t tile_values;
  int32_t tile_tokens;      // tokens in its tiles
  const uint16_t* window;   // its window slot (or nullptr)
  int32_t window_tokens;
  __device__ int32_t total() const { return tile_tokens + window_tokens; }
  // Base of the sequence's tile i.
  __device__ __forceinline__ const uint16_t* Tile(int32_t i) const {
    return tile_ptrs != nullptr ? tile_ptrs[i] : tiles + int64_t{i} * tile_values;
  }
};

// A token's tile and its offset in it, advanced without a division: the decode kernels
// walk their rows a fixed number of tokens at a time, and a division per row per step cost
// ~20 instructions (session 25).
struct TilePos {
  int32_t tile, off;
  __device__ __forceinline__ static TilePos Of(int32_t t, int32_t block_tokens) {
    const int32_t tile = t / block_tokens;
    return {tile, t - tile * block_tokens};
  }
  __device__ __forceinline__ void Advance(int32_t by, int32_t block_tokens) {
    off += by;
    while (off >= block_tokens) {
      off -= block_tokens;
      ++tile;
    }
  }
};

__device__ __forceinline__ SeqKeys LoadSeqKeys(const KvParams& kv, int32_t seq,
                                               int32_t block_tokens) {
  SeqKeys keys;
  int32_t begin, count, slot;
  if (seq < kv.inline_seqs) {
    // From the launch's parameters: the K/V reads need not wait for a load of the lists.
    const InlineSeqLists& lists = kv.inline_lists[seq];
    begin = lists.tile_begin;
    count = lists.tile_count;
    keys.tile_tokens = count == 0 ? 0 : (count - 1) * block_tokens + lists.last_tile_tokens;
    keys.window_tokens = lists.window_tokens;
    slot = lists.window_slot;
  } else {
    begin = kv.seq_tile_begin ? kv.seq_tile_begin[seq] : 0;
    count = kv.seq_tile_begin ? kv.seq_tile_begin[seq + 1] - begin : 0;
    keys.tile_tokens = count == 0 ? 0 : (count - 1) * block_tokens + kv.seq_last_tile_tokens[seq];
    keys.window_tokens = kv.seq_window_tokens ? kv.seq_window_tokens[seq] : 0;
    slot = kv.seq_window_slot ? kv.seq_window_slot[seq] : seq;
  }
  keys.tiles = kv.tile_ptrs != nullptr ? nullptr : kv.tiles + int64_t{begin} * kv.tile_values;
  keys.tile_ptrs = kv.tile_ptrs != nullptr ? kv.tile_ptrs + begin : nullptr;
  keys.tile_values = kv.tile_values;
  keys.window = keys.window_tokens > 0 ? kv.window + int64_t{slot} * kv.window_values : nullptr;
  return keys;
}

}  // namespace writescope::kernels::cuda::internal

#endif  // WRITESCOPE_KERNELS_CUDA_DEVICE_UTIL_CUH_
