#include "coordinator/resplit.h"

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
  const std::vector<BlockMove> moves = PlanResplit(placement, target);
  absl::StatusOr<ResplitStats> stats =
      ApplyResplit(placement, moves, [&](KvBlockRef from, KvBlockRef to) {
        if (copies != nullptr) copies->push_back({from, to});
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
      EXPECT_TRUE(PlanResplit(*placement, target).empty()) << "target " << target;
    }
  }
}

TEST(ResplitTest, MovesOnlyWhatChangesSidesNewestFirst) {
  std::unique_ptr<KvPlacement> placement = *KvPlacement::Create(Config(40, 40));
  ASSERT_NO_FATAL_FAILURE(Place(*placement, 1, 8, 4));  // CPU 0-3, transfer 4-7
  std::vector<std::pair<KvBlockRef, KvBlockRef>> copies;
  // 0.25: two of the four CPU blocks go, the newest (3, then 2).
  const std::vector<BlockMove> plan = PlanResplit(*placement, 0.25);
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
  EXPECT_TRUE(PlanResplit(*placement, std::numeric_limits<double>::quiet_NaN()).empty());
  EXPECT_EQ(PlanResplit(*placement, -2.0).size(), 3u);
  EXPECT_EQ(PlanResplit(*placement, 7.0).size(), 3u);
  // An empty placement, and sequences without blocks, need nothing.
  std::unique_ptr<KvPlacement> empty = *KvPlacement::Create(Config(4, 4));
  EXPECT_TRUE(PlanResplit(*empty, 0.5).empty());
  WS_ASSERT_OK(empty->Admit(3));
  EXPECT_TRUE(PlanResplit(*empty, 0.5).empty());
}

TEST(ResplitTest, AFullRegionSkipsMovesAndAFailedCopyStops) {
  // Two transfer slots: of four CPU blocks bound for it, two move and two are skipped.
  std::unique_ptr<KvPlacement> placement = *KvPlacement::Create(Config(8, 2));
  ASSERT_NO_FATAL_FAILURE(Place(*placement, 1, 4, 4));
  const ResplitStats stats = Apply(*placement, 0.0);
  EXPECT_EQ(stats.blocks, 2u);
  EXPECT_EQ(stats.skipped, 2u);
  EXPECT_EQ(CpuBlocks(*placement, 1), 2u);
  // A copier's error ends the re-split: the move it failed on is made in the metadata (its
  // old slot is free), the ones after it are not.
  std::unique_ptr<KvPlacement> other = *KvPlacement::Create(Config(8, 8));
  ASSERT_NO_FATAL_FAILURE(Place(*other, 1, 4, 4));
  int calls = 0;
  const absl::StatusOr<ResplitStats> failed =
      ApplyResplit(*other, PlanResplit(*other, 0.0), [&](KvBlockRef, KvBlockRef) {
        return ++calls == 2 ? absl::DataLossError("injected") : absl::OkStatus();
      });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(CpuBlocks(*other, 1), 2u);
  // A move naming no block is refused.
  const std::vector<BlockMove> bad = {{.sequence = 9, .index = 0, .to = KvRegion::kCpuCompute}};
  EXPECT_EQ(ApplyResplit(*other, bad, [](KvBlockRef, KvBlockRef) { return absl::OkStatus(); })
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST(CopyKvBlockTest, CopiesEveryLayerAndNothingElse) {
  const KvCacheConfig config = Config(5, 3);
  const std::string name = testing::UniqueArenaName("resplit");
  absl::StatusOr<std::unique_ptr<ShmArena>> arena =
      ShmArena::Create(name, ArenaRegions(config.arena_sizes()));
  WS_ASSERT_OK(arena.status());
  absl::Span<std::byte> cpu = *(*arena)->Region(kCpuComputeRegion);
  absl::Span<std::byte> transfer = *(*arena)->Region(kGpuTransferRegion);
  for (size_t i = 0; i < cpu.size(); ++i) cpu[i] = static_cast<std::byte>(i * 7 + 1);
  for (size_t i = 0; i < transfer.size(); ++i) transfer[i] = std::byte{0};
  const std::vector<std::byte> cpu_before(cpu.begin(), cpu.end());
  const KvGeometry& g = config.geometry;
  WS_ASSERT_OK(CopyKvBlock(**arena, config, {KvRegion::kCpuCompute, 4}, {KvRegion::kGpuTransfer, 1}));
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
  WS_ASSERT_OK(CopyKvBlock(**arena, config, {KvRegion::kGpuTransfer, 1}, {KvRegion::kCpuCompute, 0}));
  for (uint32_t layer = 0; layer < g.num_layers; ++layer) {
    EXPECT_EQ(std::memcmp(cpu.data() + RegionBlockOffset(g, 5, 0, layer),
                          cpu.data() + RegionBlockOffset(g, 5, 4, layer), lbb),
              0);
    EXPECT_EQ(std::memcmp(cpu.data() + RegionBlockOffset(g, 5, 1, layer),
                          cpu_before.data() + RegionBlockOffset(g, 5, 1, layer), lbb),
              0);
  }
  const absl::Status outside =
      CopyKvBlock(**arena, config, {KvRegion::kCpuCompute, 5}, {KvRegion::kGpuTransfer, 0});
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.message(), HasSubstr("slot 5 outside the cpu_compute region's 5 slots"));
  EXPECT_EQ(CopyKvBlock(**arena, config, {KvRegion::kGpuTransfer, 3}, {KvRegion::kCpuCompute, 0})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CopyKvBlock(**arena, config, {KvRegion::kCpuCompute, 1}, {KvRegion::kCpuCompute, 1})
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace writescope::coordinator
