// The element-wise steps of the routed experts (kernels/cuda/cuda_experts.h). Each kernel
// gives a block one row at a time (rows strided by the grid) and its threads the columns,
// so that every access is coalesced along the row.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_experts.h"
#include "kernels/cuda/device_util.cuh"

namespace writescope::kernels::cuda {
namespace {

using internal::ToBf16Bits;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;

__global__ void GatherRowsKernel(const float* __restrict__ x, int64_t hidden,
                                 const int32_t* __restrict__ rows, int64_t n,
                                 uint16_t* __restrict__ out) {
  for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
    const float* src = x + int64_t{rows[p]} * hidden;
    uint16_t* dst = out + p * hidden;
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = ToBf16Bits(src[c]);
  }
}

__global__ void SwiGluKernel(const float* __restrict__ gate_up, int64_t n, int64_t intermediate,
                             uint16_t* __restrict__ out) {
  for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
    const float* g = gate_up + p * 2 * intermediate;
    const float* u = g + intermediate;
    uint16_t* dst = out + p * intermediate;
    for (int64_t j = threadIdx.x; j < intermediate; j += blockDim.x) {
      // CpuExperts' Silu(g) * u, operation for operation (expf, IEEE division).
      const float gate = g[j];
      const float silu = gate / (1.0f + expf(-gate));
      dst[j] = ToBf16Bits(__fmul_rn(silu, u[j]));
    }
  }
}

__global__ void CombineKernel(const float* __restrict__ expert_out, int64_t hidden,
                              const int32_t* __restrict__ slot,
                              const float* __restrict__ route_weights, int64_t tokens,
                              int64_t top_k, float* __restrict__ y) {
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const int32_t* slots = slot + t * top_k;
    const float* w = route_weights + t * top_k;
    float* yr = y + t * hidden;
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
      // Rounded multiply, then rounded add (no FMA contraction): the host build's order.
      float acc = __fmul_rn(w[0], expert_out[int64_t{slots[0]} * hidden + c]);
      for (int64_t k = 1; k < top_k; ++k) {
        acc = __fadd_rn(acc, __fmul_rn(w[k], expert_out[int64_t{slots[k]} * hidden + c]));
      }
      yr[c] = acc;
    }
  }
}

int Blocks(int64_t rows) { return static_cast<int>(rows < kMaxBlocks ? rows : kMaxBlocks); }

absl::Status LaunchStatus(const char* what) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

}  // namespace

absl::Status GatherRowsToBf16(const float* x, int64_t hidden, const int32_t* rows, int64_t n,
                              uint16_t* out, void* stream) {
  if (n <= 0 || hidden <= 0) return absl::OkStatus();
  if (x == nullptr || rows == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("GatherRowsToBf16: null pointer");
  }
  GatherRowsKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, hidden, rows,
                                                                                  n, out);
  return LaunchStatus("GatherRowsToBf16");
}

absl::Status SwiGluToBf16(const float* gate_up, int64_t n, int64_t intermediate, uint16_t* out,
                          void* stream) {
  if (n <= 0 || intermediate <= 0) return absl::OkStatus();
  if (gate_up == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("SwiGluToBf16: null pointer");
  }
  SwiGluKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(gate_up, n,
                                                                              intermediate, out);
  return LaunchStatus("SwiGluToBf16");
}

absl::Status CombineExpertRows(const float* expert_out, int64_t hidden, const int32_t* slot,
                               const float* route_weights, int64_t tokens, int64_t top_k, float* y,
                               void* stream) {
  if (tokens <= 0 || hidden <= 0) return absl::OkStatus();
  if (top_k <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("CombineExpertRows: top_k ", top_k));
  }
  if (expert_out == nullptr || slot == nullptr || route_weights == nullptr || y == nullptr) {
    return absl::InvalidArgumentError("CombineExpertRows: null pointer");
  }
  CombineKernel<<<Blocks(tokens), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      expert_out, hidden, slot, route_weights, tokens, top_k, y);
  return LaunchStatus("CombineExpertRows");
}

}  // namespace writescope::kernels::cuda
