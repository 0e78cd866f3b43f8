#include "common/sampler.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace writescope {
namespace {

// The log-softmax's denominator (float exps summed in double) against the double-exp sum,
// for sizes around the 16 accumulators (0, 1, 15, 16, 17, 33) and a vocabulary (151,939),
// with -inf keys, keys far below the max (their exps underflow float) and ties at the max.
TEST(SumExpShiftedTest, MatchesDoubleExpWithinFloatRounding) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{33},
                   size_t{151939}}) {
    std::vector<float> keys(n);
    for (size_t i = 0; i < n; ++i) {
      keys[i] = i % 11 == 3 ? -inf : i % 13 == 5 ? -200.0f + normal(rng) : normal(rng);
    }
    float max_key = -inf;
    for (float key : keys) max_key = std::max(max_key, key);
    if (n > 2) keys[n / 2] = max_key;  // a tie at the max
    double want = 0.0;
    for (float key : keys) want += key == -inf ? 0.0 : std::exp(static_cast<double>(key) - max_key);
    for (auto sum : {internal_sampler::SumExpShifted, internal_sampler::SumExpShiftedPortable}) {
      const double got = sum(keys, n == 0 ? 0.0f : max_key);
      if (n == 0) {
        EXPECT_EQ(got, 0.0);
        continue;
      }
      EXPECT_GE(want, 1.0);
      EXPECT_NEAR(got, want, 2e-7 * want) << n;
    }
  }
  // One key at the max and the rest -inf: exactly 1 plus underflowed terms.
  std::vector<float> one(1000, -inf);
  one[7] = 2.5f;
  std::vector<float> flat(40, -3.0f);
  for (auto sum : {internal_sampler::SumExpShifted, internal_sampler::SumExpShiftedPortable}) {
    EXPECT_NEAR(sum(one, 2.5f), 1.0, 1e-30);
    // Exact at 0: exp(0) = 1 for every key equal to the max.
    EXPECT_EQ(sum(flat, -3.0f), 40.0);
  }
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Plain-loop double reference of the raw log-softmax (finite logits only).
std::vector<double> ReferenceLogSoftmax(const std::vector<float>& logits) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float logit : logits) max_logit = std::max<double>(max_logit, logit);
  double sum = 0.0;
  for (float logit : logits) sum += std::exp(logit - max_logit);
  std::vector<double> out;
  for (float logit : logits) out.push_back(logit - max_logit - std::log(sum));
  return out;
}

// softmax(logits / T) restricted to `kept` and renormalised; 0 elsewhere.
std::vector<double> ReferenceProbs(const std::vector<float>& logits, double temperature,
                                   const std::set<int32_t>& kept) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float logit : logits) max_logit = std::max<double>(max_logit, logit);
  std::vector<double> p(logits.size(), 0.0);
  double sum = 0.0;
  for (int32_t id : kept) {
    p[id] = std::exp((logits[id] - max_logit) / temperature);
    sum += p[id];
  }
  for (double& x : p) x /= sum;
  return p;
}

std::set<int32_t> AllIds(size_t vocab) {
  std::set<int32_t> ids;
  for (size_t i = 0; i < vocab; ++i) ids.insert(static_cast<int32_t>(i));
  return ids;
}

// Ids by logit descending, ties to the lower id.
std::vector<int32_t> RankedIds(const std::vector<float>& logits) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return ids;
}

// Reference nucleus: top_k first (if > 0), then the smallest prefix whose share of
// the top-k-renormalised mass reaches top_p.
std::set<int32_t> ReferenceKept(const std::vector<float>& logits, double temperature,
                                uint32_t top_k, float top_p) {
  std::vector<int32_t> ranked = RankedIds(logits);
  if (top_k > 0 && top_k < ranked.size()) ranked.resize(top_k);
  std::set<int32_t> kept(ranked.begin(), ranked.end());
  if (top_p >= 1.0f) return kept;
  const std::vector<double> p = ReferenceProbs(logits, temperature, kept);
  std::set<int32_t> nucleus;
  double running = 0.0;
  for (int32_t id : ranked) {
    nucleus.insert(id);
    running += p[id];
    if (running >= top_p) break;
  }
  return nucleus;
}

