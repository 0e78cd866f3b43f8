// Each host layer op against a plain double-precision implementation written
// here, on random data of odd shapes; YaRN numbers against hand-computed values
// for DeepSeek-V2-Lite; router semantics (ties, renormalization, scaling,
// groups); absorbed MLA == naive MLA.
#include "kernels/model/layers.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/cpu_attention.h"
#include "kernels/model/host_model.h"
#include "kernels/model/mla.h"

namespace writescope::kernels::model {
namespace {

std::vector<uint16_t> RandomBf16(int64_t n, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = FloatToBf16(dist(rng));
  return v;
}

std::vector<float> RandomFloats(int64_t n, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

double W(const std::vector<uint16_t>& w, int64_t i) { return Bf16ToFloat(w[i]); }

// max |a - b| / max(1, max |b|)
double RelMaxDiff(const std::vector<float>& a, const std::vector<double>& b) {
  double diff = 0, scale = 1;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return diff / scale;
}

std::vector<double> RefLinear(const std::vector<float>& x, int64_t tokens,
                              const std::vector<uint16_t>& w, int64_t out, int64_t in) {
  std::vector<double> y(tokens * out);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += double{x[t * in + i]} * W(w, o * in + i);
      y[t * out + o] = acc;
    }
  return y;
}

struct LinearShape {
  int64_t tokens, out, in;
};

class LinearTest : public ::testing::TestWithParam<LinearShape> {};

TEST_P(LinearTest, MatchesDoubleLoops) {
  const LinearShape s = GetParam();
  std::mt19937_64 rng(s.tokens * 131 + s.out * 7 + s.in);
  const auto w = RandomBf16(s.out * s.in, rng, 1.0f / std::sqrt(float(s.in)));
  const auto x = RandomFloats(s.tokens * s.in, rng, 1.0f);
  const auto ref = RefLinear(x, s.tokens, w, s.out, s.in);
  LinearWeight lw{w.data(), s.out, s.in};
  std::vector<float> y(s.tokens * s.out + 16, 12345.0f);  // guard tail
  ASSERT_TRUE(Linear(x.data(), s.tokens, lw, y.data()).ok());
  EXPECT_LT(RelMaxDiff(y, ref), 1e-5);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[s.tokens * s.out + i], 12345.0f);
  F32WeightCache cache;
  std::vector<float> y2(s.tokens * s.out);
  ASSERT_TRUE(Linear(x.data(), s.tokens, lw, y2.data(), &cache).ok());
  ASSERT_TRUE(Linear(x.data(), s.tokens, lw, y2.data(), &cache).ok());
  EXPECT_LT(RelMaxDiff(y2, ref), 1e-5);
  EXPECT_EQ(cache.bytes(), uint64_t(4 * s.out * s.in));
}

INSTANTIATE_TEST_SUITE_P(OddShapes, LinearTest,
                         ::testing::Values(LinearShape{1, 5, 7}, LinearShape{5, 11, 13},
                                           LinearShape{13, 64, 7}, LinearShape{7, 3, 300},
                                           LinearShape{33, 130, 64}),
                         [](const auto& info) {
                           return "t" + std::to_string(info.param.tokens) + "_o" +
                                  std::to_string(info.param.out) + "_i" +
                                  std::to_string(info.param.in);
                         });

TEST(LinearTest, RejectsBadShape) {
  float x[4] = {}, y[4];
  EXPECT_EQ(Linear(x, 1, LinearWeight{nullptr, 2, 2}, y).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RmsNormTest, MatchesDouble) {
  std::mt19937_64 rng(1);
  for (int64_t dim : {5, 16, 64, 129}) {
    const int64_t rows = 7;
    const auto x = RandomFloats(rows * dim, rng, 3.0f);
    const auto w = RandomBf16(dim, rng, 1.0f);
    const double eps = 1e-6;
    std::vector<double> ref(rows * dim);
    for (int64_t r = 0; r < rows; ++r) {
      double ms = 0;
      for (int64_t i = 0; i < dim; ++i) ms += double{x[r * dim + i]} * x[r * dim + i];
      ms /= dim;
      for (int64_t i = 0; i < dim; ++i)
        ref[r * dim + i] = W(w, i) * x[r * dim + i] / std::sqrt(ms + eps);
    }
    std::vector<float> y(rows * dim);
    RmsNorm(x.data(), rows, dim, w.data(), eps, y.data());
    EXPECT_LT(RelMaxDiff(y, ref), 1e-6) << dim;
    std::vector<float> in_place = x;
    RmsNorm(in_place.data(), rows, dim, w.data(), eps, in_place.data());
    EXPECT_EQ(in_place, y);
  }
}

// Where eps matters: rows whose mean square is near it (with eps dropped, or outside the
// root, they would be off by 30-100 %), and a row of zeros (exactly 0, not NaN).
TEST(RmsNormTest, EpsSitsInsideTheRoot) {
  const int64_t dim = 8;
  const std::vector<uint16_t> w(dim, FloatToBf16(1.0f));
  const double eps = 1e-2;
  for (const float value : {0.0f, 1e-4f, 0.05f, 0.1f}) {
    const std::vector<float> x(dim, value);
    std::vector<float> y(dim, -1.0f);
    RmsNorm(x.data(), 1, dim, w.data(), eps, y.data());
    const double want = value / std::sqrt(double{value} * value + eps);
    for (int64_t i = 0; i < dim; ++i) {
      EXPECT_NEAR(y[i], want, 1e-6 * std::max(1.0, std::abs(want))) << value;
    }
  }
}

TEST(SwiGluTest, MatchesDouble) {
  std::mt19937_64 rng(2);
  const int64_t tokens = 5, hidden = 13, inter = 11;
  const auto x = RandomFloats(tokens * hidden, rng, 1.0f);
  const auto g = RandomBf16(inter * hidden, rng, 0.5f), u = RandomBf16(inter * hidden, rng, 0.5f);
  const auto d = RandomBf16(hidden * inter, rng, 0.5f);
  const auto gx = RefLinear(x, tokens, g, inter, hidden),
             ux = RefLinear(x, tokens, u, inter, hidden);
  std::vector<double> ref(tokens * hidden, 0.0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t o = 0; o < hidden; ++o)
      for (int64_t i = 0; i < inter; ++i) {
        const double a = gx[t * inter + i];
        ref[t * hidden + o] += W(d, o * inter + i) * (a / (1 + std::exp(-a))) * ux[t * inter + i];
      }
  std::vector<float> y(tokens * hidden);
  ASSERT_TRUE(SwiGluMlp(x.data(), tokens, {g.data(), inter, hidden}, {u.data(), inter, hidden},
                        {d.data(), hidden, inter}, y.data())
                  .ok());
  EXPECT_LT(RelMaxDiff(y, ref), 1e-5);
  EXPECT_FALSE(SwiGluMlp(x.data(), tokens, {g.data(), inter, hidden}, {u.data(), inter, hidden},
                         {d.data(), inter, hidden}, y.data())
                   .ok());
}

TEST(LogSoftmaxTest, MatchesDoubleAndNormalizes) {
  std::mt19937_64 rng(3);
  const int64_t rows = 3, n = 1001;
  auto x = RandomFloats(rows * n, rng, 10.0f);
  x[5] = 500.0f;  // no overflow
  std::vector<double> ref(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, double{x[r * n + i]});
    for (int64_t i = 0; i < n; ++i) s += std::exp(x[r * n + i] - m);
    for (int64_t i = 0; i < n; ++i) ref[r * n + i] = x[r * n + i] - m - std::log(s);
  }
  std::vector<float> y(rows * n);
  LogSoftmax(x.data(), rows, n, y.data());
  double max_diff = 0;
  for (size_t i = 0; i < y.size(); ++i) max_diff = std::max(max_diff, std::fabs(y[i] - ref[i]));
  EXPECT_LT(max_diff, 1e-4);  // values up to ~500 in fp32
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(double{y[r * n + i]});
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

TEST(EmbedTest, GathersRowsAndRejectsOutOfRange) {
  std::mt19937_64 rng(4);
  Bf16Tensor table;
  auto data = RandomBf16(10 * 6, rng, 1.0f);
  table.data = data.data();
  table.shape = {10, 6};
  std::vector<int32_t> tokens = {3, 0, 9, 3};
  std::vector<float> out(4 * 6);
  ASSERT_TRUE(Embed(table, tokens, out.data()).ok());
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 6; ++i) EXPECT_EQ(out[t * 6 + i], Bf16ToFloat(data[tokens[t] * 6 + i]));
  std::vector<int32_t> bad = {1, 10};
  EXPECT_EQ(Embed(table, bad, out.data()).code(), absl::StatusCode::kInvalidArgument);
}

// --- RoPE ----------------------------------------------------------------------------------------

TEST(RopeTest, DefaultInvFreq) {
  RopeConfig rope;
  rope.theta = 1e6;
  const RopeTable t = MakeRopeTable(rope, 128, RopeStyle::kHalf);
  ASSERT_EQ(t.inv_freq.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(t.inv_freq[i], std::pow(1e6, -2.0 * i / 128), 2e-7 * std::pow(1e6, -2.0 * i / 128));
  }
  EXPECT_EQ(t.attention_scaling, 1.0f);
}

// DeepSeek-V2-Lite: rope dim 64, theta 1e4, factor 40, original 4096, beta 32/1, mscale
// 0.707/0.707. By hand:
//   d(r) = 64 ln(4096 / (2 pi r)) / (2 ln 1e4); d(32) = 10.472 -> low = 10,
//   d(1) = 22.514 -> high = 23; ramp(i) = clamp((i - 10) / 13, 0, 1);
//   inv_freq(i) = 1e4^(-i/32) * (1 - ramp) + 1e4^(-i/32) / 40 * ramp;
//   i = 16: 0.01 * 7/13 + 0.00025 * 6/13 = 0.0055 exactly.
TEST(RopeTest, YarnDeepseekV2LiteByHand) {
  RopeConfig rope;
  rope.type = RopeType::kYarn;
  rope.theta = 10000;
  rope.factor = 40;
  rope.original_max_position_embeddings = 4096;
  rope.beta_fast = 32;
  rope.beta_slow = 1;
  rope.mscale = 0.707;
  rope.mscale_all_dim = 0.707;
  const RopeTable t = MakeRopeTable(rope, 64, RopeStyle::kInterleaved);
  ASSERT_EQ(t.inv_freq.size(), 32u);
  for (int i = 0; i <= 10; ++i) {  // pure extrapolation (original frequencies)
    EXPECT_NEAR(t.inv_freq[i], std::pow(1e4, -i / 32.0), 1e-6 * std::pow(1e4, -i / 32.0)) << i;
  }
  for (int i = 23; i < 32; ++i) {  // pure interpolation (divided by the factor)
    EXPECT_NEAR(t.inv_freq[i], std::pow(1e4, -i / 32.0) / 40, 1e-6 * std::pow(1e4, -i / 32.0) / 40)
        << i;
  }
  EXPECT_NEAR(t.inv_freq[16], 0.0055, 0.0055 * 1e-6);
  const double ramp11 = 1.0 / 13;
  const double f11 = std::pow(1e4, -11 / 32.0);
  EXPECT_NEAR(t.inv_freq[11], f11 * (1 - ramp11) + f11 / 40 * ramp11, f11 * 1e-6);
  // attention_scaling = mscale(40, 0.707) / mscale(40, 0.707) = 1.
  EXPECT_EQ(t.attention_scaling, 1.0f);
  // mscale(40, 0.707) = 1 + 0.0707 ln 40 = 1.2608043...
  EXPECT_NEAR(YarnGetMscale(40, 0.707), 1.0 + 0.0707 * 3.6888794541139363, 1e-12);
  EXPECT_EQ(YarnGetMscale(1.0, 0.707), 1.0);
  // Softmax scale of V2-Lite: 192^-0.5 * 1.2608043^2 = 0.114722...
  ModelConfig config = *ModelConfig::ForSyntheticArch("deepseek_v2", 1);
  EXPECT_NEAR(AttentionSoftmaxScale(config, MlaSoftmaxScale::kWithYarnMscale),
              std::pow(1.0 + 0.0707 * 3.6888794541139363, 2) / std::sqrt(192.0), 1e-7);
  EXPECT_NEAR(AttentionSoftmaxScale(config, MlaSoftmaxScale::kPlain), 1 / std::sqrt(192.0), 1e-8);
  // Different mscales: attention_scaling is their ratio; no all_dim:
  // mscale(factor, 1).
  rope.mscale = 1.0;
  EXPECT_NEAR(MakeRopeTable(rope, 64, RopeStyle::kHalf).attention_scaling,
              (1 + 0.1 * std::log(40.0)) / (1 + 0.0707 * std::log(40.0)), 1e-6);
  rope.mscale_all_dim = 0;
  EXPECT_NEAR(MakeRopeTable(rope, 64, RopeStyle::kHalf).attention_scaling, 1 + 0.1 * std::log(40.0),
              1e-6);
  // Only mscale_all_dim in the config (mscale absent, read as 0): mscale(factor, 1), as
  // transformers does, not mscale(f, 1) / mscale(f, all_dim) (1.0857 at factor 40).
  rope.mscale = 0;
  rope.mscale_all_dim = 0.707;
  EXPECT_NEAR(MakeRopeTable(rope, 64, RopeStyle::kHalf).attention_scaling, 1 + 0.1 * std::log(40.0),
              1e-6);
}

TEST(RopeTest, RotationConventions) {
  std::mt19937_64 rng(5);
  RopeConfig rope;
  rope.theta = 10000;
  const int64_t dim = 8, tokens = 3, heads = 2,
                stride = 11;  // rotary slice inside a wider head
  for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved}) {
    RopeTable table = MakeRopeTable(rope, dim, style);
    table.attention_scaling = 1.25f;
    auto x = RandomFloats(tokens * heads * stride, rng, 1.0f);
    const std::vector<int64_t> positions = {0, 7, 300};
    auto y = x;
    ApplyRope(table, y.data(), tokens, heads, stride, positions.data());
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        const float* in = x.data() + (t * heads + h) * stride;
        const float* out = y.data() + (t * heads + h) * stride;
        for (int64_t i = 0; i < dim / 2; ++i) {
          const double angle = std::pow(10000.0, -2.0 * i / dim) * positions[t];
          const double c = std::cos(angle) * 1.25, s = std::sin(angle) * 1.25;
          const int64_t a = style == RopeStyle::kHalf ? i : 2 * i;
          const int64_t b = style == RopeStyle::kHalf ? i + dim / 2 : 2 * i + 1;
          EXPECT_NEAR(out[a], in[a] * c - in[b] * s, 1e-4);
          EXPECT_NEAR(out[b], in[b] * c + in[a] * s, 1e-4);
        }
        for (int64_t i = dim; i < stride; ++i) EXPECT_EQ(out[i], in[i]);  // untouched
      }
  }
}

