#include "kernels/bench/bench_kernels.h"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"

namespace writescope::kernels::bench {
namespace {

constexpr int kThreads = 256;

// Writes the XOR of every thread's `acc` to sink[blockIdx.x] (so that no load can be dropped).
__device__ __forceinline__ void WriteCtaXor(unsigned acc, unsigned* sink) {
  __shared__ unsigned cta_acc;
  if (threadIdx.x == 0) cta_acc = 0;
  __syncthreads();
  atomicXor(&cta_acc, acc);
  __syncthreads();
  if (threadIdx.x == 0) sink[blockIdx.x] = cta_acc;
}

// The XOR of data[i], data[i + stride], ... below end, kLoads loads in flight a thread at a
// time; streaming loads (ld.global.cs: the L2 evicts their lines first), or with kCached loads
// that the L2 keeps at normal priority (ld.global.cg).
template <int kLoads, bool kCached = false>
__device__ __forceinline__ unsigned XorLoads(const uint4* __restrict__ data, size_t i, size_t end,
                                             size_t stride) {
  auto load = [](const uint4* p) { return kCached ? __ldcg(p) : __ldcs(p); };
  unsigned acc = 0;
  for (; i + (kLoads - 1) * stride < end; i += kLoads * stride) {
    uint4 v[kLoads];
#pragma unroll
    for (int k = 0; k < kLoads; ++k) v[k] = load(data + i + k * stride);
#pragma unroll
    for (int k = 0; k < kLoads; ++k) acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  for (; i < end; i += stride) {
    const uint4 a = load(data + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  return acc;
}

template <bool kCached>
__global__ void __launch_bounds__(kThreads)
    ReadAllKernel(const uint4* __restrict__ data, size_t count, unsigned* sink) {
  // Four loads in flight per thread.
  WriteCtaXor(XorLoads<4, kCached>(data, size_t{blockIdx.x} * kThreads + threadIdx.x, count,
                                   size_t{gridDim.x} * kThreads),
              sink);
}

// One CTA an SM (1024 threads, 8 16-byte loads in flight each: 128 KB an SM), so that a grid
// of n CTAs reads with n SMs.
constexpr int kFewThreads = 1024;
constexpr int kFewLoads = 8;

__global__ void __launch_bounds__(kFewThreads, 1)
    ReadFewKernel(const uint4* __restrict__ data, size_t count, unsigned* sink) {
  const unsigned acc = XorLoads<kFewLoads>(data, size_t{blockIdx.x} * kFewThreads + threadIdx.x,
                                           count, size_t{gridDim.x} * kFewThreads);
  WriteCtaXor(acc, sink);
}

// A single-kernel decode's floor at batch 1: `clusters` clusters of `cluster_size` CTAs (one
// an SM, as ReadFewKernel), each cluster reading its own contiguous part of `data` (a (seq,
// kv head)'s keys) in contiguous slices a CTA (the splits), then merging through distributed
// shared memory as a decode's splits would: each CTA leaves a [8 heads][128] fp32 state in
// shared memory, and after a cluster barrier rank r reads its 1/size of every rank's state and
// writes it out (to out[cluster][8][128]), then a second barrier keeps the states
// alive until every rank has read them.
constexpr int kMergeWords = 8 * 128;

__global__ void __launch_bounds__(kFewThreads, 1)
    ReadClusterKernel(const uint4* __restrict__ data, size_t count, float* out) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned size = cluster.num_blocks(), rank = cluster.block_rank();
  const size_t cluster_index = blockIdx.x / size, clusters = gridDim.x / size;
  const size_t part = (count + clusters - 1) / clusters;
  const size_t part_begin = cluster_index * part, part_end = min(count, part_begin + part);
  const size_t slice = part_end > part_begin ? (part_end - part_begin + size - 1) / size : 0;
  const size_t begin = min(part_end, part_begin + rank * slice);
  const size_t end = min(part_end, begin + slice);
  const unsigned acc = XorLoads<kFewLoads>(data, begin + threadIdx.x, end, kFewThreads);
  __shared__ float state[kMergeWords];
  for (int w = threadIdx.x; w < kMergeWords; w += kFewThreads) state[w] = 0;
  __syncthreads();
  atomicXor(reinterpret_cast<unsigned*>(&state[threadIdx.x % kMergeWords]), acc);
  cluster.sync();
  const int share = (kMergeWords + size - 1) / size;
  for (int w = rank * share + threadIdx.x; w < min(kMergeWords, int(rank + 1) * share);
       w += kFewThreads) {
    float sum = 0;
    for (unsigned r = 0; r < size; ++r) sum += *cluster.map_shared_rank(&state[w], r);
    out[cluster_index * kMergeWords + w] = sum;
  }
  cluster.sync();
}

// Does nothing a caller can see but write its CTA's index: the floor of a launch.
__global__ void EmptyKernel(unsigned* sink) {
  if (threadIdx.x == 0) sink[blockIdx.x] = blockIdx.x;
}

__global__ void StampKernel(unsigned long long* out) { *out = cuda::internal::GlobalTimerNs(); }

// EmptyKernel as the first of a programmatic pair: it lets its dependent launch at once.
__global__ void EmptyPrimaryKernel(unsigned* sink) {
  cuda::internal::LaunchDependentGrids();
  if (threadIdx.x == 0) sink[blockIdx.x] = blockIdx.x;
}

// The dependent: waits for the primary's end and memory, as the split merge does.
__global__ void EmptyDependentKernel(unsigned* sink) {
  cuda::internal::WaitForPrimaryGrid();
  if (threadIdx.x == 0) sink[blockIdx.x] += 1;
}

// A cluster's CTAs meet at one barrier, and CTA 0 of each cluster reads a word of every other
// CTA's shared memory: the floor of a merge through distributed shared memory.
__global__ void EmptyClusterKernel(unsigned* sink) {
  namespace cg = cooperative_groups;
  __shared__ unsigned word;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) word = blockIdx.x;
  cluster.sync();
  if (cluster.block_rank() == 0 && threadIdx.x < cluster.num_blocks()) {
    const unsigned* remote = cluster.map_shared_rank(&word, threadIdx.x);
    atomicAdd(&sink[blockIdx.x], *remote);
  }
  cluster.sync();
}

// Launches `kernel` in `clusters` clusters of `cluster_size` CTAs of `threads` (sizes over 8
// are non-portable: allowed here, and the launch fails where the GPU cannot place them).
template <typename... Params, typename... Args>
int LaunchInClusters(void (*kernel)(Params...), int clusters, int cluster_size, int threads,
                     void* stream, Args... args) {
  if (cluster_size > 8) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (err != cudaSuccess) return static_cast<int>(err);
  }
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(cluster_size);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(clusters * cluster_size));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.stream = static_cast<cudaStream_t>(stream);
  config.attrs = &attribute;
  config.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, args...);
  return static_cast<int>(err != cudaSuccess ? err : cudaGetLastError());
}

}  // namespace

