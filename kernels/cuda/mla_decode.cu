// Split-KV MLA (absorbed) decode over the ping-pong tiles + the D-window.
//
// Grid (split, seq); 4 warps sharing 32-token sub-tiles staged in shared memory:
//   scores: warp w scores heads 4w..4w+3, lane = token, over all 576 latent values;
//   softmax: the owning warp updates its 4 heads' running max/sum and publishes the
//            probabilities and rescale factors;
//   output: warp w accumulates latent dims [128w, 128w + 128) for all 16 heads, lane =
//           4 consecutive dims.
// CUDA cores in fp32 (exact bf16 widening): simple and exact, but at 16 heads the scores
// make it compute-bound before HBM-bound; a tensor-core (mma bf16) version is the
// known next step.
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace writescope::kernels::cuda::internal {
namespace {

constexpr int kWarps = 4;
constexpr int kHeads = 16;  // padded: heads beyond num_heads have q = 0, not written
constexpr int kRank = 512;
constexpr int kRope = 64;
constexpr int kRow = kRank + kRope;
constexpr int kRowStride = kRow + 8;  // bf16; breaks bank conflicts between token rows
constexpr int kSub = 32;

struct __align__(16) MlaShared {
  float q[kHeads][kRow];
  uint16_t rows[kSub][kRowStride];
  float p[kHeads][kSub];
  float alpha[kHeads];
  float l[kHeads];
  float m[kHeads];
};

__global__ void __launch_bounds__(kWarps * 32) MlaDecodeSplitKernel(MlaParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  MlaShared& sh = *reinterpret_cast<MlaShared*>(smem_raw);
  const int split = blockIdx.x, seq = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int i = threadIdx.x; i < kHeads * kRow; i += blockDim.x) {
    const int h = i / kRow;
    sh.q[h][i % kRow] =
        h < p.num_heads ? Bf16(p.q[(int64_t{seq} * p.num_heads + h) * kRow + i % kRow]) * p.scale_log2
                        : 0.0f;
  }
  const SeqKeys keys = LoadSeqKeys(p.kv, seq, p.block_tokens);
  const int32_t begin = split * p.tokens_per_split;
  const int32_t end = min(keys.total(), begin + p.tokens_per_split);

  float m[4], l[4];  // this warp's heads 4w..4w+3
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    m[h] = kNegInf;
    l[h] = 0;
  }
  float acc[kHeads][4];
#pragma unroll
  for (int h = 0; h < kHeads; ++h)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[h][i] = 0;

  for (int32_t t0 = begin; t0 < end; t0 += kSub) {
    const int32_t n = min(kSub, end - t0);
    __syncthreads();  // previous sub-tile fully consumed (and q written, first time)
    for (int i = threadIdx.x; i < kSub * (kRow / 8); i += blockDim.x) {
      const int r = i / (kRow / 8), c = (i % (kRow / 8)) * 8;
      uint4 value = make_uint4(0, 0, 0, 0);  // zeros for invalid tokens: 0 * p stays 0
      if (r < n) {
        const int32_t t = t0 + r;
        const uint16_t* row =
            t < keys.tile_tokens
                ? keys.Tile(t / p.block_tokens) + int64_t{t % p.block_tokens} * kRow
                : keys.window + int64_t{t - keys.tile_tokens} * kRow;
        value = *reinterpret_cast<const uint4*>(row + c);
      }
      *reinterpret_cast<uint4*>(&sh.rows[r][c]) = value;
    }
    __syncthreads();

    float s[4] = {0, 0, 0, 0};
#pragma unroll 4
    for (int c = 0; c < kRow; c += 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(&sh.rows[lane][c]);
      const float k[8] = {Bf16Lo(raw.x), Bf16Hi(raw.x), Bf16Lo(raw.y), Bf16Hi(raw.y),
                          Bf16Lo(raw.z), Bf16Hi(raw.z), Bf16Lo(raw.w), Bf16Hi(raw.w)};
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const float4 qa = *reinterpret_cast<const float4*>(&sh.q[4 * warp + h][c]);
        const float4 qb = *reinterpret_cast<const float4*>(&sh.q[4 * warp + h][c + 4]);
        s[h] += qa.x * k[0] + qa.y * k[1] + qa.z * k[2] + qa.w * k[3] + qb.x * k[4] +
                qb.y * k[5] + qb.z * k[6] + qb.w * k[7];
      }
    }
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const float score = lane < n ? s[h] : kNegInf;
      const float m_new = fmaxf(m[h], WarpMax(score));
      const float alpha = exp2f(m[h] - m_new);
      const float prob = exp2f(score - m_new);
      l[h] = l[h] * alpha + prob;
      m[h] = m_new;
      sh.p[4 * warp + h][lane] = prob;
      if (lane == 0) sh.alpha[4 * warp + h] = alpha;
    }
    __syncthreads();

    const int d0 = warp * 128 + lane * 4;
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      const float alpha = sh.alpha[h];
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[h][i] *= alpha;
    }
    for (int j = 0; j < n; ++j) {
      const uint2 raw = *reinterpret_cast<const uint2*>(&sh.rows[j][d0]);
      const float v[4] = {Bf16Lo(raw.x), Bf16Hi(raw.x), Bf16Lo(raw.y), Bf16Hi(raw.y)};
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float pj = sh.p[h][j];
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[h][i] += pj * v[i];
      }
    }
  }

#pragma unroll
  for (int h = 0; h < 4; ++h) {
    const float lsum = WarpSum(l[h]);
    if (lane == 0) {
      sh.l[4 * warp + h] = lsum;
      sh.m[4 * warp + h] = m[h];
    }
  }
  __syncthreads();
  const int64_t rows = int64_t{p.num_seqs} * p.num_heads;
  const int d0 = warp * 128 + lane * 4;
  for (int h = 0; h < p.num_heads; ++h) {
    const float lsum = sh.l[h];
    const float inv = lsum > 0 ? 1.0f / lsum : 0.0f;
    const int64_t row = int64_t{seq} * p.num_heads + h;
    float4 out = make_float4(acc[h][0] * inv, acc[h][1] * inv, acc[h][2] * inv, acc[h][3] * inv);
    *reinterpret_cast<float4*>(p.part_o + (int64_t{split} * rows + row) * kRank + d0) = out;
    if (threadIdx.x == 0) {
      p.part_lse[int64_t{split} * rows + row] = lsum > 0 ? (sh.m[h] + log2f(lsum)) * kLn2 : kNegInf;
    }
  }
}

}  // namespace

int LaunchMlaDecode(const MlaParams& p, void* stream_ptr) {
  if (p.kv_lora_rank != kRank || p.rope_dim != kRope || p.num_heads > kHeads) {
    return static_cast<int>(cudaErrorNotSupported);
  }
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const int smem = static_cast<int>(sizeof(MlaShared));
  // Per device and cheap; done on every launch so any current device is covered.
  const cudaError_t attr = cudaFuncSetAttribute(
      MlaDecodeSplitKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess) return static_cast<int>(attr);
  const dim3 grid(p.num_splits, p.num_seqs);
  MlaDecodeSplitKernel<<<grid, kWarps * 32, smem, stream>>>(p);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return static_cast<int>(launched);
  return LaunchMergeSplits(p.part_o, p.part_lse, p.num_splits,
                           int64_t{p.num_seqs} * p.num_heads, p.kv_lora_rank, p.o, p.lse,
                           stream_ptr);
}

}  // namespace writescope::kernels::cuda::internal
