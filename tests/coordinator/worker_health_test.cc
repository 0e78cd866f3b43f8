// The supervisor's reading of health probes (WorkerHealth): a late probe while a worker is up
// leaves it up until kLateProbesDown in a row; a refused connection, NOT_SERVING, or a late
// probe while it is down count at once; an answer in between starts the count again.

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/worker_client.h"
#include "gtest/gtest.h"

namespace writescope::coordinator {
namespace {

const absl::StatusOr<bool> kServing = true;
const absl::StatusOr<bool> kNotServing = false;
const absl::StatusOr<bool> kLate = absl::DeadlineExceededError("no answer in 1s");
const absl::StatusOr<bool> kRefused = absl::UnavailableError("connection refused");

TEST(WorkerHealthTest, LateProbesWhileUpCountOnlyInARow) {
  WorkerHealth health;
  EXPECT_TRUE(health.Observe(kServing).up);
  for (int i = 1; i < WorkerHealth::kLateProbesDown; ++i) {
    const WorkerHealth::Verdict late = health.Observe(kLate);
    EXPECT_TRUE(late.up) << i;
    EXPECT_TRUE(late.reachable) << i;
    EXPECT_EQ(health.late_probes(), i);
  }
  // An answer starts the count again.
  EXPECT_TRUE(health.Observe(kServing).up);
  EXPECT_EQ(health.late_probes(), 0);
  for (int i = 1; i < WorkerHealth::kLateProbesDown; ++i) EXPECT_TRUE(health.Observe(kLate).up);
  // The kLateProbesDown-th in a row: down, and not reachable.
  const WorkerHealth::Verdict down = health.Observe(kLate);
  EXPECT_FALSE(down.up);
  EXPECT_FALSE(down.reachable);
  // Late again while down: still down.
  EXPECT_FALSE(health.Observe(kLate).up);
  EXPECT_TRUE(health.Observe(kServing).up);
}

TEST(WorkerHealthTest, ARefusalOrNotServingCountsAtOnce) {
  WorkerHealth health;
  EXPECT_TRUE(health.Observe(kServing).up);
  const WorkerHealth::Verdict refused = health.Observe(kRefused);
  EXPECT_FALSE(refused.up);
  EXPECT_FALSE(refused.reachable);
  EXPECT_TRUE(health.Observe(kServing).up);
  const WorkerHealth::Verdict not_serving = health.Observe(kNotServing);
  EXPECT_FALSE(not_serving.up);
  EXPECT_TRUE(not_serving.reachable);
  // One late probe after a refusal, or before the first answer: down at once.
  WorkerHealth fresh;
  EXPECT_FALSE(fresh.Observe(kLate).up);
  EXPECT_FALSE(health.Observe(kLate).up);
}

}  // namespace
}  // namespace writescope::coordinator
