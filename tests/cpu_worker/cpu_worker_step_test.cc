// The cpu_worker's RunStep waits for the gpu_worker's end of the step on the data plane. It
// must not outlive its reason to wait: a caller that gave up (the coordinator cancels it when
// the gpu_worker's side failed before it began, so no end comes), a stop (gRPC's shutdown
// waits for the handlers in progress, whatever its deadline), or a data plane that ended on
// its own (steps then fail at once and the worker says it no longer serves, until the
// channels are reset). One CpuWorker in this process, on the Qwen3 fixture's arena; no
// gpu_worker: no step here ever ends normally.

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/data_plane.h"
#include "common/data_plane_messages.h"
#include "common/kv_config.h"
#include "common/shm_arena.h"
#include "cpu_worker/cpu_worker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/fixture_arena.h"

namespace writescope::cpu {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kBlockTokens = 16;

internal::StepPlan EmptyStep(uint64_t step_id) {
  internal::StepPlan plan;
  plan.set_step_id(step_id);
  return plan;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class CpuWorkerStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::FixtureArena> fixture = testing::MakeFixtureArena(
        "qwen3_moe", kBlockTokens, "cpu-step-test", [](KvCacheConfig& kv) {
          kv.window_tokens = 2 * kBlockTokens;
          kv.max_sequences = 2;
          kv.cpu_compute_bytes = 4 * kv.geometry.block_bytes();
          kv.gpu_transfer_bytes = 4 * kv.geometry.block_bytes();
          kv.gpu_kv_budget_bytes = kv.window_bytes() + 2 * 4 * kv.geometry.layer_block_bytes();
        });
    if (absl::IsNotFound(fixture.status())) GTEST_SKIP() << fixture.status().message();
    ASSERT_TRUE(fixture.ok()) << fixture.status();
    arena_ = std::move(fixture->arena);
    load_ = fixture->load;
    worker_ = std::make_unique<CpuWorker>();
    worker_->set_serving_observer([this](bool serving) {
      serving_reports_.fetch_add(1);
      serving_.store(serving);
    });
    absl::StatusOr<internal::LoadResponse> loaded = worker_->Load(load_);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
  }

  void TearDown() override {
    if (worker_ != nullptr) worker_->Stop();
  }

  // RunStep of an empty step on another thread, its caller gone once `give_up` is set.
  std::future<absl::StatusOr<internal::StepResult>> StartStep(uint64_t step_id,
                                                              const std::atomic<bool>* give_up) {
    return std::async(std::launch::async, [this, step_id, give_up] {
      return worker_->RunStep(EmptyStep(step_id),
                              [give_up] { return give_up != nullptr && give_up->load(); });
    });
  }

  std::unique_ptr<ShmArena> arena_;
  internal::LoadRequest load_;
  std::unique_ptr<CpuWorker> worker_;
  std::atomic<int> serving_reports_{0};
  std::atomic<bool> serving_{true};
};

