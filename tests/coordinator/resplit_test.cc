#include "coordinator/resplit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "common/data_plane.h"
#include "common/kv_layout.h"
#include "common/log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/test_util.h"
#include "tests/gpu_worker/kv_test_util.h"

namespace writescope::coordinator {
namespace {

using ::testing::HasSubstr;

// 4-token blocks, 3 layers; `cpu` and `transfer` slots.
KvCacheConfig Config(uint32_t cpu, uint32_t transfer) {
  KvCacheConfig config;
  config.geometry = testing::SmallGqa(4);
  config.window_tokens = 8;
  config.cpu_compute_bytes = cpu * config.geometry.block_bytes();
  config.gpu_transfer_bytes = transfer * config.geometry.block_bytes();
  config.max_sequences = 4;
  config.gpu_kv_budget_bytes = 1 << 20;
  absl::StatusOr<KvCacheConfig> resolved = ResolveKvCacheConfig(config);
  WS_CHECK(resolved.ok()) << resolved.status();
  return *resolved;
}

// Places sequence `id` with `blocks` blocks, the first `cpu` of them in the CPU region.
void Place(KvPlacement& placement, SequenceId id, uint64_t blocks, uint64_t cpu) {
  WS_ASSERT_OK(placement.Admit(id));
  WS_ASSERT_OK(placement
                   .PlanPrefill(id, blocks * 4,
                                [&](const PlacementRequest& r) {
                                  return r.block_index < cpu ? KvRegion::kCpuCompute
                                                             : KvRegion::kGpuTransfer;
                                })
                   .status());
}

uint64_t CpuBlocks(const KvPlacement& placement, SequenceId id) {
  uint64_t cpu = 0;
  for (const PlacedBlock& b : placement.Find(id)->blocks) cpu += b.ref.region == KvRegion::kCpuCompute;
  return cpu;
}

// Applies the plan with a copier that only records.
ResplitStats Apply(KvPlacement& placement, double target,
                   std::vector<std::pair<KvBlockRef, KvBlockRef>>* copies = nullptr) {
  const std::vector<BlockMove> moves = PlanResplit(placement, placement.LiveSequences(), target);
  absl::StatusOr<ResplitStats> stats =
      ApplyResplit(placement, moves, [&](absl::Span<const BlockCopy> batch) {
        for (const BlockCopy& c : batch) {
          if (copies != nullptr) copies->push_back({c.from, c.to});
        }
        return absl::OkStatus();
      });
  WS_CHECK(stats.ok()) << stats.status();
  return *stats;
}

TEST(ResplitTest, EverySequenceLandsWithinABlockOfTheTargetAndTheBatchOnIt) {
  for (const double target : {0.0, 0.1, 0.25, 1.0 / 3, 0.5, 0.77, 0.9, 1.0}) {
    for (const uint64_t start_cpu : {0u, 3u, 7u}) {
      std::unique_ptr<KvPlacement> placement = *KvPlacement::Create(Config(40, 40));
      // Odd sizes: 7, 1, 5 and 9 blocks (22 in all), the first start_cpu (at most all) on the CPU.
      const uint64_t sizes[] = {7, 1, 5, 9};
      for (SequenceId id = 1; id <= 4; ++id) {
        ASSERT_NO_FATAL_FAILURE(Place(*placement, id, sizes[id - 1],
                                      std::min<uint64_t>(start_cpu, sizes[id - 1])));
      }
      const ResplitStats stats = Apply(*placement, target);
      uint64_t cpu = 0;
      for (SequenceId id = 1; id <= 4; ++id) {
        const double share = static_cast<double>(CpuBlocks(*placement, id));
        EXPECT_LE(std::abs(share - target * static_cast<double>(sizes[id - 1])), 1.0)
            << "target " << target << " sequence " << id;
        cpu += CpuBlocks(*placement, id);
      }
      EXPECT_EQ(cpu, static_cast<uint64_t>(std::llround(target * 22))) << "target " << target;
      EXPECT_EQ(stats.skipped, 0u);
      EXPECT_EQ(stats.bytes, stats.blocks * placement->config().geometry.block_bytes());
      // Once there, a second re-split to the same target moves nothing.
      EXPECT_TRUE(PlanResplit(*placement, placement->LiveSequences(), target).empty()) << "target " << target;
    }
  }
}

// The batch's CPU blocks are round(target x all its blocks) from the whole count, not from a
// running sum of each sequence's share: 0.7 x 2 + 0.7 x 3 sums to 3.4999999999999996 in
// doubles, which rounded to 3 where 0.7 x 5 rounds to 4; 0.3 and 0.1 over these sizes
// likewise.
TEST(ResplitTest, TheBatchRoundsFromItsWholeCount) {
  const std::vector<std::pair<double, std::vector<uint64_t>>> cases = {
      {0.7, {2, 3}}, {0.3, {1, 1, 23}}, {0.1, {3, 20, 3, 9}}};
  for (const auto& [target, sizes] : cases) {
    std::unique_ptr<KvPlacement> placement = *KvPlacement::Create(Config(120, 120));
    uint64_t total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_NO_FATAL_FAILURE(Place(*placement, i + 1, sizes[i], 0));
      total += sizes[i];
    }
    Apply(*placement, target);
    uint64_t cpu = 0;
    for (size_t i = 0; i < sizes.size(); ++i) cpu += CpuBlocks(*placement, i + 1);
    EXPECT_EQ(cpu, static_cast<uint64_t>(std::llround(target * static_cast<double>(total))))
        << "target " << target << ", " << sizes.size() << " sequences";
  }
}

TEST(ResplitTest, SequencesOutsideTheListNeverMove) {
  // The engine passes its own sequences: one placed beside them (the self test's) keeps
  // every block where it is, and an id that is not placed is passed over.
  std::unique_ptr<KvPlacement> placement = *KvPlacement::Create(Config(40, 40));
  ASSERT_NO_FATAL_FAILURE(Place(*placement, 1, 8, 0));
  ASSERT_NO_FATAL_FAILURE(Place(*placement, 2, 8, 0));
  const std::vector<BlockMove> plan = PlanResplit(*placement, {1, 1, 99}, 0.5);
  ASSERT_EQ(plan.size(), 4u);
  for (const BlockMove& move : plan) EXPECT_EQ(move.sequence, 1u);
  absl::StatusOr<ResplitStats> stats =
      ApplyResplit(*placement, plan, [](absl::Span<const BlockCopy>) { return absl::OkStatus(); });
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(CpuBlocks(*placement, 1), 4u);
  EXPECT_EQ(CpuBlocks(*placement, 2), 0u);
}

TEST(ResplitTest, MovesOnlyWhatChangesSidesNewestFirst) {
  std::unique_ptr<KvPlacement> placement = *KvPlacement::Create(Config(40, 40));
  ASSERT_NO_FATAL_FAILURE(Place(*placement, 1, 8, 4));  // CPU 0-3, transfer 4-7
  std::vector<std::pair<KvBlockRef, KvBlockRef>> copies;
  // 0.25: two of the four CPU blocks go, the newest (3, then 2).
  const std::vector<BlockMove> plan = PlanResplit(*placement, placement->LiveSequences(), 0.25);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0], (BlockMove{.sequence = 1, .index = 3, .to = KvRegion::kGpuTransfer}));
  EXPECT_EQ(plan[1], (BlockMove{.sequence = 1, .index = 2, .to = KvRegion::kGpuTransfer}));
  const ResplitStats stats = Apply(*placement, 0.25, &copies);
  EXPECT_EQ(stats.blocks, 2u);
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].first, (KvBlockRef{KvRegion::kCpuCompute, 3}));
  EXPECT_EQ(copies[0].second, (KvBlockRef{KvRegion::kGpuTransfer, 4}));
  EXPECT_EQ(placement->Find(1)->blocks[3].ref, copies[0].second);
  EXPECT_EQ(placement->Find(1)->blocks[2].ref, copies[1].second);
  // Up again to 0.75: six CPU blocks, the newest transfer blocks come back.
  copies.clear();
  Apply(*placement, 0.75, &copies);
  EXPECT_EQ(CpuBlocks(*placement, 1), 6u);
  EXPECT_EQ(copies.size(), 4u);
  for (const auto& [from, to] : copies) {
    EXPECT_EQ(from.region, KvRegion::kGpuTransfer);
    EXPECT_EQ(to.region, KvRegion::kCpuCompute);
  }
  EXPECT_EQ(placement->Find(1)->blocks[0].ref.region, KvRegion::kCpuCompute);
  EXPECT_EQ(placement->Find(1)->blocks[7].ref.region, KvRegion::kCpuCompute);
}

