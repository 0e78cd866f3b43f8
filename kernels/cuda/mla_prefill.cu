// Causal MLA (absorbed) prefill of one chunk over a list of tiles, on tensor cores
// (mma.sync m16n8k16 bf16 -> fp32), with the precision contract of the MLA decode
// (mla_decode.cu): fp32 scores, P split into bf16 hi + lo for P V.
//
// One CTA per kQueries queries (later queries first: they see more keys). Its rows are
// (query, head) pairs, row r = query r / 16, head r % 16 (heads beyond num_heads have
// q = 0 and are not written), so each query's 16 heads are one m-tile of 16 and every
// staged latent row serves kQueries * 16 rows. 8 warps walk the keys in steps of 32
// latent rows (576 bf16: 512 latent + 64 rope), staged by cp.async in two stages, the
// next step loading while this one computes:
//   S = Q K^T: warp w takes m-tile w % kQueries and the k-group w / kQueries of the 36
//     k-steps of 16 dims (kKGroups groups), for all 32 keys; its Q fragments stay in
//     registers. The partial S of each k-group go to shared memory.
//   Softmax: warp w owns rows kRowsPerWarp * w + i (lane = key): it sums the partials,
//     masks (key position <= the row's query position; invalid slots), updates the
//     running max and sum in base 2 and publishes P as bf16 hi + lo and each row's
//     rescale factor.
//   O += P_hi V + P_lo V: warp w owns latent dims [64 w, 64 w + 64) of every row; each V
//     fragment (ldmatrix.trans of the first 512 values of the staged rows) feeds all
//     kQueries m-tiles.
// Invalid key slots are zero-filled (tile padding may hold NaN, and 0 * NaN = NaN) and
// masked. Key steps that no row of the CTA can see are skipped (prefill_util.cuh).
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/prefill_util.cuh"

