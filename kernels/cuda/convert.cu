// bf16 -> fp32 widening on the device (weights for the fp32 matrix products), copies by the
// SMs, and the SwiGLU activation between the MLP's products.
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_convert.h"
#include "kernels/cuda/device_util.cuh"

namespace writescope::kernels::cuda {
namespace {

__global__ void SiluMulKernel(float* __restrict__ gate, const float* __restrict__ up, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double g = gate[i];
    gate[i] = static_cast<float>(g / (1.0 + exp(-g))) * up[i];
  }
}

__global__ void SplitToBf16x3Kernel(const float* __restrict__ x, int64_t n,
                                    uint16_t* __restrict__ parts) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    const uint16_t hi = internal::ToBf16Bits(v);
    const float r1 = v - internal::Bf16(hi);  // exact
    const uint16_t mid = internal::ToBf16Bits(r1);
    const float r2 = r1 - internal::Bf16(mid);  // exact
    parts[i] = hi;
    parts[n + i] = mid;
    parts[2 * n + i] = internal::ToBf16Bits(r2);
  }
}

__global__ void SumSplitProductsKernel(const float* parts, int64_t n, int64_t groups, float* y) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    float sum = 0.0f;
    for (int64_t g = 0; g < groups; ++g) {
      const float* group = parts + 3 * n * g;
      sum += (group[i] + group[n + i]) + group[2 * n + i];
    }
    y[i] = sum;
  }
}

// 16 bytes per thread per iteration where both ends allow it, then the tail byte by byte.
__global__ void CopyBytesKernel(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src,
                                size_t vectors, size_t bytes) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  const size_t first = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (size_t i = first; i < vectors; i += stride) {
    reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  }
  for (size_t i = vectors * 16 + first; i < bytes; i += stride) dst[i] = src[i];
}

// Block b copies piece b (a grid-stride over pieces when there are more than blocks).
__global__ void CopyPiecesKernel(const DevicePiece* __restrict__ pieces, int count) {
  for (int p = blockIdx.x; p < count; p += gridDim.x) {
    const DevicePiece piece = pieces[p];
    auto* dst = static_cast<unsigned char*>(piece.dst);
    const auto* src = static_cast<const unsigned char*>(piece.src);
    const bool aligned = (reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % 16 == 0;
    const uint64_t vectors = aligned ? piece.bytes / 16 : 0;
    for (uint64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    }
    for (uint64_t i = vectors * 16 + threadIdx.x; i < piece.bytes; i += blockDim.x) dst[i] = src[i];
  }
}

// The launch just queued: INTERNAL naming `what` and CUDA's error, or OK.
absl::Status LaunchStatus(const char* what) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
  }
  return absl::OkStatus();
}

// Blocks of `threads` for `units` grid-stride units: one per `threads` units, at least one,
// at most `cap` (the kernels loop over the rest).
int CappedBlocks(int64_t units, int threads, int64_t cap) {
  const int64_t wanted = (units + threads - 1) / threads;
  return static_cast<int>(wanted < 1 ? 1 : (wanted < cap ? wanted : cap));
}

// The element-wise kernels' launch: `kernel`(args...) on blocks of 256 threads, one per 256
// of the n elements, at most `cap` (the kernels grid-stride over the rest); nothing for n <= 0.
template <typename... Params, typename... Args>
absl::Status LaunchElementwise(void (*kernel)(Params...), int64_t n, int64_t cap, void* stream,
                               const char* what, Args... args) {
  if (n <= 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  kernel<<<CappedBlocks(n, kThreads, cap), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      args...);
  return LaunchStatus(what);
}

}  // namespace

absl::Status CopyDevicePieces(const DevicePiece* pieces, int count, void* stream) {
  if (count <= 0) return absl::OkStatus();
  const int blocks = count < 1024 ? count : 1024;
  CopyPiecesKernel<<<blocks, 128, 0, static_cast<cudaStream_t>(stream)>>>(pieces, count);
  return LaunchStatus("CopyDevicePieces");
}

absl::Status CopyBytes(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return absl::OkStatus();
  const bool aligned = reinterpret_cast<uintptr_t>(dst) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(src) % 16 == 0;
  const size_t vectors = aligned ? bytes / 16 : 0;
  const int threads = 256;
  const size_t units = aligned ? vectors : bytes;
  // Enough loads in flight to hide the bus latency of mapped host memory, a wave at most.
  const int blocks = CappedBlocks(static_cast<int64_t>(units), threads, 264);
  CopyBytesKernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), vectors, bytes);
  return LaunchStatus("CopyBytes");
}

absl::Status SplitToBf16x3(const float* x, int64_t n, uint16_t* parts, void* stream) {
  return LaunchElementwise(SplitToBf16x3Kernel, n, 4096, stream, "SplitToBf16x3", x, n, parts);
}

absl::Status SumSplitProducts(const float* parts, int64_t n, int64_t groups, float* y,
                              void* stream) {
  if (groups < 1) return absl::InvalidArgumentError("SumSplitProducts needs a group at least");
  return LaunchElementwise(SumSplitProductsKernel, n, 4096, stream, "SumSplitProducts", parts, n,
                           groups, y);
}

absl::Status SiluMulInPlace(float* gate, const float* up, int64_t n, void* stream) {
  return LaunchElementwise(SiluMulKernel, n, 4096, stream, "SiluMulInPlace", gate, up, n);
}

}  // namespace writescope::kernels::cuda