TEST(ResplitTest, NanMovesNothingAndSharesOutsideAreClamped) {
  std::unique_ptr<KvPlacement> placement = *KvPlacement::Create(Config(40, 40));
  ASSERT_NO_FATAL_FAILURE(Place(*placement, 1, 6, 3));
  EXPECT_TRUE(PlanResplit(*placement, placement->LiveSequences(), std::numeric_limits<double>::quiet_NaN()).empty());
  EXPECT_EQ(PlanResplit(*placement, placement->LiveSequences(), -2.0).size(), 3u);
  EXPECT_EQ(PlanResplit(*placement, placement->LiveSequences(), 7.0).size(), 3u);
  // An empty placement, and sequences without blocks, need nothing.
  std::unique_ptr<KvPlacement> empty = *KvPlacement::Create(Config(4, 4));
  EXPECT_TRUE(PlanResplit(*empty, empty->LiveSequences(), 0.5).empty());
  WS_ASSERT_OK(empty->Admit(3));
  EXPECT_TRUE(PlanResplit(*empty, empty->LiveSequences(), 0.5).empty());
}

// Every block's ref, in sequence and block order.
std::vector<KvBlockRef> Refs(const KvPlacement& placement) {
  std::vector<KvBlockRef> refs;
  for (const SequenceId id : placement.LiveSequences()) {
    for (const PlacedBlock& b : placement.Find(id)->blocks) refs.push_back(b.ref);
  }
  return refs;
}

