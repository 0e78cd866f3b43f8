#include "kernels/attention_state.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace writescope::kernels {
namespace {

using testing::GuardedFloats;

constexpr int32_t kDim = 19;  // odd on purpose

struct State {
  explicit State(int64_t rows) : o(rows * kDim), lse(rows) {}
  AttentionStateView view() { return {o.data(), lse.data()}; }
  ConstAttentionStateView cview() const { return {o.data(), lse.data()}; }
  GuardedFloats o, lse;
};

void FillRandom(State& s, int64_t rows, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-3, 3);
  for (int64_t i = 0; i < rows * kDim; ++i) s.o.data()[i] = dist(rng);
  for (int64_t r = 0; r < rows; ++r) s.lse.data()[r] = dist(rng) * 10;
}

TEST(AttentionStateTest, EmptyPlusEmptyIsEmptyAndFinite) {
  State a(3), b(3), out(3);
  SetEmptyState(a.view(), 3, kDim);
  SetEmptyState(b.view(), 3, kDim);
  MergeStates(a.cview(), b.cview(), out.view(), 3, kDim);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out.lse[i], kEmptyLse);
  for (int i = 0; i < 3 * kDim; ++i) EXPECT_EQ(out.o[i], 0.0f);
  EXPECT_TRUE(out.o.GuardsIntact() && out.lse.GuardsIntact());

  State n_out(3);
  const ConstAttentionStateView parts[] = {a.cview(), b.cview(), a.cview()};
  MergeStatesN(parts, n_out.view(), 3, kDim);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(n_out.lse[i], kEmptyLse);
  for (int i = 0; i < 3 * kDim; ++i) EXPECT_EQ(n_out.o[i], 0.0f);
  State none(3);
  MergeStatesN({}, none.view(), 3, kDim);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(none.lse[i], kEmptyLse);
  for (int i = 0; i < 3 * kDim; ++i) EXPECT_EQ(none.o[i], 0.0f);
}

TEST(AttentionStateTest, EmptyIsExactIdentityOnBothSides) {
  std::mt19937_64 rng(1);
  State a(4), empty(4), left(4), right(4);
  FillRandom(a, 4, rng);
  SetEmptyState(empty.view(), 4, kDim);
  MergeStates(a.cview(), empty.cview(), left.view(), 4, kDim);
  MergeStates(empty.cview(), a.cview(), right.view(), 4, kDim);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(left.lse[i], a.lse[i]);
    EXPECT_EQ(right.lse[i], a.lse[i]);
  }
  for (int i = 0; i < 4 * kDim; ++i) {
    EXPECT_EQ(left.o[i], a.o[i]);
    EXPECT_EQ(right.o[i], a.o[i]);
  }
}

TEST(AttentionStateTest, ExtremeLseGapsNeverMakeNan) {
  State a(4), b(4), out(4);
  std::mt19937_64 rng(2);
  FillRandom(a, 4, rng);
  FillRandom(b, 4, rng);
  const float gaps[4][2] = {{1e30f, -1e30f}, {-80, 80}, {0, -200}, {3.0e38f, 3.0e38f}};
  for (int r = 0; r < 4; ++r) {
    a.lse.data()[r] = gaps[r][0];
    b.lse.data()[r] = gaps[r][1];
  }
  MergeStates(a.cview(), b.cview(), out.view(), 4, kDim);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(std::isnan(out.lse[i])) << i;
  for (int i = 0; i < 4 * kDim; ++i) EXPECT_FALSE(std::isnan(out.o[i])) << i;
  EXPECT_FLOAT_EQ(out.lse[0], 1e30f);
  EXPECT_FLOAT_EQ(out.o[0], a.o[0]);
}

