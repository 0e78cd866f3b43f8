// The per-row stats of lm_head's logits (cuda_logits.h): what a greedy token needs of its row.
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_logits.h"

namespace writescope::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int32_t kNoIndex = 0x7fffffff;

// The better of two (key, index) candidates: the larger key, ties to the lower index.
__device__ __forceinline__ void KeepBetter(float& key, int32_t& index, float other_key,
                                           int32_t other_index) {
  if (other_key > key || (other_key == key && other_index < index)) {
    key = other_key;
    index = other_index;
  }
}

// One block per row. Pass 1: the max key (NaN counts as -inf), its first index and the +inf
// count; pass 2, when the max is finite: the sum of expf(key - max) in double.
__global__ void __launch_bounds__(kThreads)
    LogitRowStatsKernel(const float* __restrict__ logits, int32_t vocab,
                        LogitRowStats* __restrict__ stats) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __shared__ float warp_key[kWarps];
  __shared__ int32_t warp_index[kWarps];
  __shared__ uint32_t warp_inf[kWarps];
  __shared__ double warp_sum[kWarps];

  float key = -__builtin_huge_valf();
  int32_t index = kNoIndex;
  uint32_t pos_inf = 0;
  // Each thread's indices rise, so a strict > keeps its first maximum.
  for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = row[i];
    const float k = isnan(v) ? -__builtin_huge_valf() : v;
    if (k > key) {
      key = k;
      index = i;
    }
    pos_inf += k == __builtin_huge_valf() ? 1u : 0u;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_key = __shfl_xor_sync(0xffffffffu, key, offset);
    const int32_t other_index = __shfl_xor_sync(0xffffffffu, index, offset);
    KeepBetter(key, index, other_key, other_index);
    pos_inf += __shfl_xor_sync(0xffffffffu, pos_inf, offset);
  }
  if (lane == 0) {
    warp_key[warp] = key;
    warp_index[warp] = index;
    warp_inf[warp] = pos_inf;
  }
  __syncthreads();
  // Every thread reduces the warps' candidates (32 shared reads): all then know the max.
  key = warp_key[0];
  index = warp_index[0];
  pos_inf = warp_inf[0];
  for (int w = 1; w < kWarps; ++w) {
    KeepBetter(key, index, warp_key[w], warp_index[w]);
    pos_inf += warp_inf[w];
  }
  const float max_key = key;
  const bool finite = isfinite(max_key);

  double sum = 0.0;
  if (finite) {
    for (int32_t i = threadIdx.x; i < vocab; i += kThreads) {
      const float v = row[i];
      // -inf and NaN add 0 (expf(-inf) is 0; NaN is skipped).
      if (!isnan(v)) sum += static_cast<double>(expf(v - max_key));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) warp_sum[warp] = sum;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    LogitRowStats out;
    out.max_key = max_key;
    // A row of -inf has no strict maximum: its first index, 0, as the host's reference.
    out.argmax = index == kNoIndex ? 0 : index;
    out.num_pos_inf = pos_inf;
    out.reserved = 0;
    double total = 0.0;
    if (finite) {
      for (int w = 0; w < kWarps; ++w) total += warp_sum[w];
    }
    out.sum_exp = total;
    stats[blockIdx.x] = out;
  }
}

}  // namespace

absl::Status LogitRowStatsOnDevice(const float* logits, int64_t rows, int64_t vocab,
                                   LogitRowStats* stats, void* stream) {
  if (rows < 0 || vocab < 0 || vocab > 0x7fffffff || rows > 0x7fffffff) {
    return absl::InvalidArgumentError(
        absl::StrCat("LogitRowStatsOnDevice: ", rows, " rows of ", vocab, " logits"));
  }
  if (rows == 0) return absl::OkStatus();
  LogitRowStatsKernel<<<static_cast<unsigned>(rows), kThreads, 0,
                        static_cast<cudaStream_t>(stream)>>>(logits, static_cast<int32_t>(vocab),
                                                              stats);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    return absl::InternalError(absl::StrCat("LogitRowStatsOnDevice: ", cudaGetErrorString(error)));
  }
  return absl::OkStatus();
}

}  // namespace writescope::kernels::cuda
