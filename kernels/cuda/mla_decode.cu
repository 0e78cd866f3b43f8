// Split-KV MLA (absorbed) decode over the ping-pong tiles + the D-window, on tensor cores.
//
// Grid (split, seq); 8 warps walk the split in chunks of 32 latent rows (576 bf16 each:
// 512 latent + 64 rope), staged in shared memory by cp.async, two stages: the next
// chunk loads while this one computes (86 KB of shared memory: 2 CTAs per SM). All 16
// heads (padded with zero rows) share each row, so the 16 heads are the M = 16 of
// mma.sync m16n8k16 (bf16 -> fp32):
//   S = Q K^T: the 36 k-steps of 16 dims form 4 groups of 9; warp w takes k-group w % 4
//     for 16 of the chunk's tokens (w / 4 picks which). Its Q fragments stay in registers
//     for the whole split; K comes by ldmatrix. The four partial S go to shared memory.
//   Softmax: warp w owns heads 2w, 2w + 1 (lane = token): it sums the four partials,
//     scales to base 2, updates the running max / sum, and publishes P as bf16 hi + lo
//     (P keeps ~16 mantissa bits: the contract compares to an fp64 reference at 2e-5)
//     and each head's rescale factor. A head's max is raised only when a score passes it
//     by more than 2^8 (one vote; session 25: with the rows' tile positions tracked
//     instead of divided, 19 % fewer instructions at 32K x 1 and 0.97-1.07x the speed of
//     the kernel before, runs 140 and 142 on two leases).
//   O += P_hi V + P_lo V: warp w owns latent dims [64 w, 64 w + 64) for all 16 heads
//     (8 n-tiles of 8 dims), rescaled first in the chunks where some head's max rose; V is
//     the first 512 values of the staged rows, read by ldmatrix.trans.
// Invalid rows are zero-filled (tile padding may hold NaN) and masked to -inf. Scores are
// kept in base 2 inside and written as a natural-log LSE. Each split writes a normalized
// partial; merge_states.cu merges the splits. Replaced a CUDA-core kernel that was
// compute-bound at ~12 TFLOP/s (9 % of HBM); measured in docs/measurements.md.
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma_util.cuh"

