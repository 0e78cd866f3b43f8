// MakeStepLayout: how both workers lay out a step's plan, and the plans it refuses.
#include "common/step_layout.h"

#include <functional>

#include "gtest/gtest.h"
#include "tests/common/test_util.h"

namespace writescope {
namespace {

class StepLayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.geometry = KvGeometry{.kind = AttentionKind::kGqa, .num_layers = 2, .block_tokens = 4,
                                  .num_kv_heads = 1, .head_dim = 2};
    config_.window_tokens = 8;  // two blocks per flush
    config_.cpu_compute_bytes = 10 * config_.geometry.block_bytes();
    config_.gpu_transfer_bytes = 10 * config_.geometry.block_bytes();
    config_.max_sequences = 4;
  }
  static void AddRun(google::protobuf::RepeatedPtrField<internal::BlockRun>* runs,
                     internal::Region region, std::initializer_list<uint32_t> ids) {
    internal::BlockRun* run = runs->Add();
    run->set_region(region);
    for (uint32_t id : ids) run->add_block_ids(id);
  }
  internal::SequenceStep* Decode(uint64_t id, uint64_t position, uint32_t window_tokens) {
    internal::SequenceStep* s = plan_.add_sequences();
    s->set_seq_id(id);
    s->set_window_slot(static_cast<uint32_t>(id));
    s->set_position(position);
    s->set_num_tokens(1);
    s->add_token_ids(7);
    s->set_dwindow_tokens(window_tokens);
    return s;
  }
  internal::SequenceStep* Prefill(uint64_t id, uint64_t position, uint32_t tokens) {
    internal::SequenceStep* s = plan_.add_sequences();
    s->set_seq_id(id);
    s->set_window_slot(static_cast<uint32_t>(id));
    s->set_prefill(true);
    s->set_position(position);
    s->set_num_tokens(tokens);
    for (uint32_t t = 0; t < tokens; ++t) s->add_token_ids(t);
    return s;
  }

  KvCacheConfig config_;
  internal::StepPlan plan_;
};

TEST_F(StepLayoutTest, MixedStepOffsets) {
  // Decode: 3 blocks (cpu 0, gpu 1, cpu 2) + 5 window tokens, at position 17.
  internal::SequenceStep* d = Decode(0, 17, 5);
  AddRun(d->mutable_blocks(), internal::REGION_CPU_COMPUTE, {0});
  AddRun(d->mutable_blocks(), internal::REGION_GPU_TRANSFER, {1});
  AddRun(d->mutable_blocks(), internal::REGION_CPU_COMPUTE, {2});
  // A first chunk of 6 tokens: one new block, tail 2 in the window; no CPU keys yet.
  internal::SequenceStep* p = Prefill(1, 0, 6);
  AddRun(p->mutable_new_blocks(), internal::REGION_GPU_TRANSFER, {3});
  // A later chunk with one earlier CPU block.
  internal::SequenceStep* q = Prefill(2, 4, 3);
  AddRun(q->mutable_blocks(), internal::REGION_CPU_COMPUTE, {5});
  absl::StatusOr<StepLayout> layout = MakeStepLayout(plan_, config_);
  WS_ASSERT_OK(layout.status());
  ASSERT_EQ(layout->sequences.size(), 3u);
  EXPECT_EQ(layout->total_tokens, 10u);
  EXPECT_EQ(layout->cpu_tokens, 4u);  // decode (1) + the later chunk (3)
  EXPECT_EQ(layout->sequences[0].cpu_offset, 0u);
  EXPECT_EQ(layout->sequences[2].cpu_offset, 1u);
  EXPECT_EQ(layout->sequences[2].token_offset, 7u);
  ASSERT_EQ(layout->sequences[0].cpu_blocks.size(), 2u);
  EXPECT_EQ(layout->sequences[0].cpu_blocks[1].first_token, 8u);
  EXPECT_EQ(layout->sequences[0].transfer_blocks[0].first_token, 4u);
  EXPECT_EQ(layout->cpu_host_tokens, 12u);
  EXPECT_EQ(layout->transfer_host_tokens, 4u);
}

