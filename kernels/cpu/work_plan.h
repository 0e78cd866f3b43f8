// The CPU decode's work plan: each stream (a sequence, or a sequence's kv head for GQA) of
// whole blocks cut into work items for an OpenMP dynamic schedule.
#ifndef WRITESCOPE_KERNELS_CPU_WORK_PLAN_H_
#define WRITESCOPE_KERNELS_CPU_WORK_PLAN_H_

#include <cstdint>
#include <vector>

namespace writescope::kernels::cpu {

// A work item: blocks [first_block, end_block) of stream (seq, unit).
struct WorkItem {
  int32_t seq;
  int32_t unit;
  int32_t first_block;
  int32_t end_block;
};

struct WorkPlan {
  std::vector<WorkItem> items;     // in the order the threads should take them
  std::vector<int64_t> item_begin;  // [num_seqs * units + 1]: stream (s, u)'s items start at
                                    // item_begin[s * units + u], contiguous
};

// Guided, the way OpenMP's schedule(guided) cuts a loop, over the streams' blocks walked in
// order (s major, then u; every unit of a sequence has its num_blocks[s] blocks): each chunk
// takes ceil(R / (threads * divisor)) of the R blocks not yet planned, at least one, and is
// cut into items where a stream ends. So the items come largest first and a dynamic schedule
// ends on small ones. Equal items, about 4 a thread (the plan before session 32), leave the
// last round part-empty: 15 threads over a batch of 32 sequences got 64 items, 4.3 rounds,
// and the last thread to finish ended ~15 % past an even share (work_plan_test simulates
// it). On the H200 host the guided plan ran the CPU MLA decode 2-47 % faster (run 174,
// docs/measurements.md "Session 32"). threads and divisor below 1 count as 1.
void PlanGuided(const int32_t* num_blocks, int32_t num_seqs, int32_t units, int threads,
                int divisor, WorkPlan* plan);

}  // namespace writescope::kernels::cpu

#endif  // WRITESCOPE_KERNELS_CPU_WORK_PLAN_H_