TEST(AttentionStateTest, MergeMatchesDoubleFormulaAndNWayAgrees) {
  std::mt19937_64 rng(3);
  constexpr int64_t kRows = 37;
  State a(kRows), b(kRows), c(kRows), ab(kRows), abc(kRows), n_way(kRows);
  FillRandom(a, kRows, rng);
  FillRandom(b, kRows, rng);
  FillRandom(c, kRows, rng);
  c.lse.data()[5] = kEmptyLse;  // an empty row inside a non-empty state
  for (int d = 0; d < kDim; ++d) c.o.data()[5 * kDim + d] = 0;
  MergeStates(a.cview(), b.cview(), ab.view(), kRows, kDim);
  MergeStates(ab.cview(), c.cview(), abc.view(), kRows, kDim);
  const ConstAttentionStateView parts[] = {c.cview(), a.cview(), b.cview()};
  MergeStatesN(parts, n_way.view(), kRows, kDim);
  for (int64_t r = 0; r < kRows; ++r) {
    const double la = a.lse[r], lb = b.lse[r], lc = c.lse[r];
    const double m = std::max({la, lb, lc});
    const double wa = std::exp(la - m), wb = std::exp(lb - m), wc = std::exp(lc - m);
    const double lse = m + std::log(wa + wb + wc);
    EXPECT_NEAR(abc.lse[r], lse, 1e-5 * std::max(1.0, std::abs(lse)));
    EXPECT_NEAR(n_way.lse[r], lse, 1e-5 * std::max(1.0, std::abs(lse)));
    for (int d = 0; d < kDim; ++d) {
      const int64_t i = r * kDim + d;
      const double want = (wa * a.o[i] + wb * b.o[i] + wc * c.o[i]) / (wa + wb + wc);
      EXPECT_NEAR(abc.o[i], want, 1e-5);
      EXPECT_NEAR(n_way.o[i], want, 1e-5);
    }
  }
  // In place: out aliases b, then a.
  State b_copy(kRows);
  std::copy_n(b.o.data(), kRows * kDim, b_copy.o.data());
  std::copy_n(b.lse.data(), kRows, b_copy.lse.data());
  MergeStates(a.cview(), b_copy.cview(), b_copy.view(), kRows, kDim);
  for (int64_t i = 0; i < kRows * kDim; ++i) EXPECT_EQ(b_copy.o[i], ab.o[i]);
  MergeStates(a.cview(), b.cview(), a.view(), kRows, kDim);
  for (int64_t i = 0; i < kRows * kDim; ++i) EXPECT_EQ(a.o[i], ab.o[i]);
  EXPECT_TRUE(a.o.GuardsIntact() && abc.o.GuardsIntact() && n_way.lse.GuardsIntact() &&
              b_copy.o.GuardsIntact());
}

// A prefill chunk's states (above 1M values) merge on several threads: the same bits as
// row by row on one.
TEST(AttentionStateTest, AParallelMergeEqualsTheSerialOne) {
  std::mt19937_64 rng(4);
  constexpr int64_t kRows = (int64_t{1} << 20) / kDim + 100;  // past the parallel threshold
  State a(kRows), b(kRows), merged(kRows), empty(kRows);
  FillRandom(a, kRows, rng);
  FillRandom(b, kRows, rng);
  for (int64_t r = 0; r < kRows; r += 97) b.lse.data()[r] = kEmptyLse;
  MergeStates(a.cview(), b.cview(), merged.view(), kRows, kDim);
  for (int64_t r = 0; r < kRows; r += 1 + r % 13) {  // a sample of rows, each on its own
    State one_a(1), one_b(1), one(1);
    std::copy_n(a.o.data() + r * kDim, kDim, one_a.o.data());
    std::copy_n(b.o.data() + r * kDim, kDim, one_b.o.data());
    one_a.lse.data()[0] = a.lse[r];
    one_b.lse.data()[0] = b.lse[r];
    MergeStates(one_a.cview(), one_b.cview(), one.view(), 1, kDim);
    ASSERT_EQ(merged.lse[r], one.lse[0]) << r;
    for (int d = 0; d < kDim; ++d) ASSERT_EQ(merged.o[r * kDim + d], one.o[d]) << r;
  }
  SetEmptyState(empty.view(), kRows, kDim);
  for (int64_t r = 0; r < kRows; ++r) ASSERT_EQ(empty.lse[r], kEmptyLse);
  for (int64_t i = 0; i < kRows * kDim; ++i) ASSERT_EQ(empty.o[i], 0.0f);
  EXPECT_TRUE(merged.o.GuardsIntact() && merged.lse.GuardsIntact() && empty.o.GuardsIntact());
}

}  // namespace
}  // namespace writescope::kernels
