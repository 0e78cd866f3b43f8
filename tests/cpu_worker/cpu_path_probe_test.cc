// The cpu_worker's probe of its decode attention in place (ProbeCpuPath, the scheduler's
// calibration of A and c_C), with the tiny fixtures of the three architectures: one point
// per size rounded up to whole blocks, positive finite times, nothing written to the
// CPU-compute region, the request's errors, and a probe before Load. The trio probes at
// start-up too (tests/e2e/generate_test.py checks `wscope info`'s CPU path line and the
// generations that follow).

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/kv_config.h"
#include "common/shm_arena.h"
#include "cpu_worker/cpu_worker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/fixture_arena.h"

namespace writescope::cpu {
namespace {

using ::testing::HasSubstr;
using testing::ProbeRequest;

constexpr uint32_t kBlockTokens = 16;
constexpr uint32_t kCpuBlocks = 8;

// Known bf16 values in the CPU-compute region (finite: the kernels read them as keys).
uint16_t PatternValue(uint64_t i) { return static_cast<uint16_t>(0x3c00 + (i * 131 + 7) % 97); }

class CpuPathProbeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::FixtureArena> fixture = testing::MakeFixtureArena(
        GetParam(), kBlockTokens, "cpu-probe-test", [](KvCacheConfig& kv) {
          kv.window_tokens = 2 * kBlockTokens;
          kv.max_sequences = 4;
          kv.cpu_compute_bytes = kCpuBlocks * kv.geometry.block_bytes();
          kv.gpu_transfer_bytes = 8 * kv.geometry.block_bytes();
          kv.gpu_kv_budget_bytes = kv.window_bytes() + 2 * 4 * kv.geometry.layer_block_bytes();
        });
    if (absl::IsNotFound(fixture.status())) GTEST_SKIP() << fixture.status().message();
    ASSERT_TRUE(fixture.ok()) << fixture.status();
    kv_ = fixture->kv;
    arena_ = std::move(fixture->arena);
    ASSERT_EQ(kv_.region_slots(KvRegion::kCpuCompute), kCpuBlocks);
    const absl::Span<uint16_t> region = CpuRegion();
    for (uint64_t i = 0; i < region.size(); ++i) region[i] = PatternValue(i);
    worker_ = std::make_unique<CpuWorker>();
    EXPECT_EQ(worker_->ProbeCpuPath(ProbeRequest({kBlockTokens})).status().code(),
              absl::StatusCode::kFailedPrecondition);
    absl::StatusOr<internal::LoadResponse> loaded = worker_->Load(fixture->load);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
  }

  void TearDown() override {
    if (worker_ != nullptr) worker_->Stop();
  }

  absl::Span<uint16_t> CpuRegion() const {
    const absl::Span<std::byte> bytes = *arena_->Region(kCpuComputeRegion);
    return absl::MakeSpan(reinterpret_cast<uint16_t*>(bytes.data()), bytes.size() / 2);
  }

  bool CpuRegionUnchanged() const {
    const absl::Span<uint16_t> region = CpuRegion();
    for (uint64_t i = 0; i < region.size(); ++i) {
      if (region[i] != PatternValue(i)) return false;
    }
    return true;
  }

  KvCacheConfig kv_;
  std::unique_ptr<ShmArena> arena_;
  std::unique_ptr<CpuWorker> worker_;
};

TEST_P(CpuPathProbeTest, OnePointPerSizeInWholeBlocks) {
  // 1 token is one block; 33 tokens three; 7 blocks over 3 sequences (one holds more); all
  // 8 blocks of the region.
  const absl::StatusOr<internal::PathProbeResponse> probed = worker_->ProbeCpuPath(
      ProbeRequest({1, 33, 7 * kBlockTokens, kCpuBlocks * kBlockTokens}));
  ASSERT_TRUE(probed.ok()) << probed.status();
  ASSERT_EQ(probed->points_size(), 4);
  const uint64_t expected[] = {kBlockTokens, 3 * kBlockTokens, 7 * kBlockTokens,
                               kCpuBlocks * kBlockTokens};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(probed->points(i).tokens(), expected[i]);
    EXPECT_GT(probed->points(i).ns_per_layer(), 0.0);
    EXPECT_TRUE(std::isfinite(probed->points(i).ns_per_layer()));
    // The fastest run is reported; the slowest beside it.
    EXPECT_GE(probed->points(i).slowest_ns_per_layer(), probed->points(i).ns_per_layer());
    EXPECT_TRUE(std::isfinite(probed->points(i).slowest_ns_per_layer()));
  }
  EXPECT_GT(probed->ms(), 0.0);
  EXPECT_TRUE(CpuRegionUnchanged());
  // A few layers only, one sequence: still one point per size.
  internal::PathProbeRequest few = ProbeRequest({2 * kBlockTokens});
  few.set_layers(1);
  few.set_sequences(1);
  few.set_repeats(1);
  const absl::StatusOr<internal::PathProbeResponse> one = worker_->ProbeCpuPath(few);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->points_size(), 1);
  EXPECT_EQ(one->points(0).tokens(), 2 * kBlockTokens);
  EXPECT_TRUE(CpuRegionUnchanged());
}

TEST_P(CpuPathProbeTest, BadRequestsAreInvalidArgumentsThatSayWhy) {
  EXPECT_THAT(worker_->ProbeCpuPath(ProbeRequest({})).status().message(), HasSubstr("no sizes"));
  EXPECT_THAT(worker_->ProbeCpuPath(ProbeRequest({0})).status().message(),
              HasSubstr("needs 1 to the 8 slots"));
  EXPECT_THAT(
      worker_->ProbeCpuPath(ProbeRequest({16, (kCpuBlocks + 1) * kBlockTokens})).status().message(),
      HasSubstr("probe point 1"));
  internal::PathProbeRequest request = ProbeRequest({16});
  request.set_sequences(0);
  EXPECT_THAT(worker_->ProbeCpuPath(request).status().message(), HasSubstr("sequences = 0"));
  request.set_sequences(5);
  EXPECT_THAT(worker_->ProbeCpuPath(request).status().message(), HasSubstr("sequences = 5"));
  request.set_sequences(1);
  request.set_repeats(0);
  EXPECT_THAT(worker_->ProbeCpuPath(request).status().message(), HasSubstr("repeats = 0"));
  request.set_repeats(101);
  EXPECT_THAT(worker_->ProbeCpuPath(request).status().message(), HasSubstr("repeats = 101"));
  for (const internal::PathProbeRequest& bad : {ProbeRequest({}), ProbeRequest({0}), request}) {
    EXPECT_EQ(worker_->ProbeCpuPath(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(CpuRegionUnchanged());
  // Served on afterwards.
  EXPECT_TRUE(worker_->ProbeCpuPath(ProbeRequest({kBlockTokens})).ok());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CpuPathProbeTest,
                         ::testing::Values("qwen3_moe", "mixtral", "deepseek_v2"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace writescope::cpu