namespace writescope::kernels::cuda::internal {
namespace {

constexpr int kWarps = 8;
constexpr int kHeads = 16;  // padded: heads beyond num_heads have q = 0, not written
constexpr int kRank = 512;
constexpr int kRope = 64;
constexpr int kRow = kRank + kRope;
constexpr int kRowStride = kRow + 8;  // bf16: rows 1168 B apart, ldmatrix rows hit distinct banks
constexpr int kChunk = 32;            // tokens per chunk
constexpr int kKGroups = 4;           // S: the 36 k-steps in 4 groups of 9
constexpr int kKStepsPerGroup = kRow / 16 / kKGroups;     // 9
constexpr int kTokenGroups = kWarps / kKGroups;           // 2: S's warps per k-group
constexpr int kNtPerWarp = kChunk / 8 / kTokenGroups;     // S n-tiles (8 tokens) per warp
constexpr int kHeadsPerWarp = kHeads / kWarps;            // softmax
constexpr int kDimsPerWarp = kRank / kWarps;              // P V: 64
constexpr int kNTiles = kDimsPerWarp / 8;                 // 8
constexpr int kPStride = kChunk + 8;              // bf16
constexpr int kSStride = kChunk + 1;              // floats
constexpr int kVecsPerRow = kRow / 8;             // 16-byte copies per row: 72

template <int kStages>
struct __align__(16) MlaShared {
  uint16_t rows[kStages][kChunk][kRowStride];
  float s[kKGroups][kHeads][kSStride];  // each k-group's partial S
  uint16_t p_hi[kHeads][kPStride];
  uint16_t p_lo[kHeads][kPStride];
  float alpha[kHeads];
  float m[kHeads];
  float l[kHeads];
  int rescaled;  // this chunk raised some head's max: O is rescaled by alpha
};

// Stages rows [t0, t0 + kChunk) of the split (those >= end zero-filled). Thread i copies
// row i / 8, 16-byte pieces i % 8, i % 8 + 8, ...: one row address per thread, and a warp's
// copies of one instruction cover 128 contiguous bytes of each of its 4 rows. `pos` holds
// this thread's row of the chunk as a tile and an offset in it; it advances by the chunk.
constexpr int kThreadsPerRow = kWarps * 32 / kChunk;  // 8
static_assert(kVecsPerRow % kThreadsPerRow == 0, "whole pieces per thread");
__device__ __forceinline__ void LoadChunk(uint16_t (*stage_rows)[kRowStride],
                                          const SeqKeys& keys, const MlaParams& p, int32_t t0,
                                          int32_t end, TilePos& pos) {
  const int r = threadIdx.x / kThreadsPerRow, first = threadIdx.x % kThreadsPerRow;
  const int32_t t = t0 + r;
  const uint16_t* src = p.q;  // any valid address when nothing is read
  int bytes = 0;
  if (t < end) {
    src = t < keys.tile_tokens ? keys.Tile(pos.tile) + int64_t{pos.off} * kRow
                               : keys.window + int64_t{t - keys.tile_tokens} * kRow;
    bytes = 16;
  }
#pragma unroll
  for (int v = first; v < kVecsPerRow; v += kThreadsPerRow) {
    CpAsync16(&stage_rows[r][8 * v], bytes != 0 ? src + 8 * v : src, bytes);
  }
  pos.Advance(kChunk, p.block_tokens);
}

// The running max of a head is raised only when a chunk's scores pass it by more than this
// (base 2): most chunks then skip the max's reduction (one vote instead of five shuffles)
// and the rescale of O, and P may reach 2^8, which fp32 sums and the bf16 hi + lo split of P
// carry without loss.
constexpr float kRescaleLog2 = 8.0f;

// 2 CTAs of 256 threads per SM cap the registers at 128: ptxas reports exactly 128 and no
// spills for kStages = 2 (check -Xptxas -v after any change: growth spills silently). The
// split rule plans its waves with the same number (launch.h).
template <int kStages>
__global__ void __launch_bounds__(kWarps * 32, kMlaTensorCoreSplits.ctas_per_sm)
    MlaDecodeTcKernel(MlaParams p) {
  LaunchDependentGrids();  // the split merge may launch now (it waits for this grid's end)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  MlaShared<kStages>& sh = *reinterpret_cast<MlaShared<kStages>*>(smem_raw);
  const int split = blockIdx.x, seq = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, tig = lane % 4;  // mma fragment row / column pair
  const int kgroup = warp % kKGroups, tgroup = warp / kKGroups;

  const SeqKeys keys = LoadSeqKeys(p.kv, seq, p.block_tokens);
  const int32_t begin = split * p.tokens_per_split;
  const int32_t end = min(keys.total(), begin + p.tokens_per_split);
  TilePos pos = TilePos::Of(begin + static_cast<int32_t>(threadIdx.x) / kThreadsPerRow,
                            p.block_tokens);
  if (threadIdx.x == 0) sh.rescaled = 0;  // published by the first chunk's barrier
  // Chunks 0 .. kStages - 2 in flight; one group per chunk, empty past the end, so that
  // waiting for all but kStages - 1 groups always means "this chunk has landed".
#pragma unroll
  for (int c = 0; c + 1 < kStages; ++c) {
    const int32_t t0 = begin + c * kChunk;
    if (t0 < end) LoadChunk(sh.rows[c], keys, p, t0, end, pos);
    CpAsyncCommit();
  }

  // Q fragments of this warp's k-steps: rows gid and gid + 8 (heads), dims
  // 16 kk + 2 tig + {0, 1} and + 8.
  uint32_t qf[kKStepsPerGroup][4];
  {
    const uint16_t* q = p.q + int64_t{seq} * p.num_heads * kRow;
    const bool lo_ok = gid < p.num_heads, hi_ok = gid + 8 < p.num_heads;
#pragma unroll
    for (int i = 0; i < kKStepsPerGroup; ++i) {
      const int d = 16 * (kKStepsPerGroup * kgroup + i) + 2 * tig;
      const uint16_t* lo = q + gid * kRow + d;
      const uint16_t* hi = q + (gid + 8) * kRow + d;
      qf[i][0] = lo_ok ? *reinterpret_cast<const uint32_t*>(lo) : 0u;
      qf[i][1] = hi_ok ? *reinterpret_cast<const uint32_t*>(hi) : 0u;
      qf[i][2] = lo_ok ? *reinterpret_cast<const uint32_t*>(lo + 8) : 0u;
      qf[i][3] = hi_ok ? *reinterpret_cast<const uint32_t*>(hi + 8) : 0u;
    }
  }

  float m[kHeadsPerWarp], l[kHeadsPerWarp];  // heads kHeadsPerWarp * warp + h; l: this lane's share
#pragma unroll
  for (int h = 0; h < kHeadsPerWarp; ++h) {
    m[h] = kNegInf;
    l[h] = 0;
  }
  float acc[kNTiles][4];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0;

  int stage = 0;
  for (int32_t t0 = begin; t0 < end; t0 += kChunk, stage = stage + 1 == kStages ? 0 : stage + 1) {
    const int32_t ahead = t0 + (kStages - 1) * kChunk;
    if (ahead < end) {
      LoadChunk(sh.rows[stage == 0 ? kStages - 1 : stage - 1], keys, p, ahead, end, pos);
    }
    CpAsyncCommit();
    CpAsyncWait<kStages - 1>();
    __syncthreads();
    const uint16_t(*rows)[kRowStride] = sh.rows[stage];

    // Partial S over this warp's k-group, for its n-tiles of 8 tokens. ldmatrix of rows
    // (tokens) 8 nt + lane % 8, dims 16 kk + 8 (lane / 8): (b0, b1) of k-steps kk and
    // kk + 1; x2 (lanes 0-15 addressing) for the last, odd one.
    float s[kNtPerWarp][4];
#pragma unroll
    for (int n = 0; n < kNtPerWarp; ++n) {
      const int nt = kNtPerWarp * tgroup + n;
#pragma unroll
      for (int i = 0; i < 4; ++i) s[n][i] = 0;
      const uint16_t* k_row = rows[8 * nt + lane % 8] + 16 * kKStepsPerGroup * kgroup;
#pragma unroll
      for (int i = 0; i + 1 < kKStepsPerGroup; i += 2) {
        uint32_t b[4];
        LdMatrixX4(b, k_row + 16 * i + 8 * (lane / 8));
        MmaBf16(s[n], qf[i], b[0], b[1]);
        MmaBf16(s[n], qf[i + 1], b[2], b[3]);
      }
      if constexpr (kKStepsPerGroup % 2 == 1) {
        uint32_t b[2];
        LdMatrixX2(b, k_row + 16 * (kKStepsPerGroup - 1) + 8 * ((lane / 8) % 2));
        MmaBf16(s[n], qf[kKStepsPerGroup - 1], b[0], b[1]);
      }
    }
#pragma unroll
    for (int n = 0; n < kNtPerWarp; ++n) {
      const int t = 8 * (kNtPerWarp * tgroup + n) + 2 * tig;
      sh.s[kgroup][gid][t] = s[n][0];
      sh.s[kgroup][gid][t + 1] = s[n][1];
      sh.s[kgroup][gid + 8][t] = s[n][2];
      sh.s[kgroup][gid + 8][t + 1] = s[n][3];
    }
    __syncthreads();

    // Online softmax of this warp's heads; lane = token. A head's max is raised (and its
    // alpha published, the chunk marked rescaled) only when a score passes it by more than
    // kRescaleLog2; the first chunk always does (m = -inf), with alpha 0.
    const bool valid = t0 + lane < end;
    bool rescale_any = false;
#pragma unroll
    for (int h = 0; h < kHeadsPerWarp; ++h) {
      const int head = kHeadsPerWarp * warp + h;
      const float x = valid ? (sh.s[0][head][lane] + sh.s[1][head][lane] + sh.s[2][head][lane] +
                               sh.s[3][head][lane]) *
                                  p.scale_log2
                            : kNegInf;
      if (__any_sync(0xffffffffu, x > m[h] + kRescaleLog2)) {
        const float m_new = fmaxf(m[h], WarpMax(x));  // finite: token t0 is valid
        const float alpha = exp2f(m[h] - m_new);      // m = -inf: 0
        l[h] *= alpha;
        m[h] = m_new;
        if (lane == 0) sh.alpha[head] = alpha;
        rescale_any = true;
      } else if (lane == 0) {
        sh.alpha[head] = 1.0f;
      }
      const float prob = exp2f(x - m[h]);  // masked: 0
      l[h] += prob;
      // Lane pairs publish two tokens' hi and lo at once.
      const float next = __shfl_down_sync(0xffffffffu, prob, 1);
      if (lane % 2 == 0) {
        uint32_t hi, lo;
        SplitBf16(prob, next, hi, lo);
        *reinterpret_cast<uint32_t*>(&sh.p_hi[head][lane]) = hi;
        *reinterpret_cast<uint32_t*>(&sh.p_lo[head][lane]) = lo;
      }
    }
    if (rescale_any && lane == 0) sh.rescaled = 1;
    __syncthreads();

    // O += P V over this warp's dims, O rescaled first where some head's max rose.
    if (sh.rescaled) {
      const float alpha_lo = sh.alpha[gid], alpha_hi = sh.alpha[gid + 8];
#pragma unroll
      for (int n = 0; n < kNTiles; ++n) {
        acc[n][0] *= alpha_lo;
        acc[n][1] *= alpha_lo;
        acc[n][2] *= alpha_hi;
        acc[n][3] *= alpha_hi;
      }
    }
#pragma unroll
    for (int ks = 0; ks < kChunk / 16; ++ks) {
      const int k0 = 16 * ks + 2 * tig;
      const uint32_t a_hi[4] = {*reinterpret_cast<const uint32_t*>(&sh.p_hi[gid][k0]),
                                *reinterpret_cast<const uint32_t*>(&sh.p_hi[gid + 8][k0]),
                                *reinterpret_cast<const uint32_t*>(&sh.p_hi[gid][k0 + 8]),
                                *reinterpret_cast<const uint32_t*>(&sh.p_hi[gid + 8][k0 + 8])};
      const uint32_t a_lo[4] = {*reinterpret_cast<const uint32_t*>(&sh.p_lo[gid][k0]),
                                *reinterpret_cast<const uint32_t*>(&sh.p_lo[gid + 8][k0]),
                                *reinterpret_cast<const uint32_t*>(&sh.p_lo[gid][k0 + 8]),
                                *reinterpret_cast<const uint32_t*>(&sh.p_lo[gid + 8][k0 + 8])};
      // ldmatrix.trans of rows (tokens) 16 ks + lane % 16, dims d0 + 8 (lane / 16): the B
      // fragments (b0, b1) of n-tiles 2 j and 2 j + 1.
      const uint16_t* v = &rows[16 * ks + lane % 16][warp * kDimsPerWarp + 8 * (lane / 16)];
#pragma unroll
      for (int j = 0; j < kNTiles / 2; ++j) {
        uint32_t b[4];
        LdMatrixX4Trans(b, v + 16 * j);
        MmaBf16(acc[2 * j], a_hi, b[0], b[1]);
        MmaBf16(acc[2 * j], a_lo, b[0], b[1]);
        MmaBf16(acc[2 * j + 1], a_hi, b[2], b[3]);
        MmaBf16(acc[2 * j + 1], a_lo, b[2], b[3]);
      }
    }
    __syncthreads();  // this stage is reloaded by the next iteration's prefetch
    // Every thread read `rescaled` before the barrier; the next chunk's softmax writes it
    // after its S barrier.
    if (threadIdx.x == 0) sh.rescaled = 0;
  }

#pragma unroll
  for (int h = 0; h < kHeadsPerWarp; ++h) {
    const float lsum = WarpSum(l[h]);
    if (lane == 0) {
      sh.l[kHeadsPerWarp * warp + h] = lsum;
      sh.m[kHeadsPerWarp * warp + h] = m[h];
    }
  }
  __syncthreads();
  const int64_t rows_all = int64_t{p.num_seqs} * p.num_heads;
  float* part_o = p.part_o + (int64_t{split} * rows_all + int64_t{seq} * p.num_heads) * kRank;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int head = gid + 8 * half;
    if (head >= p.num_heads) continue;
    const float lsum = sh.l[head];
    const float inv = lsum > 0 ? 1.0f / lsum : 0.0f;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      const int d = warp * kDimsPerWarp + 8 * n + 2 * tig;
      *reinterpret_cast<float2*>(part_o + int64_t{head} * kRank + d) =
          make_float2(acc[n][2 * half] * inv, acc[n][2 * half + 1] * inv);
    }
  }
  if (threadIdx.x < p.num_heads) {
    const int head = threadIdx.x;
    const float lsum = sh.l[head];
    p.part_lse[int64_t{split} * rows_all + int64_t{seq} * p.num_heads + head] =
        lsum > 0 ? (sh.m[head] + log2f(lsum)) * kLn2 : kNegInf;
  }
}

}  // namespace