TEST(ResplitTest, AFullRegionSkipsMovesAndAFailedCopyIsUndone) {
  // Two transfer slots: of four CPU blocks bound for it, two move and two are skipped.
  std::unique_ptr<KvPlacement> placement = *KvPlacement::Create(Config(8, 2));
  ASSERT_NO_FATAL_FAILURE(Place(*placement, 1, 4, 4));
  const ResplitStats stats = Apply(*placement, 0.0);
  EXPECT_EQ(stats.blocks, 2u);
  EXPECT_EQ(stats.skipped, 2u);
  EXPECT_EQ(CpuBlocks(*placement, 1), 2u);
  // A copier's error ends the re-split, and the group it failed on is undone in the
  // metadata: every block is where it was (its bytes were never moved away), its slot taken,
  // the slots the moves had taken free again; the group after it did not run.
  std::unique_ptr<KvPlacement> other = *KvPlacement::Create(Config(8, 8));
  ASSERT_NO_FATAL_FAILURE(Place(*other, 1, 4, 2));   // 2 CPU blocks of 4: 0.75 moves 1 up
  ASSERT_NO_FATAL_FAILURE(Place(*other, 2, 4, 4));   // 4 of 4: 0.75 moves 1 down
  const std::vector<KvBlockRef> before = Refs(*other);
  const RegionUsage cpu_before = other->Usage(KvRegion::kCpuCompute);
  const RegionUsage transfer_before = other->Usage(KvRegion::kGpuTransfer);
  int calls = 0;
  const absl::StatusOr<ResplitStats> failed =
      ApplyResplit(*other, PlanResplit(*other, other->LiveSequences(), 0.75), [&](absl::Span<const BlockCopy> batch) {
        ++calls;
        EXPECT_EQ(batch.size(), 1u);
        return absl::DataLossError("injected");
      });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(Refs(*other), before);
  EXPECT_EQ(other->Usage(KvRegion::kCpuCompute).used_blocks, cpu_before.used_blocks);
  EXPECT_EQ(other->Usage(KvRegion::kGpuTransfer).used_blocks, transfer_before.used_blocks);
  // The undone moves can run again: a working copier brings the batch to its target.
  const ResplitStats again = Apply(*other, 0.75);
  EXPECT_EQ(again.blocks, 2u);
  EXPECT_EQ(CpuBlocks(*other, 1) + CpuBlocks(*other, 2), 6u);
  // A move naming no block is refused.
  const std::vector<BlockMove> bad = {{.sequence = 9, .index = 0, .to = KvRegion::kCpuCompute}};
  EXPECT_EQ(ApplyResplit(*other, bad, [](absl::Span<const BlockCopy>) { return absl::OkStatus(); })
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

// A move into a region that is full at its group's turn runs in a second pass, once the
// other group has freed a slot there: sequence 1's two transfer blocks and sequence 2's two
// CPU blocks at 0.5 with two transfer slots (both taken) move one each way.
TEST(ResplitTest, AMoveIntoAFullRegionWaitsForTheOtherGroup) {
  std::unique_ptr<KvPlacement> placement = *KvPlacement::Create(Config(8, 2));
  ASSERT_NO_FATAL_FAILURE(Place(*placement, 1, 2, 0));  // transfer 0-1: the region is full
  ASSERT_NO_FATAL_FAILURE(Place(*placement, 2, 2, 2));  // CPU 0-1
  std::vector<std::pair<KvBlockRef, KvBlockRef>> copies;
  const ResplitStats stats = Apply(*placement, 0.5, &copies);
  EXPECT_EQ(stats.blocks, 2u);
  EXPECT_EQ(stats.skipped, 0u);
  EXPECT_EQ(CpuBlocks(*placement, 1), 1u);
  EXPECT_EQ(CpuBlocks(*placement, 2), 1u);
  // The move to the CPU region went first (its group's turn came second in the first pass,
  // after the transfer region had refused), then the one into the slot it freed.
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].second.region, KvRegion::kCpuCompute);
  EXPECT_EQ(copies[1].second, copies[0].first);
  EXPECT_TRUE(PlanResplit(*placement, placement->LiveSequences(), 0.5).empty());
}