TEST_F(CpuWorkerStepTest, AStepWhoseCallerGaveUpEndsCancelled) {
  std::atomic<bool> give_up{false};
  auto step = StartStep(1, &give_up);
  // Waiting: no end comes.
  EXPECT_EQ(step.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  const auto gave_up_at = Clock::now();
  give_up.store(true);
  ASSERT_EQ(step.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_LT(SecondsSince(gave_up_at), 1.0);
  const absl::StatusOr<internal::StepResult> result = step.get();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(result.status().message(), HasSubstr("step 1"));
  // The step is gone: the same id may run again (it waits again), and the CPU path can be
  // probed between steps.
  std::atomic<bool> give_up_again{false};
  auto again = StartStep(1, &give_up_again);
  EXPECT_EQ(again.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  give_up_again.store(true);
  EXPECT_EQ(again.get().status().code(), absl::StatusCode::kCancelled);
  internal::PathProbeRequest probe = testing::ProbeRequest({kBlockTokens});
  probe.set_sequences(1);
  const absl::StatusOr<internal::PathProbeResponse> probed = worker_->ProbeCpuPath(probe);
  EXPECT_TRUE(probed.ok()) << probed.status();
  EXPECT_EQ(serving_reports_.load(), 0);  // still serving: nothing reported
}

TEST_F(CpuWorkerStepTest, BeginStopEndsAWaitingStepAndRefusesLaterCalls) {
  auto step = StartStep(7, nullptr);
  EXPECT_EQ(step.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  const auto stop_at = Clock::now();
  worker_->BeginStop();
  ASSERT_EQ(step.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_LT(SecondsSince(stop_at), 1.0);
  const absl::StatusOr<internal::StepResult> result = step.get();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(result.status().message(), HasSubstr("stopping"));
  // Later steps end at once.
  const auto later_at = Clock::now();
  const absl::StatusOr<internal::StepResult> later =
      worker_->RunStep(EmptyStep(8), [] { return false; });
  EXPECT_EQ(later.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(SecondsSince(later_at), 1.0);
}

TEST_F(CpuWorkerStepTest, ADataPlaneThatEndsOnItsOwnFailsStepsAtOnceUntilReset) {
  std::atomic<bool> give_up{false};
  auto pending = StartStep(3, &give_up);
  EXPECT_EQ(pending.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  // The channel the cpu_worker reads closes under it (what the coordinator does when the
  // other worker dies; a corrupt message ends the loop the same way).
  absl::StatusOr<DataPlane> plane = AttachDataPlane(*arena_);
  ASSERT_TRUE(plane.ok()) << plane.status();
  plane->to_cpu.Close();
  // The step in progress fails, with the reason.
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const absl::StatusOr<internal::StepResult> failed = pending.get();
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(failed.status().message(), HasSubstr("data plane"));
  // The worker said it no longer serves.
  for (int i = 0; i < 100 && serving_reports_.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(serving_reports_.load(), 1);
  EXPECT_FALSE(serving_.load());
  // A later step fails at once instead of waiting for an end that cannot come.
  const auto later_at = Clock::now();
  const absl::StatusOr<internal::StepResult> later =
      worker_->RunStep(EmptyStep(4), [] { return false; });
  EXPECT_EQ(later.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(later.status().message(), HasSubstr("step 4: the data plane closed"));
  EXPECT_LT(SecondsSince(later_at), 1.0);
  // The coordinator's recovery: detach, fresh channels, attach. Steps wait again.
  ASSERT_TRUE(worker_->ResetDataPlane(/*attach=*/false).ok());
  ASSERT_TRUE(CreateDataPlane(*arena_).ok());
  ASSERT_TRUE(worker_->ResetDataPlane(/*attach=*/true).ok());
  std::atomic<bool> give_up_after{false};
  auto after = StartStep(5, &give_up_after);
  EXPECT_EQ(after.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  give_up_after.store(true);
  EXPECT_EQ(after.get().status().code(), absl::StatusCode::kCancelled);
}

TEST_F(CpuWorkerStepTest, AMessageOfAStepWithoutAPlanWhileStoppingIsAnsweredUnavailable) {
  // The gpu_worker's side of a step whose RunStep the stopping worker refused: its first
  // message waits for the plan, and the stop ends the wait. The answer must say the worker
  // is going away (the coordinator tells the client UNAVAILABLE), not that the step broke.
  absl::StatusOr<DataPlane> plane = AttachDataPlane(*arena_);
  ASSERT_TRUE(plane.ok()) << plane.status();
  const DataPlaneHeader query{DataPlaneMessage::kAttention, 2, 11, 0};
  std::vector<std::byte> message(sizeof(query));
  std::memcpy(message.data(), &query, sizeof(query));
  ASSERT_TRUE(plane->to_cpu.Send(message, absl::Seconds(5)).ok());
  // Taken and waiting for a plan (up to 5 s) by then; a stop before the loop takes it would
  // end the loop without an answer.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  worker_->BeginStop();
  absl::StatusOr<absl::Span<const std::byte>> reply = plane->to_gpu.Peek(absl::Seconds(5));
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_GE(reply->size(), sizeof(DataPlaneHeader));
  DataPlaneHeader header;
  std::memcpy(&header, reply->data(), sizeof(header));
  EXPECT_EQ(header.type, DataPlaneMessage::kError);
  EXPECT_EQ(header.step_id, 11u);
  EXPECT_EQ(header.layer, 2u);
  ASSERT_EQ(header.payload_bytes, reply->size() - sizeof(header));
  const absl::Status status = ReadErrorPayload(reply->subspan(sizeof(header)), "");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("stopping"));
  plane->to_gpu.Release();
}

TEST_F(CpuWorkerStepTest, ALoadAfterBeginStopIsRefused) {
  worker_->Stop();  // unloads
  CpuWorker fresh;
  fresh.BeginStop();
  EXPECT_EQ(fresh.Load(load_).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace writescope::cpu