TEST_F(StepLayoutTest, GpuReadsCpuBlocksOfAPrefillChunk) {
  // A chunk at position 12 after blocks cpu 0, gpu 1, cpu 2, attended whole on the GPU: the
  // cpu_worker gets none of its rows; its CPU blocks are in the GPU's list, in token order.
  internal::SequenceStep* p = Prefill(0, 12, 4);
  AddRun(p->mutable_blocks(), internal::REGION_CPU_COMPUTE, {0});
  AddRun(p->mutable_blocks(), internal::REGION_GPU_TRANSFER, {1});
  AddRun(p->mutable_blocks(), internal::REGION_CPU_COMPUTE, {2});
  AddRun(p->mutable_new_blocks(), internal::REGION_GPU_TRANSFER, {3});
  p->set_gpu_reads_cpu_blocks(true);
  // A second chunk of another sequence keeps the split.
  internal::SequenceStep* q = Prefill(1, 4, 4);
  AddRun(q->mutable_blocks(), internal::REGION_CPU_COMPUTE, {5});
  AddRun(q->mutable_new_blocks(), internal::REGION_CPU_COMPUTE, {6});
  absl::StatusOr<StepLayout> layout = MakeStepLayout(plan_, config_);
  WS_ASSERT_OK(layout.status());
  const StepSequenceLayout& s = layout->sequences[0];
  EXPECT_TRUE(s.gpu_reads_cpu_blocks);
  EXPECT_TRUE(s.cpu_blocks.empty());
  ASSERT_EQ(s.transfer_blocks.size(), 3u);
  EXPECT_EQ(s.transfer_blocks[0].slot, 0u);
  EXPECT_EQ(s.transfer_blocks[2].first_token, 8u);
  EXPECT_EQ(s.blocks.size(), 3u);
  EXPECT_EQ(layout->cpu_tokens, 4u);  // only the second sequence's rows
  EXPECT_EQ(layout->sequences[1].cpu_offset, 0u);
  EXPECT_EQ(layout->cpu_host_tokens, 4u);
  EXPECT_EQ(layout->transfer_host_tokens, 12u);

}

TEST_F(StepLayoutTest, GpuReadsCpuBlocksOfADecodeStep) {
  // Sequence 0 decodes with its CPU block read by the GPU; sequence 1 keeps the split.
  internal::SequenceStep* d = Decode(0, 5, 1);
  AddRun(d->mutable_blocks(), internal::REGION_CPU_COMPUTE, {0});
  d->set_gpu_reads_cpu_blocks(true);
  internal::SequenceStep* e = Decode(1, 9, 1);
  AddRun(e->mutable_blocks(), internal::REGION_CPU_COMPUTE, {1});
  AddRun(e->mutable_blocks(), internal::REGION_GPU_TRANSFER, {2});
  absl::StatusOr<StepLayout> layout = MakeStepLayout(plan_, config_);
  WS_ASSERT_OK(layout.status());
  const StepSequenceLayout& s = layout->sequences[0];
  EXPECT_TRUE(s.cpu_blocks.empty());
  ASSERT_EQ(s.transfer_blocks.size(), 1u);
  EXPECT_EQ(s.transfer_blocks[0].slot, 0u);
  EXPECT_EQ(layout->cpu_tokens, 1u);  // only sequence 1's row goes to the cpu_worker
  EXPECT_EQ(layout->sequences[1].cpu_offset, 0u);
  EXPECT_EQ(layout->cpu_host_tokens, 4u);
  EXPECT_EQ(layout->transfer_host_tokens, 8u);
}

