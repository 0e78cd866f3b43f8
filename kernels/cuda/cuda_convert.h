// Element conversions on the device. Plain C++ header; `stream` is a cudaStream_t.
#ifndef WRITESCOPE_KERNELS_CUDA_CUDA_CONVERT_H_
#define WRITESCOPE_KERNELS_CUDA_CUDA_CONVERT_H_

#include <cstdint>

#include "absl/status/status.h"

namespace writescope::kernels::cuda {

// dst[i] = float(src[i]) for bf16 bit patterns src (exact), device pointers, asynchronous.
absl::Status Bf16ToFloat(const uint16_t* src, float* dst, int64_t n, void* stream);

}  // namespace writescope::kernels::cuda

#endif  // WRITESCOPE_KERNELS_CUDA_CUDA_CONVERT_H_
