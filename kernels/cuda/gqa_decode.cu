// Split-KV GQA decode over the ping-pong tiles + the D-window.
//
// Grid (split, kv_head, seq): each CTA covers `tokens_per_split` keys of one (seq, kv
// head) for all `group` query heads that share it, so K/V are read once per group.
//
// Tensor-core path (head_dim 64/128, group <= 8): 4 warps take 16-token steps in turn,
// each warp with its own online-softmax state; mma.sync m16n8k16 bf16 -> fp32.
//   S = Q K^T: A = Q (rows = the group's query heads, padded to 16 with zeros; read from
//     shared memory each step), B = K straight from global memory: each thread loads 16
//     bytes of a K row per 32-dim chunk, and the head dimension is permuted identically in
//     Q and K (a dot product does not care), so one 16-byte load feeds two k-steps.
//   O += P V: A = P split into bf16 hi (rows 0-7) + bf16 lo (rows 8-15), so P keeps
//     ~16 mantissa bits (the contract compares to an fp64 reference at 2e-5) and the
//     padding rows do useful work; rows r and r+8 are summed at the end. B = V, loaded
//     like K and transposed in registers by movmatrix.
//   All K and V loads of a step are issued before its first mma: 8 KB per warp-step
//     in flight, 12 warps per SM (3 CTAs).
//   Few instructions per step (session 25, docs/notes/cuda_decode_tuning.md: 2290 per
//     warp at Qwen3 32K x 1 where the kernel before, with an L2 prefetch added, issued
//     4270; 1.03-1.21x faster than it): O is rescaled only when the running max rises by
//     more than 2^8, a row's tile and offset advance without a division, only a split's
//     last step checks its rows against the end, and the warps' states merge through one
//     weight per (warp, head).
// SIMT path (head_dim 256, larger groups are rejected by the host): lane = token for
//   the scores, lane = dims for the output, as before.
// Scores are kept in base 2 (scaled by scale*log2 e) and converted back to a natural-log
// LSE when written. The warps' states are merged in shared memory; the CTA writes one
// normalized partial per split, and merge_states.cu merges the splits.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_attention.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma_util.cuh"

