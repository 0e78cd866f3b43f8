// The device's lm_head kernels: the per-row logit stats (kernels/cuda/cuda_logits.h) against
// the host reference (common/sampler.h ComputeLogitRowStats): max, first argmax and +inf count
// exact, the sum within double rounding of float exps, and the greedy token and
// log-probability that follow; the three-way bf16 split of x and the sum of the three
// products (kernels/cuda/cuda_convert.h). Needs a CUDA device (label gpu); skips without one.
#include "kernels/cuda/cuda_logits.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/sampler.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_convert.h"
#include "tests/kernels/cuda_test_util.h"

namespace writescope::kernels::cuda {
namespace {

using testing::BasicDeviceBuffer;
using Buffer = BasicDeviceBuffer<16>;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Shape {
  int64_t rows;
  int64_t vocab;
};

class LogitRowStatsOnDeviceTest : public ::testing::TestWithParam<Shape> {};

// Rows of normal logits; row r gets case r % 7: plain, ties at the max (the lower id wins,
// across threads of the block), NaN and -inf keys, +inf keys, all -inf or NaN, one key far
// above the rest (the others' exps underflow), the max at the last index.
std::vector<float> MakeRows(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(shape.rows * shape.vocab);
  for (float& v : logits) v = normal(rng);
  for (int64_t r = 0; r < shape.rows; ++r) {
    float* row = logits.data() + r * shape.vocab;
    const int64_t v = shape.vocab;
    auto at = [&](int64_t i) -> float& { return row[(i * 7919) % v]; };
    switch (r % 7) {
      case 1:
        at(1030) = at(3) = at(2047) = 50.0f;
        break;
      case 2:
        at(0) = kNaN;
        at(5) = -kInf;
        at(1500) = kNaN;
        break;
      case 3:
        at(4) = kInf;
        at(9) = kInf;
        break;
      case 4:
        for (int64_t i = 0; i < v; ++i) row[i] = i % 2 == 0 ? -kInf : kNaN;
        break;
      case 5:
        at(2) = 300.0f;
        break;
      case 6:
        row[v - 1] = 60.0f;
        break;
      default:
        break;
    }
  }
  return logits;
}

TEST_P(LogitRowStatsOnDeviceTest, MatchesTheHostReference) {
  SKIP_WITHOUT_GPU();
  const Shape shape = GetParam();
  const std::vector<float> logits = MakeRows(shape, 1000 + shape.rows * 31 + shape.vocab);
  Buffer device_logits = Buffer::From(logits);
  // Guard rows on both sides of the output: the kernel writes exactly `rows` stats.
  constexpr int kGuard = 2;
  LogitRowStats poison;
  poison.max_key = 1234.5f;
  poison.argmax = -7;
  poison.num_pos_inf = 99;
  poison.reserved = 0xdeadbeef;
  poison.sum_exp = -1.0;
  std::vector<LogitRowStats> init(shape.rows + 2 * kGuard, poison);
  Buffer device_stats = Buffer::From(init);
  ASSERT_TRUE(LogitRowStatsOnDevice(device_logits.as<float>(), shape.rows, shape.vocab,
                                    device_stats.as<LogitRowStats>() + kGuard, nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<LogitRowStats> got = device_stats.ToHost<LogitRowStats>();
  for (int g = 0; g < kGuard; ++g) {
    for (const LogitRowStats& guard : {got[g], got[kGuard + shape.rows + g]}) {
      EXPECT_EQ(guard.argmax, -7);
      EXPECT_EQ(guard.reserved, 0xdeadbeefu);
      EXPECT_EQ(guard.sum_exp, -1.0);
    }
  }
  for (int64_t r = 0; r < shape.rows; ++r) {
    const absl::Span<const float> row(logits.data() + r * shape.vocab, shape.vocab);
    const LogitRowStats want = ComputeLogitRowStats(row);
    const LogitRowStats& stats = got[kGuard + r];
    SCOPED_TRACE(::testing::Message() << "row " << r << " (case " << r % 7 << ") of "
                                      << shape.rows << " x " << shape.vocab);
    EXPECT_EQ(stats.max_key, want.max_key);
    EXPECT_EQ(stats.argmax, want.argmax);
    EXPECT_EQ(stats.num_pos_inf, want.num_pos_inf);
    EXPECT_EQ(stats.reserved, 0u);
    EXPECT_NEAR(stats.sum_exp, want.sum_exp, 1e-12 + 5e-7 * want.sum_exp);
    const SampledToken device_token = GreedyTokenFromStats(stats, shape.vocab);
    const SampledToken host_token = GreedyTokenFromStats(want, shape.vocab);
    EXPECT_EQ(device_token.token_id, host_token.token_id);
    EXPECT_NEAR(device_token.logprob, host_token.logprob, 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LogitRowStatsOnDeviceTest,
    ::testing::Values(Shape{0, 1000}, Shape{1, 1}, Shape{7, 5}, Shape{7, 77}, Shape{14, 1023},
                      Shape{7, 1025}, Shape{3, 32000}, Shape{64, 102400}, Shape{9, 151936}),
    [](const ::testing::TestParamInfo<Shape>& info) {
      return "rows" + std::to_string(info.param.rows) + "_vocab" +
             std::to_string(info.param.vocab);
    });

TEST(LogitRowStatsOnDeviceArgsTest, RefusesShapesPastInt32) {
  EXPECT_EQ(LogitRowStatsOnDevice(nullptr, 1, int64_t{1} << 31, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LogitRowStatsOnDevice(nullptr, -1, 10, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(LogitRowStatsOnDevice(nullptr, 0, 10, nullptr, nullptr).ok());
}

// hi + mid + lo == x exactly, each part a bf16 value (its low 16 bits zero as fp32), for
// values across fp32's normal range, zeros, and the odd counts around the grid's block size;
// guards after the parts.
TEST(SplitToBf16x3Test, ThePartsAddUpToXExactly) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-100, 100);
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{255}, int64_t{257}, int64_t{100003}}) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = std::ldexp(mantissa(rng), exponent(rng)) * (i % 2 == 0 ? 1.0f : -1.0f);
    }
    x[0] = 0.0f;
    if (n > 2) x[2] = -0.0f;
    Buffer device_x = Buffer::From(x);
    std::vector<uint16_t> init(3 * n + 4, 0xabcd);
    Buffer device_parts = Buffer::From(init);
    ASSERT_TRUE(SplitToBf16x3(device_x.as<float>(), n, device_parts.as<uint16_t>(), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint16_t> parts = device_parts.ToHost<uint16_t>();
    auto value = [](uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); };
    int mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      // In double the sum of three bf16 values within fp32's range is exact.
      const double sum = static_cast<double>(value(parts[i])) + value(parts[n + i]) +
                         value(parts[2 * n + i]);
      if (sum != static_cast<double>(x[i])) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0) << "n " << n;
    for (int g = 0; g < 4; ++g) EXPECT_EQ(parts[3 * n + g], 0xabcd) << "guard " << g;
  }
}

// The split products' sum: (a + b) + c in fp32 for each group, the groups added in order, in
// place too; no group refused.
class SumSplitProductsTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(SumSplitProductsTest, AddsTheLargestFirstAndTheGroupsInOrder) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1001, groups = GetParam();
  std::vector<float> parts(3 * n * groups);
  for (int64_t g = 0; g < groups; ++g) {
    float* group = parts.data() + 3 * n * g;
    for (int64_t i = 0; i < n; ++i) {
      group[i] = (g % 2 == 0 ? 1.0f : -0.75f) * (1.0f + i) + g;
      group[n + i] = std::ldexp(1.0f, -20) * ((i + g) % 7);
      group[2 * n + i] = -std::ldexp(1.0f, -30) * ((i * (g + 1)) % 5);
    }
  }
  Buffer device_parts = Buffer::From(parts);
  std::vector<float> init(n + 2, 7.0f);
  Buffer device_y = Buffer::From(init);
  ASSERT_TRUE(SumSplitProducts(device_parts.as<float>(), n, groups, device_y.as<float>(), nullptr).ok());
  ASSERT_TRUE(SumSplitProducts(device_parts.as<float>(), n, groups, device_parts.as<float>(),
                               nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> y = device_y.ToHost<float>();
  const std::vector<float> in_place = device_parts.ToHost<float>();
  for (int64_t i = 0; i < n; ++i) {
    float want = 0.0f;
    for (int64_t g = 0; g < groups; ++g) {
      const float* group = parts.data() + 3 * n * g;
      want += (group[i] + group[n + i]) + group[2 * n + i];
    }
    EXPECT_EQ(y[i], want) << i;
    EXPECT_EQ(in_place[i], want) << i;
  }
  EXPECT_EQ(y[n], 7.0f);
  EXPECT_EQ(y[n + 1], 7.0f);
  EXPECT_EQ(SumSplitProducts(device_parts.as<float>(), n, 0, device_y.as<float>(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Groups, SumSplitProductsTest, ::testing::Values(1, 2, 5));

}  // namespace
}  // namespace writescope::kernels::cuda
