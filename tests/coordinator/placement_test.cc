#include "coordinator/placement.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/test_util.h"
#include "tests/gpu_worker/kv_test_util.h"

namespace writescope::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BlockAllocatorTest, LowestFirstAllOrNothingAndReuse) {
  BlockAllocator allocator(6);
  auto first = allocator.Allocate(3);
  WS_ASSERT_OK(first.status());
  EXPECT_THAT(*first, ElementsAre(0, 1, 2));
  allocator.Free(1);
  auto next = allocator.Allocate(2);
  WS_ASSERT_OK(next.status());
  EXPECT_THAT(*next, ElementsAre(1, 3));  // the freed slot first
  EXPECT_EQ(allocator.num_free(), 2u);
  auto too_many = allocator.Allocate(3);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_many.status().message(), HasSubstr("need 3 blocks, 2 of 6 free"));
  EXPECT_EQ(allocator.num_free(), 2u);  // nothing taken
}

TEST(BlockAllocatorDeathTest, DoubleFreeIsAProgrammerError) {
  BlockAllocator allocator(2);
  EXPECT_DEATH(allocator.Free(0), "double free");
}

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KvCacheConfig config;
    config.geometry = testing::SmallGqa(4);  // W = 8: two blocks per flush
    config.window_tokens = 8;
    config.cpu_compute_bytes = 5 * config.geometry.block_bytes();
    config.gpu_transfer_bytes = 3 * config.geometry.block_bytes() + 7;  // tail is unused
    config.max_sequences = 2;
    config.gpu_kv_budget_bytes = 1 << 20;
    auto placement = KvPlacement::Create(config);
    WS_ASSERT_OK(placement.status());
    placement_ = *std::move(placement);
  }
  std::unique_ptr<KvPlacement> placement_;
};

TEST_F(PlacementTest, AdmitLimitsAndIds) {
  WS_ASSERT_OK(placement_->Admit(10));
  EXPECT_EQ(placement_->Admit(10).code(), absl::StatusCode::kAlreadyExists);
  WS_ASSERT_OK(placement_->Admit(11));
  const absl::Status full = placement_->Admit(12);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("all 2 D-window slots"));
  EXPECT_NE(placement_->Find(10)->window_slot, placement_->Find(11)->window_slot);
  WS_ASSERT_OK(placement_->Free(10));
  WS_ASSERT_OK(placement_->Admit(12));
  EXPECT_EQ(placement_->Free(99).code(), absl::StatusCode::kNotFound);
}