namespace writescope::kernels::cuda::internal {
namespace {

// ---------------------------------------------------------------- tensor-core path ----

constexpr int kTcWarps = 4;
constexpr int kTcStep = 16;  // tokens per warp step: the k of the P V mma
constexpr int kTcMaxGroup = 8;
// 3 CTAs per SM cap the registers at 168 (166 used at head_dim 128, no spills: check
// -Xptxas -v after any change; Q lives in shared memory to stay there). Measured on the H200
// against 2 (176 registers) and 4 (128, spills): 3 was fastest on every shape at >= 32K; a
// variant at 2 CTAs with the next step's K/V loading into a second register buffer (252
// registers) ran within 2 % of it at every point (session 25). The split rule plans its
// waves with the same number (launch.h).
constexpr int kTcMinCtasPerSm = kGqaTensorCoreSplits.ctas_per_sm;

// Transposes the 8x8 bf16 matrix whose row (lane / 4) holds columns 2 (lane % 4) + {0, 1}
// in this lane's register.
__device__ __forceinline__ uint32_t Transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// A warp's running state over its steps: the max m and this lane's share of the sum l for
// head gid (base 2), and O's accumulators; n-tile (ch, j): [0..1] = P_hi V, [2..3] = P_lo V
// for dims ch*32 + 8 tig + 2 j + {0, 1}.
template <int kDim>
struct TcState {
  float m = kNegInf, l = 0;
  float acc[kDim / 32 * 4][4] = {};
};

// The running max is raised only when a step's max passes it by more than this (base 2),
// so that most steps skip rescaling O's 64 accumulators: until then P may reach 2^8, which
// fp32 sums and the bf16 hi + lo split of P carry without loss.
constexpr float kRescaleLog2 = 8.0f;

// 16 bytes of a K or V row: from global memory through the read-only path, or from the
// bulk kernel's shared-memory stage.
template <bool kShared>
__device__ __forceinline__ uint4 LoadRow16(const uint16_t* at) {
  if constexpr (kShared) {
    return *reinterpret_cast<const uint4*>(at);
  } else {
    return __ldg(reinterpret_cast<const uint4*>(at));
  }
}

// One warp step: tokens t0 .. t0 + 15 of this (seq, kv head), whose K rows start at
// k_row[g] (rows t0 + gid + 8 g) with V v_off[g] values further (in global memory, or with
// kShared in a shared-memory stage). kTail: the last step of the split, whose tokens from
// `end` on are not read (tile padding, or a stage's rows that no copy filled, may hold
// anything, NaN too) and count for nothing; every other step has all 16 tokens.
template <int kDim, bool kTail, bool kShared = false>
__device__ __forceinline__ void TcStep(const uint16_t (*q_s)[kDim + 8],
                                       const uint16_t* const (&k_row)[2], const int64_t (&v_off)[2],
                                       int32_t t0, int32_t end, float scale_log2,
                                       TcState<kDim>& st) {
  constexpr int kChunks = kDim / 32;
  const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  bool valid[2] = {true, true};
  if constexpr (kTail) {
    valid[0] = t0 + gid < end;
    valid[1] = t0 + gid + 8 < end;
  }
  uint4 kr[2][kChunks], vr[2][kChunks];
#pragma unroll
  for (int g = 0; g < 2; ++g)
#pragma unroll
    for (int ch = 0; ch < kChunks; ++ch) {
      kr[g][ch] =
          valid[g] ? LoadRow16<kShared>(k_row[g] + ch * 32 + tig * 8) : make_uint4(0, 0, 0, 0);
      vr[g][ch] = valid[g] ? LoadRow16<kShared>(k_row[g] + v_off[g] + ch * 32 + tig * 8)
                           : make_uint4(0, 0, 0, 0);
    }

  // S = Q K^T for tokens t0 + 8 g + 2 tig + {0, 1} of head gid. Q row gid, dims
  // ch*32 + 8 tig + [0, 8) of each chunk: the A fragments of the two k-steps of that chunk
  // (read from shared memory each step: registers are the kernel's limit).
  uint4 qf[kChunks];
#pragma unroll
  for (int ch = 0; ch < kChunks; ++ch) {
    qf[ch] = *reinterpret_cast<const uint4*>(&q_s[gid][ch * 32 + tig * 8]);
  }
  float s[2][4];
#pragma unroll
  for (int g = 0; g < 2; ++g) {
#pragma unroll
    for (int i = 0; i < 4; ++i) s[g][i] = 0;
#pragma unroll
    for (int ch = 0; ch < kChunks; ++ch) {
      MmaBf16(s[g], qf[ch].x, 0u, qf[ch].y, 0u, kr[g][ch].x, kr[g][ch].y);
      MmaBf16(s[g], qf[ch].z, 0u, qf[ch].w, 0u, kr[g][ch].z, kr[g][ch].w);
    }
  }

  // Online softmax; a quad (same gid) holds the step's 16 tokens of one head.
  float x[2][2];
  float lane_max = kNegInf;
#pragma unroll
  for (int g = 0; g < 2; ++g)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      x[g][i] = s[g][i] * scale_log2;
      if constexpr (kTail) x[g][i] = t0 + 8 * g + 2 * tig + i < end ? x[g][i] : kNegInf;
      lane_max = fmaxf(lane_max, x[g][i]);
    }
  // One vote decides; only then the quad's max (the step's max of head gid: finite, token t0
  // is valid). m = -inf on the first step passes the test.
  if (__any_sync(0xffffffffu, lane_max > st.m + kRescaleLog2)) {
    float step_max = fmaxf(lane_max, __shfl_xor_sync(0xffffffffu, lane_max, 1));
    step_max = fmaxf(step_max, __shfl_xor_sync(0xffffffffu, step_max, 2));
    const float m_new = fmaxf(st.m, step_max);
    const float alpha = exp2f(st.m - m_new);  // m = -inf: 0
    st.m = m_new;
    st.l *= alpha;
#pragma unroll
    for (int n = 0; n < kChunks * 4; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) st.acc[n][i] *= alpha;
  }
  float pr[2][2];
#pragma unroll
  for (int g = 0; g < 2; ++g)
#pragma unroll
    for (int i = 0; i < 2; ++i) pr[g][i] = exp2f(x[g][i] - st.m);  // masked: 0
  st.l += (pr[0][0] + pr[0][1]) + (pr[1][0] + pr[1][1]);

