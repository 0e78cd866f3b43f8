// Split-KV GQA decode over the ping-pong tiles + the D-window.
//
// Grid (split, kv_head, seq); 4 warps. Each CTA covers `tokens_per_split` keys of one
// (seq, kv head) for the `group` query heads that share it, so K/V are read once per
// group. Warps take 32-token sub-tiles in turn:
//   scores: lane = token; the lane reads its K row (16-byte loads) and dots it with the
//           group's q held in shared memory (broadcast reads);
//   output: lane = head_dim/32 consecutive dims; V rows are read coalesced and the
//           probabilities come from the owning lane by shuffle.
// Scores are kept in base 2 (q pre-scaled by scale*log2 e) and converted back to a
// natural-log LSE when written. The warps' online-softmax states are merged in shared
// memory; the CTA writes one normalized partial per split, and merge_states.cu merges
// the splits.
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace writescope::kernels::cuda::internal {
namespace {

constexpr int kWarps = 4;

template <int kDim, int kGroup>
__global__ void __launch_bounds__(kWarps * 32)
    GqaDecodeSplitKernel(GqaParams p) {
  constexpr int kPerLane = kDim / 32;  // output dims owned by one lane
  const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = int64_t{seq} * p.num_q_heads + int64_t{kvh} * kGroup;

  __shared__ __align__(16) float q_s[kGroup][kDim];
  __shared__ float m_s[kWarps][kGroup], l_s[kWarps][kGroup];
  __shared__ float acc_s[kWarps][kGroup][kDim];

  for (int i = threadIdx.x; i < kGroup * kDim; i += blockDim.x) {
    q_s[i / kDim][i % kDim] = Bf16(p.q[row0 * kDim + i]) * p.scale_log2;
  }
  __syncthreads();

  const SeqKeys keys = LoadSeqKeys(p.kv, seq, p.block_tokens);
  const int32_t begin = split * p.tokens_per_split;
  const int32_t end = min(keys.total(), begin + p.tokens_per_split);
  const int64_t head_tile = int64_t{p.block_tokens} * kDim;  // one head's rows in a tile
  const int64_t head_window = int64_t{p.kv.window_capacity} * kDim;

  float m[kGroup], l[kGroup], acc[kGroup][kPerLane];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    m[h] = kNegInf;
    l[h] = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) acc[h][j] = 0;
  }

  for (int32_t t0 = begin + warp * 32; t0 < end; t0 += kWarps * 32) {
    const int32_t n = min(32, end - t0);
    // Row pointers of this lane's token.
    const int32_t t = t0 + lane;
    const uint16_t* k_row = nullptr;
    const uint16_t* v_row = nullptr;
    if (lane < n) {
      if (t < keys.tile_tokens) {
        const uint16_t* tile = keys.tiles + int64_t{t / p.block_tokens} * p.kv.tile_values;
        const int64_t off = int64_t{kvh} * head_tile + int64_t{t % p.block_tokens} * kDim;
        k_row = tile + off;
        v_row = tile + int64_t{p.num_kv_heads} * head_tile + off;
      } else {
        const int64_t off = int64_t{kvh} * head_window + int64_t{t - keys.tile_tokens} * kDim;
        k_row = keys.window + off;
        v_row = keys.window + int64_t{p.num_kv_heads} * head_window + off;
      }
    }
    float s[kGroup];
#pragma unroll
    for (int h = 0; h < kGroup; ++h) s[h] = 0;
    if (lane < n) {
#pragma unroll 4
      for (int d = 0; d < kDim; d += 8) {
        const uint4 raw = *reinterpret_cast<const uint4*>(k_row + d);
        const float k[8] = {Bf16Lo(raw.x), Bf16Hi(raw.x), Bf16Lo(raw.y), Bf16Hi(raw.y),
                            Bf16Lo(raw.z), Bf16Hi(raw.z), Bf16Lo(raw.w), Bf16Hi(raw.w)};
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          const float4 qa = *reinterpret_cast<const float4*>(&q_s[h][d]);
          const float4 qb = *reinterpret_cast<const float4*>(&q_s[h][d + 4]);
          s[h] += qa.x * k[0] + qa.y * k[1] + qa.z * k[2] + qa.w * k[3] + qb.x * k[4] +
                  qb.y * k[5] + qb.z * k[6] + qb.w * k[7];
        }
      }
    } else {
#pragma unroll
      for (int h = 0; h < kGroup; ++h) s[h] = kNegInf;
    }
    float prob[kGroup];
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      const float m_new = fmaxf(m[h], WarpMax(s[h]));  // finite: lane 0 is always valid
      const float alpha = exp2f(m[h] - m_new);         // m = -inf: 0
      prob[h] = exp2f(s[h] - m_new);                   // invalid lane: 0
      l[h] = l[h] * alpha + prob[h];                   // per-lane partial sum
      m[h] = m_new;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) acc[h][j] *= alpha;
    }
