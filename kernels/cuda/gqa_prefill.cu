// Causal GQA prefill of one chunk over a list of tiles, flash-attention style on tensor
// cores (mma.sync m16n8k16 bf16 -> fp32), with the precision contract of the decode
// (gqa_decode.cu): fp32 scores, P split into bf16 hi + lo for P V.
//
// Grid (q tile, kv head). A CTA's rows are (query, head of the kv head's group) pairs,
// row r = query (r / group), head (r % group): the whole group shares each K/V tile,
// and a q tile holds kRows / group queries. Each warp owns 16 rows and walks every key
// step of 64 keys: S = Q K^T (Q in registers, K from shared memory by ldmatrix), mask
// (key position <= query position, invalid tile slots), online softmax in base 2,
// O += P_hi V + P_lo V (V by ldmatrix.trans). K/V of the next step are fetched by
// cp.async into the other of two shared-memory stages while the current one computes.
// Invalid key slots are zero-filled (tile padding may hold NaN, and 0 * NaN = NaN).
// Key steps that no row of the CTA can see (all their keys after the CTA's last query)
// are skipped; q tiles of later queries (more keys) are scheduled first.
//
// Key steps index a virtual key range (prefill_util.cuh): tile i's slot j is key
// i * block_tokens + j.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/prefill_util.cuh"