  // A = [P_hi; P_lo]: a0a1 / a4a5 = hi of tokens 2 tig.. / 8 + 2 tig.., a2a3 / a6a7 = lo.
  uint32_t p_hi0, p_lo0, p_hi1, p_lo1;
  SplitBf16(pr[0][0], pr[0][1], p_hi0, p_lo0);
  SplitBf16(pr[1][0], pr[1][1], p_hi1, p_lo1);
#pragma unroll
  for (int ch = 0; ch < kChunks; ++ch)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // Word j of a V row holds dims ch*32 + 8 tig + 2 j + {0, 1}; transposed, lane
      // (gid, tig) gets tokens 2 tig + {0, 1} of dim ch*32 + 8 (gid / 2) + 2 j + gid % 2,
      // the B fragment of n-tile (ch, j).
      const uint32_t b0 = Transpose8x8(Word(vr[0][ch], j));
      const uint32_t b1 = Transpose8x8(Word(vr[1][ch], j));
      MmaBf16(st.acc[ch * 4 + j], p_hi0, p_lo0, p_hi1, p_lo1, b0, b1);
    }
}

// The CTA's normalized partial from its warps' states: each warp's (m, l) and unnormalized
// O per head, then one weight per (warp, head), then the partial. Every thread of the CTA
// calls it; warps from kTcWarps on (the bulk kernel's producer) bring no state.
template <int kDim>
__device__ __forceinline__ void WriteCtaPartial(TcState<kDim>& st, const GqaParams& p, int split,
                                                int64_t row0, int group, float (*m_s)[kTcMaxGroup],
                                                float (*l_s)[kTcMaxGroup],
                                                float (*w_s)[kTcMaxGroup],
                                                float (*acc_s)[kTcMaxGroup][kDim]) {
  constexpr int kChunks = kDim / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, tig = lane % 4;
  st.l += __shfl_xor_sync(0xffffffffu, st.l, 1);
  st.l += __shfl_xor_sync(0xffffffffu, st.l, 2);
  if (warp < kTcWarps && gid < group) {
    if (tig == 0) {
      m_s[warp][gid] = st.m;
      l_s[warp][gid] = st.l;
    }
#pragma unroll
    for (int ch = 0; ch < kChunks; ++ch)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float* a = st.acc[ch * 4 + j];
        *reinterpret_cast<float2*>(&acc_s[warp][gid][ch * 32 + 8 * tig + 2 * j]) =
            make_float2(a[0] + a[2], a[1] + a[3]);
      }
  }
  __syncthreads();
  const int64_t rows = int64_t{p.num_seqs} * p.num_q_heads;
  float* part_o = p.part_o + (int64_t{split} * rows + row0) * kDim;
  if (threadIdx.x < group) {
    const int h = threadIdx.x;
    float m_all = kNegInf;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) m_all = fmaxf(m_all, m_s[w][h]);
    float scale[kTcWarps], l_all = 0;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) {
      scale[w] = m_all == kNegInf ? 0.0f : exp2f(m_s[w][h] - m_all);  // idle warp: 0
      l_all += scale[w] * l_s[w][h];
    }
    const float inv = l_all > 0 ? 1.0f / l_all : 0.0f;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) w_s[w][h] = scale[w] * inv;
    p.part_lse[int64_t{split} * rows + row0 + h] =
        l_all > 0 ? (m_all + log2f(l_all)) * kLn2 : kNegInf;
  }
  __syncthreads();
  constexpr int kVecs = kDim / 4;
  for (int i = threadIdx.x; i < group * kVecs; i += blockDim.x) {
    const int h = i / kVecs, d = 4 * (i % kVecs);
    float4 o = make_float4(0, 0, 0, 0);
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) {
      const float wt = w_s[w][h];
      const float4 a = *reinterpret_cast<const float4*>(&acc_s[w][h][d]);
      o.x += wt * a.x;
      o.y += wt * a.y;
      o.z += wt * a.z;
      o.w += wt * a.w;
    }
    *reinterpret_cast<float4*>(part_o + int64_t{h} * kDim + d) = o;
  }
}

