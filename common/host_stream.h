// A read-only stream over host memory, the CPU side of ws_probe's joint host-memory ceiling
// (the read beside the pinned H2D copies, bench_report.py --host-read-gbps). It has to read
// at the memory's rate, not at the adds': written as an OpenMP loop with a simd reduction
// inside a lambda, GCC (-O3, no -march) kept the sum in memory and added one element at a
// time. On this 2-vCPU machine (session 48) ws_probe's stream read 25.6 GB/s on one thread
// with that loop and 28.9 with this one; on two threads both reach the memory (best 47.5
// and 53.0, medians 46.5 and 46.7 GB/s).
#ifndef WRITESCOPE_COMMON_HOST_STREAM_H_
#define WRITESCOPE_COMMON_HOST_STREAM_H_

#include <cstddef>

namespace writescope {

// The sum of a[i] + b[i] over i in [0, n), read by `threads` OpenMP threads (< 1: one), each
// over one contiguous range of both arrays with independent partial sums. The order of the
// additions differs from a plain loop's: exact where every partial sum is (integers below
// 2^53), else within floating-point rounding.
double SumOfTwoArrays(const double* a, const double* b, size_t n, int threads);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_HOST_STREAM_H_
