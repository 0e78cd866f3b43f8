// Element-wise conversions and copies on the device. Plain C++ header; `stream` is a
// cudaStream_t.
#ifndef WRITESCOPE_KERNELS_CUDA_CUDA_CONVERT_H_
#define WRITESCOPE_KERNELS_CUDA_CUDA_CONVERT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace writescope::kernels::cuda {

// gate[i] = silu(gate[i]) * up[i], the SwiGLU activation, for device pointers, asynchronous:
// computed as the host's kernels/model SiluMul computes it (g / (1 + e^-g) in double,
// rounded to fp32, times up in fp32), so both paths agree to an ulp of the exponential.
absl::Status SiluMulInPlace(float* gate, const float* up, int64_t n, void* stream);

// The three-way bf16 split of fp32 values, for products whose weights are bf16 exactly: for
// each x[i] (i < n), hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid), each rounded
// to nearest even, so that hi + mid + lo == x for every finite x whose parts stay normal or
// zero in bf16 (bf16 has fp32's exponent range: all but x within 2^16 of the smallest normal).
// parts[i] = hi, parts[n + i] = mid, parts[2n + i] = lo (bf16 bit patterns). A product with a
// bf16 matrix W then runs as one bf16 product over the 3n values with fp32 accumulation, W x
// = W hi + W mid + W lo, and SumSplitProducts adds the three results: fp32's value up to the
// summation order and the tensor cores' accumulation, at bf16's bytes of W. Device
// pointers, asynchronous.
absl::Status SplitToBf16x3(const float* x, int64_t n, uint16_t* parts, void* stream);

// The three products of a split (SplitToBf16x3) added, the largest first, for `groups`
// slices of the inner dimension one after the other: parts is [groups][3][n] and
// y[i] = sum over g in order of (parts[g][0][i] + parts[g][1][i]) + parts[g][2][i], in fp32,
// for i < n. Device pointers, asynchronous; y may be parts. INVALID_ARGUMENT for groups < 1.
absl::Status SumSplitProducts(const float* parts, int64_t n, int64_t groups, float* y,
                              void* stream);

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