template <int kDim>
__global__ void __launch_bounds__(kTcWarps * 32, kTcMinCtasPerSm)
    GqaDecodeTcKernel(GqaParams p) {
  LaunchDependentGrids();  // the split merge may launch now (it waits for this grid's end)
  constexpr int32_t kWarpStride = kTcWarps * kTcStep;  // from one step of a warp to its next
  const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4;  // mma fragment row
  const int group = p.num_q_heads / p.num_kv_heads;
  const int64_t row0 = int64_t{seq} * p.num_q_heads + int64_t{kvh} * group;

  __shared__ float m_s[kTcWarps][kTcMaxGroup], l_s[kTcWarps][kTcMaxGroup];
  __shared__ float w_s[kTcWarps][kTcMaxGroup];  // each warp's weight in the CTA's partial
  __shared__ __align__(16) float acc_s[kTcWarps][kTcMaxGroup][kDim];
  // The group's Q rows, zero past the group (the padding rows of the S mma); rows 16 bytes
  // longer than a row, so that the 8 rows a load instruction reads hit distinct banks.
  __shared__ __align__(16) uint16_t q_s[kTcMaxGroup][kDim + 8];
  // The sequence's key range is read before the barrier, so that its loads and Q's are in
  // flight together (after it, they were two trips to memory before the first K/V load).
  const SeqKeys keys = LoadSeqKeys(p.kv, seq, p.block_tokens);
  for (int i = threadIdx.x; i < kTcMaxGroup * kDim / 8; i += blockDim.x) {
    const int h = i / (kDim / 8), d = 8 * (i % (kDim / 8));
    uint4 q = make_uint4(0, 0, 0, 0);
    if (h < group) q = *reinterpret_cast<const uint4*>(p.q + (row0 + h) * kDim + d);
    *reinterpret_cast<uint4*>(&q_s[h][d]) = q;
  }
  __syncthreads();

  const int32_t begin = split * p.tokens_per_split;
  const int32_t end = min(keys.total(), begin + p.tokens_per_split);
  const int64_t head_tile = int64_t{p.block_tokens} * kDim;  // one head's rows in a tile
  const int64_t v_in_tile = int64_t{p.num_kv_heads} * head_tile;
  const int64_t head_window = int64_t{p.kv.window_capacity} * kDim;
  const int64_t v_in_window = int64_t{p.num_kv_heads} * head_window;

  // Row t0 + gid of this warp's steps: its tile and offset in it, advanced by kWarpStride
  // each step (one division per split, not per step); row t0 + gid + 8 from there.
  TilePos row0_pos = TilePos::Of(begin + warp * kTcStep + gid, p.block_tokens);

  TcState<kDim> st;
#pragma unroll 1
  for (int32_t t0 = begin + warp * kTcStep; t0 < end; t0 += kWarpStride) {
    const uint16_t* k_row[2];
    int64_t v_off[2];
    TilePos pos = row0_pos;
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const int32_t t = t0 + gid + 8 * g;
      if (g == 1) pos.Advance(8, p.block_tokens);
      if (t < keys.tile_tokens) {
        k_row[g] = keys.Tile(pos.tile) + kvh * head_tile + int64_t{pos.off} * kDim;
        v_off[g] = v_in_tile;
      } else {
        k_row[g] = keys.window + kvh * head_window + int64_t{t - keys.tile_tokens} * kDim;
        v_off[g] = v_in_window;
      }
    }
    row0_pos.Advance(kWarpStride, p.block_tokens);
    if (t0 + kTcStep <= end) {
      TcStep<kDim, false>(q_s, k_row, v_off, t0, end, p.scale_log2, st);
    } else {
      TcStep<kDim, true>(q_s, k_row, v_off, t0, end, p.scale_log2, st);
    }
  }

  WriteCtaPartial<kDim>(st, p, split, row0, group, m_s, l_s, w_s, acc_s);
}

