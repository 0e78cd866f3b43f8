// Reference kernels for the attention benchmark (CUDA builds only): a plain streaming
// read, the size-matched ceiling a decode over the same bytes is compared with, and the
// L2 flush between timed runs.
#ifndef WRITESCOPE_KERNELS_BENCH_BENCH_KERNELS_H_
#define WRITESCOPE_KERNELS_BENCH_BENCH_KERNELS_H_

#include <cstddef>

namespace writescope::kernels::bench {

// Reads `bytes` (rounded down to 16) of device memory with 16-byte loads from `blocks`
// CTAs of 256 threads; each CTA writes one word of its XOR to sink[block] (so the loads
// cannot be dropped). Returns a cudaError_t as int.
int LaunchReadAll(const void* data, size_t bytes, unsigned* sink, int blocks, void* stream);

}  // namespace writescope::kernels::bench

#endif  // WRITESCOPE_KERNELS_BENCH_BENCH_KERNELS_H_
