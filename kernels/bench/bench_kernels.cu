#include "kernels/bench/bench_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace writescope::kernels::bench {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) ReadAllKernel(const uint4* __restrict__ data,
                                                         size_t count, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = size_t{gridDim.x} * kThreads;
  size_t i = size_t{blockIdx.x} * kThreads + threadIdx.x;
  // Four loads in flight per thread per iteration.
  for (; i + 3 * stride < count; i += 4 * stride) {
    const uint4 a = __ldcs(data + i), b = __ldcs(data + i + stride),
                c = __ldcs(data + i + 2 * stride), d = __ldcs(data + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
           d.z ^ d.w;
  }
  for (; i < count; i += stride) {
    const uint4 a = __ldcs(data + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  __shared__ unsigned block_acc;
  if (threadIdx.x == 0) block_acc = 0;
  __syncthreads();
  atomicXor(&block_acc, acc);
  __syncthreads();
  if (threadIdx.x == 0) sink[blockIdx.x] = block_acc;
}

}  // namespace

int LaunchReadAll(const void* data, size_t bytes, unsigned* sink, int blocks, void* stream) {
  ReadAllKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(data), bytes / 16, sink);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace writescope::kernels::bench
