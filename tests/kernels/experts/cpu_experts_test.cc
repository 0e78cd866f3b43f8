// CpuExperts against the host reference (kernels/model/layers.h SwiGluMlp per token and
// expert, fp32 on the same bf16 weights, summed over k in double).
#include "kernels/experts/cpu_experts.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/experts/expert_test_util.h"
#include "kernels/bf16.h"
#include "kernels/model/layers.h"
#include "tests/kernels/model/tiny_models.h"

namespace writescope::kernels::experts {
namespace {

using model::AsLinear;
using model::LinearWeight;

// Random experts: weights ~ U(-1, 1) / sqrt(fan_in), bf16.
struct RandomExperts {
  int64_t hidden, inter, num;
  std::vector<uint16_t> gate, up, down;  // [num][inter, hidden], [num][hidden, inter]

  RandomExperts(int64_t hidden_, int64_t inter_, int64_t num_, uint64_t seed)
      : hidden(hidden_), inter(inter_), num(num_) {
    std::mt19937_64 rng(seed);
    auto fill = [&](std::vector<uint16_t>& v, int64_t n, int64_t fan_in) {
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      const float scale = 1.7f / std::sqrt(static_cast<float>(fan_in));
      v.resize(n);
      for (auto& value : v) value = FloatToBf16(dist(rng) * scale);
    };
    fill(gate, num * inter * hidden, hidden);
    fill(up, num * inter * hidden, hidden);
    fill(down, num * hidden * inter, inter);
  }
  std::vector<ExpertMatrices> Matrices() const {
    std::vector<ExpertMatrices> m;
    for (int64_t e = 0; e < num; ++e) {
      m.push_back({gate.data() + e * inter * hidden, up.data() + e * inter * hidden,
                   down.data() + e * hidden * inter});
    }
    return m;
  }
  // y [tokens, hidden] by the reference SwiGluMlp, token by token.
  std::vector<float> Reference(const std::vector<float>& x, int64_t tokens, int64_t top_k,
                               const std::vector<int32_t>& ids,
                               const std::vector<float>& weights) const {
    std::vector<double> acc(tokens * hidden, 0.0);
    std::vector<float> one(hidden);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t k = 0; k < top_k; ++k) {
        const int64_t e = ids[t * top_k + k];
        if (e == kSkippedExpert) continue;
        LinearWeight g{gate.data() + e * inter * hidden, inter, hidden};
        LinearWeight u{up.data() + e * inter * hidden, inter, hidden};
        LinearWeight d{down.data() + e * hidden * inter, hidden, inter};
        EXPECT_TRUE(model::SwiGluMlp(x.data() + t * hidden, 1, g, u, d, one.data()).ok());
        for (int64_t c = 0; c < hidden; ++c) {
          acc[t * hidden + c] += double{weights[t * top_k + k]} * one[c];
        }
      }
    }
    return std::vector<float>(acc.begin(), acc.end());
  }
};

// Per token, top_k distinct experts drawn from `allowed` (so that the others get none).
void RandomRouting(int64_t tokens, int64_t top_k, const std::vector<int32_t>& allowed,
                   std::mt19937_64& rng, std::vector<int32_t>* ids, std::vector<float>* weights) {
  ids->clear();
  weights->clear();
  std::uniform_real_distribution<float> dist(0.05f, 1.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> pool = allowed;
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int64_t k = 0; k < top_k; ++k) {
      ids->push_back(pool[k]);
      weights->push_back(dist(rng));
    }
  }
}

using testing::RelativeError;

struct Case {
  std::string name;
  int64_t hidden, inter, experts, top_k, tokens;
  int64_t allowed;  // experts [0, allowed) receive tokens (rest: zero tokens)
  ExpertPrecision precision;
  bool prepack;
  int64_t gate_up_slice = 32, down_slice = 64;  // remainders: 80 % 32, 96 % 64
};

