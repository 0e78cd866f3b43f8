#include "common/kv_pattern.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace writescope {
namespace {

KvGeometry Gqa() {
  return {.kind = AttentionKind::kGqa, .num_layers = 2, .block_tokens = 16, .num_kv_heads = 3,
          .head_dim = 8};
}
KvGeometry Mla() {
  return {.kind = AttentionKind::kMla, .num_layers = 2, .block_tokens = 16, .kv_lora_rank = 12,
          .rope_dim = 4};
}

class KvPatternTest : public ::testing::TestWithParam<KvGeometry> {};

TEST_P(KvPatternTest, FilledBlockVerifiesAndEveryCorruptionIsCounted) {
  const KvGeometry g = GetParam();
  std::vector<uint16_t> block(g.layer_block_bytes() / 2, 0);
  FillKvPatternBlock(g, /*seq=*/7, /*first_token=*/32, /*num_tokens=*/11, /*layer=*/1, block.data());
  std::string first;
  EXPECT_EQ(CountKvPatternMismatches(g, 7, 32, 11, 1, block.data(), &first), 0u);
  EXPECT_TRUE(first.empty());
  // The same bytes are wrong for another sequence, token offset or layer.
  EXPECT_GT(CountKvPatternMismatches(g, 8, 32, 11, 1, block.data(), nullptr), 0u);
  EXPECT_GT(CountKvPatternMismatches(g, 7, 33, 11, 1, block.data(), nullptr), 0u);
  EXPECT_GT(CountKvPatternMismatches(g, 7, 32, 11, 0, block.data(), nullptr), 0u);
  // Rows past num_tokens are not part of the pattern: checking them fails.
  EXPECT_GT(CountKvPatternMismatches(g, 7, 32, 12, 1, block.data(), nullptr), 0u);
  // A value is covered by the pattern iff filling over 0x0000 and over 0xffff agree there.
  std::vector<uint16_t> over_ones(block.size(), 0xffff);
  FillKvPatternBlock(g, 7, 32, 11, 1, over_ones.data());
  std::vector<uint16_t> corrupted = block;
  uint64_t flipped = 0;
  for (size_t i = 0; i < corrupted.size(); i += 97) {
    if (block[i] == over_ones[i]) {
      corrupted[i] ^= 1;
      ++flipped;
    }
  }
  ASSERT_GT(flipped, 0u);
  first.clear();
  EXPECT_EQ(CountKvPatternMismatches(g, 7, 32, 11, 1, corrupted.data(), &first), flipped);
  EXPECT_FALSE(first.empty());
}

INSTANTIATE_TEST_SUITE_P(Geometries, KvPatternTest, ::testing::Values(Gqa(), Mla()),
                         [](const auto& info) {
                           return info.param.kind == AttentionKind::kMla ? "Mla" : "Gqa";
                         });

}  // namespace
}  // namespace writescope