namespace writescope::kernels::cuda::internal {
namespace {

constexpr int kPfKeys = 64;  // keys per step

template <int kDim, int kWarps>
__device__ __forceinline__ void LoadStep(const GqaPrefillParams& p, int32_t step, int kvh,
                                         uint16_t* k_s, uint16_t* v_s, int32_t* pos_s) {
  constexpr int kStride = kDim + 8;
  constexpr int kChunks = kDim / 8;  // 16-byte chunks of a row
  const int64_t head_tile = int64_t{p.block_tokens} * kDim;
  const int64_t v_in_tile = int64_t{p.num_kv_heads} * head_tile;
  for (int i = threadIdx.x; i < kPfKeys * kChunks; i += kWarps * 32) {
    const int key = i / kChunks, ch = i % kChunks;
    const int64_t t = int64_t{step} * kPfKeys + key;
    const int64_t tile = t / p.block_tokens;
    const int32_t slot = static_cast<int32_t>(t % p.block_tokens);
    const bool valid = tile < p.num_tiles && slot < __ldg(p.tile_tokens + tile);
    const uint16_t* k_row =
        valid ? p.tiles[tile] + kvh * head_tile + int64_t{slot} * kDim + ch * 8 : p.q;
    CpAsync16(k_s + key * kStride + ch * 8, k_row, valid ? 16 : 0);
    CpAsync16(v_s + key * kStride + ch * 8, valid ? k_row + v_in_tile : p.q, valid ? 16 : 0);
    if (ch == 0) {
      pos_s[key] = valid ? RelativePosition(__ldg(p.tile_positions + tile) + slot, p.query_position0)
                         : kPfInvalidPos;
    }
  }
}

template <int kDim, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) GqaPrefillTcKernel(GqaPrefillParams p) {
  constexpr int kStride = kDim + 8;  // +16 bytes: ldmatrix rows hit distinct banks
  constexpr int kKSteps = kDim / 16;
  constexpr int kNTiles = kDim / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* k_s = reinterpret_cast<uint16_t*>(smem_raw);  // [2][kPfKeys][kStride]
  uint16_t* v_s = k_s + 2 * kPfKeys * kStride;             // [2][kPfKeys][kStride]
  int32_t* pos_s = reinterpret_cast<int32_t*>(v_s + 2 * kPfKeys * kStride);  // [2][kPfKeys]

  const int group = p.num_q_heads / p.num_kv_heads;
  const int queries_per_cta = kWarps * 16 / group;
  const int num_qtiles = (p.num_queries + queries_per_cta - 1) / queries_per_cta;
  const int qtile = num_qtiles - 1 - static_cast<int>(blockIdx.x);  // late queries first
  const int kvh = blockIdx.y;
  const int first_query = qtile * queries_per_cta;
  const int last_query = min(p.num_queries, first_query + queries_per_cta) - 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, tig = lane % 4;

  // This thread's rows: warp * 16 + gid (g = 0) and + 8 (g = 1).
  int32_t qpos[2];  // relative query position; padding rows: below every clamped key
  int64_t out_row[2];
  uint32_t qf[kKSteps][4];
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    const int r = warp * 16 + gid + 8 * g;
    const int query = first_query + r / group;
    const bool valid = r < queries_per_cta * group && query < p.num_queries;
    qpos[g] = valid ? query : -(1 << 30) - 1;
    out_row[g] = valid ? int64_t{query} * p.num_q_heads + kvh * group + r % group : -1;
  }
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int g = i & 1;
      const int col = kk * 16 + 2 * tig + (i >> 1) * 8;
      qf[kk][i] = out_row[g] >= 0
                      ? *reinterpret_cast<const uint32_t*>(p.q + out_row[g] * kDim + col)
                      : 0u;
    }
  }

  float m[2] = {kNegInf, kNegInf}, l[2] = {0, 0};
  float acc[kNTiles][4];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0;

  const int32_t num_steps = NumSteps<kPfKeys>(p);
  int32_t step = NextStep<kPfKeys>(p, 0, num_steps, last_query);
  if (step < num_steps) LoadStep<kDim, kWarps>(p, step, kvh, k_s, v_s, pos_s);
  CpAsyncCommit();
  int stage = 0;
  while (step < num_steps) {
    const int32_t next = NextStep<kPfKeys>(p, step + 1, num_steps, last_query);
    if (next < num_steps) {
      const int o = (stage ^ 1) * kPfKeys;
      LoadStep<kDim, kWarps>(p, next, kvh, k_s + o * kStride, v_s + o * kStride, pos_s + o);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const uint16_t* ks = k_s + stage * kPfKeys * kStride;
    const uint16_t* vs = v_s + stage * kPfKeys * kStride;
    const int32_t* ps = pos_s + stage * kPfKeys;

    // S = Q K^T: n-tile j = keys 8 j .. 8 j + 7.
    float s[kPfKeys / 8][4];
#pragma unroll
    for (int j = 0; j < kPfKeys / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[j][i] = 0;
#pragma unroll
    for (int kc = 0; kc < kDim / 32; ++kc)
#pragma unroll
      for (int j = 0; j < kPfKeys / 8; ++j) {
        uint32_t b[4];
        LdMatrixX4(b, ks + (8 * j + lane % 8) * kStride + 32 * kc + 8 * (lane / 8));
        MmaBf16(s[j], qf[2 * kc], b[0], b[1]);
        MmaBf16(s[j], qf[2 * kc + 1], b[2], b[3]);
      }

    // Mask, online softmax (base 2). s[j][i]: row g = i / 2, key 8 j + 2 tig + i % 2.
    float step_max[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int j = 0; j < kPfKeys / 8; ++j) {
      const int2 kp = *reinterpret_cast<const int2*>(ps + 8 * j + 2 * tig);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int g = i >> 1;
        const int32_t key_pos = (i & 1) ? kp.y : kp.x;
        s[j][i] = key_pos <= qpos[g] ? s[j][i] * p.scale_log2 : kNegInf;
        step_max[g] = fmaxf(step_max[g], s[j][i]);
      }
    }
    float alpha[2], base[2];
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      step_max[g] = fmaxf(step_max[g], __shfl_xor_sync(0xffffffffu, step_max[g], 1));
      step_max[g] = fmaxf(step_max[g], __shfl_xor_sync(0xffffffffu, step_max[g], 2));
      const float m_new = fmaxf(m[g], step_max[g]);
      base[g] = m_new == kNegInf ? 0.0f : m_new;  // a row that has seen nothing stays empty
      alpha[g] = exp2f(m[g] - base[g]);           // m = -inf: 0
      m[g] = m_new;
    }
    float row_sum[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < kPfKeys / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[j][i] = exp2f(s[j][i] - base[i >> 1]);  // masked: 0
        row_sum[i >> 1] += s[j][i];
      }
#pragma unroll
    for (int g = 0; g < 2; ++g) l[g] = l[g] * alpha[g] + row_sum[g];
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      acc[n][0] *= alpha[0];
      acc[n][1] *= alpha[0];
      acc[n][2] *= alpha[1];
      acc[n][3] *= alpha[1];
    }

    // O += P V over 16-key k-steps; A = P of keys 16 kk.. from n-tiles 2 kk, 2 kk + 1.
