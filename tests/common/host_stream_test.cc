// SumOfTwoArrays (common/host_stream.h) against a plain loop: every length around the
// lanes' groups and the threads' ranges, more threads than groups, none at all.
#include "common/host_stream.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace writescope {
namespace {

double PlainSum(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] + b[i];
  return sum;
}

class SumOfTwoArraysTest : public ::testing::TestWithParam<std::tuple<size_t, int>> {};

TEST_P(SumOfTwoArraysTest, IntegersSumExactlyAsAPlainLoop) {
  const auto [n, threads] = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(n * 31 + threads));
  std::uniform_int_distribution<int> value(-1000, 1000);
  std::vector<double> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = value(rng);
    b[i] = value(rng);
  }
  // Each element counts once: integers add exactly in any order.
  EXPECT_EQ(SumOfTwoArrays(a.data(), b.data(), n, threads), PlainSum(a, b));
}

TEST_P(SumOfTwoArraysTest, FractionsWithinRounding) {
  const auto [n, threads] = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(n * 17 + threads));
  std::uniform_real_distribution<double> value(0.0, 1.0);
  std::vector<double> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = value(rng);
    b[i] = value(rng);
  }
  const double expected = PlainSum(a, b);
  EXPECT_NEAR(SumOfTwoArrays(a.data(), b.data(), n, threads), expected,
              1e-12 * std::max(1.0, expected));
}

INSTANTIATE_TEST_SUITE_P(LengthsAndThreads, SumOfTwoArraysTest,
                         ::testing::Combine(::testing::Values(size_t{0}, size_t{1}, size_t{7},
                                                              size_t{8}, size_t{9}, size_t{15},
                                                              size_t{17}, size_t{63}, size_t{64},
                                                              size_t{1000}, size_t{4097}),
                                            ::testing::Values(0, 1, 2, 3, 16)));

TEST(SumOfTwoArrays, OnlyTheFirstNElementsCount) {
  const std::vector<double> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 100};
  const std::vector<double> b = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 100};
  EXPECT_EQ(SumOfTwoArrays(a.data(), b.data(), 11, 2), 66.0 + 11.0);
  EXPECT_EQ(SumOfTwoArrays(nullptr, nullptr, 0, 4), 0.0);
}

}  // namespace
}  // namespace writescope