// ApplyRope keeps its angles' cosines and sines for the next call with the same table and
// positions (a step's layers, q then k). Calls that change the table, its scaling, the
// positions or their count in between give, to the bit, the rotation computed the way the
// function documents it.
TEST(RopeTest, RepeatedCallsGiveTheSameBitsAsAFreshRotation) {
  std::mt19937_64 rng(9);
  RopeConfig rope;
  rope.theta = 10000;
  const int64_t dim = 16, heads = 3, stride = 20;
  RopeTable a = MakeRopeTable(rope, dim, RopeStyle::kHalf);
  rope.theta = 500000;
  RopeTable b = MakeRopeTable(rope, dim, RopeStyle::kInterleaved);
  RopeTable a_scaled = a;
  a_scaled.attention_scaling = 1.5f;
  const std::vector<int64_t> p1 = {5, 6, 7, 8}, p2 = {5, 6, 7, 9}, p3 = {5, 6, 7};
  struct Call {
    const RopeTable* table;
    const std::vector<int64_t>* positions;
  };
  const Call calls[] = {{&a, &p1}, {&a, &p1}, {&b, &p1}, {&a, &p1},        {&a, &p2},
                        {&a, &p3}, {&a, &p1}, {&a_scaled, &p1}, {&a, &p1}, {&a, &p1}};
  for (size_t c = 0; c < std::size(calls); ++c) {
    const RopeTable& table = *calls[c].table;
    const std::vector<int64_t>& positions = *calls[c].positions;
    const int64_t tokens = static_cast<int64_t>(positions.size()), half = dim / 2;
    auto x = RandomFloats(tokens * heads * stride, rng, 1.0f);
    auto want = x;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const float angle = table.inv_freq[i] * static_cast<float>(positions[t]);
        const float cos_v = static_cast<float>(std::cos(double{angle})) * table.attention_scaling;
        const float sin_v = static_cast<float>(std::sin(double{angle})) * table.attention_scaling;
        for (int64_t h = 0; h < heads; ++h) {
          float* v = want.data() + (t * heads + h) * stride;
          const int64_t ia = table.style == RopeStyle::kHalf ? i : 2 * i;
          const int64_t ib = table.style == RopeStyle::kHalf ? i + half : 2 * i + 1;
          const float x0 = v[ia], x1 = v[ib];
          v[ia] = x0 * cos_v - x1 * sin_v;
          v[ib] = x1 * cos_v + x0 * sin_v;
        }
      }
    }
    ApplyRope(table, x.data(), tokens, heads, stride, positions.data());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], want[i]) << "call " << c << " value " << i;
  }
}

