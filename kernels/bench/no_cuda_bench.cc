// The CUDA benchmarks in a build without CUDA.
#include <cstdio>

#include "kernels/bench/bench_common.h"

namespace writescope::kernels::bench {

void RunCudaBenchmarks(const BenchOptions&) {
  std::printf("\n== CUDA: not built (WS_HAVE_CUDA off) ==\n");
}

std::unique_ptr<HostCopyLoad> HostCopyLoad::Start(size_t) { return nullptr; }

}  // namespace writescope::kernels::bench
