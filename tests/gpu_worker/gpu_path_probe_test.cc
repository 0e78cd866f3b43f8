// The gpu_worker's probe of its decode attention path (ProbeGpuPath, the scheduler's
// calibration of B and c_G), on the host device with the tiny fixtures: one point per size
// rounded up to whole blocks, positive times, nothing written to the KV regions, the
// request's errors, and that the KV paths read right after a probe that stopped before the
// last layer (the transfer protocol starts afresh). The trio probes at start-up too, and
// tests/e2e/generate_test.py checks the generations that follow (the fixtures have 2–3
// layers, so that probe runs them all).
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/data_plane.h"
#include "common/data_plane_messages.h"
#include "common/kv_config.h"
#include "common/kv_spec.h"
#include "common/shm_arena.h"
#include "common/worker_model.h"
#include "gmock/gmock.h"
#include "gpu_worker/device.h"
#include "gpu_worker/gpu_worker.h"
#include "gtest/gtest.h"
#include "tests/common/fixture_arena.h"
#include "tests/common/test_util.h"

namespace writescope::gpu {
namespace {

using ::testing::HasSubstr;
using testing::ProbeRequest;

constexpr uint32_t kBlockTokens = 16;

// The known bytes the transfer region starts with.
std::byte PatternByte(uint64_t i) { return static_cast<std::byte>((i * 131 + 7) % 251); }

// The fixture's arena: a D-window of 2 blocks for 4 sequences, 8 CPU-compute blocks,
// `transfer_blocks` GPU-transfer blocks and ping-pong buffers of `pingpong_blocks`.
absl::StatusOr<testing::FixtureArena> Arena(const std::string& arch, const char* name,
                                            uint64_t transfer_blocks, uint64_t pingpong_blocks) {
  return testing::MakeFixtureArena(arch, kBlockTokens, name, [&](KvCacheConfig& kv) {
    kv.window_tokens = 2 * kBlockTokens;
    kv.max_sequences = 4;
    kv.cpu_compute_bytes = 8 * kv.geometry.block_bytes();
    kv.gpu_transfer_bytes = transfer_blocks * kv.geometry.block_bytes();
    kv.gpu_kv_budget_bytes =
        kv.window_bytes() + 2 * pingpong_blocks * kv.geometry.layer_block_bytes();
  });
}

class GpuPathProbeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::FixtureArena> fixture = Arena(GetParam(), "probe-test", 40, 24);
    if (absl::IsNotFound(fixture.status())) GTEST_SKIP() << fixture.status().message();
    ASSERT_TRUE(fixture.ok()) << fixture.status();
    kv_ = fixture->kv;
    arena_ = std::move(fixture->arena);
    // Known bytes in the transfer region, to see that the probe only reads it.
    absl::Span<std::byte> transfer = *arena_->Region(kGpuTransferRegion);
    for (uint64_t i = 0; i < transfer.size(); ++i) {
      transfer[i] = PatternByte(i);
    }
    worker_ = std::make_unique<GpuWorker>(CreateHostDevice());
    internal::LoadRequest load = fixture->load;
    load.set_vram_budget_bytes(uint64_t{4} << 30);
    absl::StatusOr<internal::LoadResponse> loaded = worker_->Load(load);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
  }

  void TearDown() override {
    if (worker_ != nullptr) worker_->Stop();
  }

  bool TransferRegionUnchanged() const {
    const absl::Span<std::byte> transfer = *arena_->Region(kGpuTransferRegion);
    for (uint64_t i = 0; i < transfer.size(); ++i) {
      if (transfer[i] != PatternByte(i)) return false;
    }
    return true;
  }

  KvCacheConfig kv_;
  std::unique_ptr<ShmArena> arena_;
  std::unique_ptr<GpuWorker> worker_;
};

TEST_P(GpuPathProbeTest, OnePointPerSizeInWholeBlocks) {
  ASSERT_EQ(kv_.region_slots(KvRegion::kGpuTransfer), 40u);
  ASSERT_EQ(kv_.pingpong_blocks, 24u);
  // 1 token is one block; 33 tokens three; 24 blocks fill a ping-pong buffer; one sequence
  // of more blocks than the others (7 blocks over 3 sequences).
  const absl::StatusOr<internal::PathProbeResponse> response =
      worker_->ProbeGpuPath(ProbeRequest({1, 33, 7 * kBlockTokens, 24 * kBlockTokens}));
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->points_size(), 4);
  const uint64_t expected[] = {kBlockTokens, 3 * kBlockTokens, 7 * kBlockTokens,
                               24 * kBlockTokens};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(response->points(i).tokens(), expected[i]);
    EXPECT_GT(response->points(i).ns_per_layer(), 0.0);
    EXPECT_GE(response->points(i).slowest_ns_per_layer(), response->points(i).ns_per_layer());
  }
  EXPECT_GT(response->ms(), 0.0);
  EXPECT_TRUE(TransferRegionUnchanged());
  // Some layers only, one sequence.
  internal::PathProbeRequest few = ProbeRequest({2 * kBlockTokens});
  few.set_layers(1);
  few.set_sequences(1);
  few.set_repeats(1);
  const absl::StatusOr<internal::PathProbeResponse> one = worker_->ProbeGpuPath(few);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->points_size(), 1);
}