std::vector<float> RandomLogits(size_t vocab, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 generator(seed);
  std::vector<float> logits(vocab);
  // Not uniform_real_distribution: fixed across standard libraries.
  for (float& logit : logits) {
    logit = scale * static_cast<float>((generator() >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
  return logits;
}

// Pearson chi-square of observed counts against expected probabilities, over the
// ids with positive probability; a draw of a zero-probability id fails the test.
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& p, int draws) {
  double chi2 = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "id " << i << " has probability 0";
      continue;
    }
    const double expected = p[i] * draws;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

std::vector<int> CountDraws(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++counts[sampler.Sample(logits).token_id];
  return counts;
}

TEST(SamplerGreedyTest, ArgmaxTiesToLowerId) {
  Sampler sampler(SamplerOptions{});
  EXPECT_EQ(sampler.Sample(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}).token_id, 1);
  EXPECT_EQ(sampler.Sample(std::vector<float>{5.0f, 5.0f}).token_id, 0);
  EXPECT_EQ(sampler.Sample(std::vector<float>{-9.0f, -8.0f, -7.5f}).token_id, 2);
  // Greedy ignores top-k/top-p and the seed.
  Sampler filtered(SamplerOptions{.top_k = 2, .top_p = 0.3f, .seed = 77});
  EXPECT_EQ(filtered.Sample(std::vector<float>{0.0f, 4.0f, 1.0f, 4.0f}).token_id, 1);
}

TEST(SamplerLogprobTest, MatchesDoubleReference) {
  const std::vector<float> logits = RandomLogits(1000, 1, 8.0f);
  const std::vector<double> reference = ReferenceLogSoftmax(logits);
  std::vector<float> logprobs;
  LogSoftmaxInto(logits, &logprobs);
  ASSERT_EQ(logprobs.size(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(logprobs[i], reference[i], 1e-6 * (1.0 + std::abs(reference[i]))) << i;
  }

  for (float temperature : {0.0f, 0.8f}) {
    Sampler sampler(SamplerOptions{.temperature = temperature, .seed = 3, .num_top = 5});
    for (int step = 0; step < 20; ++step) {
      const SampledToken token = sampler.Sample(logits);
      // The logprob is the RAW one whatever the temperature, and bit-equal to
      // LogSoftmaxInto; the top list is bit-equal to TopLogprobs.
      EXPECT_EQ(token.logprob, logprobs[token.token_id]);
      EXPECT_NEAR(token.logprob, reference[token.token_id], 1e-5);
      const std::vector<TokenLogprob> top = TopLogprobs(logprobs, 5);
      ASSERT_EQ(token.top.size(), 5u);
      for (size_t i = 0; i < top.size(); ++i) {
        EXPECT_EQ(token.top[i].token_id, top[i].token_id);
        EXPECT_EQ(token.top[i].logprob, top[i].logprob);
      }
    }
  }
  // Without a top list, the same logprob.
  Sampler plain(SamplerOptions{});
  const SampledToken token = plain.Sample(logits);
  EXPECT_EQ(token.logprob, logprobs[token.token_id]);
  EXPECT_TRUE(token.top.empty());
}

// A real vocabulary's width (Qwen3's 151936) and a wide spread of logits: every entry stays
// within float rounding of the double reference, and the greedy token's logprob is
// bit-equal to LogSoftmaxInto's.
TEST(SamplerLogprobTest, FullVocabularyMatchesDoubleReference) {
  for (float scale : {1.0f, 12.0f, 40.0f}) {
    const std::vector<float> logits = RandomLogits(151936, 7, scale);
    const std::vector<double> reference = ReferenceLogSoftmax(logits);
    std::vector<float> logprobs;
    LogSoftmaxInto(logits, &logprobs);
    double worst = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      worst = std::max(worst, std::abs(logprobs[i] - reference[i]) / (1.0 + std::abs(reference[i])));
    }
    EXPECT_LT(worst, 1e-6) << "scale " << scale;
    Sampler greedy(SamplerOptions{.temperature = 0.0f});
    const SampledToken token = greedy.Sample(logits);
    EXPECT_EQ(token.logprob, logprobs[token.token_id]);
  }
}

TEST(SamplerLogprobTest, TopListOrderAndTies) {
  const std::vector<float> logits = {0.0f, 2.0f, 2.0f, 1.0f, 2.0f, -1.0f};
  Sampler sampler(SamplerOptions{.num_top = 4});
  const SampledToken token = sampler.Sample(logits);
  EXPECT_EQ(token.token_id, 1);
  const std::vector<double> reference = ReferenceLogSoftmax(logits);
  ASSERT_EQ(token.top.size(), 4u);
  const int32_t expected_ids[] = {1, 2, 4, 3};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(token.top[i].token_id, expected_ids[i]);
    EXPECT_NEAR(token.top[i].logprob, reference[expected_ids[i]], 1e-6);
  }
  // n beyond the vocabulary is clamped; n = 0 is empty.
  std::vector<float> logprobs;
  LogSoftmaxInto(logits, &logprobs);
  const std::vector<TokenLogprob> all = TopLogprobs(logprobs, 100);
  ASSERT_EQ(all.size(), logits.size());
  std::vector<int32_t> ids;
  for (const TokenLogprob& entry : all) ids.push_back(entry.token_id);
  EXPECT_THAT(ids, ::testing::ElementsAre(1, 2, 4, 3, 0, 5));
  EXPECT_TRUE(TopLogprobs(logprobs, 0).empty());
  // NaN in the input of TopLogprobs counts as -inf, and ties keep the lower index.
  const std::vector<TokenLogprob> with_nan =
      TopLogprobs(std::vector<float>{kNaN, -1.0f, -kInf, -1.0f}, 4);
  ASSERT_EQ(with_nan.size(), 4u);
  EXPECT_EQ(with_nan[0].token_id, 1);
  EXPECT_EQ(with_nan[1].token_id, 3);
  EXPECT_EQ(with_nan[2].token_id, 0);
  EXPECT_EQ(with_nan[2].logprob, -kInf);
  EXPECT_EQ(with_nan[3].token_id, 2);
}

