#include "common/host_stream.h"

#include <omp.h>

#include <algorithm>

namespace writescope {
namespace {

// Eight partial sums: the adds of one are independent of the others', so the loop issues
// loads as fast as the memory returns them.
constexpr size_t kLanes = 8;

double SumRange(const double* a, const double* b, size_t begin, size_t end) {
  double lanes[kLanes] = {};
  size_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) lanes[k] += a[i + k] + b[i + k];
  }
  double sum = 0.0;
  for (; i < end; ++i) sum += a[i] + b[i];
  for (size_t k = 0; k < kLanes; ++k) sum += lanes[k];
  return sum;
}

}  // namespace

double SumOfTwoArrays(const double* a, const double* b, size_t n, int threads) {
  threads = std::max(1, threads);
  double total = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    const size_t team = static_cast<size_t>(omp_get_num_threads());
    const size_t rank = static_cast<size_t>(omp_get_thread_num());
    // Contiguous ranges, whole groups of lanes each where n allows.
    const size_t groups = (n + kLanes - 1) / kLanes;
    const size_t begin = std::min(n, groups * rank / team * kLanes);
    const size_t end = std::min(n, groups * (rank + 1) / team * kLanes);
    total += SumRange(a, b, begin, end);
  }
  return total;
}

}  // namespace writescope
