// The split-size rule of the GPU decodes (kernels/cuda/launch.h): plain integer logic,
// tested on the host (no CUDA needed).
#include <algorithm>
#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/cuda/launch.h"

namespace writescope::kernels::cuda::internal {
namespace {

constexpr int32_t kSms = 132;

int32_t Splits(int32_t tokens, int32_t per) { return (tokens + per - 1) / per; }

TEST(SplitTokensTest, FewPairsFillOneWave) {
  // GQA batch 1, 4 kv heads at 32K: ~99 splits wanted, 331 tokens rounded up to 384.
  const int32_t per = SplitTokens(kGqaTensorCoreSplits, 32768, 4, kSms, 1024);
  EXPECT_EQ(per, 384);
  EXPECT_LE(4 * Splits(32768, per), kSms * kGqaTensorCoreSplits.ctas_per_sm);
  // MLA batch 1 at 32K: one CTA per SM, 132 splits of 249 tokens, rounded up to 256.
  EXPECT_EQ(SplitTokens(kMlaTensorCoreSplits, 32768, 1, kSms, 1024), 256);
  // 1M tokens: one CTA per SM would make splits of 7944 tokens, over the MLA rule's 1024, so
  // one wave of 2 per SM: 264 splits of 3972 tokens, rounded up to 4000.
  EXPECT_EQ(SplitTokens(kMlaTensorCoreSplits, 1 << 20, 1, kSms, 1024), 4000);
}

// The MLA rule's one CTA per SM (run 295's points): short splits, below the 256-token minimum
// of the plan with two per SM, where batch x context is small; that plan where one CTA per SM
// would make splits over 1024 tokens.
TEST(SplitTokensTest, MlaPlansOneCtaPerSmWhereItsSplitsAreShort) {
  const SplitRule& rule = kMlaTensorCoreSplits;
  EXPECT_EQ(SplitTokens(rule, 2048, 1, kSms, 1024), 32);      // 64 splits
  EXPECT_EQ(SplitTokens(rule, 8192, 1, kSms, 1024), 64);      // 128 splits
  EXPECT_EQ(SplitTokens(rule, 2048, 32, kSms, 1024), 512);    // 4 splits x 32: 128 CTAs
  EXPECT_EQ(SplitTokens(rule, 32768, 4, kSms, 1024), 1024);   // two per SM: 512
  EXPECT_EQ(SplitTokens(rule, 131072, 1, kSms, 1024), 1024);  // two per SM: 512
  // One per SM would make 2048-token splits: two per SM, 33 splits of 993 -> 1024 tokens.
  EXPECT_EQ(SplitTokens(rule, 32768, 8, kSms, 1024), 1024);
  EXPECT_EQ(SplitTokens(rule, 8192, 32, kSms, 1024), 1024);  // 8 splits (one per SM: 2048)
  // Up to half as many pairs as SMs: one per SM (2 splits of 512); more: two per SM (3 splits,
  // 342 -> 352 tokens), as for 200 pairs (~4 waves: splits of 256).
  EXPECT_EQ(SplitTokens(rule, 1024, 66, kSms, 1024), 512);
  EXPECT_EQ(SplitTokens(rule, 1024, 67, kSms, 1024), 352);
  EXPECT_EQ(SplitTokens(rule, 512, 200, kSms, 1024), 256);
  for (int32_t tokens : {1, 100, 2048, 8192, 32768, 131072}) {
    for (int64_t pairs : {1, 2, 4, 8, 16, 32, 66, 67, 132}) {
      const int32_t per = SplitTokens(rule, tokens, pairs, kSms, 1024);
      if (per < rule.min_tokens) {  // the one-per-SM plan: at most one CTA per SM
        EXPECT_LE(pairs * Splits(tokens, per), kSms) << tokens << " " << pairs;
      }
      EXPECT_EQ(per % rule.multiple, 0);
    }
  }
  // Of the GQA rules only bulk4's has it (run 297); the others keep their 256-token minimum.
  EXPECT_EQ(kGqaTensorCoreSplits.one_cta_max_tokens, 0);
  EXPECT_EQ(kGqaBulk3x2Splits.one_cta_max_tokens, 0);
  EXPECT_EQ(SplitTokens(kGqaTensorCoreSplits, 2048, 4, kSms, 1024), 256);
}

// bulk4 plans one CTA per SM as before, now below 256 tokens too where the minimum left SMs idle
// (run 297's points, 4 kv heads for Qwen3 and 8 for Mixtral a sequence).
TEST(SplitTokensTest, Bulk4TakesShortSplitsWhereTheMinimumLeftSmsIdle) {
  const SplitRule& rule = kGqaBulk4Splits;
  EXPECT_EQ(SplitTokens(rule, 2048, 4, kSms, 1024), 64);   // Qwen3 2K x 1: 128 CTAs, not 32
  EXPECT_EQ(SplitTokens(rule, 2048, 8, kSms, 1024), 128);  // Qwen3 2K x 2, Mixtral 2K x 1
  EXPECT_EQ(SplitTokens(rule, 4096, 4, kSms, 1024), 128);  // Qwen3 4K x 1
  // As before where the splits were 256 tokens or more.
  EXPECT_EQ(SplitTokens(rule, 8192, 4, kSms, 1024), 256);      // Qwen3 8K x 1
  EXPECT_EQ(SplitTokens(rule, 32768, 4, kSms, 1024), 1024);    // Qwen3 32K x 1
  EXPECT_EQ(SplitTokens(rule, 8192, 32, kSms, 1024), 2048);    // Qwen3 8K x 8
  EXPECT_EQ(SplitTokens(rule, 32768, 64, kSms, 1024), 16384);  // Mixtral 32K x 8
}

// Each GQA kernel plans with its own occupancy: the bulk kernels' one wave is 1 or 2 CTAs per
// SM, so their batch-1 splits are 3x or 1.5x the register kernel's.
TEST(SplitTokensTest, EachGqaKernelPlansWithItsOccupancy) {
  EXPECT_EQ(&GqaSplitRuleOf(kGqaRegisters), &kGqaTensorCoreSplits);
  EXPECT_EQ(&GqaSplitRuleOf(kGqaBulk4), &kGqaBulk4Splits);
  EXPECT_EQ(&GqaSplitRuleOf(kGqaBulk3x2), &kGqaBulk3x2Splits);
  // Qwen3 32K x 1 (4 pairs): 33 splits wanted, 993 tokens -> 1024; 66 -> 512.
  EXPECT_EQ(SplitTokens(GqaSplitRuleOf(kGqaBulk4), 32768, 4, kSms, 1024), 1024);
  EXPECT_EQ(SplitTokens(GqaSplitRuleOf(kGqaBulk3x2), 32768, 4, kSms, 1024), 512);
  for (GqaKernel kernel : {kGqaBulk4, kGqaBulk3x2}) {
    const SplitRule& rule = GqaSplitRuleOf(kernel);
    const int32_t per = SplitTokens(rule, 32768, 4, kSms, 1024);
    EXPECT_LE(4 * Splits(32768, per), kSms * rule.ctas_per_sm) << kernel;
  }
}

TEST(SplitTokensTest, ManyPairsTargetWaves) {
  // 32 sequences x 8 kv heads = 256 pairs > half a wave: ~4 waves of 396 CTAs.
  const int32_t per = SplitTokens(kGqaTensorCoreSplits, 32768, 256, kSms, 1024);
  const int64_t ctas = int64_t{256} * Splits(32768, per);
  EXPECT_GE(ctas, 3 * kSms * kGqaTensorCoreSplits.ctas_per_sm);
  EXPECT_LE(ctas, 5 * kSms * kGqaTensorCoreSplits.ctas_per_sm);
}

TEST(SplitTokensTest, MultiplesMinimumsAndTheSplitCap) {
  for (int32_t tokens : {0, 1, 31, 33, 255, 257, 1000, 32768, 131072, 1 << 24}) {
    for (int64_t pairs : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{200}, int64_t{5000}}) {
      const int32_t gqa = SplitTokens(kGqaTensorCoreSplits, tokens, pairs, kSms, 1024);
      const int32_t mla = SplitTokens(kMlaTensorCoreSplits, tokens, pairs, kSms, 1024);
      EXPECT_EQ(gqa % 64, 0) << tokens << " " << pairs;
      EXPECT_EQ(mla % 32, 0) << tokens << " " << pairs;
      EXPECT_GE(gqa, kGqaTensorCoreSplits.min_tokens);
      // MLA's one CTA per SM has no minimum but its multiple; only that plan goes below it.
      EXPECT_GE(mla, kMlaTensorCoreSplits.multiple);
      if (mla < kMlaTensorCoreSplits.min_tokens) {
        EXPECT_LE(std::max<int64_t>(pairs, 1) * Splits(tokens, mla), kSms)
            << tokens << " " << pairs;
      }
      EXPECT_LE(Splits(tokens, gqa), 1024) << tokens << " " << pairs;
      EXPECT_LE(Splits(tokens, mla), 1024) << tokens << " " << pairs;
    }
  }
}

}  // namespace
}  // namespace writescope::kernels::cuda::internal