// --- Routers -------------------------------------------------------------------------------------

struct RefRoute {
  std::vector<int32_t> ids;
  std::vector<double> weights;
  double margin = 0;  // k-th chosen score minus the best unchosen one's
};

RefRoute RefRouter(const std::vector<float>& logits, const RouterSpec& spec) {
  const int64_t e = spec.num_experts;
  std::vector<double> p(e);
  double m = *std::max_element(logits.begin(), logits.end()), s = 0;
  for (int64_t i = 0; i < e; ++i) s += (p[i] = std::exp(logits[i] - m));
  for (auto& v : p) v /= s;
  std::vector<double> scores = p;
  if (spec.method == TopkMethod::kGroupLimitedGreedy) {
    const int64_t per = e / spec.n_group;
    std::vector<std::pair<double, int64_t>> groups;
    for (int64_t g = 0; g < spec.n_group; ++g)
      groups.push_back({-*std::max_element(p.begin() + g * per, p.begin() + (g + 1) * per), g});
    std::sort(groups.begin(), groups.end());
    for (int64_t g = spec.topk_group; g < spec.n_group; ++g)
      for (int64_t i = 0; i < per; ++i) scores[groups[g].second * per + i] = 0;
  }
  std::vector<std::pair<double, int32_t>> order;
  for (int32_t i = 0; i < e; ++i) order.push_back({-scores[i], i});
  std::sort(order.begin(), order.end());
  RefRoute r;
  double sum = 0;
  for (int64_t i = 0; i < spec.top_k; ++i) sum += -order[i].first;
  for (int64_t i = 0; i < spec.top_k; ++i) {
    r.ids.push_back(order[i].second);
    r.weights.push_back(-order[i].first / (spec.renormalize ? sum : 1.0) * spec.scaling);
  }
  r.margin = spec.top_k < e ? order[spec.top_k].first - order[spec.top_k - 1].first : INFINITY;
  return r;
}