TEST_F(StepLayoutTest, DecodeAfterFlushNamesTheLastBlocks) {
  internal::SequenceStep* d = Decode(0, 8, 0);
  AddRun(d->mutable_blocks(), internal::REGION_CPU_COMPUTE, {0, 1});
  AddRun(d->mutable_new_blocks(), internal::REGION_CPU_COMPUTE, {0, 1});
  WS_EXPECT_OK(MakeStepLayout(plan_, config_).status());
  // The flushed blocks must be the last ones, with an empty window.
  d->set_dwindow_tokens(1);
  d->set_position(9);
  EXPECT_EQ(MakeStepLayout(plan_, config_).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(StepLayoutTest, RefusesInconsistentPlans) {
  struct Case {
    const char* what;
    std::function<void(internal::StepPlan&)> make;
  };
  const Case cases[] = {
      {"slot outside region",
       [](internal::StepPlan& plan) {
         internal::SequenceStep* s = plan.add_sequences();
         s->set_num_tokens(1);
         s->add_token_ids(1);
         s->set_position(4);
         AddRun(s->mutable_blocks(), internal::REGION_CPU_COMPUTE, {10});
       }},
      {"window slot out of range",
       [](internal::StepPlan& plan) {
         internal::SequenceStep* s = plan.add_sequences();
         s->set_window_slot(4);
         s->set_num_tokens(1);
         s->add_token_ids(1);
       }},
      {"token count mismatch",
       [](internal::StepPlan& plan) {
         internal::SequenceStep* s = plan.add_sequences();
         s->set_num_tokens(2);
         s->add_token_ids(1);
       }},
      {"decode of two tokens",
       [](internal::StepPlan& plan) {
         internal::SequenceStep* s = plan.add_sequences();
         s->set_num_tokens(2);
         s->add_token_ids(1);
         s->add_token_ids(2);
       }},
      {"decode position does not follow the blocks",
       [](internal::StepPlan& plan) {
         internal::SequenceStep* s = plan.add_sequences();
         s->set_num_tokens(1);
         s->add_token_ids(1);
         s->set_position(3);
       }},
      {"prefill off a block boundary",
       [](internal::StepPlan& plan) {
         internal::SequenceStep* s = plan.add_sequences();
         s->set_prefill(true);
         s->set_position(2);
         s->set_num_tokens(1);
         s->add_token_ids(1);
       }},
      {"prefill with the wrong number of new blocks",
       [](internal::StepPlan& plan) {
         internal::SequenceStep* s = plan.add_sequences();
         s->set_prefill(true);
         s->set_num_tokens(8);
         for (int i = 0; i < 8; ++i) s->add_token_ids(1);
         AddRun(s->mutable_new_blocks(), internal::REGION_CPU_COMPUTE, {0});
       }},
      {"the same sequence twice",
       [](internal::StepPlan& plan) {
         for (uint32_t w = 0; w < 2; ++w) {
           internal::SequenceStep* s = plan.add_sequences();
           s->set_seq_id(5);
           s->set_window_slot(w);
           s->set_num_tokens(1);
           s->add_token_ids(1);
         }
       }},
      {"a slot read by two sequences",
       [](internal::StepPlan& plan) {
         for (uint32_t w = 0; w < 2; ++w) {
           internal::SequenceStep* s = plan.add_sequences();
           s->set_seq_id(w);
           s->set_window_slot(w);
           s->set_num_tokens(1);
           s->add_token_ids(1);
           s->set_position(4);
           AddRun(s->mutable_blocks(), internal::REGION_CPU_COMPUTE, {3});
         }
       }},
      {"a prefill writing a slot another sequence reads",
       [](internal::StepPlan& plan) {
         internal::SequenceStep* d = plan.add_sequences();
         d->set_seq_id(1);
         d->set_window_slot(1);
         d->set_num_tokens(1);
         d->add_token_ids(1);
         d->set_position(4);
         AddRun(d->mutable_blocks(), internal::REGION_GPU_TRANSFER, {2});
         internal::SequenceStep* p = plan.add_sequences();
         p->set_seq_id(2);
         p->set_window_slot(2);
         p->set_prefill(true);
         p->set_num_tokens(4);
         for (int i = 0; i < 4; ++i) p->add_token_ids(1);
         AddRun(p->mutable_new_blocks(), internal::REGION_GPU_TRANSFER, {2});
       }},
      {"a block run without a region",
       [](internal::StepPlan& plan) {
         internal::SequenceStep* s = plan.add_sequences();
         s->set_num_tokens(1);
         s->add_token_ids(1);
         s->set_position(4);
         AddRun(s->mutable_blocks(), internal::REGION_UNSPECIFIED, {0});
       }},
  };
  for (const Case& c : cases) {
    internal::StepPlan plan;
    c.make(plan);
    EXPECT_EQ(MakeStepLayout(plan, config_).status().code(), absl::StatusCode::kInvalidArgument)
        << c.what;
  }
}

TEST(StepDimsTest, MessageWidths) {
  ModelConfig config;
  config.arch = ModelArch::kDeepseekV2;
  config.num_heads = 16;
  config.kv_lora_rank = 512;
  config.qk_rope_head_dim = 64;
  config.hidden_size = 2048;
  config.num_experts_per_tok = 6;
  const StepDims d = StepDimsFor(config);
  EXPECT_EQ(d.q_dim, 576);
  EXPECT_EQ(d.o_dim, 512);
  EXPECT_EQ(d.attention_result_bytes(1), 16u * 513 * 4);
  EXPECT_EQ(d.max_bytes_per_token(), 16u * 513 * 4);
}

// The path probes' steps: slots in order, the remainder on the first sequences, one decode
// row each, and the region's side of the layout.
TEST(PathProbeTest, LayoutSpreadsTheBlocksInSlotOrder) {
  for (const KvRegion region : {KvRegion::kCpuCompute, KvRegion::kGpuTransfer}) {
    SCOPED_TRACE(static_cast<int>(region));
    const bool cpu = region == KvRegion::kCpuCompute;
    // 7 blocks over 3 sequences: 3, 2, 2.
    const StepLayout layout = PathProbeLayout(7, 3, 16, region);
    ASSERT_EQ(layout.sequences.size(), 3u);
    EXPECT_EQ(layout.total_tokens, 3u);
    EXPECT_EQ(layout.cpu_tokens, cpu ? 3u : 0u);
    EXPECT_EQ(layout.cpu_host_tokens, cpu ? 7u * 16 : 0u);
    EXPECT_EQ(layout.transfer_host_tokens, cpu ? 0u : 7u * 16);
    uint32_t slot = 0;
    for (size_t i = 0; i < 3; ++i) {
      const StepSequenceLayout& s = layout.sequences[i];
      const size_t n = i == 0 ? 3 : 2;
      const std::vector<PlacedSlot>& own = cpu ? s.cpu_blocks : s.transfer_blocks;
      EXPECT_TRUE((cpu ? s.transfer_blocks : s.cpu_blocks).empty());
      ASSERT_EQ(own.size(), n);
      ASSERT_EQ(s.blocks.size(), n);
      EXPECT_EQ(s.position, n * 16);
      EXPECT_EQ(s.num_tokens, 1u);
      EXPECT_EQ(s.token_offset, i);
      if (cpu) {
        EXPECT_EQ(s.cpu_offset, i);
      }
      for (size_t j = 0; j < n; ++j, ++slot) {
        EXPECT_EQ(own[j].slot, slot);
        EXPECT_EQ(own[j].first_token, j * 16);
        EXPECT_EQ(s.blocks[j], (KvBlockRef{region, slot}));
      }
    }
    // More sequences than blocks: one block each.
    EXPECT_EQ(PathProbeLayout(2, 16, 16, region).sequences.size(), 2u);
  }
  // From slot 6 of a region of 8: 6, 7, 0 | 1, 2.
  const StepLayout wrapped = PathProbeLayout(5, 2, 16, KvRegion::kCpuCompute, 6, 8);
  ASSERT_EQ(wrapped.sequences.size(), 2u);
  std::vector<uint32_t> slots;
  for (const StepSequenceLayout& s : wrapped.sequences) {
    for (const PlacedSlot& placed : s.cpu_blocks) slots.push_back(placed.slot);
  }
  EXPECT_EQ(slots, (std::vector<uint32_t>{6, 7, 0, 1, 2}));
  EXPECT_EQ(wrapped.sequences[1].cpu_blocks[0].first_token, 0u);
  EXPECT_EQ(wrapped.sequences[1].cpu_blocks[1].first_token, 16u);
}

TEST(PathProbeTest, BlocksAreWholeAndBoundedAndTheRequestChecked) {
  internal::PathProbeRequest request;
  for (const uint64_t t : {1, 16, 17, 64}) request.add_tokens(t);
  request.set_sequences(2);
  request.set_repeats(3);
  absl::StatusOr<std::vector<uint64_t>> blocks = PathProbeBlocks(request, 16, 4, 4, "4 slots");
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(*blocks, (std::vector<uint64_t>{1, 1, 2, 4}));
  request.add_tokens(65);
  EXPECT_EQ(PathProbeBlocks(request, 16, 4, 4, "4 slots").status().message(),
            "probe point 4: 65 tokens make 5 blocks; it needs 1 to 4 slots");
  internal::PathProbeRequest bad = request;
  bad.clear_tokens();
  EXPECT_EQ(PathProbeBlocks(bad, 16, 4, 4, "").status().message(), "probe: no sizes");
  bad = request;
  bad.set_tokens(0, 0);
  EXPECT_EQ(PathProbeBlocks(bad, 16, 4, 8, "").status().code(), absl::StatusCode::kInvalidArgument);
  bad = request;
  bad.set_sequences(5);
  EXPECT_EQ(PathProbeBlocks(bad, 16, 4, 8, "").status().code(), absl::StatusCode::kInvalidArgument);
  bad.set_sequences(2);
  bad.set_repeats(101);
  EXPECT_EQ(PathProbeBlocks(bad, 16, 4, 8, "").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace writescope