// -------------------------------------------------------- tensor-core path, bulk ----
//
// The same warp steps, with K/V staged in shared memory: warp kTcWarps (the producer) moves
// each 64-token stage of the split (one step of each of the 4 consumer warps) with bulk
// copies, one per run of rows within a tile or the window for K and one for V, into a ring of
// kStages stages; a stage's `full` barrier completes when its bytes have landed, its `empty`
// barrier when the 128 consumer threads have read it. The copies hold no registers, so the
// bytes in flight per SM are the ring's (up to 128 KB), not what 12 warps' registers hold;
// the consumers compute while the next stages land. After the loop the ring is reused for
// the warps' O.

constexpr int kBulkStageTokens = kTcWarps * kTcStep;  // 64

// (clang-format takes these variable templates' products for pointer declarations.)
// clang-format off
template <int kDim>
constexpr int kBulkStageBytes = 4 * kBulkStageTokens * kDim;  // K and V of a stage, bf16
template <int kDim, int kStages>
constexpr int kBulkSharedBytes = kStages * kBulkStageBytes<kDim>;  // the ring
// clang-format on

// The ring's stages at head_dim kDim for a kernel named by its stages at head_dim 128: the
// same bytes (head_dim 64 gets twice the stages), so that shared memory allows the occupancy
// its split rule plans with (1 or 2 CTAs per SM), no more.
template <int kDim, int kStagesAt128>
constexpr int kBulkStages = kStagesAt128 * 128 / kDim;

// One stamp of a CTA's timeline (GqaParams::timeline), where the caller asked for one.
__device__ __forceinline__ void Stamp(const GqaParams& p, int stamp) {
  if (p.timeline == nullptr) return;
  const uint64_t now = GlobalTimerNs();
  const int64_t cta =
      blockIdx.x + int64_t{gridDim.x} * (blockIdx.y + int64_t{gridDim.y} * blockIdx.z);
  p.timeline[cta * kGpuTimelineStamps + stamp] = now;
}