namespace writescope::kernels::cuda::internal {
namespace {

constexpr int kWarps = 8;
constexpr int kHeads = 16;  // padded
constexpr int kRank = 512;
constexpr int kRope = 64;
constexpr int kRow = kRank + kRope;
constexpr int kRowStride = kRow + 8;  // bf16: ldmatrix rows hit distinct banks
constexpr int kKeys = 32;             // keys per step
constexpr int kPStride = kKeys + 8;   // bf16
constexpr int kSStride = kKeys + 1;   // floats
constexpr int kVecsPerRow = kRow / 8;  // 16-byte copies per latent row: 72
constexpr int kDimsPerWarp = kRank / kWarps;  // P V: 64
constexpr int kNTiles = kDimsPerWarp / 8;     // 8

template <int kQueries>
struct Layout {
  static constexpr int kRows = kQueries * kHeads;
  static constexpr int kKGroups = kWarps / kQueries;             // S's warps per m-tile
  static constexpr int kKSteps = kRow / 16 / kKGroups;           // k-steps per warp
  static constexpr int kRowsPerWarp = kRows / kWarps;            // softmax
  static_assert(kRow / 16 % kKGroups == 0, "whole k-groups");
  static_assert(kRows % kWarps == 0, "whole softmax rows per warp");
};

template <int kQueries>
struct __align__(16) PrefillShared {
  static constexpr int kRows = Layout<kQueries>::kRows;
  uint16_t rows[2][kKeys][kRowStride];
  int32_t pos[2][kKeys];  // relative key positions; kPfInvalidPos: no key
  float s[Layout<kQueries>::kKGroups][kRows][kSStride];
  uint16_t p_hi[kRows][kPStride];
  uint16_t p_lo[kRows][kPStride];
  float alpha[kRows];
  float m[kRows];
  float l[kRows];
};

// Stages key step `step` into stage_rows / stage_pos. Thread i copies latent row i / 8,
// 16-byte pieces i % 8, i % 8 + 8, ... (as the decode's LoadChunk does).
constexpr int kThreadsPerRow = kWarps * 32 / kKeys;  // 8
static_assert(kVecsPerRow % kThreadsPerRow == 0, "whole pieces per thread");
__device__ __forceinline__ void LoadStep(const MlaPrefillParams& p, int32_t step,
                                         uint16_t (*stage_rows)[kRowStride], int32_t* stage_pos) {
  const int r = threadIdx.x / kThreadsPerRow, first = threadIdx.x % kThreadsPerRow;
  const int64_t t = int64_t{step} * kKeys + r;
  const int64_t tile = t / p.block_tokens;
  const int32_t slot = static_cast<int32_t>(t % p.block_tokens);
  const bool valid = tile < p.num_tiles && slot < __ldg(p.tile_tokens + tile);
  const uint16_t* src = valid ? p.tiles[tile] + int64_t{slot} * kRow : p.q;
#pragma unroll
  for (int v = first; v < kVecsPerRow; v += kThreadsPerRow) {
    CpAsync16(&stage_rows[r][8 * v], valid ? src + 8 * v : src, valid ? 16 : 0);
  }
  if (first == 0) {
    stage_pos[r] = valid ? RelativePosition(__ldg(p.tile_positions + tile) + slot, p.query_position0)
                         : kPfInvalidPos;
  }
}

template <int kQueries, int kCtasPerSm>
__global__ void __launch_bounds__(kWarps * 32, kCtasPerSm) MlaPrefillTcKernel(MlaPrefillParams p) {
  using L = Layout<kQueries>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  PrefillShared<kQueries>& sh = *reinterpret_cast<PrefillShared<kQueries>*>(smem_raw);
  const int num_ctas = (p.num_queries + kQueries - 1) / kQueries;
  const int first_query = (num_ctas - 1 - static_cast<int>(blockIdx.x)) * kQueries;
  const int last_query = min(p.num_queries, first_query + kQueries) - 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, tig = lane % 4;  // mma fragment row / column pair
  const int mtile = warp % kQueries, kgroup = warp / kQueries;

  // Q fragments of this warp's k-steps: m-tile rows gid and gid + 8 (heads) of query
  // first_query + mtile, dims 16 kk + 2 tig + {0, 1} and + 8.
  uint32_t qf[L::kKSteps][4];
  {
    const int query = first_query + mtile;
    const bool q_ok = query <= last_query;
    const bool lo_ok = q_ok && gid < p.num_heads, hi_ok = q_ok && gid + 8 < p.num_heads;
    const uint16_t* q = p.q + int64_t{q_ok ? query : 0} * p.num_heads * kRow;
#pragma unroll
    for (int i = 0; i < L::kKSteps; ++i) {
      const int d = 16 * (L::kKSteps * kgroup + i) + 2 * tig;
      const uint16_t* lo = q + gid * kRow + d;
      const uint16_t* hi = q + (gid + 8) * kRow + d;
      qf[i][0] = lo_ok ? *reinterpret_cast<const uint32_t*>(lo) : 0u;
      qf[i][1] = hi_ok ? *reinterpret_cast<const uint32_t*>(hi) : 0u;
      qf[i][2] = lo_ok ? *reinterpret_cast<const uint32_t*>(lo + 8) : 0u;
      qf[i][3] = hi_ok ? *reinterpret_cast<const uint32_t*>(hi + 8) : 0u;
    }
  }

  // Softmax state of rows kRowsPerWarp * warp + i; l: this lane's share. A padding row's
  // query position lies below every clamped key position: it sees nothing.
  float m[L::kRowsPerWarp], l[L::kRowsPerWarp];
  int32_t qpos[L::kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < L::kRowsPerWarp; ++i) {
    const int query = first_query + (L::kRowsPerWarp * warp + i) / kHeads;
    m[i] = kNegInf;
    l[i] = 0;
    qpos[i] = query <= last_query ? query : -(1 << 30) - 1;
  }
  float acc[kQueries][kNTiles][4];
#pragma unroll
  for (int mt = 0; mt < kQueries; ++mt)
#pragma unroll
    for (int n = 0; n < kNTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][n][i] = 0;

  const int32_t num_steps = NumSteps<kKeys>(p);
  int32_t step = NextStep<kKeys>(p, 0, num_steps, last_query);
  if (step < num_steps) LoadStep(p, step, sh.rows[0], sh.pos[0]);
  CpAsyncCommit();
  int stage = 0;
  while (step < num_steps) {
    const int32_t next = NextStep<kKeys>(p, step + 1, num_steps, last_query);
    if (next < num_steps) LoadStep(p, next, sh.rows[stage ^ 1], sh.pos[stage ^ 1]);
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const uint16_t(*rows)[kRowStride] = sh.rows[stage];

    // Partial S over this warp's k-group, n-tile n = keys 8 n .. 8 n + 7. ldmatrix of rows
    // (keys) 8 n + lane % 8, dims 16 kk + 8 (lane / 8): (b0, b1) of k-steps kk and kk + 1;
    // x2 for an odd last one.
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      float s[4] = {0, 0, 0, 0};
      const uint16_t* k_row = rows[8 * n + lane % 8] + 16 * L::kKSteps * kgroup;
#pragma unroll
      for (int i = 0; i + 1 < L::kKSteps; i += 2) {
        uint32_t b[4];
        LdMatrixX4(b, k_row + 16 * i + 8 * (lane / 8));
        MmaBf16(s, qf[i], b[0], b[1]);
        MmaBf16(s, qf[i + 1], b[2], b[3]);
      }
      if constexpr (L::kKSteps % 2 == 1) {
        uint32_t b[2];
        LdMatrixX2(b, k_row + 16 * (L::kKSteps - 1) + 8 * ((lane / 8) % 2));
        MmaBf16(s, qf[L::kKSteps - 1], b[0], b[1]);
      }
      const int t = 8 * n + 2 * tig;
      const int r = kHeads * mtile + gid;
      sh.s[kgroup][r][t] = s[0];
      sh.s[kgroup][r][t + 1] = s[1];
      sh.s[kgroup][r + 8][t] = s[2];
      sh.s[kgroup][r + 8][t + 1] = s[3];
    }
    __syncthreads();

    // Online softmax of this warp's rows; lane = key.
    const int32_t key_pos = sh.pos[stage][lane];
#pragma unroll
    for (int i = 0; i < L::kRowsPerWarp; ++i) {
      const int row = L::kRowsPerWarp * warp + i;
      float x = 0;
#pragma unroll
      for (int g = 0; g < L::kKGroups; ++g) x += sh.s[g][row][lane];
      x = key_pos <= qpos[i] ? x * p.scale_log2 : kNegInf;
      const float m_new = fmaxf(m[i], WarpMax(x));
      const float base = m_new == kNegInf ? 0.0f : m_new;  // a row that has seen nothing stays empty
      const float alpha = exp2f(m[i] - base);              // m = -inf: 0
      const float prob = exp2f(x - base);                  // masked: 0
      l[i] = l[i] * alpha + prob;
      m[i] = m_new;
      // Lane pairs publish two keys' hi and lo at once.
      const float next_prob = __shfl_down_sync(0xffffffffu, prob, 1);
      if (lane % 2 == 0) {
        uint32_t hi, lo;
        SplitBf16(prob, next_prob, hi, lo);
        *reinterpret_cast<uint32_t*>(&sh.p_hi[row][lane]) = hi;
        *reinterpret_cast<uint32_t*>(&sh.p_lo[row][lane]) = lo;
      }
      if (lane == 0) sh.alpha[row] = alpha;
    }
    __syncthreads();

    // O += P V over this warp's dims, every m-tile.
#pragma unroll
    for (int mt = 0; mt < kQueries; ++mt) {
      const float alpha_lo = sh.alpha[kHeads * mt + gid], alpha_hi = sh.alpha[kHeads * mt + gid + 8];
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
        acc[mt][n][0] *= alpha_lo;
        acc[mt][n][1] *= alpha_lo;
        acc[mt][n][2] *= alpha_hi;
        acc[mt][n][3] *= alpha_hi;
      }
    }
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) {
      const int k0 = 16 * ks + 2 * tig;
      uint32_t a_hi[kQueries][4], a_lo[kQueries][4];
#pragma unroll
      for (int mt = 0; mt < kQueries; ++mt) {
        const int r = kHeads * mt + gid;
        a_hi[mt][0] = *reinterpret_cast<const uint32_t*>(&sh.p_hi[r][k0]);
        a_hi[mt][1] = *reinterpret_cast<const uint32_t*>(&sh.p_hi[r + 8][k0]);
        a_hi[mt][2] = *reinterpret_cast<const uint32_t*>(&sh.p_hi[r][k0 + 8]);
        a_hi[mt][3] = *reinterpret_cast<const uint32_t*>(&sh.p_hi[r + 8][k0 + 8]);
        a_lo[mt][0] = *reinterpret_cast<const uint32_t*>(&sh.p_lo[r][k0]);
        a_lo[mt][1] = *reinterpret_cast<const uint32_t*>(&sh.p_lo[r + 8][k0]);
        a_lo[mt][2] = *reinterpret_cast<const uint32_t*>(&sh.p_lo[r][k0 + 8]);
        a_lo[mt][3] = *reinterpret_cast<const uint32_t*>(&sh.p_lo[r + 8][k0 + 8]);
      }
      // ldmatrix.trans of rows (keys) 16 ks + lane % 16, dims d0 + 8 (lane / 16): the B
      // fragments (b0, b1) of n-tiles 2 j and 2 j + 1.
      const uint16_t* v = &rows[16 * ks + lane % 16][warp * kDimsPerWarp + 8 * (lane / 16)];
#pragma unroll
      for (int j = 0; j < kNTiles / 2; ++j) {
        uint32_t b[4];
        LdMatrixX4Trans(b, v + 16 * j);
#pragma unroll
        for (int mt = 0; mt < kQueries; ++mt) {
          MmaBf16(acc[mt][2 * j], a_hi[mt], b[0], b[1]);
          MmaBf16(acc[mt][2 * j], a_lo[mt], b[0], b[1]);
          MmaBf16(acc[mt][2 * j + 1], a_hi[mt], b[2], b[3]);
          MmaBf16(acc[mt][2 * j + 1], a_lo[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // this stage is refilled by the next iteration's loads
    step = next;
    stage ^= 1;
  }

#pragma unroll
  for (int i = 0; i < L::kRowsPerWarp; ++i) {
    const float lsum = WarpSum(l[i]);
    if (lane == 0) {
      sh.l[L::kRowsPerWarp * warp + i] = lsum;
      sh.m[L::kRowsPerWarp * warp + i] = m[i];
    }
  }
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kQueries; ++mt) {
    const int query = first_query + mt;
    if (query > last_query) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int head = gid + 8 * half;
      if (head >= p.num_heads) continue;
      const float lsum = sh.l[kHeads * mt + head];
      const float inv = lsum > 0 ? 1.0f / lsum : 0.0f;
      float* o = p.o + (int64_t{query} * p.num_heads + head) * kRank;
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
        const int d = warp * kDimsPerWarp + 8 * n + 2 * tig;
        *reinterpret_cast<float2*>(o + d) =
            make_float2(acc[mt][n][2 * half] * inv, acc[mt][n][2 * half + 1] * inv);
      }
    }
  }
  if (threadIdx.x < L::kRows) {
    const int row = threadIdx.x;
    const int query = first_query + row / kHeads, head = row % kHeads;
    if (query <= last_query && head < p.num_heads) {
      const float lsum = sh.l[row];
      p.lse[int64_t{query} * p.num_heads + head] = lsum > 0 ? (sh.m[row] + log2f(lsum)) * kLn2 : kNegInf;
    }
  }
}

template <int kQueries, int kCtasPerSm>
int Launch(const MlaPrefillParams& p, cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(PrefillShared<kQueries>));
  auto kernel = MlaPrefillTcKernel<kQueries, kCtasPerSm>;
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess) return static_cast<int>(attr);
  const int ctas = (p.num_queries + kQueries - 1) / kQueries;
  kernel<<<ctas, kWarps * 32, smem, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

// Two queries (m-tiles of 16 heads) per CTA: the most whose Q fragments and accumulators fit
// the registers. Launch bounds of 2 CTAs per SM cap the registers at 128 (168 bytes of
// spills, ptxas -v); 1 CTA per SM needs 174 and spills nothing, but ran 1.42-1.52x slower on
// the H200 (run 134): the kernel wants the warps more than the registers.
constexpr int kQueriesPerCta = 2;
constexpr int kDefaultCtasPerSm = 2;

int LaunchMlaPrefill(const MlaPrefillParams& p, void* stream_ptr, int ctas_per_sm) {
  if (p.kv_lora_rank != kRank || p.rope_dim != kRope || p.num_heads > kHeads) {
    return static_cast<int>(cudaErrorNotSupported);
  }
  if (p.num_queries == 0) return cudaSuccess;
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  switch (ctas_per_sm == 0 ? kDefaultCtasPerSm : ctas_per_sm) {
    case 1: return Launch<kQueriesPerCta, 1>(p, stream);
    case 2: return Launch<kQueriesPerCta, 2>(p, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace writescope::kernels::cuda::internal