void ExpectRoute(const std::vector<float>& logits, const RouterSpec& spec) {
  const RefRoute ref = RefRouter(logits, spec);
  std::vector<int32_t> ids(spec.top_k);
  std::vector<float> w(spec.top_k);
  float margin = -1;
  RouteTokens(logits.data(), 1, spec, ids.data(), w.data(), &margin);
  for (int64_t i = 0; i < spec.top_k; ++i) {
    EXPECT_EQ(ids[i], ref.ids[i]) << i;
    EXPECT_NEAR(w[i], ref.weights[i], 1e-6) << i;
  }
  EXPECT_NEAR(margin, ref.margin, 1e-6);
  // RouterWeights of the chosen experts are RouteTokens' weights, bit for bit, in any order.
  std::vector<float> again(spec.top_k);
  RouterWeights(logits.data(), 1, spec, ids.data(), again.data());
  EXPECT_EQ(again, w);
  std::reverse(ids.begin(), ids.end());
  RouterWeights(logits.data(), 1, spec, ids.data(), again.data());
  for (int64_t i = 0; i < spec.top_k; ++i) EXPECT_FLOAT_EQ(again[spec.top_k - 1 - i], w[i]) << i;
}

TEST(RouterTest, WeightsOfOtherExperts) {
  // probabilities of logits {ln 4, ln 3, ln 2, ln 1}: 0.4, 0.3, 0.2, 0.1.
  const std::vector<float> logits = {std::log(4.0f), std::log(3.0f), std::log(2.0f), 0.0f};
  RouterSpec spec{.num_experts = 4, .top_k = 2, .renormalize = false, .scaling = 2.0};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  float margin = 0;
  RouteTokens(logits.data(), 1, spec, ids.data(), w.data(), &margin);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(margin, 0.1, 1e-6);  // 0.3 - 0.2
  const std::vector<int32_t> other = {3, 2};
  RouterWeights(logits.data(), 1, spec, other.data(), w.data());
  EXPECT_NEAR(w[0], 0.2, 1e-6);
  EXPECT_NEAR(w[1], 0.4, 1e-6);
  spec.renormalize = true;
  RouterWeights(logits.data(), 1, spec, other.data(), w.data());
  EXPECT_NEAR(w[0], 2.0 * 0.1 / 0.3, 1e-6);
  EXPECT_NEAR(w[1], 2.0 * 0.2 / 0.3, 1e-6);
  spec.top_k = 4;
  std::vector<int32_t> all(4);
  std::vector<float> all_w(4);
  RouteTokens(logits.data(), 1, spec, all.data(), all_w.data(), &margin);
  EXPECT_TRUE(std::isinf(margin));
}