#pragma unroll 8
    for (int j = 0; j < n; ++j) {
      const uint16_t* v_j = reinterpret_cast<const uint16_t*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(v_row), j));
      float v[kPerLane];
      if constexpr (kPerLane == 4) {
        const uint2 raw = *reinterpret_cast<const uint2*>(v_j + lane * 4);
        v[0] = Bf16Lo(raw.x); v[1] = Bf16Hi(raw.x); v[2] = Bf16Lo(raw.y); v[3] = Bf16Hi(raw.y);
      } else if constexpr (kPerLane == 2) {
        const uint32_t raw = *reinterpret_cast<const uint32_t*>(v_j + lane * 2);
        v[0] = Bf16Lo(raw); v[1] = Bf16Hi(raw);
      } else {
#pragma unroll
        for (int i = 0; i < kPerLane; i += 2) {
          const uint32_t raw = *reinterpret_cast<const uint32_t*>(v_j + lane * kPerLane + i);
          v[i] = Bf16Lo(raw); v[i + 1] = Bf16Hi(raw);
        }
      }
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float pj = __shfl_sync(0xffffffffu, prob[h], j);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) acc[h][i] += pj * v[i];
      }
    }
  }

  // Merge the warps' states.
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    const float lsum = WarpSum(l[h]);
    if (lane == 0) {
      m_s[warp][h] = m[h];
      l_s[warp][h] = lsum;
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc_s[warp][h][lane * kPerLane + i] = acc[h][i];
  }
  __syncthreads();
  const int64_t rows = int64_t{p.num_seqs} * p.num_q_heads;
  float* part_o = p.part_o + (int64_t{split} * rows + row0) * kDim;
  float* part_lse = p.part_lse + int64_t{split} * rows + row0;
  for (int i = threadIdx.x; i < kGroup * kDim; i += blockDim.x) {
    const int h = i / kDim, d = i % kDim;
    float m_all = kNegInf;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, m_s[w][h]);
    float l_all = 0, o = 0;
    if (m_all != kNegInf) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float scale = exp2f(m_s[w][h] - m_all);
        l_all += scale * l_s[w][h];
        o += scale * acc_s[w][h][d];
      }
    }
    part_o[int64_t{h} * kDim + d] = l_all > 0 ? o / l_all : 0.0f;
    if (d == 0) part_lse[h] = l_all > 0 ? (m_all + log2f(l_all)) * kLn2 : kNegInf;
  }
}

template <int kDim, int kGroup>
int Launch(const GqaParams& p, cudaStream_t stream) {
  const dim3 grid(p.num_splits, p.num_kv_heads, p.num_seqs);
  GqaDecodeSplitKernel<kDim, kGroup><<<grid, kWarps * 32, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

template <int kDim>
int LaunchForGroup(const GqaParams& p, cudaStream_t stream) {
  switch (p.num_q_heads / p.num_kv_heads) {
    case 1: return Launch<kDim, 1>(p, stream);
    case 2: return Launch<kDim, 2>(p, stream);
    case 3: return Launch<kDim, 3>(p, stream);
    case 4: return Launch<kDim, 4>(p, stream);
    case 5: return Launch<kDim, 5>(p, stream);
    case 6: return Launch<kDim, 6>(p, stream);
    case 7: return Launch<kDim, 7>(p, stream);
    case 8: return Launch<kDim, 8>(p, stream);
    default: return static_cast<int>(cudaErrorNotSupported);
  }
}

}  // namespace

int LaunchGqaDecode(const GqaParams& p, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  int status;
  switch (p.head_dim) {
    case 64: status = LaunchForGroup<64>(p, stream); break;
    case 128: status = LaunchForGroup<128>(p, stream); break;
    case 256: status = LaunchForGroup<256>(p, stream); break;
    default: return static_cast<int>(cudaErrorNotSupported);
  }
  if (status != cudaSuccess) return status;
  return LaunchMergeSplits(p.part_o, p.part_lse, p.num_splits,
                           int64_t{p.num_seqs} * p.num_q_heads, p.head_dim, p.o, p.lse,
                           stream_ptr);
}

}  // namespace writescope::kernels::cuda::internal
