// Shared by the attention benchmark's CPU and CUDA parts: options and a tile pool.
#ifndef WRITESCOPE_KERNELS_BENCH_BENCH_COMMON_H_
#define WRITESCOPE_KERNELS_BENCH_BENCH_COMMON_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention.h"

namespace writescope::kernels::bench {

// The middle value of `v` (the upper one of an even count), or 0 where it is empty.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct BenchOptions {
  std::vector<int64_t> tokens = {8192, 32768, 131072};
  std::vector<int32_t> batches = {1, 8, 32};
  std::vector<std::string> models = {"qwen3", "mixtral"};
  int threads = 0;           // 0: OpenMP default
  int iters = 3;             // timed iterations per point (after one warm-up)
  double dram_gbps = 85;     // CPU ceiling
  double hbm_gbps = 4300;    // GPU ceiling
  double pool_gb = 2;        // unique KV bytes on the host (sequences reuse tiles beyond it)
  double gpu_pool_gb = 16;   // same on the GPU
  bool cpu = true, mla = true, cuda = true, merge = true;
  bool logits = true;  // the CUDA table of lm_head's per-row stats (kernels/cuda/cuda_logits.h)
  bool gqa = true;  // the GQA tables (CPU and CUDA), the overlap and the prefill
  bool prefill = true, overlap = true;  // the CUDA prefill tables, the CUDA overlap table
  bool floors = true;         // the CUDA floors at batch 1: reads by n SMs, empty launches
  bool gqa_splits = false;    // the CUDA GQA table's bulk4 columns at fixed split sizes
  bool timeline = false;      // the batch-1 anatomy's timeline of bulk4's CTAs
  bool flush_cached = true;   // the CUDA L2 flush with normal-priority loads (--flush=stream: not)
  double gpu_warmup_ms = 50;  // CUDA timings: calls before the timed runs, at least this long
  // The CPU MLA table's AMX rows: one per prefetch distance (CpuAttentionOptions::
  // mla_amx_prefetch_steps).
  std::vector<int32_t> mla_prefetch = {2};
  // The CPU decodes' work plans: rows per divisor (CpuAttentionOptions::plan_divisor).
  std::vector<int32_t> plan_divisors = {1};
};

struct GqaModel {
  std::string name;
  int32_t q_heads, kv_heads, head_dim;
};
inline bool FindModel(const std::string& name, GqaModel* model) {
  if (name == "qwen3") *model = {"qwen3", 32, 4, 128};
  else if (name == "mixtral") *model = {"mixtral", 32, 8, 128};
  else return false;
  return true;
}

// The model's GQA shape in tiles of block_tokens (softmax scale 1 / sqrt(head_dim)), and
// the bf16 values of one tile (K then V of every kv head).
inline GqaShape BenchShape(const GqaModel& model, int32_t block_tokens) {
  return {model.q_heads, model.kv_heads, model.head_dim, block_tokens,
          1.0f / std::sqrt(static_cast<float>(model.head_dim))};
}
inline int64_t TileValues(const GqaShape& shape) {
  return int64_t{2} * shape.num_kv_heads * shape.block_tokens * shape.head_dim;
}

// CUDA part; a build without CUDA links a stub that prints one line.
void RunCudaBenchmarks(const BenchOptions& options);

// While it lives, a thread keeps the GPU's copy engine reading host memory: pinned
// host-to-device copies of `bytes` back to back, as the ping-pong transfers run beside the
// CPU's attention in a decode step. Null where there is no CUDA build or device, or no
// pinned memory.
class HostCopyLoad {
 public:
  static std::unique_ptr<HostCopyLoad> Start(size_t bytes);
  virtual ~HostCopyLoad() = default;
  // Stops the copies; the rate they ran at (GB/s) while they ran.
  virtual double Stop() = 0;
};

}  // namespace writescope::kernels::bench

#endif  // WRITESCOPE_KERNELS_BENCH_BENCH_COMMON_H_