TEST(SamplerLogprobTest, NegativeInfinityLogits) {
  const std::vector<float> logits = {-kInf, 0.0f, -kInf, 0.0f, -kInf};
  std::vector<float> logprobs;
  LogSoftmaxInto(logits, &logprobs);
  EXPECT_EQ(logprobs[0], -kInf);
  EXPECT_FLOAT_EQ(logprobs[1], -std::log(2.0f));
  EXPECT_FLOAT_EQ(logprobs[3], -std::log(2.0f));

  Sampler greedy(SamplerOptions{.num_top = 3});
  const SampledToken token = greedy.Sample(logits);
  EXPECT_EQ(token.token_id, 1);
  EXPECT_FLOAT_EQ(token.logprob, -std::log(2.0f));
  ASSERT_EQ(token.top.size(), 3u);
  EXPECT_EQ(token.top[2].token_id, 0);
  EXPECT_EQ(token.top[2].logprob, -kInf);

  for (float temperature : {0.5f, 1.0f, 100.0f}) {
    Sampler sampler(SamplerOptions{.temperature = temperature, .seed = 11});
    const std::vector<int> counts = CountDraws(sampler, logits, 2000);
    EXPECT_EQ(counts[0] + counts[2] + counts[4], 0);
    EXPECT_GT(counts[1], 800);
    EXPECT_GT(counts[3], 800);
  }
}

TEST(SamplerLogprobTest, NaNLogitsCountAsNegativeInfinity) {
  const std::vector<float> logits = {kNaN, 1.0f, kNaN, 0.0f};
  std::vector<float> logprobs;
  LogSoftmaxInto(logits, &logprobs);
  EXPECT_EQ(logprobs[0], -kInf);
  EXPECT_EQ(logprobs[2], -kInf);
  const std::vector<double> reference = ReferenceLogSoftmax({1.0f, 0.0f});
  EXPECT_NEAR(logprobs[1], reference[0], 1e-6);
  EXPECT_NEAR(logprobs[3], reference[1], 1e-6);

  Sampler greedy(SamplerOptions{.num_top = 4});
  const SampledToken token = greedy.Sample(logits);
  EXPECT_EQ(token.token_id, 1);
  EXPECT_FALSE(std::isnan(token.logprob));
  for (const TokenLogprob& entry : token.top) EXPECT_FALSE(std::isnan(entry.logprob));
  EXPECT_EQ(token.top[2].token_id, 0);  // the NaNs last, lower id first
  EXPECT_EQ(token.top[3].token_id, 2);

  // A NaN first logit must not win greedy.
  EXPECT_EQ(greedy.Sample(std::vector<float>{kNaN, -5.0f}).token_id, 1);

  Sampler sampler(SamplerOptions{.temperature = 1.0f, .top_p = 0.99f, .seed = 5});
  const std::vector<int> counts = CountDraws(sampler, logits, 2000);
  EXPECT_EQ(counts[0] + counts[2], 0);
}

