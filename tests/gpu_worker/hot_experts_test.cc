// The hot-expert rule (gpu_worker/hot_experts.h): counting over the warm-up, the choice by
// selections within the capacity and the byte cap, and the split of a layer's pairs.
#include "gpu_worker/hot_experts.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/model/tiny_models.h"

namespace writescope::gpu {
namespace {

ModelConfig Config(const std::string& arch, int64_t layers) {
  return kernels::model::testing::TinyConfig(arch, layers);
}

TEST(HotExperts, OffCountsNothingAndIsNeverDue) {
  const ModelConfig config = Config("qwen3_moe", 2);
  HotExperts hot(config, {.enabled = false, .warmup_tokens = 1});
  EXPECT_FALSE(hot.counting());
  const std::vector<int32_t> ids(config.num_experts_per_tok, 0);
  hot.Count(0, ids.data(), 1, 1);
  EXPECT_FALSE(hot.EndStep(100));
  EXPECT_EQ(hot.tokens_seen(), 0);
}

TEST(HotExperts, DueOnceTheWarmupIsCountedThenChosenOnce) {
  const ModelConfig config = Config("qwen3_moe", 2);
  HotExperts hot(config, {.enabled = true, .warmup_tokens = 10});
  EXPECT_TRUE(hot.counting());
  EXPECT_FALSE(hot.EndStep(4));
  EXPECT_FALSE(hot.EndStep(5));
  EXPECT_TRUE(hot.EndStep(3));  // 12 >= 10: the step that crosses it counts
  EXPECT_EQ(hot.tokens_seen(), 12);
  EXPECT_FALSE(hot.chosen());
  hot.Choose(4);
  EXPECT_TRUE(hot.chosen());
  EXPECT_FALSE(hot.counting());
  EXPECT_FALSE(hot.EndStep(100));  // never due again
  EXPECT_EQ(hot.tokens_seen(), 12);
}

TEST(HotExperts, StatesFromWarmupToResidentOrFailed) {
  const ModelConfig config = Config("qwen3_moe", 2);
  EXPECT_STREQ(HotExperts(config, {.enabled = false}).state(), "off");
  HotExperts hot(config, {.enabled = true, .warmup_tokens = 1});
  EXPECT_STREQ(hot.state(), "warming up");
  hot.Choose(2);
  EXPECT_STREQ(hot.state(), "uploading");
  hot.set_resident(2, 2 * hot.expert_bytes());
  EXPECT_STREQ(hot.state(), "resident");
  EXPECT_EQ(hot.resident_experts(), 2);
  EXPECT_EQ(hot.resident_bytes(), 2 * hot.expert_bytes());
  HotExperts failed(config, {.enabled = true, .warmup_tokens = 1});
  failed.Choose(2);
  failed.set_failed();
  EXPECT_STREQ(failed.state(), "failed");
  EXPECT_EQ(failed.resident_experts(), 0);
}

TEST(HotExperts, ChoosesTheMostSelectedWithinCapacity) {
  const ModelConfig config = Config("qwen3_moe", 3);
  const int64_t E = config.n_routed_experts;
  ASSERT_GE(E, 4);
  HotExperts hot(config, {.enabled = true, .warmup_tokens = 1});
  // Layer 1: expert 3 five times, expert 2 three times; layer 2: expert 0 four times;
  // -1 (skipped) and out-of-range ids are not counted; other layers' counts do not mix.
  std::vector<int32_t> ids = {3, 3, 3, 3, 3, 2, 2, 2, -1, -1};
  hot.Count(1, ids.data(), 10, 1);
  ids = {0, 0, 0, 0, static_cast<int32_t>(E)};
  hot.Count(2, ids.data(), 5, 1);
  hot.Count(7, ids.data(), 5, 1);  // no such layer: ignored
  const std::vector<ExpertRef> set = hot.Choose(3);
  // (layer, expert) order in the result.
  ASSERT_EQ(set.size(), 3u);
  EXPECT_EQ(set[0], (ExpertRef{1, 2}));
  EXPECT_EQ(set[1], (ExpertRef{1, 3}));
  EXPECT_EQ(set[2], (ExpertRef{2, 0}));
}

TEST(HotExperts, TiesGoInLayerThenExpertOrderAndUnseenFillTheRoom) {
  const ModelConfig config = Config("qwen3_moe", 2);
  const int64_t E = config.n_routed_experts;
  HotExperts hot(config, {.enabled = true, .warmup_tokens = 1});
  const std::vector<int32_t> ids = {1};
  hot.Count(1, ids.data(), 1, 1);
  const std::vector<ExpertRef> set = hot.Choose(3);
  ASSERT_EQ(set.size(), 3u);
  EXPECT_EQ(set[0], (ExpertRef{0, 0}));
  EXPECT_EQ(set[1], (ExpertRef{0, 1}));
  EXPECT_EQ(set[2], (ExpertRef{1, 1}));  // the one selected
  // A room larger than all the experts takes them all, once.
  HotExperts all(config, {.enabled = true});
  EXPECT_EQ(all.Choose(1 << 20).size(), static_cast<size_t>(2 * E));
  HotExperts none(config, {.enabled = true});
  EXPECT_TRUE(none.Choose(0).empty());
  EXPECT_TRUE(none.Choose(-5).empty());
}

TEST(HotExperts, SkipsDenseLayersAndHonoursTheByteCap) {
  const ModelConfig config = Config("deepseek_v2", 3);
  ASSERT_FALSE(config.IsMoeLayer(0));
  const int64_t E = config.n_routed_experts;
  HotExperts hot(config, {.enabled = true, .max_bytes = 0});
  EXPECT_EQ(hot.total_experts(), 2 * E);
  for (const ExpertRef& ref : hot.Choose(1 << 20)) EXPECT_NE(ref.layer, 0);
  HotExperts capped(config, {.enabled = true, .max_bytes = 3 * HotExperts(config, {}).expert_bytes() + 1});
  EXPECT_EQ(capped.Choose(1 << 20).size(), 3u);
  EXPECT_EQ(capped.expert_bytes(),
            uint64_t{6} * config.moe_intermediate_size * config.hidden_size);
}

TEST(HotExperts, SplitPutsEachPairOnOneSide) {
  const std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5};
  const std::vector<float> weights = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  std::vector<int32_t> hot_ids, cold_ids;
  std::vector<float> hot_w, cold_w;
  const int64_t hot = HotExperts::Split([](int32_t e) { return e % 2 == 0; }, ids.data(),
                                        weights.data(), 3, 2, &hot_ids, &hot_w, &cold_ids, &cold_w);
  EXPECT_EQ(hot, 3);
  EXPECT_EQ(hot_ids, (std::vector<int32_t>{0, -1, 2, -1, 4, -1}));
  EXPECT_EQ(cold_ids, (std::vector<int32_t>{-1, 1, -1, 3, -1, 5}));
  EXPECT_EQ(hot_w, (std::vector<float>{0.1f, 0, 0.3f, 0, 0.5f, 0}));
  EXPECT_EQ(cold_w, (std::vector<float>{0, 0.2f, 0, 0.4f, 0, 0.6f}));
  EXPECT_EQ(HotExperts::Split([](int32_t) { return false; }, ids.data(), weights.data(), 3, 2,
                              &hot_ids, &hot_w, &cold_ids, &cold_w),
            0);
  EXPECT_EQ(cold_ids, ids);
  EXPECT_EQ(HotExperts::Split([](int32_t) { return true; }, ids.data(), weights.data(), 0, 2,
                              &hot_ids, &hot_w, &cold_ids, &cold_w),
            0);
  EXPECT_TRUE(hot_ids.empty());
}

TEST(HotExperts, DistinctCountsEachExpertOnceAndNoPlaceholder) {
  // A layer of 4 tokens x top 2 over 8 experts: 3, 5 and 6 chosen, 5 twice.
  const std::vector<int32_t> ids = {3, 5, 6, 5, 3, 6, 5, 3};
  EXPECT_EQ(HotExperts::Distinct(ids.data(), 8, 8), 3);
  EXPECT_EQ(HotExperts::Distinct(ids.data(), 2, 8), 2);  // the first token's pair
  EXPECT_EQ(HotExperts::Distinct(ids.data(), 0, 8), 0);
  // One side of a split: the other side's -1, and ids beyond the experts, do not count.
  std::vector<int32_t> hot_ids, cold_ids;
  std::vector<float> hot_w, cold_w;
  const std::vector<float> weights(ids.size(), 0.5f);
  HotExperts::Split([](int32_t e) { return e == 5; }, ids.data(), weights.data(), 4, 2, &hot_ids,
                    &hot_w, &cold_ids, &cold_w);
  EXPECT_EQ(HotExperts::Distinct(hot_ids.data(), 8, 8), 1);
  EXPECT_EQ(HotExperts::Distinct(cold_ids.data(), 8, 8), 2);
  const std::vector<int32_t> odd = {-1, 8, 9, 7, 7, -2};
  EXPECT_EQ(HotExperts::Distinct(odd.data(), 6, 8), 1);
  EXPECT_EQ(HotExperts::Distinct(odd.data(), 6, 0), 0);
}

}  // namespace
}  // namespace writescope::gpu