// Moves both ways in one re-split: the slots the first group frees may be the second's
// destinations, and each group's copies are made before the next group allocates.
TEST(ResplitTest, GroupsAreCopiedBeforeTheNextAllocates) {
  std::unique_ptr<KvPlacement> placement = *KvPlacement::Create(Config(4, 4));
  ASSERT_NO_FATAL_FAILURE(Place(*placement, 1, 2, 0));  // transfer 0-1
  ASSERT_NO_FATAL_FAILURE(Place(*placement, 2, 4, 4));  // CPU 0-3: the CPU region is full
  std::vector<std::vector<BlockCopy>> batches;
  const absl::StatusOr<ResplitStats> stats = ApplyResplit(
      *placement, PlanResplit(*placement, placement->LiveSequences(), 0.5), [&](absl::Span<const BlockCopy> batch) {
        batches.emplace_back(batch.begin(), batch.end());
        return absl::OkStatus();
      });
  WS_ASSERT_OK(stats.status());
  // Sequence 2 sends two CPU blocks down, which frees the CPU slots sequence 1's one block
  // up takes.
  EXPECT_EQ(stats->blocks, 3u);
  EXPECT_EQ(stats->skipped, 0u);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].size(), 2u);
  ASSERT_EQ(batches[1].size(), 1u);
  EXPECT_EQ(batches[1][0].to.region, KvRegion::kCpuCompute);
  EXPECT_TRUE(batches[1][0].to == batches[0][0].from || batches[1][0].to == batches[0][1].from);
}

// An arena laid out for `config`: its CPU region filled with `byte_of(i)`, its transfer
// region with zeros.
struct FilledArena {
  std::unique_ptr<ShmArena> arena;
  absl::Span<std::byte> cpu, transfer;
};
FilledArena MakeArena(const KvCacheConfig& config, const std::string& tag,
                      std::byte (*byte_of)(size_t)) {
  absl::StatusOr<std::unique_ptr<ShmArena>> arena =
      ShmArena::Create(testing::UniqueArenaName(tag), ArenaRegions(config.arena_sizes()));
  WS_CHECK(arena.ok()) << arena.status();
  FilledArena out;
  out.arena = *std::move(arena);
  out.cpu = *out.arena->Region(kCpuComputeRegion);
  out.transfer = *out.arena->Region(kGpuTransferRegion);
  for (size_t i = 0; i < out.cpu.size(); ++i) out.cpu[i] = byte_of(i);
  std::fill(out.transfer.begin(), out.transfer.end(), std::byte{0});
  return out;
}