TEST(RouterTest, SpecsOfTheThreeModels) {
  const RouterSpec mixtral = RouterSpecFor(*ModelConfig::ForSyntheticArch("mixtral", 1));
  EXPECT_TRUE(mixtral.renormalize);
  EXPECT_EQ(mixtral.top_k, 2);
  EXPECT_EQ(mixtral.scaling, 1.0);
  const RouterSpec qwen = RouterSpecFor(*ModelConfig::ForSyntheticArch("qwen3_moe", 1));
  EXPECT_TRUE(qwen.renormalize);
  EXPECT_EQ(qwen.top_k, 8);
  const RouterSpec deepseek = RouterSpecFor(*ModelConfig::ForSyntheticArch("deepseek_v2", 2));
  EXPECT_FALSE(deepseek.renormalize);
  EXPECT_EQ(deepseek.top_k, 6);
  EXPECT_EQ(deepseek.method, TopkMethod::kGreedy);
}

TEST(RouterTest, RandomLogitsAgainstReference) {
  std::mt19937_64 rng(6);
  for (bool renorm : {false, true}) {
    for (double scaling : {1.0, 2.5}) {
      RouterSpec spec{.num_experts = 13, .top_k = 3, .renormalize = renorm, .scaling = scaling};
      for (int rep = 0; rep < 20; ++rep) ExpectRoute(RandomFloats(13, rng, 2.0f), spec);
    }
  }
  RouterSpec grouped{.num_experts = 12,
                     .top_k = 3,
                     .renormalize = false,
                     .scaling = 1.0,
                     .method = TopkMethod::kGroupLimitedGreedy,
                     .n_group = 4,
                     .topk_group = 2};
  for (int rep = 0; rep < 20; ++rep) ExpectRoute(RandomFloats(12, rng, 2.0f), grouped);
}