TEST(SamplerLogprobTest, DegenerateRowsStayDefined) {
  // All -inf (or NaN): uniform, never NaN.
  const std::vector<float> dead = {-kInf, kNaN, -kInf, -kInf};
  std::vector<float> logprobs;
  LogSoftmaxInto(dead, &logprobs);
  for (float logprob : logprobs) EXPECT_FLOAT_EQ(logprob, -std::log(4.0f));
  Sampler greedy(SamplerOptions{});
  EXPECT_EQ(greedy.Sample(dead).token_id, 0);
  Sampler sampler(SamplerOptions{.temperature = 1.0f, .top_k = 2, .seed = 1});
  for (int i = 0; i < 100; ++i) EXPECT_LT(sampler.Sample(dead).token_id, 2);

  // +inf: the mass is shared among the +inf logits.
  const std::vector<float> hot = {0.0f, kInf, 1.0f, kInf};
  LogSoftmaxInto(hot, &logprobs);
  EXPECT_EQ(logprobs[0], -kInf);
  EXPECT_FLOAT_EQ(logprobs[1], -std::log(2.0f));
  EXPECT_FLOAT_EQ(logprobs[3], -std::log(2.0f));
  EXPECT_EQ(greedy.Sample(hot).token_id, 1);
  Sampler hot_sampler(SamplerOptions{.temperature = 2.0f, .seed = 9});
  const std::vector<int> counts = CountDraws(hot_sampler, hot, 1000);
  EXPECT_EQ(counts[0] + counts[2], 0);
  EXPECT_GT(counts[1], 400);
  EXPECT_GT(counts[3], 400);

  // An empty row is a caller bug but defined.
  EXPECT_EQ(greedy.Sample({}).logprob, -kInf);
}

// The greedy token from a row's stats (what the gpu_worker's device sends back instead of the
// row) against Sampler::Sample at temperature 0, to the bit: random rows of odd and real
// vocabulary sizes, with ties at the max, NaN, -inf and +inf keys, and the degenerate rows.
TEST(LogitRowStatsTest, GreedyTokenFromStatsIsTheSamplersToTheBit) {
  std::mt19937_64 rng(41);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  Sampler greedy(SamplerOptions{});
  int rows = 0;
  for (size_t vocab : {size_t{1}, size_t{2}, size_t{5}, size_t{17}, size_t{77}, size_t{1000},
                       size_t{32000}, size_t{151936}}) {
    for (int variant = 0; variant < 6; ++variant) {
      std::vector<float> row(vocab);
      for (float& v : row) v = normal(rng);
      auto at = [&](size_t i) -> float& { return row[(i * 7919) % vocab]; };
      switch (variant) {
        case 1:  // ties at the max: the lower id wins
          at(3) = at(11) = 40.0f;
          break;
        case 2:  // NaN and -inf keys beside finite ones
          at(0) = kNaN;
          at(5) = -kInf;
          at(9) = kNaN;
          break;
        case 3:  // +inf keys share the mass
          at(4) = kInf;
          at(8) = kInf;
          break;
        case 4:  // every key -inf or NaN: uniform
          for (size_t i = 0; i < vocab; ++i) row[i] = i % 3 == 0 ? kNaN : -kInf;
          break;
        case 5:  // keys far below the max underflow float's exp
          at(2) = 200.0f;
          break;
        default:
          break;
      }
      const LogitRowStats stats = ComputeLogitRowStats(row);
      const SampledToken want = greedy.Sample(row);
      const SampledToken got = GreedyTokenFromStats(stats, vocab);
      EXPECT_EQ(got.token_id, want.token_id) << "vocab " << vocab << " variant " << variant;
      EXPECT_EQ(std::bit_cast<uint32_t>(got.logprob), std::bit_cast<uint32_t>(want.logprob))
          << "vocab " << vocab << " variant " << variant << ": " << got.logprob << " against "
          << want.logprob;
      ++rows;
    }
  }
  EXPECT_EQ(rows, 48);
}

