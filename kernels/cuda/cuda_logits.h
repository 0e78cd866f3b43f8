// Reductions of lm_head's logits on the device, so that a greedy step's [rows, vocab] product
// need not be copied to the host. Plain C++ header; `stream` is a cudaStream_t.
#ifndef WRITESCOPE_KERNELS_CUDA_CUDA_LOGITS_H_
#define WRITESCOPE_KERNELS_CUDA_CUDA_LOGITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/logit_row_stats.h"

namespace writescope::kernels::cuda {

// stats[r] = the LogitRowStats of row r of logits [rows][vocab] (both device pointers),
// asynchronous: one block per row, two passes over it (the max, its first index and the +inf
// count; then the sum of expf(key - max) in double). The sum's order differs from the host's
// (common/sampler.h ComputeLogitRowStats), so a log-probability from it may differ from the
// host's in its last bits; the rest is exact. INVALID_ARGUMENT for rows or vocab < 0 or a vocab
// past int32.
absl::Status LogitRowStatsOnDevice(const float* logits, int64_t rows, int64_t vocab,
                                   LogitRowStats* stats, void* stream);

}  // namespace writescope::kernels::cuda

#endif  // WRITESCOPE_KERNELS_CUDA_CUDA_LOGITS_H_
