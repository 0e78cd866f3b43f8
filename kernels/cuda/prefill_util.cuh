// Device helpers of the causal prefill kernels (gqa_prefill.cu, mla_prefill.cu): the keys of
// a chunk's tile list as one virtual key range, walked in steps of kKeys keys (tile i's slot
// j is key i * block_tokens + j), and the skipping of steps that no query of a CTA can see.
//
// Params is either kernel's parameter block (launch.h): it names num_tiles, block_tokens,
// tile_positions, tile_tokens and query_position0 alike. Positions are kept relative to
// query_position0 in int32 (clamped; the mask only compares them).
#ifndef WRITESCOPE_KERNELS_CUDA_PREFILL_UTIL_CUH_
#define WRITESCOPE_KERNELS_CUDA_PREFILL_UTIL_CUH_

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

namespace writescope::kernels::cuda::internal {

constexpr int32_t kPfInvalidPos = INT_MAX;  // an invalid key slot: after every query

__device__ __forceinline__ int32_t RelativePosition(int64_t pos, int64_t query_position0) {
  const int64_t rel = pos - query_position0;
  return rel < -(int64_t{1} << 30) ? -(1 << 30) : rel > (int64_t{1} << 30) ? (1 << 30) : static_cast<int32_t>(rel);
}

// Smallest relative position of a valid key in step `step`, or kPfInvalidPos. Tiles
// hold consecutive positions, so a tile's first key in the step is its smallest.
template <int kKeys, typename Params>
__device__ int32_t StepMinPosition(const Params& p, int32_t step) {
  const int64_t t0 = int64_t{step} * kKeys;
  const int64_t t1 = min(t0 + kKeys, int64_t{p.num_tiles} * p.block_tokens);
  int32_t best = kPfInvalidPos;
  for (int64_t tile = t0 / p.block_tokens; tile * p.block_tokens < t1; ++tile) {
    const int32_t first = static_cast<int32_t>(t0 > tile * p.block_tokens ? t0 - tile * p.block_tokens : 0);
    if (first < __ldg(p.tile_tokens + tile)) {
      best = min(best, RelativePosition(__ldg(p.tile_positions + tile) + first, p.query_position0));
    }
  }
  return best;
}

// First step >= step that a query at relative position <= last_query can see.
template <int kKeys, typename Params>
__device__ __forceinline__ int32_t NextStep(const Params& p, int32_t step, int32_t num_steps,
                                            int32_t last_query) {
  while (step < num_steps && StepMinPosition<kKeys>(p, step) > last_query) ++step;
  return step;
}

// Number of key steps of the tile list.
template <int kKeys, typename Params>
__device__ __forceinline__ int32_t NumSteps(const Params& p) {
  return static_cast<int32_t>((int64_t{p.num_tiles} * p.block_tokens + kKeys - 1) / kKeys);
}

}  // namespace writescope::kernels::cuda::internal

#endif  // WRITESCOPE_KERNELS_CUDA_PREFILL_UTIL_CUH_