TEST(LogitRowStatsTest, StatsOfAHandRow) {
  const std::vector<float> row = {1.0f, kNaN, 3.0f, -kInf, 3.0f, 2.0f};
  const LogitRowStats stats = ComputeLogitRowStats(row);
  EXPECT_EQ(stats.max_key, 3.0f);
  EXPECT_EQ(stats.argmax, 2);
  EXPECT_EQ(stats.num_pos_inf, 0u);
  const double want = std::exp(-2.0) + 1.0 + 1.0 + std::exp(-1.0);
  EXPECT_NEAR(stats.sum_exp, want, 1e-6 * want);

  const LogitRowStats hot = ComputeLogitRowStats(std::vector<float>{kInf, 0.0f, kInf});
  EXPECT_EQ(hot.max_key, kInf);
  EXPECT_EQ(hot.argmax, 0);
  EXPECT_EQ(hot.num_pos_inf, 2u);
  EXPECT_EQ(GreedyTokenFromStats(hot, 3).logprob, static_cast<float>(-std::log(2.0)));

  const LogitRowStats dead = ComputeLogitRowStats(std::vector<float>{-kInf, kNaN});
  EXPECT_EQ(dead.max_key, -kInf);
  EXPECT_EQ(GreedyTokenFromStats(dead, 2).token_id, 0);
  EXPECT_EQ(GreedyTokenFromStats(dead, 2).logprob, static_cast<float>(-std::log(2.0)));

  const SampledToken empty = GreedyTokenFromStats(ComputeLogitRowStats({}), 0);
  EXPECT_EQ(empty.token_id, 0);
  EXPECT_EQ(empty.logprob, -kInf);
}

// About six standard deviations above the mean of a chi-square of `categories` - 1
// degrees of freedom (40 for 8 categories, P ~ 1e-6). The seeds are fixed, so
// this is a deterministic check that the draws follow the distribution, not a
// flaky one; it would catch any real bias.
double ChiSquareBound(size_t categories) {
  const double dof = static_cast<double>(categories) - 1.0;
  return dof + 6.0 * std::sqrt(2.0 * dof) + 10.0;
}

TEST(SamplerTemperatureTest, FrequenciesMatchSoftmaxOverTemperature) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f, -2.0f, 0.7f};
  constexpr int kDraws = 200000;
  for (float temperature : {0.5f, 1.0f, 1.7f}) {
    Sampler sampler(SamplerOptions{.temperature = temperature, .seed = 20240601});
    const std::vector<int> counts = CountDraws(sampler, logits, kDraws);
    const std::vector<double> p = ReferenceProbs(logits, temperature, AllIds(logits.size()));
    EXPECT_LT(ChiSquare(counts, p, kDraws), ChiSquareBound(logits.size())) << "T=" << temperature;
  }
}

TEST(SamplerTemperatureTest, FilteredFrequenciesMatchRenormalised) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f, -2.0f, 0.7f};
  constexpr int kDraws = 100000;
  struct Case {
    uint32_t top_k;
    float top_p;
  };
  for (const Case& c : {Case{3, 1.0f}, Case{0, 0.8f}, Case{5, 0.8f}, Case{8, 0.95f}}) {
    const float temperature = 1.3f;
    Sampler sampler(
        SamplerOptions{.temperature = temperature, .top_k = c.top_k, .top_p = c.top_p, .seed = 42});
    const std::vector<int> counts = CountDraws(sampler, logits, kDraws);
    const std::set<int32_t> kept = ReferenceKept(logits, temperature, c.top_k, c.top_p);
    const std::vector<double> p = ReferenceProbs(logits, temperature, kept);
    EXPECT_LT(ChiSquare(counts, p, kDraws), ChiSquareBound(kept.size()))
        << "top_k=" << c.top_k << " top_p=" << c.top_p << " kept " << kept.size();
  }
}

TEST(SamplerFilterTest, TopKOneIsGreedy) {
  for (uint64_t seed : {1, 2, 3}) {
    std::vector<float> logits = RandomLogits(500, seed);
    logits[17] = logits[300] = 10.0f;  // a tie for the max: the lower id wins
    Sampler sampler(SamplerOptions{.temperature = 5.0f, .top_k = 1, .seed = seed});
    for (int i = 0; i < 200; ++i) EXPECT_EQ(sampler.Sample(logits).token_id, 17);
  }
}

TEST(SamplerFilterTest, TinyTopPIsGreedy) {
  std::vector<float> logits = RandomLogits(500, 8);
  logits[250] = logits[400] = 4.0f;
  Sampler sampler(SamplerOptions{.temperature = 2.0f, .top_p = 1e-6f, .seed = 8});
  for (int i = 0; i < 200; ++i) EXPECT_EQ(sampler.Sample(logits).token_id, 250);
}

