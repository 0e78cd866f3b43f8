#include "gpu_worker/kv_transfer_plan.h"

#include "gtest/gtest.h"
#include "tests/common/test_util.h"
#include "tests/gpu_worker/kv_test_util.h"

namespace writescope::gpu {
namespace {

KvCacheConfig Config(uint32_t pingpong_blocks) {
  KvCacheConfig config;
  config.geometry = testing::SmallGqa(4);
  config.window_tokens = 4;
  config.cpu_compute_bytes = 16 * config.geometry.block_bytes();
  config.gpu_transfer_bytes = 32 * config.geometry.block_bytes();
  config.gpu_kv_budget_bytes = 1 << 20;
  config.max_sequences = 4;
  config.pingpong_blocks = pingpong_blocks;
  auto resolved = ResolveKvCacheConfig(config);
  EXPECT_TRUE(resolved.ok()) << resolved.status();
  return *resolved;
}

KvBlockRef T(uint32_t slot) { return {KvRegion::kGpuTransfer, slot}; }
KvBlockRef C(uint32_t slot) { return {KvRegion::kCpuCompute, slot}; }

TEST(TransferPlanTest, CoalescesConsecutiveSlotsAcrossSequencesAndSkipsCpuBlocks) {
  const std::vector<StepSequence> batch = {
      {.window_slot = 0, .window_tokens = 1, .blocks = {T(4), C(0), T(5), T(6)}},
      {.window_slot = 1, .window_tokens = 2, .blocks = {T(7), T(9), C(1)}},
      {.window_slot = 2, .window_tokens = 0, .blocks = {T(0)}},
  };
  auto plan = BuildTransferPlan(Config(100), batch);
  WS_ASSERT_OK(plan.status());
  ASSERT_EQ(plan->chunks.size(), 1u);
  const TransferChunk& chunk = plan->chunks[0];
  EXPECT_EQ(chunk.num_blocks, 6u);
  // Slots 0 | 4 5 6 7 | 9: three copies per layer.
  ASSERT_EQ(chunk.runs.size(), 3u);
  EXPECT_EQ(chunk.runs[0].first_slot, 0u);
  EXPECT_EQ(chunk.runs[0].num_blocks, 1u);
  EXPECT_EQ(chunk.runs[1].first_slot, 4u);
  EXPECT_EQ(chunk.runs[1].num_blocks, 4u);
  EXPECT_EQ(chunk.runs[1].pingpong_block, 1u);
  EXPECT_EQ(chunk.runs[2].first_slot, 9u);
  EXPECT_EQ(chunk.runs[2].pingpong_block, 5u);
  EXPECT_EQ(plan->copies_per_layer(), 3u);
  EXPECT_EQ(plan->num_rounds(), 3u);  // 3 layers x 1 chunk
  // Entries by (sequence, block): sequence 0's block 2 (slot 5) is at position 2.
  ASSERT_EQ(chunk.entries.size(), 6u);
  EXPECT_EQ(chunk.entries[1].sequence_index, 0u);
  EXPECT_EQ(chunk.entries[1].block_index, 2u);
  EXPECT_EQ(chunk.entries[1].pingpong_block, 2u);
  EXPECT_EQ(chunk.entries[5].sequence_index, 2u);
  EXPECT_EQ(chunk.entries[5].pingpong_block, 0u);
}

// A step that also streams CPU-compute blocks keeps the first chunks of the step that does
// not (the transfer blocks sort first): a writescope step that hands CPU blocks to the GPU,
// or returns from one, can take the other's early rounds.
TEST(TransferPlanTest, ReadingCpuBlocksTooKeepsTheFirstChunks) {
  std::vector<StepSequence> batch = {
      {.window_slot = 0, .blocks = {C(0), T(0), C(1), T(1), T(2)}},
      {.window_slot = 1, .blocks = {T(3), C(2), T(4), T(5), C(3)}},
  };
  auto split = BuildTransferPlan(Config(4), batch);
  WS_ASSERT_OK(split.status());
  for (StepSequence& s : batch) s.read_cpu_blocks = true;
  auto gpu_only = BuildTransferPlan(Config(4), batch);
  WS_ASSERT_OK(gpu_only.status());
  ASSERT_EQ(split->chunks.size(), 2u);     // transfer 0-3 | 4-5
  ASSERT_EQ(gpu_only->chunks.size(), 3u);  // transfer 0-3 | 4-5, cpu 0-1 | cpu 2-3
  EXPECT_EQ(gpu_only->chunks[0].runs, split->chunks[0].runs);
  EXPECT_EQ(gpu_only->chunks[0].num_blocks, 4u);
  // The second chunk starts alike and goes on with CPU blocks: its runs differ.
  EXPECT_EQ(gpu_only->chunks[1].runs[0], split->chunks[1].runs[0]);
  EXPECT_NE(gpu_only->chunks[1].runs, split->chunks[1].runs);
}

TEST(TransferPlanTest, ReadsCpuBlocksOfTheSequencesThatAskAndNeverMergesRegions) {
  // Sequence 0 (a prefill chunk attended whole on the GPU) streams its CPU blocks too;
  // sequence 1 leaves its CPU block to the cpu_worker. Transfer slot 3 and CPU slot 4 are
  // "consecutive" numbers but different regions: two runs.
  const std::vector<StepSequence> batch = {
      {.window_slot = 0, .blocks = {C(2), T(3), C(3), C(4)}, .read_cpu_blocks = true},
      {.window_slot = 1, .blocks = {C(5), T(4)}},
  };
  auto plan = BuildTransferPlan(Config(100), batch);
  WS_ASSERT_OK(plan.status());
  ASSERT_EQ(plan->chunks.size(), 1u);
  const TransferChunk& chunk = plan->chunks[0];
  EXPECT_EQ(chunk.num_blocks, 5u);
  // (transfer 3 4) | (cpu 2 3 4): the GPU-transfer region sorts first.
  ASSERT_EQ(chunk.runs.size(), 2u);
  EXPECT_EQ(chunk.runs[0].region, KvRegion::kGpuTransfer);
  EXPECT_EQ(chunk.runs[0].first_slot, 3u);
  EXPECT_EQ(chunk.runs[0].num_blocks, 2u);
  EXPECT_EQ(chunk.runs[0].pingpong_block, 0u);
  EXPECT_EQ(chunk.runs[1].region, KvRegion::kCpuCompute);
  EXPECT_EQ(chunk.runs[1].first_slot, 2u);
  EXPECT_EQ(chunk.runs[1].num_blocks, 3u);
  EXPECT_EQ(chunk.runs[1].pingpong_block, 2u);
  // Sequence 0's blocks 0..3 sit at positions 2, 0, 3, 4; sequence 1's block 1 at 1.
  ASSERT_EQ(chunk.entries.size(), 5u);
  const uint32_t want[] = {2, 0, 3, 4, 1};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(chunk.entries[i].pingpong_block, want[i]) << i;
  EXPECT_EQ(chunk.entries[4].sequence_index, 1u);
  EXPECT_EQ(chunk.entries[4].block_index, 1u);
  // The same CPU slot named by two reading sequences is an error; a CPU slot out of range too.
  const std::vector<StepSequence> twice = {
      {.window_slot = 0, .blocks = {C(1)}, .read_cpu_blocks = true},
      {.window_slot = 1, .blocks = {C(1)}, .read_cpu_blocks = true},
  };
  EXPECT_EQ(BuildTransferPlan(Config(100), twice).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<StepSequence> outside = {
      {.window_slot = 0, .blocks = {C(16)}, .read_cpu_blocks = true}};
  EXPECT_EQ(BuildTransferPlan(Config(100), outside).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TransferPlanTest, SplitsIntoChunksOfThePingPongCapacity) {
  std::vector<StepSequence> batch(1);
  for (uint32_t s = 0; s < 10; ++s) batch[0].blocks.push_back(T(s));
  auto plan = BuildTransferPlan(Config(4), batch);
  WS_ASSERT_OK(plan.status());
  ASSERT_EQ(plan->chunks.size(), 3u);  // 4 + 4 + 2
  EXPECT_EQ(plan->chunks[2].num_blocks, 2u);
  EXPECT_EQ(plan->chunks[1].runs[0].first_slot, 4u);
  EXPECT_EQ(plan->chunks[1].runs[0].pingpong_block, 0u);
  EXPECT_EQ(plan->num_rounds(), 9u);
  EXPECT_EQ(plan->layer_of_round(4), 1u);
  EXPECT_EQ(plan->chunk_of_round(4), 1u);
  EXPECT_EQ(plan->blocks_per_layer(), 10u);
}

TEST(TransferPlanTest, EmptyAndInvalid) {
  auto empty = BuildTransferPlan(Config(4), {{.blocks = {C(1)}}});
  WS_ASSERT_OK(empty.status());
  EXPECT_EQ(empty->num_rounds(), 0u);
  EXPECT_EQ(BuildTransferPlan(Config(4), {{.blocks = {T(32)}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildTransferPlan(Config(4), {{.blocks = {T(3)}}, {.blocks = {T(3)}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace writescope::gpu
