// The time budget of `wscope bench --bench_for`: which bench points may still start. A point
// (batch, context) runs under all its policies and turns in a round, or not at all, so that
// every policy keeps as many rounds of it as the others (a bench stopped from outside ends in
// the middle of one: run 234 kept one round of writescope at Mixtral 32 x 32512, two of the
// other policies'). Pure logic: the caller measures.
#ifndef WRITESCOPE_COORDINATOR_BENCH_BUDGET_H_
#define WRITESCOPE_COORDINATOR_BENCH_BUDGET_H_

#include <cstdint>
#include <map>
#include <utility>

#include "absl/time/time.h"

namespace writescope::coordinator {

class BenchBudget {
 public:
  // The room kept above a point's estimate for the host's drift between rounds (the CPU
  // expert time moved 10-30 % between a policy's turns on the H200, runs 231-232).
  static constexpr double kSlack = 1.1;

  // `limit`: the bench's time; zero or less: none.
  explicit BenchBudget(absl::Duration limit) : limit_(limit) {}

  bool limited() const { return limit_ > absl::ZeroDuration(); }
  // How long the point's rounds take: its longest round since its first, or its first until
  // it has another (a point's first round carries the one-time costs: without a prewarm, the
  // host device's first round at a point took 6.3 s and the later ones 0.7-0.8). Zero: no
  // round of it recorded.
  absl::Duration Estimate(uint64_t batch, uint64_t context) const;
  // Whether the point may start `elapsed` into the bench: always without a limit; never once
  // the limit has passed; else when its estimate, with kSlack, fits in what is left (a point
  // not yet recorded fits: nothing tells its time).
  bool Fits(uint64_t batch, uint64_t context, absl::Duration elapsed) const;
  // What is left of the limit `elapsed` into the bench (zero at the least; zero without a
  // limit).
  absl::Duration Left(absl::Duration elapsed) const;
  // A round of the point that ran under all its policies and turns took `took` (a round in
  // which one failed tells nothing of the point's time: the caller leaves it out).
  void Record(uint64_t batch, uint64_t context, absl::Duration took);

 private:
  struct PointTime {
    absl::Duration first, longest_later;
    bool has_later = false;
  };
  absl::Duration limit_;
  std::map<std::pair<uint64_t, uint64_t>, PointTime> points_;
};

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_BENCH_BUDGET_H_
