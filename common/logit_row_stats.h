// What a greedy token needs of one row of logits, so that the row itself need not leave the
// device that computed it: the gpu_worker reduces each row of lm_head's product on its GPU
// (kernels/cuda/cuda_logits.h) and only these 24 bytes a row come back, not the [vocab]
// floats (13 MB a step at DeepSeek's vocabulary and batch 32). common/sampler.h turns them
// into the token and its log-probability (GreedyTokenFromStats) and computes them on the host
// (ComputeLogitRowStats, the reference). Plain header: the CUDA code includes it.
//
// Keys are the logits with NaN counted as -inf (the sampler's convention).
#ifndef WRITESCOPE_COMMON_LOGIT_ROW_STATS_H_
#define WRITESCOPE_COMMON_LOGIT_ROW_STATS_H_

#include <cstdint>

namespace writescope {

struct LogitRowStats {
  float max_key = 0.0f;       // the largest key (may be +inf, or -inf when every key is)
  int32_t argmax = 0;         // the first index of max_key (0 for an empty row)
  uint32_t num_pos_inf = 0;   // keys equal to +inf
  uint32_t reserved = 0;      // keeps sum_exp 8-byte aligned; 0
  double sum_exp = 0.0;       // sum of exp(key - max_key) over the row when max_key is
                              // finite (a key of -inf adds 0), else 0
};
static_assert(sizeof(LogitRowStats) == 24, "LogitRowStats travels as raw bytes");

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_LOGIT_ROW_STATS_H_
