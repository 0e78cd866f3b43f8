// Exact merges of partial attention states on the GPU: the split-KV reduction and the
// CPU-partial + GPU-partial merge.
//   Split reduction: one CTA per row and 128 dims; the weights exp(lse_i - max) go to
//   shared memory first, then threads (dims as float4) x (parts in groups) read the
//   partials with many loads in flight (the partials sit in L2: the decode kernel just
//   wrote them).
//   A generic one-warp-per-row kernel covers dims that are no multiple of 4.
//   Two-state merge: one warp per row; a row's lse is read by all lanes before lane 0
//   writes it, so `out` may alias an input.
#include <cuda_runtime.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/launch.h"

namespace writescope::kernels::cuda::internal {
namespace {

constexpr int kRowsPerBlock = 4;
constexpr int kMaxPerLane = 16;  // head_dim up to 512

__global__ void MergeSplitsKernel(const float* __restrict__ part_o,
                                  const float* __restrict__ part_lse, int32_t num_parts,
                                  int64_t rows, int32_t dim, float* __restrict__ o,
                                  float* __restrict__ lse) {
  WaitForPrimaryGrid();  // before any early return, so that no CTA ends before the decode has
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float m = kNegInf;
  for (int32_t i = lane; i < num_parts; i += 32) m = fmaxf(m, part_lse[i * rows + row]);
  m = WarpMax(m);
  float acc[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) acc[j] = 0;
  float sum = 0;
  if (m != kNegInf) {
    for (int32_t c = 0; c < num_parts; c += 32) {
      const int32_t i = c + lane;
      const float w = i < num_parts ? expf(part_lse[i * rows + row] - m) : 0.0f;
      sum += w;
      const int32_t n = min(32, num_parts - c);
      for (int32_t k = 0; k < n; ++k) {
        const float wk = __shfl_sync(0xffffffffu, w, k);
        if (wk == 0.0f) continue;  // empty split: its o is 0, skipping keeps NaN out
        const float* src = part_o + ((c + k) * rows + row) * dim;
#pragma unroll
        for (int j = 0; j < kMaxPerLane; ++j) {
          const int d = lane + 32 * j;
          if (d < dim) acc[j] += wk * src[d];
        }
      }
    }
    sum = WarpSum(sum);
  }
  const float inv = sum > 0 ? 1.0f / sum : 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < dim) o[row * dim + d] = acc[j] * inv;
  }
  if (lane == 0) lse[row] = sum > 0 ? m + logf(sum) : kNegInf;
}

constexpr int kMergeThreads = 256;  // a batch-1 step has few rows: parallelism comes from the parts
constexpr int kMaxVecParts = 1024;
// Dims per CTA: a row of more dims (MLA's 512) is spread over several CTAs, so that each
// thread has few partials to read (a batch-1 MLA step has 16 rows and ~128 parts).
constexpr int kMergeDims = 128;

__device__ __forceinline__ float BlockMax(float x, float* scratch) {
  x = WarpMax(x);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  x = scratch[0];
#pragma unroll
  for (int w = 1; w < kMergeThreads / 32; ++w) x = fmaxf(x, scratch[w]);
  __syncthreads();
  return x;
}

__device__ __forceinline__ float BlockSum(float x, float* scratch) {
  x = WarpSum(x);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  x = 0;
#pragma unroll
  for (int w = 0; w < kMergeThreads / 32; ++w) x += scratch[w];
  __syncthreads();
  return x;
}