std::string PrecisionName(ExpertPrecision p) {
  return p == ExpertPrecision::kF32 ? "f32" : p == ExpertPrecision::kBf16 ? "bf16" : "auto";
}

class CpuExpertsTest : public ::testing::TestWithParam<Case> {};

TEST_P(CpuExpertsTest, MatchesSwiGluReference) {
  const Case& c = GetParam();
  RandomExperts w(c.hidden, c.inter, c.experts, 7);
  CpuExpertsOptions options;
  options.precision = c.precision;
  options.prepack = c.prepack;
  options.gate_up_slice = c.gate_up_slice;
  options.down_slice = c.down_slice;
  auto experts = CpuExperts::Create(c.hidden, c.inter, w.Matrices(), options);
  if (c.precision == ExpertPrecision::kBf16 && !OneDnnHasBf16Matmul()) {
    // Refused with the reason (an AVX2-only CPU); the f32 cases run.
    EXPECT_EQ(experts.status().code(), absl::StatusCode::kUnimplemented) << experts.status();
    GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (ISA " << OneDnnIsaName() << ")";
  }
  ASSERT_TRUE(experts.ok()) << experts.status();

  std::mt19937_64 rng(c.tokens * 131 + c.top_k);
  std::vector<float> x(c.tokens * c.hidden);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> allowed(c.allowed);
  std::iota(allowed.begin(), allowed.end(), 0);
  std::reverse(allowed.begin(), allowed.end());
  std::vector<int32_t> ids;
  std::vector<float> route;
  RandomRouting(c.tokens, c.top_k, allowed, rng, &ids, &route);

  const std::vector<float> ref = w.Reference(x, c.tokens, c.top_k, ids, route);
  // Guard words around y; y starts NaN so that an unwritten value fails.
  constexpr int64_t kGuard = 64;
  std::vector<float> y_guarded(c.tokens * c.hidden + 2 * kGuard, -12345.0f);
  float* y = y_guarded.data() + kGuard;
  std::fill(y, y + c.tokens * c.hidden, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE((*experts)->Forward(x.data(), c.tokens, c.top_k, ids.data(), route.data(), y).ok());
  for (int64_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(y_guarded[i], -12345.0f);
    ASSERT_EQ(y_guarded[kGuard + c.tokens * c.hidden + i], -12345.0f);
  }
  std::vector<float> got(y, y + c.tokens * c.hidden);
  const double tolerance = (*experts)->bf16() ? 1e-2 : 1e-5;
  const double err = RelativeError(got, ref);
  RecordProperty("relative_error", std::to_string(err));
  EXPECT_LE(err, tolerance) << "isa " << (*experts)->isa() << ", " << (*experts)->matmul_impl();

  // Twice: the scratch and primitive caches reused give the same bits.
  std::vector<float> again(c.tokens * c.hidden);
  ASSERT_TRUE((*experts)
                  ->Forward(x.data(), c.tokens, c.top_k, ids.data(), route.data(), again.data())
                  .ok());
  EXPECT_EQ(0, std::memcmp(again.data(), got.data(), got.size() * sizeof(float)));

  // bf16 input: the same as the fp32 input rounded to bf16 (which the bf16 path does).
  std::vector<uint16_t> xb(x.size());
  std::vector<float> xr(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = FloatToBf16(x[i]);
    xr[i] = Bf16ToFloat(xb[i]);
  }
  std::vector<float> from_bf16(c.tokens * c.hidden);
  ASSERT_TRUE(
      (*experts)
          ->ForwardBf16(xb.data(), c.tokens, c.top_k, ids.data(), route.data(), from_bf16.data())
          .ok());
  EXPECT_LE(RelativeError(from_bf16, w.Reference(xr, c.tokens, c.top_k, ids, route)), tolerance);

  // Pairs skipped (kSkippedExpert: hot experts computed on the GPU): about a third of them,
  // and every pair of token 0. The rest equals the reference over the pairs left, and
  // token 0 is exactly zero.
  std::vector<int32_t> cold = ids;
  for (size_t i = 0; i < cold.size(); ++i) {
    if (static_cast<int64_t>(i) < c.top_k || rng() % 3 == 0) cold[i] = kSkippedExpert;
  }
  std::vector<float> y_cold(c.tokens * c.hidden, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(
      (*experts)->Forward(x.data(), c.tokens, c.top_k, cold.data(), route.data(), y_cold.data()).ok());
  for (int64_t col = 0; col < c.hidden; ++col) ASSERT_EQ(y_cold[col], 0.0f) << col;
  const std::vector<float> ref_cold = w.Reference(x, c.tokens, c.top_k, cold, route);
  EXPECT_LE(RelativeError(y_cold, ref_cold), tolerance);
  // Every pair skipped: y is zero.
  std::vector<int32_t> none(ids.size(), kSkippedExpert);
  ASSERT_TRUE(
      (*experts)->Forward(x.data(), c.tokens, c.top_k, none.data(), route.data(), y_cold.data()).ok());
  EXPECT_TRUE(std::all_of(y_cold.begin(), y_cold.end(), [](float v) { return v == 0.0f; }));
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  const ExpertPrecision precisions[] = {ExpertPrecision::kBf16, ExpertPrecision::kF32};
  for (ExpertPrecision p : precisions) {
    for (bool prepack : {true, false}) {
      if (p == ExpertPrecision::kF32 && !prepack) continue;  // f32 always copies
      for (int64_t tokens : {1, 5, 33}) {
        for (int64_t top_k : {2, 8}) {
          const std::string base = PrecisionName(p) + (prepack ? "_packed" : "_inplace") + "_t" +
                                   std::to_string(tokens) + "_k" + std::to_string(top_k);
          // 16 experts, only 11 of them used (5 with zero tokens): odd shapes.
          cases.push_back({base, 96, 80, 16, top_k, tokens, 11, p, prepack});
        }
      }
      // Many rows per expert: M buckets with padding rows (33 * 2 / 3 ~ 22 -> 24).
      cases.push_back({PrecisionName(p) + (prepack ? "_packed" : "_inplace") + "_buckets", 64, 48,
                       3, 2, 33, 3, p, prepack, 64, 64});
      // One slice each (slices larger than the matrices).
      cases.push_back({PrecisionName(p) + (prepack ? "_packed" : "_inplace") + "_oneslice", 48, 40,
                       4, 2, 7, 4, p, prepack, 128, 256});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuExpertsTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

class CpuExpertsErrors : public ::testing::Test {
 protected:
  CpuExpertsErrors() : w_(32, 16, 4, 3) {}
  RandomExperts w_;
};

TEST_F(CpuExpertsErrors, RejectsBadRouting) {
  auto experts = CpuExperts::Create(32, 16, w_.Matrices(), {.precision = ExpertPrecision::kF32});
  ASSERT_TRUE(experts.ok()) << experts.status();
  std::vector<float> x(2 * 32, 0.5f), y(2 * 32), route(4, 0.5f);
  std::vector<int32_t> duplicate = {0, 1, 2, 2};
  absl::Status s = (*experts)->Forward(x.data(), 2, 2, duplicate.data(), route.data(), y.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token 1 routed to expert 2 twice"), std::string::npos) << s;
  std::vector<int32_t> out_of_range = {0, 4, 1, 2};
  s = (*experts)->Forward(x.data(), 2, 2, out_of_range.data(), route.data(), y.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expert 4 outside [0, 4)"), std::string::npos) << s;
  std::vector<int32_t> negative = {-2, 0, 1, 2};  // -1 is kSkippedExpert, -2 is wrong
  s = (*experts)->Forward(x.data(), 2, 2, negative.data(), route.data(), y.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expert -2 outside [0, 4) and not -1 (skipped)"), std::string::npos)
      << s;
  std::vector<int32_t> skipped_twice = {-1, -1, 1, -1};  // skipped pairs may repeat
  EXPECT_TRUE(
      (*experts)->Forward(x.data(), 2, 2, skipped_twice.data(), route.data(), y.data()).ok());
  std::vector<int32_t> ok = {0, 1, 2, 3};
  EXPECT_EQ((*experts)->Forward(x.data(), 2, 5, ok.data(), route.data(), y.data()).code(),
            absl::StatusCode::kInvalidArgument);  // top_k > experts
  EXPECT_TRUE((*experts)->Forward(x.data(), 0, 2, ok.data(), route.data(), y.data()).ok());
}

TEST_F(CpuExpertsErrors, RejectsBadShapes) {
  EXPECT_EQ(CpuExperts::Create(0, 16, w_.Matrices()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuExperts::Create(32, 16, {}).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<ExpertMatrices> missing = w_.Matrices();
  missing[2].down = nullptr;
  EXPECT_EQ(CpuExperts::Create(32, 16, missing).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A load cancelled from another thread: building the slices stops and Create says
// CANCELLED (with the flag clear, the same Create succeeds).
TEST_F(CpuExpertsErrors, CancelledBuildReturnsCancelled) {
  std::atomic<bool> cancelled{true};
  for (ExpertPrecision precision : {ExpertPrecision::kF32, ExpertPrecision::kBf16}) {
    if (precision == ExpertPrecision::kBf16 && !OneDnnHasBf16Matmul()) continue;  // (above)
    CpuExpertsOptions options{.precision = precision, .prepack = true};
    options.cancelled = &cancelled;
    cancelled = true;
    EXPECT_EQ(CpuExperts::Create(32, 16, w_.Matrices(), options).status().code(),
              absl::StatusCode::kCancelled);
    cancelled = false;
    EXPECT_TRUE(CpuExperts::Create(32, 16, w_.Matrices(), options).ok());
  }
}

// A layer of synthetic weights through ForLayer, against the reference with the real router.
TEST(CpuExpertsLayer, SyntheticTinyQwen3Layer) {
  ModelConfig config = model::testing::TinyConfig("qwen3_moe", 1);
  SyntheticOptions synthetic;
  synthetic.side = SideFilter::kCpu;
  synthetic.seed = 5;
  auto weights = MakeSyntheticWeights(config, synthetic);
  ASSERT_TRUE(weights.ok()) << weights.status();
  auto experts = CpuExperts::ForLayer(**weights, 0, {});
  ASSERT_TRUE(experts.ok()) << experts.status();
  const int64_t H = config.hidden_size, K = config.num_experts_per_tok, T = 9;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(T * H), logits(T * config.n_routed_experts);
  for (float& v : x) v = normal(rng);
  for (float& v : logits) v = normal(rng);
  std::vector<int32_t> ids(T * K);
  std::vector<float> route(T * K);
  model::RouteTokens(logits.data(), T, model::RouterSpecFor(config), ids.data(), route.data());
  std::vector<float> y(T * H), ref(T * H, 0.0f), one(H);
  ASSERT_TRUE((*experts)->Forward(x.data(), T, K, ids.data(), route.data(), y.data()).ok());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = ids[t * K + k];
      ASSERT_TRUE(model::SwiGluMlp(x.data() + t * H, 1,
                                   AsLinear((*weights)->RoutedExpert(0, e, MlpMatrix::kGate)),
                                   AsLinear((*weights)->RoutedExpert(0, e, MlpMatrix::kUp)),
                                   AsLinear((*weights)->RoutedExpert(0, e, MlpMatrix::kDown)),
                                   one.data())
                      .ok());
      for (int64_t c = 0; c < H; ++c) ref[t * H + c] += route[t * K + k] * one[c];
    }
  }
  EXPECT_LE(RelativeError(y, ref), (*experts)->bf16() ? 1e-2 : 1e-5);
  EXPECT_EQ(CpuExperts::ForLayer(**weights, 1, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace writescope::kernels::experts