TEST_P(GpuPathProbeTest, BadRequestsNameWhatIsWrong) {
  EXPECT_THAT(worker_->ProbeGpuPath(ProbeRequest({})).status().message(), HasSubstr("no sizes"));
  EXPECT_THAT(worker_->ProbeGpuPath(ProbeRequest({0})).status().message(),
              HasSubstr("probe point 0: 0 tokens make 0 blocks"));
  // Beyond a ping-pong buffer (24 blocks), and beyond the region (40).
  EXPECT_THAT(worker_->ProbeGpuPath(ProbeRequest({16, 25 * kBlockTokens})).status().message(),
              HasSubstr("probe point 1"));
  EXPECT_THAT(worker_->ProbeGpuPath(ProbeRequest({41 * kBlockTokens})).status().message(),
              HasSubstr("40 transfer-region slots, 24 ping-pong blocks"));
  internal::PathProbeRequest request = ProbeRequest({16});
  request.set_sequences(0);
  EXPECT_THAT(worker_->ProbeGpuPath(request).status().message(), HasSubstr("sequences = 0"));
  request.set_sequences(5);  // max_sequences is 4
  EXPECT_THAT(worker_->ProbeGpuPath(request).status().message(), HasSubstr("sequences = 5"));
  request.set_sequences(1);
  request.set_repeats(0);
  EXPECT_THAT(worker_->ProbeGpuPath(request).status().message(), HasSubstr("repeats = 0"));
  for (const internal::PathProbeRequest& bad : {ProbeRequest({}), ProbeRequest({0})}) {
    EXPECT_EQ(worker_->ProbeGpuPath(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(TransferRegionUnchanged());
}

// A known pattern written through the prefill path into transfer blocks and a D-window,
// then a probe of one layer (its transfer plan abandoned after the first layer's rounds),
// then the gpu_worker reads the pattern back through a fresh transfer plan: no mismatch.
// On the host device (synchronous copies, and BeginTransfer resets the protocol whatever
// came before) this checks that the probe leaves the KV and the D-window intact; it does
// not see a transfer protocol left half way, which only asynchronous copies would show.
TEST_P(GpuPathProbeTest, TheKvPathsReadRightAfterAPartialProbe) {
  internal::KvPatternRequest write;
  write.set_mode(internal::KvPatternRequest::WRITE);
  for (uint32_t s = 0; s < 2; ++s) {
    internal::KvPatternSequence* sequence = write.add_sequences();
    sequence->set_seq_id(100 + s);
    sequence->set_window_slot(s);
    sequence->set_window_tokens(5);
    for (uint32_t b = 0; b < 3; ++b) {
      internal::BlockRef* block = sequence->add_blocks();
      block->set_region(internal::REGION_GPU_TRANSFER);
      block->set_slot(30 + 3 * s + b);  // apart from the probe's first slots
    }
  }
  const absl::StatusOr<internal::KvPatternResponse> written = worker_->KvPattern(write);
  ASSERT_TRUE(written.ok()) << written.status();
  internal::PathProbeRequest probe = ProbeRequest({8 * kBlockTokens, 20 * kBlockTokens});
  probe.set_layers(1);
  ASSERT_GT(kv_.geometry.num_layers, 1u);
  const absl::StatusOr<internal::PathProbeResponse> probed = worker_->ProbeGpuPath(probe);
  ASSERT_TRUE(probed.ok()) << probed.status();
  internal::KvPatternRequest verify = write;
  verify.set_mode(internal::KvPatternRequest::VERIFY);
  const absl::StatusOr<internal::KvPatternResponse> checked = worker_->KvPattern(verify);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_GT(checked->values_checked(), 0u);
  EXPECT_EQ(checked->mismatches(), 0u) << checked->first_mismatch();
}

TEST_P(GpuPathProbeTest, AVerifyOutsideTheDWindowIsRefused) {
  for (const auto& [slot, tokens] : std::vector<std::pair<uint32_t, uint32_t>>{
           {4, 5},                        // max_sequences is 4
           {0, 2 * kBlockTokens + 1}}) {  // W is 2 blocks
    internal::KvPatternRequest verify;
    verify.set_mode(internal::KvPatternRequest::VERIFY);
    internal::KvPatternSequence* sequence = verify.add_sequences();
    sequence->set_seq_id(7);
    sequence->set_window_slot(slot);
    sequence->set_window_tokens(tokens);
    const absl::StatusOr<internal::KvPatternResponse> checked = worker_->KvPattern(verify);
    EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument)
        << slot << " " << tokens << ": " << checked.status();
  }
}

TEST_P(GpuPathProbeTest, AFailedLoadLeavesAWorkerThatLoads) {
  absl::StatusOr<testing::FixtureArena> fixture = Arena(GetParam(), "reload-test", 8, 8);
  ASSERT_TRUE(fixture.ok()) << fixture.status();
  GpuWorker worker(CreateHostDevice());
  // Fails after the arena is mapped and the KV cache made: the weights are not there.
  internal::LoadRequest bad = fixture->load;
  bad.set_model_path("/nonexistent/model");
  bad.clear_synthetic_arch();
  EXPECT_FALSE(worker.Load(bad).ok());
  const absl::StatusOr<internal::LoadResponse> loaded = worker.Load(fixture->load);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(worker.Stats().loaded());
  worker.Stop();
}

TEST(GpuPathProbeUnloadedTest, RefusedBeforeLoad) {
  GpuWorker worker(CreateHostDevice());
  EXPECT_EQ(worker.ProbeGpuPath({}).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A channel ping drops what is not its echo: the echo of a ping that timed out in an earlier
// call, and a late reply of a failed step (both may sit in the cpu_worker's channel). The
// test echoes as the cpu_worker does.
TEST_P(GpuPathProbeTest, APingDropsTheLateEchoOfAnEarlierPing) {
  absl::StatusOr<DataPlane> plane = AttachDataPlane(*arena_);
  ASSERT_TRUE(plane.ok()) << plane.status();
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    while (!stop.load()) {
      absl::StatusOr<absl::Span<const std::byte>> in = plane->to_cpu.Peek(absl::Milliseconds(20));
      if (!in.ok()) continue;
      DataPlaneHeader header;
      std::memcpy(&header, in->data(), sizeof(header));
      absl::StatusOr<absl::Span<std::byte>> out =
          plane->to_gpu.Reserve(in->size(), absl::Seconds(5));
      if (out.ok()) {
        std::memcpy(out->data(), in->data(), in->size());
        header.type = DataPlaneMessage::kEchoReply;
        std::memcpy(out->data(), &header, sizeof(header));
        plane->to_gpu.Commit();
      }
      plane->to_cpu.Release();
    }
  });
  internal::ChannelPingRequest request;
  request.set_count(3);
  request.set_bytes(64);
  const absl::StatusOr<internal::ChannelPingResponse> first = worker_->ChannelPing(request);
  EXPECT_TRUE(first.ok()) << first.status();
  // Left in the channel: the echo of the first call's second ping, then a step's late reply.
  auto put = [&](DataPlaneMessage type, uint64_t id, size_t payload) {
    absl::StatusOr<absl::Span<std::byte>> out =
        plane->to_gpu.Reserve(sizeof(DataPlaneHeader) + payload, absl::Seconds(1));
    ASSERT_TRUE(out.ok()) << out.status();
    const DataPlaneHeader header{type, 0, id, payload};
    std::memcpy(out->data(), &header, sizeof(header));
    std::memset(out->data() + sizeof(header), 1, payload);
    plane->to_gpu.Commit();
  };
  put(DataPlaneMessage::kEchoReply, 1, 64);
  put(DataPlaneMessage::kAttentionResult, 7, 32);
  request.set_count(2);
  const absl::StatusOr<internal::ChannelPingResponse> second = worker_->ChannelPing(request);
  EXPECT_TRUE(second.ok()) << second.status();
  if (second.ok()) {
    EXPECT_EQ(second->count(), 2u);
  }
  EXPECT_FALSE(plane->to_gpu.Pending());  // everything read
  stop.store(true);
  echo.join();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuPathProbeTest,
                         ::testing::Values("qwen3_moe", "deepseek_v2", "mixtral"));

}  // namespace
}  // namespace writescope::gpu