TEST(RouterTest, TiesGoToLowerIndexAndRenormalization) {
  // Probabilities: experts 1, 2, 4 tie at the top.
  std::vector<float> logits = {0.0f, 2.0f, 2.0f, 1.0f, 2.0f};
  RouterSpec spec{.num_experts = 5, .top_k = 2, .renormalize = true, .scaling = 1.0};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  RouteTokens(logits.data(), 1, spec, ids.data(), w.data());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
  // No renormalization, scaled: the plain softmax probabilities times the
  // scale.
  spec.renormalize = false;
  spec.scaling = 16.0;
  RouteTokens(logits.data(), 1, spec, ids.data(), w.data());
  double z = 1 + 3 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(w[0], 16.0 * std::exp(2.0) / z, 1e-5);
  // Mixtral's top-2 renormalized = softmax over the two chosen logits.
  std::vector<float> mixtral = {0.3f, -1.0f, 1.7f, 0.9f};
  spec = RouterSpec{.num_experts = 4, .top_k = 2, .renormalize = true, .scaling = 1.0};
  RouteTokens(mixtral.data(), 1, spec, ids.data(), w.data());
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);
  EXPECT_NEAR(w[0], 1.0 / (1.0 + std::exp(0.9 - 1.7)), 1e-6);
}