// Grid (row, dims / kMergeDims); dim % 4 == 0, num_parts <= kMaxVecParts. Empty
// partials have o = 0 (finite) and weight 0, so they add nothing and no NaN.
// kPreloaded > 0: a thread's first kPreloaded partials are loaded before the weights are
// known, so that their reads and the lse reads are in flight together, one round trip to
// the L2 instead of two. That pays where the merge is latency, not bytes (a batch-1 step:
// Qwen3 32K has 86 parts, 11 per thread; 6.3 -> 5.2 us in session 25) and costs where it
// is bytes: the preloads' registers (98) leave 2 CTAs per SM, and at DeepSeek 8K x 32
// (2048 CTAs) the MLA decode ran 16 % longer with them (LaunchMergeSplits picks).
template <int kPreloaded>
__global__ void __launch_bounds__(kMergeThreads)
    MergeSplitsVecKernel(const float* __restrict__ part_o, const float* __restrict__ part_lse,
                         int32_t num_parts, int64_t rows, int32_t dim, float* __restrict__ o,
                         float* __restrict__ lse) {
  WaitForPrimaryGrid();
  __shared__ float w_s[kMaxVecParts];
  __shared__ float scratch[kMergeThreads / 32];
  __shared__ float4 acc_s[kMergeThreads];
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x;
  const int dim0 = blockIdx.y * kMergeDims;
  const int vecs = min(kMergeDims, dim - dim0) / 4;
  const int groups = kMergeThreads / vecs;
  const int v = tid % vecs, grp = tid / vecs;
  const bool reads = grp < groups;
  const float* src = part_o + row * dim + dim0 + 4 * v;
  float4 pre[kPreloaded > 0 ? kPreloaded : 1];
#pragma unroll
  for (int k = 0; k < kPreloaded; ++k) {
    const int32_t i = grp + k * groups;
    pre[k] = reads && i < num_parts ? __ldg(reinterpret_cast<const float4*>(src + i * rows * dim))
                                    : make_float4(0, 0, 0, 0);
  }

  float m = kNegInf;
  for (int32_t i = tid; i < num_parts; i += kMergeThreads) {
    w_s[i] = part_lse[i * rows + row];
    m = fmaxf(m, w_s[i]);
  }
  m = BlockMax(m, scratch);
  float sum = 0;
  for (int32_t i = tid; i < num_parts; i += kMergeThreads) {
    const float w = m == kNegInf ? 0.0f : expf(w_s[i] - m);
    w_s[i] = w;
    sum += w;
  }
  sum = BlockSum(sum, scratch);  // its barrier also publishes w_s

  float4 a = make_float4(0, 0, 0, 0);
  if (reads) {
#pragma unroll
    for (int k = 0; k < kPreloaded; ++k) {
      const int32_t i = grp + k * groups;
      const float w = i < num_parts ? w_s[i] : 0.0f;
      a.x += w * pre[k].x;
      a.y += w * pre[k].y;
      a.z += w * pre[k].z;
      a.w += w * pre[k].w;
    }
#pragma unroll 8
    for (int32_t i = grp + kPreloaded * groups; i < num_parts; i += groups) {
      const float w = w_s[i];
      const float4 x = __ldg(reinterpret_cast<const float4*>(src + i * rows * dim));
      a.x += w * x.x;
      a.y += w * x.y;
      a.z += w * x.z;
      a.w += w * x.w;
    }
  }
  acc_s[tid] = a;
  __syncthreads();
  if (tid < vecs) {
    float4 t = acc_s[tid];
    for (int g = 1; g < groups; ++g) {
      const float4 x = acc_s[g * vecs + tid];
      t.x += x.x;
      t.y += x.y;
      t.z += x.z;
      t.w += x.w;
    }
    const float inv = sum > 0 ? 1.0f / sum : 0.0f;
    float* dst = o + row * dim + dim0 + 4 * v;
    dst[0] = t.x * inv;
    dst[1] = t.y * inv;
    dst[2] = t.z * inv;
    dst[3] = t.w * inv;
  }
  if (tid == 0 && blockIdx.y == 0) lse[row] = sum > 0 ? m + logf(sum) : kNegInf;
}

__global__ void MergeTwoKernel(const float* o_a, const float* lse_a, const float* o_b,
                               const float* lse_b, float* o_out, float* lse_out, int64_t rows,
                               int32_t dim) {
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float la = lse_a[row], lb = lse_b[row];
  float wa = 0, wb = 0, out_lse = kNegInf;
  if (la != kNegInf || lb != kNegInf) {
    const float m = fmaxf(la, lb);
    const float ea = expf(la - m), eb = expf(lb - m);
    wa = ea / (ea + eb);
    wb = eb / (ea + eb);
    out_lse = m + logf(ea + eb);
  }
  for (int d = lane; d < dim; d += 32) {
    float v = 0;
    if (wa != 0.0f) v += wa * o_a[row * dim + d];
    if (wb != 0.0f) v += wb * o_b[row * dim + d];
    o_out[row * dim + d] = v;
  }
  __syncwarp();
  if (lane == 0) lse_out[row] = out_lse;
}

}  // namespace

int LaunchMergeSplits(const float* part_o, const float* part_lse, int32_t num_parts,
                      int64_t rows, int32_t dim, float* o, float* lse, void* stream) {
  if (rows == 0) return cudaSuccess;
  // Launched as a programmatic dependent of the decode before it in the stream: its CTAs
  // may start once all of the decode's have (LaunchDependentGrids) and wait in the kernel
  // for the decode's end, so the launch gap between the two overlaps the decode. After any
  // other work it waits as an ordinary launch would.
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.stream = static_cast<cudaStream_t>(stream);
  config.attrs = &attribute;
  config.numAttrs = 1;
  if (dim % 4 == 0 && num_parts <= kMaxVecParts) {
    config.gridDim = dim3(static_cast<unsigned>(rows), (dim + kMergeDims - 1) / kMergeDims);
    config.blockDim = dim3(kMergeThreads);
    // Preloads where the grid is one wave of the preloading kernel (2 CTAs per SM).
    const bool latency_bound =
        int64_t{config.gridDim.x} * config.gridDim.y <= 2 * int64_t{SmCount()};
    return static_cast<int>(
        latency_bound ? cudaLaunchKernelEx(&config, MergeSplitsVecKernel<16>, part_o, part_lse,
                                           num_parts, rows, dim, o, lse)
                      : cudaLaunchKernelEx(&config, MergeSplitsVecKernel<0>, part_o, part_lse,
                                           num_parts, rows, dim, o, lse));
  }
  if (dim > 32 * kMaxPerLane) return cudaErrorNotSupported;
  config.gridDim = dim3(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
  config.blockDim = dim3(kRowsPerBlock * 32);
  return static_cast<int>(
      cudaLaunchKernelEx(&config, MergeSplitsKernel, part_o, part_lse, num_parts, rows, dim, o, lse));
}

int LaunchMergeTwo(const float* o_a, const float* lse_a, const float* o_b, const float* lse_b,
                   float* o_out, float* lse_out, int64_t rows, int32_t dim, void* stream) {
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  MergeTwoKernel<<<blocks, kRowsPerBlock * 32, 0, static_cast<cudaStream_t>(stream)>>>(
      o_a, lse_a, o_b, lse_b, o_out, lse_out, rows, dim);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace writescope::kernels::cuda::internal
