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
  // W is chosen (kAutoWindowTokens) before the block size follows it, so the resolved W is
  // never 0; a block size no candidate W divides leaves W at one block.
  g = Qwen3();
  g.block_tokens = 96;
  auto one_block = ResolveKvCacheConfig({.geometry = g, .window_tokens = kAutoWindowTokens});
  WS_ASSERT_OK(one_block.status());
  EXPECT_EQ(one_block->window_tokens, 96u);
}

// An MLA row's width is kv_lora_rank + rope_dim summed in 64 bits, as the sizes are: a
// geometry from the wire whose sum passes 2^32 is neither offset nor refused by a wrapped sum.
TEST(KvConfigTest, MlaRowWidthIsSummedIn64Bits) {
  KvGeometry g{.kind = AttentionKind::kMla,
               .num_layers = 1,
               .block_tokens = 16,
               .kv_lora_rank = 0xFFFFFFFFu,
               .rope_dim = 2};
  EXPECT_EQ(g.latent_offset(1), uint64_t{0xFFFFFFFF} + 2);
  EXPECT_EQ(g.latent_offset(3), 3 * (uint64_t{0xFFFFFFFF} + 2));
  EXPECT_EQ(g.values_per_token_layer(), uint64_t{0xFFFFFFFF} + 2);
  g.rope_dim = 1;  // the sum is 2^32: not "no width"
  const absl::Status status = ResolveKvCacheConfig({.geometry = g}).status();
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("kv_lora_rank + rope_dim > 0")));
}

// kAutoWindowTokens: the largest W of 256, 128, ..., 16 whose D-window takes at most half
// the GPU KV budget.
TEST(KvConfigTest, AutoWindowKeepsTwoFiftySixWhereItTakesAtMostHalf) {
  // Qwen3, 48 layers, 32 sequences: 32 x 256 x 96 KiB = 768 MiB, 37.5 % of 2 GiB.
  auto qwen3 = ResolveKvCacheConfig(
      {.geometry = Qwen3(), .window_tokens = kAutoWindowTokens, .max_sequences = 32});
  WS_ASSERT_OK(qwen3.status());
  EXPECT_EQ(qwen3->window_tokens, 256u);
  EXPECT_EQ(qwen3->block_tokens(), 256u);
  // DeepSeek-V2-Lite with the grid's 4 layers: 32 x 256 x 4 x 1152 B = 36 MiB of 0.3 GiB.
  KvGeometry four = DeepSeekV2Lite();
  four.num_layers = 4;
  auto deepseek4 = ResolveKvCacheConfig(
      {.geometry = four, .window_tokens = kAutoWindowTokens, .max_sequences = 32});
  WS_ASSERT_OK(deepseek4.status());
  EXPECT_EQ(deepseek4->window_tokens, 256u);
}

TEST(KvConfigTest, AutoWindowAtExactlyHalfKeepsTheWindow) {
  // Mixtral-8x7B, 32 layers, 8 KV heads, head_dim 128: 128 KiB per token; 32 sequences x
  // 256 tokens take 1 GiB, half of 2 GiB exactly; a 33rd sequence passes half.
  const KvGeometry mixtral{.kind = AttentionKind::kGqa,
                           .num_layers = 32,
                           .block_tokens = 0,
                           .num_kv_heads = 8,
                           .head_dim = 128};
  auto at_half = ResolveKvCacheConfig(
      {.geometry = mixtral, .window_tokens = kAutoWindowTokens, .max_sequences = 32});
  WS_ASSERT_OK(at_half.status());
  EXPECT_EQ(at_half->window_bytes(), uint64_t{1} << 30);
  EXPECT_EQ(at_half->window_tokens, 256u);
  auto past_half = ResolveKvCacheConfig(
      {.geometry = mixtral, .window_tokens = kAutoWindowTokens, .max_sequences = 33});
  WS_ASSERT_OK(past_half.status());
  EXPECT_EQ(past_half->window_tokens, 128u);
}

TEST(KvConfigTest, AutoWindowHalvesForTheFullDeepSeekAtBatch32) {
  // 27 layers x 1152 B x 32 sequences: W=256 takes 243 MiB, 79 % of the 307 MiB budget;
  // W=128 takes 121.5 MiB, 40 %. The ping-pong buffers get the rest.
  auto resolved = ResolveKvCacheConfig(
      {.geometry = DeepSeekV2Lite(), .window_tokens = kAutoWindowTokens, .max_sequences = 32});
  WS_ASSERT_OK(resolved.status());
  EXPECT_EQ(resolved->window_tokens, 128u);
  EXPECT_EQ(resolved->block_tokens(), 128u);
  EXPECT_LE(resolved->window_bytes(), resolved->gpu_kv_budget_bytes / 2);
  EXPECT_GT(2 * uint64_t{256} * resolved->geometry.bytes_per_token() * 32,
            resolved->gpu_kv_budget_bytes);
  EXPECT_THAT(resolved->DebugString(), HasSubstr("W=128"));
  EXPECT_THAT(resolved->DebugString(), HasSubstr("(40 % of the budget)"));
  // An explicit W is kept, whatever its share.
  auto explicit_w = ResolveKvCacheConfig(
      {.geometry = DeepSeekV2Lite(), .window_tokens = 256, .max_sequences = 32});
  WS_ASSERT_OK(explicit_w.status());
  EXPECT_EQ(explicit_w->window_tokens, 256u);
  EXPECT_LT(explicit_w->pingpong_blocks * explicit_w->block_tokens(),
            resolved->pingpong_blocks * resolved->block_tokens());
}

TEST(KvConfigTest, AutoWindowStaysAMultipleOfAGivenBlockSize) {
  // Qwen3 with 64-token blocks and 128 sequences: W=256 takes 3 GiB, 128 takes 1.5 GiB, 64
  // takes 768 MiB of the 2 GiB: 64.
  KvGeometry g = Qwen3();
  g.block_tokens = 64;
  auto resolved =
      ResolveKvCacheConfig({.geometry = g, .window_tokens = kAutoWindowTokens, .max_sequences = 128});
  WS_ASSERT_OK(resolved.status());
  EXPECT_EQ(resolved->window_tokens, 64u);
  EXPECT_EQ(resolved->blocks_per_window(), 1u);
  // 32-token blocks and 2000 sequences: nothing takes half (16 is not a multiple of 32, 32
  // tokens take 6 GiB): the smallest candidate, then the budget check refuses it.
  g.block_tokens = 32;
  auto status = ResolveKvCacheConfig(
                    {.geometry = g, .window_tokens = kAutoWindowTokens, .max_sequences = 2000})
                    .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("2000 sequences x 32 tokens"));
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
