#include "kernels/cpu/work_plan.h"

#include <algorithm>

namespace writescope::kernels::cpu {

void PlanGuided(const int32_t* num_blocks, int32_t num_seqs, int32_t units, int threads,
                int divisor, WorkPlan* plan) {
  int64_t remaining = 0;
  for (int32_t s = 0; s < num_seqs; ++s) remaining += int64_t{num_blocks[s]} * units;
  const int64_t parts = int64_t{std::max(1, threads)} * std::max(1, divisor);
  plan->items.clear();
  plan->item_begin.assign(int64_t{num_seqs} * units + 1, 0);
  int64_t chunk_left = 0;  // of the chunk being cut
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t u = 0; u < units; ++u) {
      plan->item_begin[int64_t{s} * units + u] = static_cast<int64_t>(plan->items.size());
      for (int32_t b = 0; b < num_blocks[s];) {
        if (chunk_left == 0) chunk_left = std::max<int64_t>(1, (remaining + parts - 1) / parts);
        const int32_t take =
            static_cast<int32_t>(std::min<int64_t>(chunk_left, num_blocks[s] - b));
        plan->items.push_back({s, u, b, b + take});
        b += take;
        chunk_left -= take;
        remaining -= take;
      }
    }
  }
  plan->item_begin.back() = static_cast<int64_t>(plan->items.size());
}

}  // namespace writescope::kernels::cpu
