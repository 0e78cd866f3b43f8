// The element-wise steps of the routed experts on the device, around the per-expert cuBLAS
// GEMMs of gpu_worker/cuda/cuda_experts.cc. Numerics mirror CpuExperts' bf16 path
// (kernels/experts/cpu_experts.h): activations rounded to bf16 round-to-nearest-even, SiLU
// and products in fp32, the k terms summed in k order.
//
// Plain C++ header: every pointer is a device pointer, `stream` is a cudaStream_t, every
// launch is asynchronous on it. Launch errors come back as INTERNAL; n <= 0 is a no-op.
#ifndef WRITESCOPE_KERNELS_CUDA_CUDA_EXPERTS_H_
#define WRITESCOPE_KERNELS_CUDA_CUDA_EXPERTS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace writescope::kernels::cuda {

// out[p, :] = bf16(x[rows[p], :]) for p < n: the rows of each expert gathered together.
//   x     [*, hidden]  fp32
//   rows  [n]          int32, row of x for output row p
//   out   [n, hidden]  bf16 bits
absl::Status GatherRowsToBf16(const float* x, int64_t hidden, const int32_t* rows, int64_t n,
                              uint16_t* out, void* stream);

// out[p, j] = bf16(silu(g) * u), g = gate_up[p, j], u = gate_up[p, intermediate + j],
// silu(g) = g / (1 + exp(-g)) in fp32.
//   gate_up  [n, 2 * intermediate]  fp32 (gate columns, then up columns)
//   out      [n, intermediate]      bf16 bits
absl::Status SwiGluToBf16(const float* gate_up, int64_t n, int64_t intermediate, uint16_t* out,
                          void* stream);

// y[t, :] = w[t, 0] * expert_out[slot[t, 0], :] + w[t, 1] * expert_out[slot[t, 1], :] + ...
// in k order (the first term a product, then one addition per k, as CpuExperts does).
//   expert_out     [*, hidden]        fp32, one row per (token, k) pair
//   slot           [tokens, top_k]    int32, row of expert_out for the pair
//   route_weights  [tokens, top_k]    fp32
//   y              [tokens, hidden]   fp32, overwritten
absl::Status CombineExpertRows(const float* expert_out, int64_t hidden, const int32_t* slot,
                               const float* route_weights, int64_t tokens, int64_t top_k, float* y,
                               void* stream);

}  // namespace writescope::kernels::cuda

#endif  // WRITESCOPE_KERNELS_CUDA_CUDA_EXPERTS_H_
