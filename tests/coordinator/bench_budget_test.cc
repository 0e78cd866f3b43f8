// wscope bench --bench_for's budget: which points may still start, from their rounds' times.
#include "coordinator/bench_budget.h"

#include "gtest/gtest.h"

namespace writescope::coordinator {
namespace {

using absl::Seconds;

TEST(BenchBudgetTest, WithoutALimitEveryPointFits) {
  for (absl::Duration limit : {absl::ZeroDuration(), Seconds(-1)}) {
    BenchBudget budget(limit);
    budget.Record(4, 8192, Seconds(100));
    EXPECT_FALSE(budget.limited());
    EXPECT_TRUE(budget.Fits(4, 8192, Seconds(1e6)));
    EXPECT_EQ(budget.Left(Seconds(5)), absl::ZeroDuration());
  }
}

TEST(BenchBudgetTest, APointNotYetRunFitsUntilTheLimitHasPassed) {
  BenchBudget budget(Seconds(10));
  EXPECT_TRUE(budget.Fits(4, 8192, Seconds(0)));
  EXPECT_TRUE(budget.Fits(4, 8192, Seconds(9.9)));
  EXPECT_FALSE(budget.Fits(4, 8192, Seconds(10)));
  EXPECT_FALSE(budget.Fits(4, 8192, Seconds(12)));
  EXPECT_EQ(budget.Left(Seconds(12)), absl::ZeroDuration());
  EXPECT_EQ(budget.Left(Seconds(3)), Seconds(7));
}

TEST(BenchBudgetTest, ARunPointFitsWhenItsRoundWithSlackFitsInWhatIsLeft) {
  BenchBudget budget(Seconds(10));
  budget.Record(4, 8192, Seconds(2));
  EXPECT_EQ(budget.Estimate(4, 8192), Seconds(2));
  // 2 s with 10 % slack needs 2.2 s.
  EXPECT_TRUE(budget.Fits(4, 8192, Seconds(7.7)));
  EXPECT_FALSE(budget.Fits(4, 8192, Seconds(7.9)));
  // Points are apart: another, not yet run, still fits there.
  EXPECT_TRUE(budget.Fits(16, 8192, Seconds(7.9)));
  EXPECT_TRUE(budget.Fits(4, 32768, Seconds(7.9)));
}

TEST(BenchBudgetTest, TheFirstRoundCountsOnlyUntilThereIsAnother) {
  BenchBudget budget(Seconds(100));
  budget.Record(4, 8192, Seconds(6.3));  // the one-time costs
  EXPECT_EQ(budget.Estimate(4, 8192), Seconds(6.3));
  budget.Record(4, 8192, Seconds(0.8));
  EXPECT_EQ(budget.Estimate(4, 8192), Seconds(0.8));
  budget.Record(4, 8192, Seconds(1.2));
  budget.Record(4, 8192, Seconds(0.7));
  // The longest since the first.
  EXPECT_EQ(budget.Estimate(4, 8192), Seconds(1.2));
  EXPECT_TRUE(budget.Fits(4, 8192, Seconds(100 - 1.4)));
  EXPECT_FALSE(budget.Fits(4, 8192, Seconds(100 - 1.3)));
}

TEST(BenchBudgetTest, AnUnknownPointHasNoEstimate) {
  BenchBudget budget(Seconds(10));
  EXPECT_EQ(budget.Estimate(32, 32768), absl::ZeroDuration());
}

}  // namespace
}  // namespace writescope::coordinator