// --- MLA -----------------------------------------------------------------------------------------

// Independent MLA: k/v expanded per head in double, attention in double.
std::vector<double> RefMla(const MlaDims& d, const std::vector<float>& q, int64_t nq, int64_t p0,
                           const std::vector<float>& latents, const std::vector<uint16_t>& kv_b,
                           double scale) {
  const int64_t latent = d.latent_dim(), qd = d.q_head_dim(), per = d.kv_b_rows_per_head();
  std::vector<double> out(nq * d.num_heads * d.v_dim, 0.0);
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t h = 0; h < d.num_heads; ++h) {
      const int64_t visible = p0 + i + 1;
      std::vector<double> s(visible);
      std::vector<std::vector<double>> v(visible, std::vector<double>(d.v_dim));
      for (int64_t j = 0; j < visible; ++j) {
        double dot = 0;
        for (int64_t r = 0; r < d.qk_nope; ++r) {
          double k = 0;
          for (int64_t c = 0; c < d.kv_lora_rank; ++c)
            k += W(kv_b, (h * per + r) * d.kv_lora_rank + c) * latents[j * latent + c];
          dot += q[(i * d.num_heads + h) * qd + r] * k;
        }
        for (int64_t r = 0; r < d.qk_rope; ++r)
          dot += q[(i * d.num_heads + h) * qd + d.qk_nope + r] *
                 latents[j * latent + d.kv_lora_rank + r];
        s[j] = dot * scale;
        for (int64_t r = 0; r < d.v_dim; ++r) {
          double acc = 0;
          for (int64_t c = 0; c < d.kv_lora_rank; ++c)
            acc +=
                W(kv_b, (h * per + d.qk_nope + r) * d.kv_lora_rank + c) * latents[j * latent + c];
          v[j][r] = acc;
        }
      }
      const double m = *std::max_element(s.begin(), s.end());
      double z = 0;
      for (auto& x : s) z += (x = std::exp(x - m));
      for (int64_t j = 0; j < visible; ++j)
        for (int64_t r = 0; r < d.v_dim; ++r)
          out[(i * d.num_heads + h) * d.v_dim + r] += s[j] / z * v[j][r];
    }
  return out;
}