TEST(SamplerFilterTest, NeverPicksAnExcludedToken) {
  const std::vector<float> logits = RandomLogits(300, 21, 4.0f);
  struct Case {
    uint32_t top_k;
    float top_p;
  };
  for (const Case& c : {Case{5, 1.0f}, Case{40, 1.0f}, Case{0, 0.5f}, Case{0, 0.9f}, Case{20, 0.6f},
                        Case{299, 0.3f}}) {
    const float temperature = 1.0f;
    const std::set<int32_t> kept = ReferenceKept(logits, temperature, c.top_k, c.top_p);
    Sampler sampler(
        SamplerOptions{.temperature = temperature, .top_k = c.top_k, .top_p = c.top_p, .seed = 4});
    std::set<int32_t> seen;
    for (int i = 0; i < 5000; ++i) {
      const int32_t id = sampler.Sample(logits).token_id;
      ASSERT_TRUE(kept.contains(id))
          << "top_k=" << c.top_k << " top_p=" << c.top_p << " drew " << id;
      seen.insert(id);
    }
    EXPECT_GT(seen.size(), 1u);  // it did sample, not collapse to greedy
  }
}

TEST(SamplerFilterTest, NucleusOnLargerVocabs) {
  // Vocab 9000: a nucleus within the 128 or the 512 most likely is found by the
  // one-scan selection, a larger one by the bisection; all three must give the
  // reference nucleus, renormalised.
  constexpr size_t kVocab = 9000;
  struct Case {
    size_t hot;  // tokens of logit in [0, 1), spread over the ids; the rest are -40
    float top_p;
    int draws;
    bool check_frequencies;
  };
  for (const Case& c :
       {Case{8, 0.8f, 5000, true}, Case{300, 0.9f, 8000, true}, Case{kVocab, 0.5f, 1500, false}}) {
    const std::vector<float> noise = RandomLogits(kVocab, c.hot, 1.0f);
    std::vector<float> logits(kVocab, -40.0f);
    for (size_t i = 0; i < c.hot; ++i) {
      const size_t id = (i * 7919) % kVocab;
      logits[id] = 0.5f + 0.5f * noise[i];
    }
    const std::set<int32_t> kept = ReferenceKept(logits, 1.0, 0, c.top_p);
    Sampler sampler(SamplerOptions{.temperature = 1.0f, .top_p = c.top_p, .seed = 31});
    std::vector<int> counts(kVocab, 0);
    for (int i = 0; i < c.draws; ++i) {
      const int32_t id = sampler.Sample(logits).token_id;
      ASSERT_TRUE(kept.contains(id)) << "hot=" << c.hot << " drew " << id;
      ++counts[id];
    }
    if (c.check_frequencies) {
      const std::vector<double> p = ReferenceProbs(logits, 1.0, kept);
      EXPECT_LT(ChiSquare(counts, p, c.draws), ChiSquareBound(kept.size()))
          << "hot=" << c.hot << " kept " << kept.size();
    } else {
      EXPECT_GT(kept.size(), 1000u);
      EXPECT_GT(std::count_if(counts.begin(), counts.end(), [](int n) { return n > 0; }), 1000);
    }
  }
}

// The nucleus of a flat row of a large vocabulary ends inside one bucket of the exponents'
// histogram: keys spread over [-120, 0] (past the float exp's -87 at T = 1), runs of equal
// keys across bucket edges, and -inf. A sweep of draws over [0, 1) keeps to the reference
// nucleus and reaches every kept token of probability above 3 / draws.
TEST(SamplerFilterTest, NucleusEndsInsideAnExponentBucket) {
  constexpr size_t kVocab = 12000;
  std::vector<float> logits(kVocab);
  for (size_t id = 0; id < kVocab; ++id) {
    const size_t r = (id * 7919) % kVocab;  // the ids' order scrambled
    logits[id] = id % 97 == 1 ? -kInf : -120.0f * static_cast<float>(r / 12) / 1000.0f;
  }
  for (const float temperature : {1.0f, 3.0f}) {
    for (const float top_p : {0.05f, 0.9f, 0.999f}) {
      const std::set<int32_t> kept = ReferenceKept(logits, temperature, 0, top_p);
      const std::vector<double> p = ReferenceProbs(logits, temperature, kept);
      Sampler sampler(SamplerOptions{.temperature = temperature, .top_p = top_p});
      constexpr int kDraws = 4000;
      std::set<int32_t> seen;
      for (int i = 0; i < kDraws; ++i) {
        const int32_t id = sampler.Sample(logits, (i + 0.5) / kDraws).token_id;
        ASSERT_TRUE(kept.contains(id)) << "T=" << temperature << " top_p=" << top_p
                                       << " drew " << id << " outside " << kept.size();
        seen.insert(id);
      }
      for (const int32_t id : kept) {
        if (p[id] > 3.0 / kDraws) {
          EXPECT_TRUE(seen.contains(id)) << "T=" << temperature << " top_p=" << top_p << " id "
                                         << id << " p " << p[id];
        }
      }
    }
  }
}