template <int kDim, int kStages, int kCtasPerSm>
__global__ void __launch_bounds__((kTcWarps + 1) * 32, kCtasPerSm)
    GqaDecodeBulkKernel(GqaParams p) {
  if (threadIdx.x == 0) Stamp(p, kStampStart);
  LaunchDependentGrids();  // the split merge may launch now (it waits for this grid's end)
  constexpr int kStageValues = kBulkStageTokens * kDim;  // K of a stage; its V follows
  static_assert(kBulkSharedBytes<kDim, kStages> >= kTcWarps * kTcMaxGroup * kDim * 4,
                "the warps' O reuse the ring");
  const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4;
  const int group = p.num_q_heads / p.num_kv_heads;
  const int64_t row0 = int64_t{seq} * p.num_q_heads + int64_t{kvh} * group;

  extern __shared__ __align__(128) unsigned char ring_bytes[];
  uint16_t* const ring = reinterpret_cast<uint16_t*>(ring_bytes);  // [kStages][K, V][64][kDim]
  __shared__ uint64_t full[kStages], empty[kStages];
  __shared__ float m_s[kTcWarps][kTcMaxGroup], l_s[kTcWarps][kTcMaxGroup];
  __shared__ float w_s[kTcWarps][kTcMaxGroup];
  __shared__ __align__(16) uint16_t q_s[kTcMaxGroup][kDim + 8];

  const SeqKeys keys = LoadSeqKeys(p.kv, seq, p.block_tokens);
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      MbarInit(&full[i], 1);               // the producer's arrival (+ its copies' bytes)
      MbarInit(&empty[i], kTcWarps * 32);  // every consumer thread, once read
    }
    FenceBarrierInit();
  }
  __syncthreads();

  const int32_t begin = split * p.tokens_per_split;
  const int32_t end = min(keys.total(), begin + p.tokens_per_split);
  const int32_t stages = end > begin ? (end - begin + kBulkStageTokens - 1) / kBulkStageTokens : 0;
  TcState<kDim> st;
  if (warp == kTcWarps) {
    // The producer: lane 0 issues, the warp waits together.
    const int64_t head_tile = int64_t{p.block_tokens} * kDim;
    const int64_t v_in_tile = int64_t{p.num_kv_heads} * head_tile;
    const int64_t head_window = int64_t{p.kv.window_capacity} * kDim;
    const int64_t v_in_window = int64_t{p.num_kv_heads} * head_window;
#pragma unroll 1
    for (int32_t k = 0; k < stages; ++k) {
      const int slot = k % kStages;
      if (k >= kStages) MbarWait(&empty[slot], (k / kStages - 1) & 1);
      if (lane == 0) {
        if (k >= kStages) FenceProxyAsyncShared();  // the consumers' reads before the refill
        const int32_t t_begin = begin + k * kBulkStageTokens;
        const int32_t t_end = min(end, t_begin + kBulkStageTokens);
        MbarArriveExpectBytes(&full[slot], static_cast<uint32_t>(t_end - t_begin) * kDim * 2 * 2);
        uint16_t* const k_dst = ring + slot * 2 * kStageValues;
        for (int32_t t = t_begin; t < t_end;) {
          const uint16_t* k_src;
          int64_t v_off;
          int32_t run;
          if (t < keys.tile_tokens) {
            const int32_t tile = t / p.block_tokens, off = t - tile * p.block_tokens;
            run = min(t_end, min(keys.tile_tokens, (tile + 1) * p.block_tokens)) - t;
            k_src = keys.Tile(tile) + kvh * head_tile + int64_t{off} * kDim;
            v_off = v_in_tile;
          } else {
            run = t_end - t;
            k_src = keys.window + kvh * head_window + int64_t{t - keys.tile_tokens} * kDim;
            v_off = v_in_window;
          }
          const uint32_t bytes = static_cast<uint32_t>(run) * kDim * 2;
          uint16_t* const dst = k_dst + (t - t_begin) * kDim;
          BulkCopyToShared(dst, k_src, bytes, &full[slot]);
          BulkCopyToShared(dst + kStageValues, k_src + v_off, bytes, &full[slot]);
          t += run;
        }
      }
      __syncwarp();
    }
  } else {
    // The consumers: Q first (the producer's copies are in flight meanwhile).
    for (int i = threadIdx.x; i < kTcMaxGroup * kDim / 8; i += kTcWarps * 32) {
      const int h = i / (kDim / 8), d = 8 * (i % (kDim / 8));
      uint4 q = make_uint4(0, 0, 0, 0);
      if (h < group) q = *reinterpret_cast<const uint4*>(p.q + (row0 + h) * kDim + d);
      *reinterpret_cast<uint4*>(&q_s[h][d]) = q;
    }
    NamedBarrierSync<1, kTcWarps * 32>();
    const int64_t v_off[2] = {kStageValues, kStageValues};
#pragma unroll 1
    for (int32_t k = 0; k < stages; ++k) {
      const int slot = k % kStages;
      MbarWait(&full[slot], (k / kStages) & 1);
      if (k == 0 && threadIdx.x == 0) Stamp(p, kStampFirstData);
      const int32_t t0 = begin + k * kBulkStageTokens + warp * kTcStep;
      if (t0 < end) {
        const uint16_t* const rows = ring + slot * 2 * kStageValues + (warp * kTcStep + gid) * kDim;
        const uint16_t* const k_row[2] = {rows, rows + 8 * kDim};
        if (t0 + kTcStep <= end) {
          TcStep<kDim, false, true>(q_s, k_row, v_off, t0, end, p.scale_log2, st);
        } else {
          TcStep<kDim, true, true>(q_s, k_row, v_off, t0, end, p.scale_log2, st);
        }
      }
      MbarArrive(&empty[slot]);
    }
  }
  __syncthreads();  // every stage has been read (and every copy has landed): O may use the ring
  if (threadIdx.x == 0) Stamp(p, kStampLoopEnd);
  WriteCtaPartial<kDim>(st, p, split, row0, group, m_s, l_s, w_s,
                        reinterpret_cast<float(*)[kTcMaxGroup][kDim]>(ring_bytes));
  if (threadIdx.x == 0) Stamp(p, kStampEnd);
}

// --------------------------------------------------------------------- SIMT path ----

constexpr int kWarps = 4;

