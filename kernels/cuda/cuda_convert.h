// Element-wise conversions and copies on the device. Plain C++ header; `stream` is a
// cudaStream_t.
#ifndef WRITESCOPE_KERNELS_CUDA_CUDA_CONVERT_H_
#define WRITESCOPE_KERNELS_CUDA_CUDA_CONVERT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace writescope::kernels::cuda {

// dst[i] = float(src[i]) for bf16 bit patterns src (exact), device pointers, asynchronous.
absl::Status Bf16ToFloat(const uint16_t* src, float* dst, int64_t n, void* stream);

// gate[i] = silu(gate[i]) * up[i], the SwiGLU activation, for device pointers, asynchronous:
// computed as the host's kernels/model SiluMul computes it (g / (1 + e^-g) in double,
// rounded to fp32, times up in fp32), so both paths agree to an ulp of the exponential.
absl::Status SiluMulInPlace(float* gate, const float* up, int64_t n, void* stream);

// dst[0, bytes) = src[0, bytes), asynchronous, by the SMs (not a copy engine): `src` may be
// host memory mapped into the device's address space (a registered or cudaHostAllocMapped
// buffer's device view), so that a small upload does not queue behind a long DMA on the
// copy engine.
absl::Status CopyBytes(void* dst, const void* src, size_t bytes, void* stream);

// One kernel for `count` device-to-device copies: pieces[i] = {dst, src, bytes}, the table
// itself readable by the device (device memory or mapped host memory). Pieces must not
// overlap. Asynchronous.
struct DevicePiece {
  void* dst;
  const void* src;
  uint64_t bytes;
};
absl::Status CopyDevicePieces(const DevicePiece* pieces, int count, void* stream);

}  // namespace writescope::kernels::cuda

#endif  // WRITESCOPE_KERNELS_CUDA_CUDA_CONVERT_H_
