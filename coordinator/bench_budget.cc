#include "coordinator/bench_budget.h"

#include <algorithm>

namespace writescope::coordinator {

absl::Duration BenchBudget::Estimate(uint64_t batch, uint64_t context) const {
  const auto it = points_.find({batch, context});
  if (it == points_.end()) return absl::ZeroDuration();
  return it->second.has_later ? it->second.longest_later : it->second.first;
}

absl::Duration BenchBudget::Left(absl::Duration elapsed) const {
  if (!limited()) return absl::ZeroDuration();
  return std::max(limit_ - elapsed, absl::ZeroDuration());
}

bool BenchBudget::Fits(uint64_t batch, uint64_t context, absl::Duration elapsed) const {
  if (!limited()) return true;
  const absl::Duration left = limit_ - elapsed;
  return left > absl::ZeroDuration() && Estimate(batch, context) * kSlack <= left;
}

void BenchBudget::Record(uint64_t batch, uint64_t context, absl::Duration took) {
  const auto [it, first] = points_.try_emplace({batch, context});
  if (first) {
    it->second.first = took;
    return;
  }
  it->second.longest_later = it->second.has_later ? std::max(it->second.longest_later, took)
                                                  : took;
  it->second.has_later = true;
}

}  // namespace writescope::coordinator