TEST(MlaTest, NaiveMatchesDoubleReferenceAndAbsorbedDecodeMatchesNaive) {
  std::mt19937_64 rng(7);
  MlaDims d{.num_heads = 3, .qk_nope = 5, .qk_rope = 4, .v_dim = 7, .kv_lora_rank = 11};
  const int64_t keys = 41, nq = 6, p0 = keys - nq, latent = d.latent_dim();
  const auto kv_b = RandomBf16(d.num_heads * d.kv_b_rows_per_head() * d.kv_lora_rank, rng, 0.3f);
  // Latents as the cache holds them: bf16-representable.
  std::vector<float> latents(keys * latent);
  for (auto& x : latents) x = Bf16ToFloat(FloatToBf16(std::normal_distribution<float>(0, 1)(rng)));
  const auto q = RandomFloats(nq * d.num_heads * d.q_head_dim(), rng, 1.0f);
  const float scale = 0.3f;
  LinearWeight kv_b_w{kv_b.data(), d.num_heads * d.kv_b_rows_per_head(), d.kv_lora_rank};

  std::vector<float> naive(nq * d.num_heads * d.v_dim);
  ASSERT_TRUE(
      MlaNaiveAttention(d, q.data(), nq, p0, latents.data(), keys, kv_b_w, scale, naive.data())
          .ok());
  EXPECT_LT(RelMaxDiff(naive, RefMla(d, q, nq, p0, latents, kv_b, scale)), 1e-5);

  // Absorbed decode of the last query over tiles of 16 tokens (3 tiles, the
  // last partial).
  const int32_t bt = 16;
  const int64_t nb = (keys + bt - 1) / bt;
  std::vector<uint16_t> tiles(nb * bt * latent, 0);
  for (int64_t j = 0; j < keys; ++j)
    for (int64_t c = 0; c < latent; ++c)
      tiles[j * latent + c] = FloatToBf16(latents[j * latent + c]);
  std::vector<const uint16_t*> blocks;
  for (int64_t b = 0; b < nb; ++b) blocks.push_back(tiles.data() + b * bt * latent);
  KvBlockList list{blocks.data(), static_cast<int32_t>(nb),
                   static_cast<int32_t>(keys - (nb - 1) * bt)};
  const float* q_last = q.data() + (nq - 1) * d.num_heads * d.q_head_dim();
  std::vector<float> q_abs(d.num_heads * latent);
  MlaAbsorbQuery(d, q_last, 1, kv_b_w, q_abs.data());
  std::vector<uint16_t> q_bf16(q_abs.size());
  for (size_t i = 0; i < q_abs.size(); ++i) q_bf16[i] = FloatToBf16(q_abs[i]);
  MlaDecodeArgs args;
  args.shape = MlaShape{.num_heads = 3,
                        .kv_lora_rank = 11,
                        .rope_dim = 4,
                        .block_tokens = bt,
                        .softmax_scale = scale};
  args.num_seqs = 1;
  args.q = q_bf16.data();
  args.seqs = &list;
  std::vector<float> o_lat(d.num_heads * d.kv_lora_rank), lse(d.num_heads);
  args.o = o_lat.data();
  args.lse = lse.data();
  ASSERT_TRUE(CpuMlaDecode(args).ok());
  std::vector<float> absorbed(d.num_heads * d.v_dim);
  MlaApplyUv(d, o_lat.data(), 1, kv_b_w, absorbed.data());
  std::vector<double> naive_last(naive.end() - d.num_heads * d.v_dim, naive.end());
  // The only approximation: the absorbed query rounded to bf16 (the kernels'
  // contract).
  EXPECT_LT(RelMaxDiff(absorbed, naive_last), 2e-2);
}

}  // namespace
}  // namespace writescope::kernels::model
