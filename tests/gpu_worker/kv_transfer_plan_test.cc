#include "gpu_worker/kv_transfer_plan.h"

#include <random>
#include <vector>

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

TEST(TransferPlanTest, NoPingPongRoomIsRefusedNotLoopedOn) {
  KvCacheConfig config = Config(4);
  config.pingpong_blocks = 0;  // as no resolved config has it
  const std::vector<StepSequence> batch = {
      {.window_slot = 0, .window_tokens = 1, .blocks = {T(4)}}};
  EXPECT_EQ(BuildTransferPlan(config, batch).status().code(), absl::StatusCode::kInvalidArgument);
  // Nothing to stream: an empty plan, as before.
  const std::vector<StepSequence> cpu_only = {
      {.window_slot = 0, .window_tokens = 1, .blocks = {C(0)}}};
  const absl::StatusOr<TransferPlan> empty = BuildTransferPlan(config, cpu_only);
  WS_ASSERT_OK(empty.status());
  EXPECT_TRUE(empty->chunks.empty());
}

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

TransferRun Piece(KvRegion region, uint32_t first_slot, uint32_t blocks, uint32_t pingpong) {
  return {.first_slot = first_slot, .num_blocks = blocks, .pingpong_block = pingpong,
          .region = region};
}

// MissingRuns, block by block: a wanted block is covered when some copied run puts its
// slot at its position; the uncovered ones, in the order of the wanted runs, joined where
// consecutive within one run.
std::vector<TransferRun> MissingRunsReference(absl::Span<const TransferRun> copied,
                                              absl::Span<const TransferRun> wanted) {
  std::vector<TransferRun> out;
  for (const TransferRun& w : wanted) {
    bool open = false;
    for (uint32_t i = 0; i < w.num_blocks; ++i) {
      const uint32_t slot = w.first_slot + i, position = w.pingpong_block + i;
      bool covered = false;
      for (const TransferRun& c : copied) {
        covered |= c.region == w.region && slot >= c.first_slot &&
                   slot - c.first_slot < c.num_blocks &&
                   c.pingpong_block + (slot - c.first_slot) == position;
      }
      if (covered) {
        open = false;
      } else if (open) {
        ++out.back().num_blocks;
      } else {
        out.push_back(Piece(w.region, slot, 1, position));
        open = true;
      }
    }
  }
  return out;
}

TEST(MissingRunsTest, NamedCases) {
  const KvRegion t = KvRegion::kGpuTransfer, c = KvRegion::kCpuCompute;
  const std::vector<TransferRun> split = {Piece(t, 0, 4, 0), Piece(t, 8, 2, 4)};
  // The same runs, and a superset (the GPU-only step's round after a split step's).
  EXPECT_TRUE(MissingRuns(split, split).empty());
  const std::vector<TransferRun> gpu_only = {Piece(t, 0, 4, 0), Piece(t, 8, 2, 4), Piece(c, 3, 5, 6)};
  EXPECT_EQ(MissingRuns(split, gpu_only), std::vector<TransferRun>({Piece(c, 3, 5, 6)}));
  EXPECT_TRUE(MissingRuns(gpu_only, split).empty());
  // Nothing copied; another region; the same slots at other positions.
  EXPECT_EQ(MissingRuns({}, split), split);
  EXPECT_EQ(MissingRuns({Piece(c, 0, 4, 0)}, {Piece(t, 0, 4, 0)}),
            std::vector<TransferRun>({Piece(t, 0, 4, 0)}));
  EXPECT_EQ(MissingRuns({Piece(t, 0, 4, 1)}, {Piece(t, 0, 4, 0)}),
            std::vector<TransferRun>({Piece(t, 0, 4, 0)}));
  // A hole in the middle of a wanted run, and both ends.
  EXPECT_EQ(MissingRuns({Piece(t, 2, 2, 2)}, {Piece(t, 0, 6, 0)}),
            std::vector<TransferRun>({Piece(t, 0, 2, 0), Piece(t, 4, 2, 4)}));
  EXPECT_EQ(MissingRuns({Piece(t, 0, 1, 0), Piece(t, 5, 1, 5)}, {Piece(t, 0, 6, 0)}),
            std::vector<TransferRun>({Piece(t, 1, 4, 1)}));
}

// Random copied / wanted round pairs, as two plans' rounds make them (each slot copied at
// most once per round, positions anywhere), against the block-by-block reference.
TEST(MissingRunsTest, MatchesTheBlockByBlockReference) {
  std::mt19937 rng(5);
  int partial = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const auto round = [&](int max_runs) {
      std::vector<TransferRun> runs;
      std::vector<bool> used(2 * 40, false);
      const int n = std::uniform_int_distribution<int>(0, max_runs)(rng);
      uint32_t position = std::uniform_int_distribution<uint32_t>(0, 3)(rng);
      for (int i = 0; i < n; ++i) {
        const KvRegion region = rng() % 3 == 0 ? KvRegion::kCpuCompute : KvRegion::kGpuTransfer;
        const uint32_t first = std::uniform_int_distribution<uint32_t>(0, 35)(rng);
        const uint32_t len = std::uniform_int_distribution<uint32_t>(1, 5)(rng);
        bool free = true;
        for (uint32_t s = first; s < first + len; ++s) {
          free &= !used[static_cast<int>(region) * 40 + s];
        }
        if (!free) continue;
        for (uint32_t s = first; s < first + len; ++s) used[static_cast<int>(region) * 40 + s] = true;
        runs.push_back(Piece(region, first, len, position));
        position += len + (rng() % 4 == 0 ? 1 : 0);
      }
      return runs;
    };
    std::vector<TransferRun> copied = round(6), wanted = round(6);
    if (trial % 3 == 0 && !copied.empty()) wanted.insert(wanted.begin(), copied.begin(), copied.end() - 1);
    // Wanted runs of one round never overlap in slots: drop the later of an overlapping pair.
    std::vector<TransferRun> clean;
    for (const TransferRun& w : wanted) {
      bool overlaps = false;
      for (const TransferRun& k : clean) {
        overlaps |= k.region == w.region && w.first_slot < k.first_slot + k.num_blocks &&
                    k.first_slot < w.first_slot + w.num_blocks;
      }
      if (!overlaps) clean.push_back(w);
    }
    const std::vector<TransferRun> expected = MissingRunsReference(copied, clean);
    ASSERT_EQ(MissingRuns(copied, clean), expected) << "trial " << trial;
    uint64_t wanted_blocks = 0, missing_blocks = 0;
    for (const TransferRun& w : clean) wanted_blocks += w.num_blocks;
    for (const TransferRun& m : expected) missing_blocks += m.num_blocks;
    partial += missing_blocks > 0 && missing_blocks < wanted_blocks ? 1 : 0;
  }
  EXPECT_GT(partial, 300) << "too few rounds were partly covered to test the interesting case";
}

}  // namespace
}  // namespace writescope::gpu