int LaunchReadAll(const void* data, size_t bytes, unsigned* sink, int blocks, void* stream,
                  bool cached) {
  auto* const kernel = cached ? ReadAllKernel<true> : ReadAllKernel<false>;
  kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(data), bytes / 16, sink);
  return static_cast<int>(cudaGetLastError());
}

int LaunchReadFew(const void* data, size_t bytes, unsigned* sink, int ctas, void* stream) {
  ReadFewKernel<<<ctas, kFewThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(data), bytes / 16, sink);
  return static_cast<int>(cudaGetLastError());
}

int LaunchReadClusters(const void* data, size_t bytes, float* out, int clusters, int cluster_size,
                       void* stream) {
  return LaunchInClusters(ReadClusterKernel, clusters, cluster_size, kFewThreads, stream,
                          static_cast<const uint4*>(data), bytes / 16, out);
}

int LaunchEmpty(unsigned* sink, int ctas, int threads, void* stream) {
  EmptyKernel<<<ctas, threads, 0, static_cast<cudaStream_t>(stream)>>>(sink);
  return static_cast<int>(cudaGetLastError());
}

int LaunchStamp(unsigned long long* out, void* stream) {
  StampKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(out);
  return static_cast<int>(cudaGetLastError());
}

int LaunchEmptyPair(unsigned* sink, int ctas, int threads, void* stream) {
  EmptyPrimaryKernel<<<ctas, threads, 0, static_cast<cudaStream_t>(stream)>>>(sink);
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.stream = static_cast<cudaStream_t>(stream);
  config.attrs = &attribute;
  config.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&config, EmptyDependentKernel, sink);
  return static_cast<int>(err != cudaSuccess ? err : cudaGetLastError());
}

int LaunchEmptyClusters(unsigned* sink, int clusters, int cluster_size, int threads, void* stream) {
  return LaunchInClusters(EmptyClusterKernel, clusters, cluster_size, threads, stream, sink);
}

}  // namespace writescope::kernels::bench
