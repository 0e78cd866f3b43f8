// bf16 -> fp32 widening on the device (weights for the fp32 matrix products).
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_convert.h"

namespace writescope::kernels::cuda {
namespace {

__global__ void WidenBf16(const uint16_t* __restrict__ src, float* __restrict__ dst, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = __uint_as_float(static_cast<uint32_t>(src[i]) << 16);
  }
}

}  // namespace

absl::Status Bf16ToFloat(const uint16_t* src, float* dst, int64_t n, void* stream) {
  if (n <= 0) return absl::OkStatus();
  const int threads = 256;
  const int64_t wanted = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(wanted < 65536 ? wanted : 65536);
  WidenBf16<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(src, dst, n);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    return absl::InternalError(absl::StrCat("Bf16ToFloat: ", cudaGetErrorString(error)));
  }
  return absl::OkStatus();
}

}  // namespace writescope::kernels::cuda