template <int kDim, int kGroup>
__global__ void __launch_bounds__(kWarps * 32)
    GqaDecodeSimtKernel(GqaParams p) {
  LaunchDependentGrids();
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
        const uint16_t* tile = keys.Tile(t / p.block_tokens);
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
#pragma unroll
      for (int i = 0; i < kPerLane; i += 2) {
        const uint32_t raw = *reinterpret_cast<const uint32_t*>(v_j + lane * kPerLane + i);
        v[i] = Bf16Lo(raw);
        v[i + 1] = Bf16Hi(raw);
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
int LaunchSimt(const GqaParams& p, cudaStream_t stream) {
  const dim3 grid(p.num_splits, p.num_kv_heads, p.num_seqs);
  GqaDecodeSimtKernel<kDim, kGroup><<<grid, kWarps * 32, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

template <int kDim>
int LaunchSimtForGroup(const GqaParams& p, cudaStream_t stream) {
  switch (p.num_q_heads / p.num_kv_heads) {
    case 1: return LaunchSimt<kDim, 1>(p, stream);
    case 2: return LaunchSimt<kDim, 2>(p, stream);
    case 3: return LaunchSimt<kDim, 3>(p, stream);
    case 4: return LaunchSimt<kDim, 4>(p, stream);
    case 5: return LaunchSimt<kDim, 5>(p, stream);
    case 6: return LaunchSimt<kDim, 6>(p, stream);
    case 7: return LaunchSimt<kDim, 7>(p, stream);
    case 8: return LaunchSimt<kDim, 8>(p, stream);
    default: return static_cast<int>(cudaErrorNotSupported);
  }
}

template <int kDim, int kStagesAt128, int kCtasPerSm>
int LaunchBulk(const GqaParams& p, cudaStream_t stream) {
  constexpr int kStages = kBulkStages<kDim, kStagesAt128>;
  constexpr int kBytes = kBulkSharedBytes<kDim, kStages>;
  static_assert(kCtasPerSm * (kBytes + 4096) <= 228 * 1024, "the ring must fit kCtasPerSm");
  static_assert((kCtasPerSm + 1) * kBytes > 228 * 1024, "no more CTAs than planned");
  auto* kernel = GqaDecodeBulkKernel<kDim, kStages, kCtasPerSm>;
  // Above the 48 KB default; per device and cheap, so on every launch (as mla_decode.cu).
  const cudaError_t allowed =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (allowed != cudaSuccess) return static_cast<int>(allowed);
  const dim3 grid(p.num_splits, p.num_kv_heads, p.num_seqs);
  kernel<<<grid, (kTcWarps + 1) * 32, kBytes, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

template <int kDim>
int LaunchTc(const GqaParams& p, cudaStream_t stream) {
  switch (p.kernel) {
    case kGqaBulk4:
      return LaunchBulk<kDim, 4, kGqaBulk4Splits.ctas_per_sm>(p, stream);
    case kGqaBulk3x2:
      return LaunchBulk<kDim, 3, kGqaBulk3x2Splits.ctas_per_sm>(p, stream);
    default:
      break;
  }
  const dim3 grid(p.num_splits, p.num_kv_heads, p.num_seqs);
  GqaDecodeTcKernel<kDim><<<grid, kTcWarps * 32, 0, stream>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

bool GqaDecodeUsesTensorCores(int32_t head_dim, int32_t group) {
  return (head_dim == 64 || head_dim == 128) && group >= 1 && group <= kTcMaxGroup;
}

int LaunchGqaDecode(const GqaParams& p, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  int status;
  if (GqaDecodeUsesTensorCores(p.head_dim, group)) {
    status = p.head_dim == 64 ? LaunchTc<64>(p, stream) : LaunchTc<128>(p, stream);
  } else {
    switch (p.head_dim) {
      case 64: status = LaunchSimtForGroup<64>(p, stream); break;
      case 128: status = LaunchSimtForGroup<128>(p, stream); break;
      case 256: status = LaunchSimtForGroup<256>(p, stream); break;
      default: return static_cast<int>(cudaErrorNotSupported);
    }
  }
  if (status != cudaSuccess) return status;
  return LaunchMergeSplits(p.part_o, p.part_lse, p.num_splits,
                           int64_t{p.num_seqs} * p.num_q_heads, p.head_dim, p.o, p.lse,
                           stream_ptr);
}

}  // namespace writescope::kernels::cuda::internal