TEST(SamplerWeightTest, TemperedWeightsFollowTheDoubleExp) {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal(0.0f, 6.0f);
  for (const size_t n : {0u, 1u, 15u, 16u, 17u, 1000u, 4099u}) {
    std::vector<float> keys(n);
    for (size_t i = 0; i < n; ++i) keys[i] = i % 7 == 2 ? -kInf : normal(rng);
    float max_key = -kInf;
    for (float key : keys) max_key = std::max(max_key, key);
    for (const float temperature : {0.3f, 1.0f, 2.5f, kInf}) {
      std::vector<double> weights(n + 1, -1.0);  // a guard after the row
      internal_sampler::TemperedWeights(keys, max_key, temperature, weights.data());
      EXPECT_EQ(weights[n], -1.0);
      for (size_t i = 0; i < n; ++i) {
        const double want =
            keys[i] == -kInf ? 0.0 : std::exp((static_cast<double>(keys[i]) - max_key) / temperature);
        // The one-token form (top_k's candidates) within rounding of the row's vector form.
        const double one = internal_sampler::TemperedWeight(keys[i], max_key, temperature);
        EXPECT_NEAR(weights[i], one, 1e-6 * one) << i;
        if (keys[i] == -kInf) {
          EXPECT_EQ(weights[i], 0.0) << i;
        } else if (want >= std::exp(-87.0)) {
          // The float exp's 1e-7, and the float exponent's rounding, 6e-8 of |x| relative.
          const double x = -std::log(want);
          EXPECT_NEAR(weights[i], want, (2e-7 + 1.2e-7 * x) * want) << i << " T=" << temperature;
        } else {
          // Below the float exp's range: exp(-87), not 0 (so that the token keeps a weight).
          EXPECT_NEAR(weights[i], std::exp(-87.0), 1e-6 * std::exp(-87.0)) << i;
        }
      }
    }
  }
}

TEST(SamplerFilterTest, FlatNucleusGrowsPastTheFirstSelection) {
  // Equal logits: the nucleus of top_p = 0.9 is the lowest 900 ids, found by the
  // bisection (1000 -> 500 -> 250 -> 125, then sorted).
  const std::vector<float> logits(1000, 0.25f);
  Sampler sampler(SamplerOptions{.temperature = 1.0f, .top_p = 0.9f, .seed = 6});
  int32_t highest = 0;
  for (int i = 0; i < 20000; ++i) {
    const int32_t id = sampler.Sample(logits).token_id;
    ASSERT_LT(id, 900);
    highest = std::max(highest, id);
  }
  EXPECT_GT(highest, 890);
}

TEST(SamplerSeedTest, SameSeedSameSequenceDifferentSeedsDiffer) {
  const std::vector<float> logits = RandomLogits(1000, 5, 2.0f);
  auto run = [&](uint64_t seed) {
    Sampler sampler(SamplerOptions{.temperature = 1.0f, .top_k = 50, .top_p = 0.95f, .seed = seed});
    std::vector<int32_t> ids;
    for (int i = 0; i < 64; ++i) ids.push_back(sampler.Sample(logits).token_id);
    return ids;
  };
  EXPECT_EQ(run(123), run(123));
  EXPECT_NE(run(123), run(124));
  EXPECT_NE(run(0), run(1));
}

// The split the service uses: the coordinator's sampler draws, another one (reused across
// requests with Reset) samples with that draw. Every option mix, 200 tokens each: the
// same tokens, logprobs and alternatives as sampling in one place.
TEST(SamplerSplitTest, DrawThenSampleElsewhereEqualsSampleInOnePlace) {
  const std::vector<float> peaked = RandomLogits(5000, 11, 6.0f);
  const std::vector<float> flat = RandomLogits(5000, 12, 0.3f);
  const SamplerOptions mixes[] = {
      {.temperature = 0.0f, .num_top = 3},
      {.temperature = 1.0f},
      {.temperature = 0.7f, .top_k = 40, .num_top = 5},
      {.temperature = 1.3f, .top_p = 0.9f},
      {.temperature = 1.0f, .top_k = 100, .top_p = 0.5f, .num_top = 2},
      {.temperature = 2.0f, .top_p = 0.99f},  // flat: the bisection path
  };
  Sampler worker(SamplerOptions{});
  for (const std::vector<float>* logits : {&peaked, &flat}) {
    for (SamplerOptions options : mixes) {
      options.seed = 2024;
      Sampler whole(options), coordinator(options);
      for (int i = 0; i < 200; ++i) {
        const SampledToken expected = whole.Sample(*logits);
        const double u = coordinator.NextDraw();
        if (options.temperature == 0.0f) {
          EXPECT_EQ(u, 0.0);
        }
        worker.Reset(SamplerOptions{.temperature = options.temperature,
                                    .top_k = options.top_k,
                                    .top_p = options.top_p,
                                    .num_top = options.num_top});
        const SampledToken got = worker.Sample(*logits, u);
        ASSERT_EQ(got.token_id, expected.token_id) << "token " << i;
        ASSERT_EQ(got.logprob, expected.logprob);
        ASSERT_EQ(got.top.size(), expected.top.size());
        for (size_t k = 0; k < got.top.size(); ++k) {
          EXPECT_EQ(got.top[k].token_id, expected.top[k].token_id);
          EXPECT_EQ(got.top[k].logprob, expected.top[k].logprob);
        }
      }
    }
  }
}

