// The split-size rule of the GPU decodes (kernels/cuda/launch.h): plain integer logic,
// tested on the host (no CUDA needed).
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
  // MLA batch 1 at 32K: one wave of 2 per SM wants 124 tokens; the minimum is 256.
  EXPECT_EQ(SplitTokens(kMlaTensorCoreSplits, 32768, 1, kSms, 1024), kMlaTensorCoreSplits.min_tokens);
  // 1M tokens: 264 splits of 3972 tokens, rounded up to 4000.
  EXPECT_EQ(SplitTokens(kMlaTensorCoreSplits, 1 << 20, 1, kSms, 1024), 4000);
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
      EXPECT_GE(mla, kMlaTensorCoreSplits.min_tokens);
      EXPECT_LE(Splits(tokens, gqa), 1024) << tokens << " " << pairs;
      EXPECT_LE(Splits(tokens, mla), 1024) << tokens << " " << pairs;
    }
  }
}

}  // namespace
}  // namespace writescope::kernels::cuda::internal