template <int kStages>
int LaunchWithStages(const MlaParams& p, cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(MlaShared<kStages>));
  // Per device and cheap; done on every launch so any current device is covered.
  const cudaError_t attr = cudaFuncSetAttribute(
      MlaDecodeTcKernel<kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (attr != cudaSuccess) return static_cast<int>(attr);
  const dim3 grid(p.num_splits, p.num_seqs);
  MlaDecodeTcKernel<kStages><<<grid, kWarps * 32, smem, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int LaunchMlaDecode(const MlaParams& p, void* stream_ptr) {
  if (p.kv_lora_rank != kRank || p.rope_dim != kRope || p.num_heads > kHeads) {
    return static_cast<int>(cudaErrorNotSupported);
  }
  // Two stages: 2 CTAs of 8 warps per SM. Three to five stages (1 CTA per SM) were
  // 20-40 % slower on the H200 (docs/notes/cuda_decode_tuning.md, MLA on tensor cores);
  // 16-row chunks in 3-5 stages at 2 CTAs per SM (up to 64 rows ahead) were no faster at
  // any point on an H100 (run 251).
  const int launched = LaunchWithStages<2>(p, static_cast<cudaStream_t>(stream_ptr));
  if (launched != cudaSuccess) return launched;
  return LaunchMergeSplits(p.part_o, p.part_lse, p.num_splits,
                           int64_t{p.num_seqs} * p.num_heads, p.kv_lora_rank, p.o, p.lse,
                           stream_ptr);
}

}  // namespace writescope::kernels::cuda::internal
