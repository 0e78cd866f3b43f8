#include "common/kv_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/test_util.h"

namespace writescope {
namespace {

using ::testing::HasSubstr;

// Qwen3-30B-A3B: 48 layers, 4 KV heads, head_dim 128 -> 96 KiB of KV per token.
KvGeometry Qwen3() {
  return KvGeometry{.kind = AttentionKind::kGqa,
                    .num_layers = 48,
                    .block_tokens = 0,
                    .num_kv_heads = 4,
                    .head_dim = 128};
}

// DeepSeek-V2-Lite: 27 layers, MLA 512 + 64.
KvGeometry DeepSeekV2Lite() {
  return KvGeometry{.kind = AttentionKind::kMla,
                    .num_layers = 27,
                    .block_tokens = 0,
                    .kv_lora_rank = 512,
                    .rope_dim = 64};
}

TEST(KvConfigTest, DefaultsForQwen3) {
  KvCacheConfig config{.geometry = Qwen3(),
                       .cpu_compute_bytes = uint64_t{8} << 30,
                       .gpu_transfer_bytes = uint64_t{4} << 30,
                       .max_sequences = 16};
  auto resolved = ResolveKvCacheConfig(config);
  WS_ASSERT_OK(resolved.status());
  EXPECT_EQ(resolved->geometry.bytes_per_token(), 96u * 1024);
  EXPECT_EQ(resolved->block_tokens(), 256u);  // = W
  EXPECT_EQ(resolved->gpu_kv_budget_bytes, uint64_t{2} << 30);
  // 16 x 256 x 96 KiB = 384 MiB of D-window; the rest (1664 MiB) is two buffers of
  // 512 KiB layer-blocks: 1664 blocks each.
  EXPECT_EQ(resolved->window_bytes(), uint64_t{384} << 20);
  EXPECT_EQ(resolved->pingpong_blocks, 1664u);
  EXPECT_LE(resolved->gpu_bytes(), resolved->gpu_kv_budget_bytes);
  EXPECT_EQ(resolved->region_slots(KvRegion::kCpuCompute), (uint64_t{8} << 30) / (24u << 20));
  EXPECT_EQ(resolved->arena_sizes().gpu_transfer_bytes,
            uint64_t{resolved->region_slots(KvRegion::kGpuTransfer)} * (24u << 20));
}

TEST(KvConfigTest, MlaDefaultBudgetIsPointThreeGiB) {
  auto resolved = ResolveKvCacheConfig({.geometry = DeepSeekV2Lite(), .max_sequences = 16});
  WS_ASSERT_OK(resolved.status());
  EXPECT_EQ(resolved->geometry.bytes_per_token_layer(), 1152u);
  EXPECT_EQ(resolved->gpu_kv_budget_bytes, (uint64_t{3} << 30) / 10);
  EXPECT_GT(resolved->pingpong_blocks, 0u);
  EXPECT_LE(resolved->gpu_bytes(), resolved->gpu_kv_budget_bytes);
}

TEST(KvConfigTest, BudgetTooSmallIsResourceExhaustedWithNumbers) {
  // 64 sequences of D-window alone (1.5 GiB) plus 2 x 1024 blocks (1 GiB) > 2 GiB.
  auto status =
      ResolveKvCacheConfig({.geometry = Qwen3(), .max_sequences = 64, .pingpong_blocks = 1024})
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("64 sequences x 256 tokens x 98304 B"));
  EXPECT_THAT(status.message(), HasSubstr("1024 layer-blocks x 524288 B"));
  // Nothing left for even one ping-pong block.
  status = ResolveKvCacheConfig({.geometry = Qwen3(), .max_sequences = 90}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("no room for two ping-pong buffers"));
}

TEST(KvConfigTest, BadGeometryIsInvalidArgument) {
  KvGeometry g = Qwen3();
  g.block_tokens = 96;  // 256 is not a multiple of 96
  auto status = ResolveKvCacheConfig({.geometry = g}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("W=256 must be a multiple of the block size 96"));
  g = Qwen3();
  g.num_kv_heads = 0;
  EXPECT_EQ(ResolveKvCacheConfig({.geometry = g}).status().code(),
            absl::StatusCode::kInvalidArgument);
  g = Qwen3();
  g.num_layers = 0;
  EXPECT_EQ(ResolveKvCacheConfig({.geometry = g}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveKvCacheConfig({.geometry = Qwen3(), .max_sequences = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveKvCacheConfig({.geometry = Qwen3(), .window_tokens = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KvConfigTest, BlockSmallerThanWindow) {
  KvGeometry g = Qwen3();
  g.block_tokens = 64;
  auto resolved = ResolveKvCacheConfig({.geometry = g, .window_tokens = 256});
  WS_ASSERT_OK(resolved.status());
  EXPECT_EQ(resolved->blocks_per_window(), 4u);
}

}  // namespace
}  // namespace writescope