TEST_F(PlacementTest, PrefillPlacesFullBlocksAndLeavesTheTailInTheWindow) {
  WS_ASSERT_OK(placement_->Admit(1));
  int calls = 0;
  auto plan = placement_->PlanPrefill(1, 14, [&](const PlacementRequest& r) {
    EXPECT_EQ(r.block_index, static_cast<uint64_t>(calls));
    EXPECT_EQ(r.first_token, 4u * calls);
    EXPECT_FALSE(r.is_flush);
    // Free counts are net of the blocks already chosen for this request.
    EXPECT_EQ(r.free_slots[KvRegionIndex(KvRegion::kGpuTransfer)], calls == 0 ? 3u : 2u);
    return calls++ == 0 ? KvRegion::kGpuTransfer : KvRegion::kCpuCompute;
  });
  WS_ASSERT_OK(plan.status());
  EXPECT_EQ(calls, 3);
  ASSERT_EQ(plan->blocks.size(), 3u);
  EXPECT_EQ(plan->blocks[0].ref, (KvBlockRef{KvRegion::kGpuTransfer, 0}));
  EXPECT_EQ(plan->blocks[1].ref, (KvBlockRef{KvRegion::kCpuCompute, 0}));
  EXPECT_EQ(plan->blocks[2].ref, (KvBlockRef{KvRegion::kCpuCompute, 1}));
  EXPECT_EQ(plan->window_tokens, 2u);
  EXPECT_EQ(placement_->Find(1)->num_tokens(), 14u);
  EXPECT_EQ(placement_->Usage(KvRegion::kGpuTransfer).used_blocks, 1u);
  EXPECT_EQ(placement_->Usage(KvRegion::kGpuTransfer).total_blocks, 3u);
  EXPECT_DOUBLE_EQ(placement_->PlacedCpuShare(), 2.0 / 3.0);
  // The D-window holds the tail: another chunk would not start on a block boundary.
  EXPECT_EQ(placement_->PlanPrefill(1, 4, ChooseCpuCompute).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(PlacementTest, ChunkedPrefillAppendsBlocks) {
  WS_ASSERT_OK(placement_->Admit(1));
  const uint32_t bt = placement_->config().block_tokens();
  absl::StatusOr<PrefillPlan> first = placement_->PlanPrefill(1, 2 * bt, ChooseCpuCompute);
  WS_ASSERT_OK(first.status());
  EXPECT_EQ(first->blocks.size(), 2u);
  EXPECT_EQ(first->window_tokens, 0u);
  absl::StatusOr<PrefillPlan> second = placement_->PlanPrefill(1, bt + 3, ChooseGpuTransfer);
  WS_ASSERT_OK(second.status());
  ASSERT_EQ(second->blocks.size(), 1u);
  EXPECT_EQ(second->blocks[0].first_token, 2u * bt);
  EXPECT_EQ(second->blocks[0].ref.region, KvRegion::kGpuTransfer);
  EXPECT_EQ(placement_->Find(1)->blocks.size(), 3u);
  EXPECT_EQ(placement_->Find(1)->num_tokens(), 3u * bt + 3);
}

TEST_F(PlacementTest, ExhaustedPrefillAllocatesNothing) {
  WS_ASSERT_OK(placement_->Admit(1));
  auto plan = placement_->PlanPrefill(1, 4 * 4, ChooseGpuTransfer);  // 4 blocks, 3 slots
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("needs 4 gpu_transfer blocks but only 3 of 3 are free"));
  EXPECT_EQ(placement_->Usage(KvRegion::kGpuTransfer).used_blocks, 0u);
  EXPECT_EQ(placement_->Usage(KvRegion::kCpuCompute).used_blocks, 0u);
  EXPECT_EQ(placement_->Find(1)->num_tokens(), 0u);
  // The scheduler can steer around it.
  WS_ASSERT_OK(placement_
                   ->PlanPrefill(1, 16,
                                 [](const PlacementRequest& r) {
                                   return r.free_slots[KvRegionIndex(KvRegion::kGpuTransfer)] > 0
                                              ? KvRegion::kGpuTransfer
                                              : KvRegion::kCpuCompute;
                                 })
                   .status());
  EXPECT_EQ(placement_->Usage(KvRegion::kGpuTransfer).used_blocks, 3u);
  EXPECT_EQ(placement_->Usage(KvRegion::kCpuCompute).used_blocks, 1u);
}

TEST_F(PlacementTest, DecodeFillsTheWindowThenFlushesIntoTheRegionChosenAtFlushTime) {
  WS_ASSERT_OK(placement_->Admit(1));
  WS_ASSERT_OK(placement_->PlanPrefill(1, 5, ChooseCpuCompute).status());  // 1 block + 1
  EXPECT_EQ(placement_->Flush(1, ChooseCpuCompute).status().code(),
            absl::StatusCode::kFailedPrecondition);
  for (uint32_t expected = 1; expected < 8; ++expected) {
    auto position = placement_->AppendDecode(1);
    WS_ASSERT_OK(position.status());
    EXPECT_EQ(*position, expected);
  }
  EXPECT_TRUE(placement_->NeedsFlush(1));
  EXPECT_EQ(placement_->AppendDecode(1).status().code(), absl::StatusCode::kFailedPrecondition);
  auto flush = placement_->Flush(1, [](const PlacementRequest& r) {
    EXPECT_TRUE(r.is_flush);
    return KvRegion::kGpuTransfer;
  });
  WS_ASSERT_OK(flush.status());
  ASSERT_EQ(flush->blocks.size(), 2u);
  EXPECT_EQ(flush->blocks[0].first_token, 4u);
  EXPECT_EQ(flush->blocks[1].first_token, 8u);
  EXPECT_EQ(flush->blocks[1].ref, (KvBlockRef{KvRegion::kGpuTransfer, 1}));
  const SequencePlacement* seq = placement_->Find(1);
  EXPECT_EQ(seq->num_tokens(), 12u);
  EXPECT_EQ(seq->window_tokens, 0u);
  EXPECT_FALSE(placement_->NeedsFlush(1));
  // Placed blocks never move: the first block is where prefill put it.
  EXPECT_EQ(seq->blocks[0].ref, (KvBlockRef{KvRegion::kCpuCompute, 0}));
  WS_ASSERT_OK(placement_->Free(1));
  EXPECT_EQ(placement_->Usage(KvRegion::kCpuCompute).used_blocks, 0u);
  EXPECT_EQ(placement_->Usage(KvRegion::kGpuTransfer).used_blocks, 0u);
  EXPECT_DOUBLE_EQ(placement_->PlacedCpuShare(), 0.0);
}

TEST_F(PlacementTest, ExhaustedFlushKeepsTheWindow) {
  WS_ASSERT_OK(placement_->Admit(1));
  WS_ASSERT_OK(placement_->PlanPrefill(1, 8, ChooseCpuCompute).status());
  WS_ASSERT_OK(placement_->AppendDecode(1, 8).status());
  WS_ASSERT_OK(placement_->Admit(2));
  WS_ASSERT_OK(placement_->PlanPrefill(2, 8, ChooseCpuCompute).status());  // 4 of 5 used
  auto flush = placement_->Flush(1, ChooseCpuCompute);                     // needs 2, 1 free
  EXPECT_EQ(flush.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(flush.status().message(), HasSubstr("flush of sequence 1 needs 2 cpu_compute"));
  EXPECT_TRUE(placement_->NeedsFlush(1));
  EXPECT_EQ(placement_->Find(1)->blocks.size(), 2u);
  EXPECT_EQ(placement_->Usage(KvRegion::kCpuCompute).used_blocks, 4u);
}

TEST_F(PlacementTest, RelocateMovesOneBlocksMetadataAndFreesItsSlot) {
  WS_ASSERT_OK(placement_->Admit(1));
  WS_ASSERT_OK(placement_->PlanPrefill(1, 12, ChooseCpuCompute).status());  // CPU slots 0-2
  absl::StatusOr<Relocation> moved = placement_->Relocate(1, 1, KvRegion::kGpuTransfer);
  WS_ASSERT_OK(moved.status());
  EXPECT_EQ(moved->from, (KvBlockRef{KvRegion::kCpuCompute, 1}));
  EXPECT_EQ(moved->to, (KvBlockRef{KvRegion::kGpuTransfer, 0}));
  const SequencePlacement& seq = *placement_->Find(1);
  EXPECT_EQ(seq.blocks[0].ref, (KvBlockRef{KvRegion::kCpuCompute, 0}));
  EXPECT_EQ(seq.blocks[1].ref, (KvBlockRef{KvRegion::kGpuTransfer, 0}));
  EXPECT_EQ(seq.blocks[1].first_token, 4u);  // its tokens do not change
  EXPECT_EQ(seq.blocks[2].ref, (KvBlockRef{KvRegion::kCpuCompute, 2}));
  EXPECT_TRUE(placement_->allocator(KvRegion::kCpuCompute).IsFree(1));
  EXPECT_EQ(placement_->Usage(KvRegion::kCpuCompute).used_blocks, 2u);
  EXPECT_EQ(placement_->Usage(KvRegion::kGpuTransfer).used_blocks, 1u);
  EXPECT_DOUBLE_EQ(placement_->PlacedCpuShare(), 2.0 / 3.0);
  // And back, into the lowest free CPU slot.
  moved = placement_->Relocate(1, 1, KvRegion::kCpuCompute);
  WS_ASSERT_OK(moved.status());
  EXPECT_EQ(moved->to, (KvBlockRef{KvRegion::kCpuCompute, 1}));
  EXPECT_EQ(placement_->Usage(KvRegion::kGpuTransfer).used_blocks, 0u);
  WS_ASSERT_OK(placement_->Free(1));
  EXPECT_EQ(placement_->Usage(KvRegion::kCpuCompute).used_blocks, 0u);
}

TEST_F(PlacementTest, RelocateRefusesWithoutChangingAnything) {
  WS_ASSERT_OK(placement_->Admit(1));
  WS_ASSERT_OK(placement_->PlanPrefill(1, 20, ChooseCpuCompute).status());  // 5 CPU blocks
  EXPECT_EQ(placement_->Relocate(2, 0, KvRegion::kGpuTransfer).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(placement_->Relocate(1, 5, KvRegion::kGpuTransfer).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(placement_->Relocate(1, 0, KvRegion::kCpuCompute).status().code(),
            absl::StatusCode::kFailedPrecondition);
  for (size_t i = 0; i < 3; ++i) {
    WS_ASSERT_OK(placement_->Relocate(1, i, KvRegion::kGpuTransfer).status());
  }
  const absl::Status full = placement_->Relocate(1, 3, KvRegion::kGpuTransfer).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("no free gpu_transfer slot"));
  EXPECT_EQ(placement_->Find(1)->blocks[3].ref, (KvBlockRef{KvRegion::kCpuCompute, 3}));
  EXPECT_EQ(placement_->Usage(KvRegion::kCpuCompute).used_blocks, 2u);
}

TEST_F(PlacementTest, UndoRelocatePutsTheBlockBackIntoItsOldSlot) {
  WS_ASSERT_OK(placement_->Admit(1));
  WS_ASSERT_OK(placement_->PlanPrefill(1, 12, ChooseCpuCompute).status());  // CPU slots 0-2
  const absl::StatusOr<Relocation> moved = placement_->Relocate(1, 1, KvRegion::kGpuTransfer);
  WS_ASSERT_OK(moved.status());
  // Refused, nothing changed: another block, an index past the blocks, an id not live.
  EXPECT_EQ(placement_->UndoRelocate(1, 0, *moved).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(placement_->UndoRelocate(1, 3, *moved).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(placement_->UndoRelocate(2, 1, *moved).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(placement_->Find(1)->blocks[1].ref, moved->to);
  WS_ASSERT_OK(placement_->UndoRelocate(1, 1, *moved));
  EXPECT_EQ(placement_->Find(1)->blocks[1].ref, (KvBlockRef{KvRegion::kCpuCompute, 1}));
  EXPECT_FALSE(placement_->allocator(KvRegion::kCpuCompute).IsFree(1));
  EXPECT_TRUE(placement_->allocator(KvRegion::kGpuTransfer).IsFree(moved->to.slot));
  EXPECT_EQ(placement_->Usage(KvRegion::kCpuCompute).used_blocks, 3u);
  EXPECT_EQ(placement_->Usage(KvRegion::kGpuTransfer).used_blocks, 0u);
  // Its old slot taken since (here by a second sequence's block): refused, nothing changed.
  const absl::StatusOr<Relocation> again = placement_->Relocate(1, 1, KvRegion::kGpuTransfer);
  WS_ASSERT_OK(again.status());
  WS_ASSERT_OK(placement_->Admit(2));
  WS_ASSERT_OK(placement_->PlanPrefill(2, 4, ChooseCpuCompute).status());  // takes CPU slot 1
  EXPECT_EQ(placement_->Find(2)->blocks[0].ref, (KvBlockRef{KvRegion::kCpuCompute, 1}));
  EXPECT_EQ(placement_->UndoRelocate(1, 1, *again).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(placement_->Find(1)->blocks[1].ref, again->to);
  EXPECT_EQ(placement_->Usage(KvRegion::kGpuTransfer).used_blocks, 1u);
}

}  // namespace
}  // namespace writescope::coordinator