// A draw outside [0, 1) (a corrupted plan) still picks a kept token: u >= 1 the last of the
// walk, u < 0 or NaN the first; nothing outside the top-k.
TEST(SamplerSplitTest, OutOfRangeDrawsStayInTheKeptSet) {
  const std::vector<float> logits = RandomLogits(1000, 13, 3.0f);
  Sampler sampler(SamplerOptions{.temperature = 1.0f, .top_k = 10});
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const std::set<int32_t> kept(order.begin(), order.begin() + 10);
  for (double u : {-1.0, 0.0, 0.999999, 1.0, 7.5, std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity()}) {
    EXPECT_TRUE(kept.count(sampler.Sample(logits, u).token_id)) << u;
  }
  EXPECT_EQ(sampler.Sample(logits, -1.0).token_id, order[0]);
  EXPECT_EQ(sampler.Sample(logits, std::numeric_limits<double>::quiet_NaN()).token_id, order[0]);
}

TEST(SamplerShapeTest, VocabOfOne) {
  const std::vector<float> logits = {-3.5f};
  for (float temperature : {0.0f, 1.0f}) {
    Sampler sampler(SamplerOptions{
        .temperature = temperature, .top_k = 1, .top_p = 0.5f, .seed = 1, .num_top = 4});
    const SampledToken token = sampler.Sample(logits);
    EXPECT_EQ(token.token_id, 0);
    EXPECT_EQ(token.logprob, 0.0f);
    ASSERT_EQ(token.top.size(), 1u);
    EXPECT_EQ(token.top[0].token_id, 0);
    EXPECT_EQ(token.top[0].logprob, 0.0f);
  }
}

TEST(SamplerShapeTest, LargeVocabRuns) {
  constexpr size_t kVocab = 152064;
  std::vector<float> logits = RandomLogits(kVocab, 77, 10.0f);
  logits[kVocab - 1] = 25.0f;
  logits[3] = -kInf;
  const std::vector<double> reference = ReferenceLogSoftmax([&] {
    std::vector<float> finite = logits;
    finite[3] = -1e30f;
    return finite;
  }());
  struct Case {
    float temperature;
    uint32_t top_k;
    float top_p;
  };
  for (const Case& c : {Case{0.0f, 0, 1.0f}, Case{1.0f, 0, 1.0f}, Case{0.7f, 50, 1.0f},
                        Case{0.7f, 0, 0.9f}, Case{1.0f, 20, 0.8f}}) {
    Sampler sampler(SamplerOptions{
        .temperature = c.temperature, .top_k = c.top_k, .top_p = c.top_p, .seed = 3, .num_top = 5});
    const auto start = std::chrono::steady_clock::now();
    constexpr int kSteps = 8;
    for (int i = 0; i < kSteps; ++i) {
      const SampledToken token = sampler.Sample(logits);
      ASSERT_GE(token.token_id, 0);
      ASSERT_LT(token.token_id, static_cast<int32_t>(kVocab));
      ASSERT_NE(token.token_id, 3);
      EXPECT_NEAR(token.logprob, reference[token.token_id], 1e-4);
      ASSERT_EQ(token.top.size(), 5u);
      EXPECT_EQ(token.top[0].token_id, static_cast<int32_t>(kVocab - 1));
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        kSteps;
    RecordProperty("us_per_sample", static_cast<int>(us));
    std::printf("T=%.1f top_k=%u top_p=%.2f: %.0f us per Sample\n", c.temperature, c.top_k, c.top_p,
                us);
  }
}

}  // namespace
}  // namespace writescope