TEST(CopyKvBlockTest, CopiesEveryLayerAndNothingElse) {
  const KvCacheConfig config = Config(5, 3);
  FilledArena filled =
      MakeArena(config, "resplit", [](size_t i) { return static_cast<std::byte>(i * 7 + 1); });
  std::unique_ptr<ShmArena>& arena = filled.arena;
  absl::Span<std::byte> cpu = filled.cpu;
  absl::Span<std::byte> transfer = filled.transfer;
  const std::vector<std::byte> cpu_before(cpu.begin(), cpu.end());
  const KvGeometry& g = config.geometry;
  const BlockCopy first[] = {{{KvRegion::kCpuCompute, 4}, {KvRegion::kGpuTransfer, 1}}};
  WS_ASSERT_OK(CopyKvBlocks(*arena, config, first, 3));
  const uint64_t lbb = g.layer_block_bytes();
  uint64_t copied = 0;
  for (uint32_t layer = 0; layer < g.num_layers; ++layer) {
    const std::byte* src = cpu.data() + RegionBlockOffset(g, 5, 4, layer);
    const std::byte* dst = transfer.data() + RegionBlockOffset(g, 3, 1, layer);
    EXPECT_EQ(std::memcmp(src, dst, lbb), 0) << "layer " << layer;
    copied += lbb;
  }
  // Every other transfer byte is untouched, and the source unchanged.
  uint64_t nonzero = 0;
  for (const std::byte b : transfer) nonzero += b != std::byte{0};
  EXPECT_LE(nonzero, copied);
  EXPECT_GT(nonzero, copied / 2);
  EXPECT_TRUE(std::equal(cpu.begin(), cpu.end(), cpu_before.begin()));
  // The other way, within one region's neighbours.
  const BlockCopy back[] = {{{KvRegion::kGpuTransfer, 1}, {KvRegion::kCpuCompute, 0}}};
  WS_ASSERT_OK(CopyKvBlocks(*arena, config, back, 1));
  for (uint32_t layer = 0; layer < g.num_layers; ++layer) {
    EXPECT_EQ(std::memcmp(cpu.data() + RegionBlockOffset(g, 5, 0, layer),
                          cpu.data() + RegionBlockOffset(g, 5, 4, layer), lbb),
              0);
    EXPECT_EQ(std::memcmp(cpu.data() + RegionBlockOffset(g, 5, 1, layer),
                          cpu_before.data() + RegionBlockOffset(g, 5, 1, layer), lbb),
              0);
  }
  const auto copy = [&](KvBlockRef from, KvBlockRef to) {
    const BlockCopy one[] = {{from, to}};
    return CopyKvBlocks(*arena, config, one, 2);
  };
  const absl::Status outside = copy({KvRegion::kCpuCompute, 5}, {KvRegion::kGpuTransfer, 0});
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.message(), HasSubstr("slot 5 outside the cpu_compute region's 5 slots"));
  EXPECT_EQ(copy({KvRegion::kGpuTransfer, 3}, {KvRegion::kCpuCompute, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(copy({KvRegion::kCpuCompute, 1}, {KvRegion::kCpuCompute, 1}).code(),
            absl::StatusCode::kInvalidArgument);
  // A batch with one bad copy makes none.
  const std::vector<std::byte> cpu_now(cpu.begin(), cpu.end());
  const BlockCopy mixed[] = {{{KvRegion::kCpuCompute, 2}, {KvRegion::kCpuCompute, 3}},
                             {{KvRegion::kCpuCompute, 0}, {KvRegion::kGpuTransfer, 9}}};
  EXPECT_EQ(CopyKvBlocks(*arena, config, mixed, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::equal(cpu.begin(), cpu.end(), cpu_now.begin()));
  WS_EXPECT_OK(CopyKvBlocks(*arena, config, {}, 4));  // nothing to copy
}

class CopyKvBlocksThreadsTest : public ::testing::TestWithParam<int> {};

TEST_P(CopyKvBlocksThreadsTest, EveryPieceLandsWhateverTheThreads) {
  const KvCacheConfig config = Config(12, 12);
  FilledArena filled = MakeArena(config, "resplit-threads",
                                 [](size_t i) { return static_cast<std::byte>((i * 131) >> 3); });
  std::unique_ptr<ShmArena>& arena = filled.arena;
  absl::Span<std::byte> cpu = filled.cpu;
  absl::Span<std::byte> transfer = filled.transfer;
  // 10 CPU blocks to transfer slots in another order (slot i -> 11 - i).
  std::vector<BlockCopy> copies;
  for (uint32_t i = 0; i < 10; ++i) {
    copies.push_back({{KvRegion::kCpuCompute, i}, {KvRegion::kGpuTransfer, 11 - i}});
  }
  WS_ASSERT_OK(CopyKvBlocks(*arena, config, copies, GetParam()));
  const KvGeometry& g = config.geometry;
  for (const BlockCopy& c : copies) {
    for (uint32_t layer = 0; layer < g.num_layers; ++layer) {
      EXPECT_EQ(std::memcmp(transfer.data() + RegionBlockOffset(g, 12, c.to.slot, layer),
                            cpu.data() + RegionBlockOffset(g, 12, c.from.slot, layer),
                            g.layer_block_bytes()),
                0)
          << "block " << c.from.slot << " layer " << layer;
    }
  }
  // The two transfer slots nobody copied to stay zero.
  for (const uint32_t slot : {0u, 1u}) {
    for (uint32_t layer = 0; layer < g.num_layers; ++layer) {
      const std::byte* p = transfer.data() + RegionBlockOffset(g, 12, slot, layer);
      EXPECT_TRUE(std::all_of(p, p + g.layer_block_bytes(), [](std::byte b) { return b == std::byte{0}; }));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CopyKvBlocksThreadsTest, ::testing::Values(0, 1, 2, 3, 7, 64));

TEST(ResplitCopyThreadsTest, HalfTheCoresOneToEight) {
  const int threads = ResplitCopyThreads();
  EXPECT_GE(threads, 1);
  EXPECT_LE(threads, 8);
}

}  // namespace
}  // namespace writescope::coordinator