#pragma unroll
    for (int kk = 0; kk < kPfKeys / 16; ++kk) {
      uint32_t hi[4], lo[4];
      SplitBf16(s[2 * kk][0], s[2 * kk][1], hi[0], lo[0]);
      SplitBf16(s[2 * kk][2], s[2 * kk][3], hi[1], lo[1]);
      SplitBf16(s[2 * kk + 1][0], s[2 * kk + 1][1], hi[2], lo[2]);
      SplitBf16(s[2 * kk + 1][2], s[2 * kk + 1][3], hi[3], lo[3]);
#pragma unroll
      for (int dp = 0; dp < kDim / 16; ++dp) {
        uint32_t b[4];
        LdMatrixX4Trans(b, vs + (16 * kk + lane % 8 + 8 * ((lane / 8) & 1)) * kStride + 16 * dp +
                               8 * (lane / 16));
        MmaBf16(acc[2 * dp], hi, b[0], b[1]);
        MmaBf16(acc[2 * dp + 1], hi, b[2], b[3]);
        MmaBf16(acc[2 * dp], lo, b[0], b[1]);
        MmaBf16(acc[2 * dp + 1], lo, b[2], b[3]);
      }
    }
    __syncthreads();  // the stage is refilled by the next iteration's loads
    step = next;
    stage ^= 1;
  }

#pragma unroll
  for (int g = 0; g < 2; ++g) {
    l[g] += __shfl_xor_sync(0xffffffffu, l[g], 1);
    l[g] += __shfl_xor_sync(0xffffffffu, l[g], 2);
    if (out_row[g] < 0) continue;
    const float inv = l[g] > 0 ? 1.0f / l[g] : 0.0f;
    float* o = p.o + out_row[g] * kDim;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      *reinterpret_cast<float2*>(o + 8 * n + 2 * tig) =
          make_float2(acc[n][2 * g] * inv, acc[n][2 * g + 1] * inv);
    }
    if (tig == 0) p.lse[out_row[g]] = l[g] > 0 ? (m[g] + log2f(l[g])) * kLn2 : kNegInf;
  }
}

template <int kDim, int kWarps>
int LaunchPrefill(const GqaPrefillParams& p, cudaStream_t stream) {
  constexpr int kSmem = 2 * 2 * kPfKeys * (kDim + 8) * 2 + 2 * kPfKeys * 4;
  auto kernel = GqaPrefillTcKernel<kDim, kWarps>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return static_cast<int>(err);
  const int group = p.num_q_heads / p.num_kv_heads;
  const int queries_per_cta = kWarps * 16 / group;
  const dim3 grid((p.num_queries + queries_per_cta - 1) / queries_per_cta, p.num_kv_heads);
  kernel<<<grid, kWarps * 32, kSmem, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

#ifndef WS_PREFILL_WARPS
#define WS_PREFILL_WARPS 8  // 128 rows per CTA: measured 1.25x faster than 4 warps on the H200
#endif

int LaunchGqaPrefill(const GqaPrefillParams& p, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (p.num_queries == 0) return cudaSuccess;
  if (p.num_q_heads / p.num_kv_heads > WS_PREFILL_WARPS * 16) return cudaErrorNotSupported;
  switch (p.head_dim) {
    case 64: return LaunchPrefill<64, WS_PREFILL_WARPS>(p, stream);
    case 128: return LaunchPrefill<128, WS_PREFILL_WARPS>(p, stream);
    default: return static_cast<int>(cudaErrorNotSupported);
  }
}

}  // namespace writescope::kernels::cuda::internal
