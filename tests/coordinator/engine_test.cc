// The coordinator's engine (batching, admission, sampling, lifecycle) against fake workers:
// the fake gpu_worker's logits put all mass on (last token + 1) % vocab, so every greedy
// continuation is known; it samples them with the real Sampler and the plan's draw. Several
// threads submit, abort and fail requests at once; the TSan subset of deploy/sanitize.sh
// runs these tests (the batching code's threads without gRPC's).
#include "coordinator/engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "common/step_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/test_util.h"
#include "tests/coordinator/engine_fixture.h"

namespace writescope::coordinator {
namespace {

// Answers every step; the gpu side returns the logits, the cpu side nothing.
class FakeWorker final : public StepWorker {
 public:
  FakeWorker(bool gpu, int64_t vocab) : gpu_(gpu), vocab_(vocab) {}

  absl::StatusOr<internal::StepResult> RunStep(const internal::StepPlan& plan,
                                               absl::Duration) override {
    // As both real workers do: the plan must be one they can lay out (no slot read or written
    // twice, a prefill's new blocks and a flush's where they belong, every slot in its region).
    if (kv_ != nullptr) {
      const absl::StatusOr<StepLayout> layout = MakeStepLayout(plan, *kv_);
      if (!layout.ok()) {
        ADD_FAILURE() << "step " << plan.step_id() << " cannot be laid out: " << layout.status();
        return layout.status();
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(step_us_.load()));  // a step takes time
    {
      std::lock_guard<std::mutex> lock(plans_mutex_);
      plans_kv_moved_.push_back(plan.kv_moved());
    }
    if (fail_next_.exchange(false) ||
        (fail_in_steps_.load() > 0 && fail_in_steps_.fetch_sub(1) == 1)) {
      return absl::Status(fail_code_.load(), "injected step failure");
    }
    if (plan.kv_moved() && fail_next_moved_.exchange(false)) {
      return absl::InternalError("injected failure of a step that carried kv_moved");
    }
    if (plan.kv_moved()) kv_moved_plans_.fetch_add(1);
    if (plan.exploring()) {
      std::lock_guard<std::mutex> lock(exploring_mutex_);
      exploring_steps_.push_back(plan.step_id());
      if (plan.exploration_continues()) continuing_steps_.push_back(plan.step_id());
    }
    const uint64_t step = steps_.fetch_add(1) + 1;
    internal::StepResult result;
    result.set_step_id(plan.step_id());
    result.set_num_layers(2);
    // Attention reports as the workers make them: the CPU side's tokens are the CPU-compute
    // blocks it attends in place, the GPU side's the rest of the host tokens.
    uint64_t cpu_tokens = 0, host_tokens = 0, gpu_runs = 0;
    for (const internal::SequenceStep& step : plan.sequences()) {
      if (!step.prefill() && step.gpu_reads_cpu_blocks()) gpu_read_decode_steps_.fetch_add(1);
      for (const internal::BlockRun& run : step.blocks()) {
        host_tokens += run.num_tokens();
        if (run.region() == internal::REGION_CPU_COMPUTE && !step.gpu_reads_cpu_blocks()) {
          cpu_tokens += run.num_tokens();
        } else {
          ++gpu_runs;
        }
      }
    }
    if (gpu_) {
      // One copy per streamed run of every layer, and a fixed CPU time of the process.
      result.set_transfer_copies(gpu_runs * 2);
      result.set_process_cpu_ms(0.25);
    }
    const uint64_t attended = gpu_ ? host_tokens - cpu_tokens : cpu_tokens;
    const bool split = cpu_tokens > 0;
    if (gpu_ && upload_at_step_.load() > 0 && step >= upload_at_step_.load() &&
        !plan.exploring() && !last_exploring_ && split == last_split_) {
      upload_at_step_ = 0;
      // The hot experts' upload after this step: it takes time, reported or not.
      std::this_thread::sleep_for(std::chrono::milliseconds(upload_ms_));
      if (report_upload_) result.set_hot_upload_ms(static_cast<double>(upload_ms_));
    }
    last_split_ = split;
    last_exploring_ = plan.exploring();
    // As the gpu_worker reports it: the rounds queued after the previous step missed when
    // this decode step streams the CPU-compute blocks of other sequences.
    std::vector<uint64_t> gpu_reads_cpu;
    for (const internal::SequenceStep& step : plan.sequences()) {
      if (step.gpu_reads_cpu_blocks()) gpu_reads_cpu.push_back(step.seq_id());
    }
    if (gpu_ && gpu_reads_cpu != last_gpu_reads_cpu_ && step > 1) result.set_early_rounds_missed(2);
    last_gpu_reads_cpu_ = std::move(gpu_reads_cpu);
    // The time is spent too, so that the step's wall time agrees with the reports.
    const double attention_ns = static_cast<double>(attended) * ns_per_token_.load() * 2;
    std::this_thread::sleep_for(std::chrono::nanoseconds(static_cast<int64_t>(attention_ns)));
    result.set_attended_tokens(attended);
    result.set_attention_ms(attention_ns / 1e6);
    result.set_first_layer_attention_ms(attention_ns / 2 / 1e6);  // its layers alike
    if (!gpu_) return result;
    for (const internal::SequenceStep& step : plan.sequences()) {
      internal::SequenceResult* out = result.add_sequences();
      out->set_seq_id(step.seq_id());
      if (step.has_sample_next()) {
        // Samples as the gpu_worker does, with the coordinator's draw.
        const uint32_t last = step.token_ids(step.num_tokens() - 1);
        std::vector<float> logits(vocab_);
        for (int64_t v = 0; v < vocab_; ++v) logits[v] = v == (last + 1) % vocab_ ? 10.0f : 0.0f;
        const internal::TokenSampling& in = step.sample_next();
        {
          std::lock_guard<std::mutex> lock(sampling_mutex_);
          samplings_.push_back(in);
          fed_[step.seq_id()].push_back(last);
        }
        Sampler sampler(SamplerOptions{.temperature = in.temperature(), .top_k = in.top_k(),
                                       .top_p = in.top_p(), .num_top = in.num_top()});
        const SampledToken token = sampler.Sample(logits, in.draw());
        internal::SampledToken* next = out->mutable_next_token();
        next->set_token_id(static_cast<uint32_t>(token.token_id));
        next->set_logprob(token.logprob);
        for (const TokenLogprob& alt : token.top) {
          next->add_top_ids(static_cast<uint32_t>(alt.token_id));
          next->add_top_logprobs(alt.logprob);
        }
      }
      if (step.want_prompt_logprobs()) {
        const int targets = step.num_tokens() - (step.next_prompt_token() >= 0 ? 0 : 1);
        for (int t = 0; t < targets; ++t) out->add_prompt_logprobs(-1.0f);
      }
    }
    return result;
  }
  void CancelStep(uint64_t) override {}
  // The GPU path's probe: time = probe_ns_per_token_ · tokens + 50 µs (a GPU fake only).
  absl::StatusOr<internal::PathProbeResponse> ProbeGpuPath(
      const internal::PathProbeRequest& request, absl::Duration) override {
    if (!gpu_) return absl::UnimplementedError("not a gpu_worker");
    return Probe(request);
  }
  // The CPU path's: the same line (a CPU fake only).
  absl::StatusOr<internal::PathProbeResponse> ProbeCpuPath(
      const internal::PathProbeRequest& request, absl::Duration) override {
    if (gpu_) return absl::UnimplementedError("not a cpu_worker");
    return Probe(request);
  }
  absl::StatusOr<internal::PathProbeResponse> Probe(const internal::PathProbeRequest& request) {
    probes_.fetch_add(1);
    if (probe_fails_.load()) return absl::InternalError("injected probe failure");
    std::lock_guard<std::mutex> lock(probe_mutex_);
    last_probe_ = request;
    internal::PathProbeResponse response;
    for (const uint64_t tokens : request.tokens()) {
      internal::PathProbePoint* point = response.add_points();
      point->set_tokens(tokens);
      point->set_ns_per_layer(probe_ns_per_token_ * static_cast<double>(tokens) + 50000);
    }
    response.set_ms(1.5);
    return response;
  }

  std::atomic<int> step_us_{200};
  const KvCacheConfig* kv_ = nullptr;  // where set, every plan is laid out first
  std::atomic<bool> fail_next_{false};
  // > 0: the step this many steps ahead (1: the next) fails.
  std::atomic<int> fail_in_steps_{0};
  // The code of the injected failures.
  std::atomic<absl::StatusCode> fail_code_{absl::StatusCode::kInternal};
  // Fails the next plan marked kv_moved (after recording it).
  std::atomic<bool> fail_next_moved_{false};
  // Every plan's StepPlan.kv_moved, failed ones included, in order.
  std::mutex plans_mutex_;
  std::vector<bool> plans_kv_moved_;  // guarded by plans_mutex_
  // The gpu side's hot-expert upload: after its first step from number upload_at_step_ on
  // (1-based) that reads as the step before it and neither explores (a step that reads
  // otherwise than the KV rounds queued for it teaches the scheduler nothing,
  // switch_settle_steps: the upload there went unlearned, reported or not).
  std::atomic<uint64_t> upload_at_step_{0};
  bool last_split_ = false;      // the previous step's CPU attended something
  bool last_exploring_ = false;  // the previous step explored
  std::vector<uint64_t> last_gpu_reads_cpu_;  // the sequences whose CPU blocks it streamed
  int upload_ms_ = 1200;
  bool report_upload_ = true;
  std::atomic<uint64_t> probes_{0};
  std::atomic<bool> probe_fails_{false};
  double probe_ns_per_token_ = 3.0;
  std::mutex probe_mutex_;
  internal::PathProbeRequest last_probe_;  // guarded by probe_mutex_
  std::atomic<uint64_t> steps_{0};
  // The attention time it reports per host token it attends and layer.
  std::atomic<double> ns_per_token_{1.0};
  // Plans marked StepPlan.kv_moved (blocks moved since the step before).
  std::atomic<uint64_t> kv_moved_plans_{0};
  // Decode sequences planned with their CPU-compute blocks on the GPU.
  std::atomic<uint64_t> gpu_read_decode_steps_{0};
  // The step ids of the plans marked exploring (StepPlan.exploring).
  std::mutex exploring_mutex_;
  std::vector<uint64_t> exploring_steps_;  // guarded by exploring_mutex_
  // Of those, the ones marked StepPlan.exploration_continues.
  std::vector<uint64_t> continuing_steps_;  // guarded by exploring_mutex_
  // Every token's sampling options and draw, as the gpu side got them.
  std::mutex sampling_mutex_;
  std::vector<internal::TokenSampling> samplings_;  // guarded by sampling_mutex_
  // Each sequence's tokens fed before a sampling, in order.
  std::map<uint64_t, std::vector<uint32_t>> fed_;  // guarded by sampling_mutex_

 private:
  bool gpu_;
  int64_t vocab_;
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::TinyEngineModel();
    auto resolved = testing::TinyEngineKv(model_, /*max_sequences=*/6);
    WS_ASSERT_OK(resolved.status());
    kv_ = *resolved;
    auto placement = KvPlacement::Create(kv_);
    WS_ASSERT_OK(placement.status());
    placement_ = *std::move(placement);
    gpu_ = std::make_unique<FakeWorker>(true, model_.vocab_size);
    cpu_ = std::make_unique<FakeWorker>(false, model_.vocab_size);
    gpu_->kv_ = &kv_;
    cpu_->kv_ = &kv_;
    ASSERT_NO_FATAL_FAILURE(StartEngine(SchedulerOptions{}));
  }
  // A `policy` scheduler with `options` and an engine over it (with `copier`, if any),
  // serving; the engine before it, if any, stopped.
  void StartEngine(SchedulerOptions options, const std::string& policy = "writescope",
                   BlockCopier copier = nullptr) {
    if (engine_ != nullptr) engine_->Stop();
    auto scheduler = Scheduler::Create(policy, options);
    WS_ASSERT_OK(scheduler.status());
    scheduler_ = *std::move(scheduler);
    EngineOptions engine_options;
    engine_options.max_step_tokens = 64;
    engine_options.queue_capacity = 8;
    engine_ = std::make_unique<Engine>(engine_options, model_, kv_, &placement_mutex_,
                                       placement_.get(), scheduler_.get(), gpu_.get(), cpu_.get(),
                                       &metrics_);
    if (copier) engine_->set_block_copier(std::move(copier));
    engine_->set_serving(true);
    engine_->Start();
  }
  void TearDown() override { engine_->Stop(); }
  // The engine again over the same scheduler, with `limit` log-probabilities a chunk.
  void RestartWithChunkLimit(uint32_t limit) {
    engine_->Stop();
    EngineOptions options;
    options.max_step_tokens = 64;
    options.logprobs_per_chunk = limit;
    engine_ = std::make_unique<Engine>(options, model_, kv_, &placement_mutex_, placement_.get(),
                                       scheduler_.get(), gpu_.get(), cpu_.get());
    engine_->set_serving(true);
    engine_->Start();
  }

  static v1::GenerateRequest Request(std::vector<uint32_t> prompt, uint32_t max_tokens,
                                     const std::string& id = "") {
    v1::GenerateRequest request;
    request.set_request_id(id);
    request.mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
    request.mutable_sampling()->set_max_tokens(max_tokens);
    return request;
  }

  static v1::BenchRequest Bench(uint32_t batch, uint64_t context_tokens, uint32_t decode_steps,
                                uint32_t warmup_steps) {
    v1::BenchRequest request;
    request.set_batch(batch);
    request.set_context_tokens(context_tokens);
    request.set_decode_steps(decode_steps);
    request.set_warmup_steps(warmup_steps);
    return request;
  }

  struct Outcome {
    std::vector<uint32_t> tokens;
    bool complete = false;
    v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
    absl::Status status;
  };
  static Outcome Drain(RequestStream& stream) {
    Outcome outcome;
    v1::GenerateResponse response;
    bool done = false;
    while (true) {
      if (stream.Next(&response, absl::Seconds(10), &done)) {
        if (response.has_chunk()) {
          outcome.tokens.insert(outcome.tokens.end(), response.chunk().token_ids().begin(),
                                response.chunk().token_ids().end());
        }
        if (response.has_complete()) {
          outcome.complete = true;
          outcome.reason = response.complete().finish_reason();
        }
        continue;
      }
      if (done) break;
      ADD_FAILURE() << "the stream did not end within 10 s";
      break;
    }
    outcome.status = stream.final_status();
    return outcome;
  }
  // The fake's greedy continuation of a prompt ending in `last`.
  std::vector<uint32_t> Expected(uint32_t last, uint32_t n) const {
    std::vector<uint32_t> out;
    for (uint32_t i = 0; i < n; ++i) out.push_back(last = (last + 1) % model_.vocab_size);
    return out;
  }
  uint32_t UsedBlocks() {
    std::lock_guard<std::mutex> lock(placement_mutex_);
    return placement_->Usage(KvRegion::kCpuCompute).used_blocks +
           placement_->Usage(KvRegion::kGpuTransfer).used_blocks;
  }

  // Every sequence slot (max_sequences, 6) taken by a long request ("run-0".."run-5"), on
  // slow steps (none ends meanwhile), and a seventh request waiting for a slot.
  struct Crowd {
    std::vector<std::shared_ptr<RequestStream>> running;
    std::shared_ptr<RequestStream> waiting;
  };
  void FillTheSlotsAndQueueOne(Crowd* crowd) {
    gpu_->step_us_ = 5000;
    for (int i = 0; i < 6; ++i) {
      auto stream = engine_->Submit(Request({1, 2}, 150, absl::StrCat("run-", i)),
                                    absl::InfiniteFuture());
      WS_ASSERT_OK(stream.status());
      crowd->running.push_back(*stream);
    }
    auto waiting = engine_->Submit(Request({3}, 4), absl::InfiniteFuture());
    WS_ASSERT_OK(waiting.status());
    crowd->waiting = *waiting;
    for (int i = 0; i < 200 && engine_->Counts().running < 6; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(engine_->Counts().running, 6u);
    ASSERT_EQ(engine_->Counts().waiting, 1u);
  }

  ModelConfig model_;
  KvCacheConfig kv_;
  std::mutex placement_mutex_;
  std::unique_ptr<KvPlacement> placement_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<FakeWorker> gpu_, cpu_;
  Metrics metrics_;  // outlives engine_ (declared before it)
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTest, GreedyContinuationAcrossChunksAndFlushes) {
  // 100 prompt tokens: chunks of whole 16-token blocks; 70 new tokens cross the 32-token
  // D-window twice.
  std::vector<uint32_t> prompt(100);
  for (uint32_t i = 0; i < prompt.size(); ++i) prompt[i] = (i * 7) % 200;
  auto stream = engine_->Submit(Request(prompt, 70), absl::InfiniteFuture());
  WS_ASSERT_OK(stream.status());
  const Outcome outcome = Drain(**stream);
  WS_EXPECT_OK(outcome.status);
  EXPECT_TRUE(outcome.complete);
  EXPECT_EQ(outcome.reason, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(outcome.tokens, Expected(prompt.back(), 70));
  EXPECT_EQ(UsedBlocks(), 0u);
  EXPECT_EQ(engine_->Counts().generated_tokens, 70u);
}

TEST_F(EngineTest, ConcurrentSubmittersGetTheirOwnTokens) {
  std::vector<std::thread> threads;
  std::atomic<int> good{0}, exhausted{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 4; ++r) {
        const uint32_t n = 5 + 13 * ((t + r) % 5);
        std::vector<uint32_t> prompt(n, static_cast<uint32_t>(t * 10 + r));
        auto stream = engine_->Submit(Request(prompt, 12), absl::InfiniteFuture());
        if (!stream.ok()) {
          // A full queue is the only acceptable refusal here.
          EXPECT_EQ(stream.status().code(), absl::StatusCode::kResourceExhausted) << stream.status();
          exhausted.fetch_add(1);
          continue;
        }
        const Outcome outcome = Drain(**stream);
        EXPECT_TRUE(outcome.status.ok()) << outcome.status;
        EXPECT_EQ(outcome.tokens, Expected(prompt.back(), 12));
        good.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(good + exhausted, 24);
  EXPECT_GT(good, 0);
  EXPECT_EQ(UsedBlocks(), 0u);
  EXPECT_EQ(engine_->Counts().running, 0u);
}

TEST_F(EngineTest, AbortAndFailAllFromOtherThreads) {
  std::vector<uint32_t> prompt(20, 3);
  auto aborted = engine_->Submit(Request(prompt, 1000, "victim"), absl::InfiniteFuture());
  WS_ASSERT_OK(aborted.status());
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(engine_->Abort("victim"));
  });
  const Outcome abort_outcome = Drain(**aborted);
  aborter.join();
  WS_EXPECT_OK(abort_outcome.status);
  EXPECT_EQ(abort_outcome.reason, v1::FINISH_REASON_ABORT);
  EXPECT_FALSE(engine_->Abort("victim"));

  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    auto stream = engine_->Submit(Request(prompt, 1000), absl::InfiniteFuture());
    WS_ASSERT_OK(stream.status());
    streams.push_back(*stream);
  }
  std::thread failer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    engine_->FailAll(absl::UnavailableError("worker lost"));
  });
  for (auto& stream : streams) {
    const Outcome outcome = Drain(*stream);
    EXPECT_EQ(outcome.status.code(), absl::StatusCode::kUnavailable) << outcome.status;
  }
  failer.join();
  EXPECT_EQ(UsedBlocks(), 0u);
  // Serving goes on.
  auto next = engine_->Submit(Request(prompt, 5), absl::InfiniteFuture());
  WS_ASSERT_OK(next.status());
  EXPECT_EQ(Drain(**next).tokens, Expected(3, 5));
}

TEST_F(EngineTest, AStepFailureEndsItsRequestsOnly) {
  std::vector<uint32_t> prompt(10, 9);
  gpu_->fail_next_ = true;
  auto failed = engine_->Submit(Request(prompt, 5), absl::InfiniteFuture());
  WS_ASSERT_OK(failed.status());
  EXPECT_EQ(Drain(**failed).status.code(), absl::StatusCode::kInternal);
  auto next = engine_->Submit(Request(prompt, 5), absl::InfiniteFuture());
  WS_ASSERT_OK(next.status());
  EXPECT_EQ(Drain(**next).tokens, Expected(9, 5));
  EXPECT_EQ(UsedBlocks(), 0u);
}

// A failed step ends its requests with what it means to their clients: a worker's refusal of
// the plan (INVALID_ARGUMENT and the like) is the service's fault, INTERNAL; a worker call
// past --step_timeout (DEADLINE_EXCEEDED) or cancelled leaves the service UNAVAILABLE; the
// codes a client can act on as they are.
TEST_F(EngineTest, AStepFailureTellsTheClientWhatItMeans) {
  const std::vector<uint32_t> prompt(10, 9);
  const std::pair<absl::StatusCode, absl::StatusCode> cases[] = {
      {absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kUnavailable},
      {absl::StatusCode::kCancelled, absl::StatusCode::kUnavailable},
      {absl::StatusCode::kInvalidArgument, absl::StatusCode::kInternal},
      {absl::StatusCode::kFailedPrecondition, absl::StatusCode::kInternal},
      {absl::StatusCode::kOutOfRange, absl::StatusCode::kInternal},
      {absl::StatusCode::kNotFound, absl::StatusCode::kInternal},
      {absl::StatusCode::kInternal, absl::StatusCode::kInternal},
      {absl::StatusCode::kUnavailable, absl::StatusCode::kUnavailable},
      {absl::StatusCode::kResourceExhausted, absl::StatusCode::kResourceExhausted}};
  for (const auto& [worker, client] : cases) {
    gpu_->fail_code_ = worker;
    gpu_->fail_next_ = true;
    auto failed = engine_->Submit(Request(prompt, 5), absl::InfiniteFuture());
    WS_ASSERT_OK(failed.status());
    const absl::Status status = Drain(**failed).status;
    EXPECT_EQ(status.code(), client) << absl::StatusCodeToString(worker) << ": " << status;
    EXPECT_THAT(status.message(), ::testing::HasSubstr("injected step failure"));
  }
  gpu_->fail_code_ = absl::StatusCode::kInternal;
  EXPECT_EQ(UsedBlocks(), 0u);
}

// A request that fails mid-generation first gets the tokens it had generated (a large
// stream_interval held them back), then the error.
TEST_F(EngineTest, AFailedRequestKeepsTheTokensItHad) {
  v1::GenerateRequest request = Request(std::vector<uint32_t>(10, 9), 1000);
  request.set_stream_interval(1000);
  gpu_->fail_in_steps_ = 12;  // the prompt's step, 10 decode steps, then the failure
  auto stream = engine_->Submit(request, absl::InfiniteFuture());
  WS_ASSERT_OK(stream.status());
  const Outcome outcome = Drain(**stream);
  EXPECT_EQ(outcome.status.code(), absl::StatusCode::kInternal) << outcome.status;
  EXPECT_FALSE(outcome.complete);
  EXPECT_EQ(outcome.tokens, Expected(9, 11));
  EXPECT_EQ(UsedBlocks(), 0u);
}

// A chunk holds at most logprobs_per_chunk generated tokens whatever stream_interval asks (a
// default client refuses a message over 4 MiB: ~22K tokens with 20 log-probabilities each).
TEST_F(EngineTest, AChunkHoldsAtMostItsLimitWhateverTheInterval) {
  RestartWithChunkLimit(5);
  v1::GenerateRequest request = Request({1, 2, 3}, 23);
  request.set_stream_interval(1000);
  request.mutable_sampling()->set_logprobs(3);
  auto stream = engine_->Submit(request, absl::InfiniteFuture());
  WS_ASSERT_OK(stream.status());
  std::vector<int> tokens_per_chunk;
  v1::GenerateResponse response;
  bool done = false;
  while (!done) {
    if ((*stream)->Next(&response, absl::Seconds(10), &done)) {
      if (response.has_chunk()) tokens_per_chunk.push_back(response.chunk().token_ids_size());
    } else if (!done) {
      ADD_FAILURE() << "the stream did not end within 10 s";
      break;
    }
  }
  // The first token at once, then chunks of the limit, the rest with the end.
  EXPECT_THAT(tokens_per_chunk, ::testing::ElementsAre(1, 5, 5, 5, 5, 2));
  EXPECT_EQ(UsedBlocks(), 0u);
}

// max_tokens 0 runs up to the model's context or as far as the KV regions hold the sequence,
// whichever ends first: here the regions (80 blocks of 16 tokens) before the context (4096).
TEST_F(EngineTest, MaxTokensZeroRunsAsFarAsTheKvRegionsHold) {
  auto stream = engine_->Submit(Request(std::vector<uint32_t>(10, 9), 0), absl::InfiniteFuture());
  WS_ASSERT_OK(stream.status());
  const Outcome outcome = Drain(**stream);
  WS_EXPECT_OK(outcome.status);
  EXPECT_EQ(outcome.reason, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(outcome.tokens.size(), 80u * 16 - 10);
  EXPECT_EQ(UsedBlocks(), 0u);
}

// The requests of a failed step end with its error; one that waited outside it (no
// sequence slot was free) runs after it, to its end.
TEST_F(EngineTest, AStepFailureSparesTheRequestsOutsideTheStep) {
  Crowd crowd;
  ASSERT_NO_FATAL_FAILURE(FillTheSlotsAndQueueOne(&crowd));
  gpu_->fail_next_ = true;
  for (const auto& stream : crowd.running) {
    EXPECT_EQ(Drain(*stream).status.code(), absl::StatusCode::kInternal);
  }
  gpu_->step_us_ = 200;
  const Outcome outcome = Drain(*crowd.waiting);
  WS_EXPECT_OK(outcome.status);
  EXPECT_EQ(outcome.tokens, Expected(3, 4));
  EXPECT_EQ(UsedBlocks(), 0u);
}

TEST_F(EngineTest, RefusalsNameTheirReason) {
  // A context larger than both regions together.
  auto huge = engine_->Submit(Request({1, 2, 3}, 4000), absl::InfiniteFuture());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("KV blocks"), absl::string_view::npos);
  // A bad request.
  auto bad = engine_->Submit(Request({}, 4), absl::InfiniteFuture());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  // A duplicate id in flight.
  auto first = engine_->Submit(Request({1, 2}, 1000, "same"), absl::InfiniteFuture());
  WS_ASSERT_OK(first.status());
  auto second = engine_->Submit(Request({1, 2}, 4, "same"), absl::InfiniteFuture());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  // The abort reaches the first request (the refused one replaced nothing).
  EXPECT_TRUE(engine_->Abort("same"));
  const Outcome first_outcome = Drain(**first);
  WS_EXPECT_OK(first_outcome.status);
  EXPECT_EQ(first_outcome.reason, v1::FINISH_REASON_ABORT);
  EXPECT_LT(first_outcome.tokens.size(), 1000u);
  // A deadline 30 ms ahead ends the request with DEADLINE_EXCEEDED and frees its blocks.
  auto late = engine_->Submit(Request({1, 2}, 1000), absl::Now() + absl::Milliseconds(30));
  WS_ASSERT_OK(late.status());
  EXPECT_EQ(Drain(**late).status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(UsedBlocks(), 0u);
  // The same where the stream is cancelled once the deadline has passed (gRPC cancels the
  // call at its deadline, and the service passes that on): a deadline, not an abort. A step of
  // 200 ms holds the engine past both, so it sees them together.
  gpu_->step_us_ = 200000;
  auto cancelled_late =
      engine_->Submit(Request({1, 2}, 1000), absl::Now() + absl::Milliseconds(30));
  WS_ASSERT_OK(cancelled_late.status());
  absl::SleepFor(absl::Milliseconds(60));
  (*cancelled_late)->Cancel();
  const Outcome cancelled_outcome = Drain(**cancelled_late);
  gpu_->step_us_ = 200;  // the fake's default
  EXPECT_EQ(cancelled_outcome.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(UsedBlocks(), 0u);
  // Nothing waits or runs after the refusals, and the refused id is free again.
  EXPECT_EQ(engine_->Counts().waiting, 0u);
  EXPECT_EQ(engine_->Counts().running, 0u);
  auto again = engine_->Submit(Request({1, 2}, 3, "same"), absl::InfiniteFuture());
  WS_ASSERT_OK(again.status());
  EXPECT_EQ(Drain(**again).tokens, Expected(2, 3));
  // Not serving.
  engine_->set_serving(false);
  EXPECT_EQ(engine_->Submit(Request({1}, 1), absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kUnavailable);
}

// A client cancels its call at its own deadline, which gRPC's rounding up of the timeout and
// the call's transit put a little before the server's copy: a deadline, not an abort, in the
// stream's status and in the metrics. A cancellation well before the deadline stays an abort.
TEST_F(EngineTest, ACancellationJustBeforeTheDeadlineIsTheDeadline) {
  gpu_->step_us_ = 5000;  // 1000 tokens take ~5 s: both requests run when their client cancels
  const absl::Time start = absl::Now();
  auto at_deadline = engine_->Submit(Request({1, 2}, 1000), start + absl::Seconds(1));
  auto early = engine_->Submit(Request({1, 2}, 1000), start + absl::Seconds(30));
  WS_ASSERT_OK(at_deadline.status());
  WS_ASSERT_OK(early.status());
  absl::SleepFor(start + absl::Milliseconds(990) - absl::Now());  // the slack: 1 % of 1 s + 10 ms
  (*at_deadline)->Cancel();
  (*early)->Cancel();
  const Outcome at_deadline_outcome = Drain(**at_deadline);
  const Outcome early_outcome = Drain(**early);
  gpu_->step_us_ = 200;  // the fake's default
  EXPECT_EQ(at_deadline_outcome.status.code(), absl::StatusCode::kDeadlineExceeded);
  WS_EXPECT_OK(early_outcome.status);
  EXPECT_EQ(early_outcome.reason, v1::FINISH_REASON_ABORT);
  const std::string rendered = metrics_.Render();
  EXPECT_THAT(rendered, ::testing::HasSubstr("writescope_requests_total{outcome=\"error\"} 1"));
  EXPECT_THAT(rendered, ::testing::HasSubstr("writescope_requests_total{outcome=\"abort\"} 1"));
  EXPECT_EQ(UsedBlocks(), 0u);
}

// A CPU whose attention costs far more than the GPU's: writescope's decode steps hand the
// CPU-compute blocks to the GPU (gpu_reads_cpu_blocks) and the CPU attends less than the
// placed share. (The fake's tokens do not depend on who reads; e2e_generate checks the
// values through the real workers.)
TEST_F(EngineTest, ASlowCpuPathHandsTheCpuBlocksToTheGpu) {
  const uint32_t bt = kv_.block_tokens();
  cpu_->ns_per_token_ = 20000;  // 20 µs per token and layer: ~2 ms per split step, any split loses
  gpu_->ns_per_token_ = 1.0;
  // One round, placed at the initial target (0.5) before anything is measured; then the
  // lines learn that the CPU path is slow.
  const v1::BenchRequest request = Bench(3, 4 * bt, 24, 0);
  absl::StatusOr<v1::BenchResponse> response = engine_->RunBench(request, absl::Seconds(30));
  WS_ASSERT_OK(response.status());
  EXPECT_GT(gpu_->gpu_read_decode_steps_.load(), 0u);
  int below_placed = 0, read_changes = 0;
  for (int i = 0; i < response->steps_size(); ++i) {
    const v1::BenchStep& step = response->steps(i);
    // Nothing placed moves, so every step, the round's last too (whose sequences end in
    // it and free their blocks), reports the CPU blocks placed at the start.
    EXPECT_GT(step.placed_cpu_share(), 0) << "step " << i;
    EXPECT_LE(step.read_cpu_share(), step.placed_cpu_share() + 1e-9) << "step " << i;
    below_placed += step.read_cpu_share() < step.placed_cpu_share() ? 1 : 0;
    // The gpu_worker's copies and CPU time reach the bench's steps.
    EXPECT_GT(step.gpu_transfer_copies(), 0u) << "step " << i;
    EXPECT_EQ(step.gpu_worker_cpu_ms(), 0.25) << "step " << i;
    // A change of the CPU's reads makes the (fake) gpu_worker miss its early rounds; the
    // bench's steps carry that.
    if (i > 0 && step.read_cpu_share() != response->steps(i - 1).read_cpu_share()) {
      EXPECT_EQ(step.early_rounds_missed(), 2u) << "step " << i;
      ++read_changes;
    }
  }
  EXPECT_GT(read_changes, 0);
  // The metrics count the decode steps by how they read and the exploring ones by what
  // started them (the bench's warm-up steps too, so at least the measured ones).
  const std::string rendered = metrics_.Render();
  const auto counter = [&](const std::string& series) {
    const size_t at = rendered.find("\n" + series + " ");
    return at == std::string::npos ? -1.0 : std::stod(rendered.substr(at + series.size() + 2));
  };
  int gpu_only_steps = 0, exploring_steps = 0;
  for (const v1::BenchStep& step : response->steps()) {
    gpu_only_steps += step.read_cpu_share() == 0 ? 1 : 0;
    exploring_steps += step.explore() ? 1 : 0;
    EXPECT_EQ(step.explore(), !step.explore_reason().empty());
  }
  EXPECT_GE(counter("writescope_decode_steps_total{read=\"gpu_only\"}"), gpu_only_steps);
  EXPECT_GE(counter("writescope_decode_steps_total{read=\"split\"}"), 0);
  double counted = 0;
  for (const char* reason :
       {"unmeasured", "repeat", "credit", "max_period", "guess", "rest_shift", "rest_rise"}) {
    const double n = counter(std::string("writescope_exploring_steps_total{reason=\"") + reason +
                             "\"}");
    EXPECT_GE(n, 0) << reason;
    counted += n;
  }
  EXPECT_GE(counted, exploring_steps);
  EXPECT_EQ(rendered.find("writescope_exploring_steps_total{reason=\"\"}"), std::string::npos);
  // The steps report the predictions they were chosen by (the lines are ready by the end).
  ASSERT_GE(response->steps_size(), 1);
  const v1::BenchStep& last = response->steps(response->steps_size() - 1);
  EXPECT_TRUE(std::isfinite(last.predicted_split_ms()));
  EXPECT_TRUE(std::isfinite(last.predicted_gpu_only_ms()));
  // And the rests in them, within them (GPU-only, the mode chosen here, has one; the split's
  // may not have been measured since its line was learned).
  ASSERT_TRUE(std::isfinite(last.rest_gpu_only_ms()));
  EXPECT_LE(last.rest_gpu_only_ms(), last.predicted_gpu_only_ms());
  if (std::isfinite(last.rest_split_ms())) {
    EXPECT_LE(last.rest_split_ms(), last.predicted_split_ms());
  }
  EXPECT_GT(below_placed, response->steps_size() / 2);
  // The plans of the exploring steps say so (after an exploration's last step the gpu_worker
  // queues the early KV rounds of the step before it), and only theirs.
  int explored = 0;
  {
    std::lock_guard<std::mutex> lock(gpu_->exploring_mutex_);
    for (const v1::BenchStep& step : response->steps()) {
      const bool marked = absl::c_linear_search(gpu_->exploring_steps_, step.step_id());
      EXPECT_EQ(marked, step.explore()) << "step " << step.step_id();
      explored += step.explore() ? 1 : 0;
    }
  }
  EXPECT_GT(explored, 0) << "no step explored: the check above saw only unmarked plans";
  // An exploration is two steps (switch_settle_steps = 1): its first plan says the next
  // continues it, and the next step explores too; its last plan does not.
  {
    std::lock_guard<std::mutex> lock(gpu_->exploring_mutex_);
    int continuing = 0;
    for (int i = 0; i < response->steps_size(); ++i) {
      const v1::BenchStep& step = response->steps(i);
      if (!absl::c_linear_search(gpu_->continuing_steps_, step.step_id())) continue;
      ++continuing;
      // An exploration may begin at the round's last step (the engine does not know that
      // the round ends there); its second step is then another round's or none.
      if (i + 1 == response->steps_size()) continue;
      EXPECT_TRUE(response->steps(i + 1).explore()) << "step " << response->steps(i + 1).step_id();
      EXPECT_FALSE(
          absl::c_linear_search(gpu_->continuing_steps_, response->steps(i + 1).step_id()));
    }
    EXPECT_GT(continuing, 0);
  }
  // The engine keeps serving afterwards, and frees everything.
  auto stream = engine_->Submit(Request({5, 6, 7}, 2 * kv_.window_tokens + 5), absl::InfiniteFuture());
  WS_ASSERT_OK(stream.status());
  EXPECT_EQ(Drain(**stream).tokens, Expected(7, 2 * kv_.window_tokens + 5));
  EXPECT_EQ(UsedBlocks(), 0u);
}

// Monolithic: when its target moves (the CPU path is slow, so r* falls to the probe share),
// the placed blocks move to it before the next step, which pays for the copies and tells
// the workers; writescope's stay where they were placed.
TEST_F(EngineTest, MonolithicReSplitsThePlacedBlocksWhenItsTargetMoves) {
  const uint32_t bt = kv_.block_tokens();
  struct Copies {
    std::mutex mutex;
    std::vector<std::pair<KvBlockRef, KvBlockRef>> moves;
  };
  auto copies = std::make_shared<Copies>();
  const auto copier = [copies](absl::Span<const BlockCopy> batch) {
    std::lock_guard<std::mutex> lock(copies->mutex);
    for (const BlockCopy& c : batch) copies->moves.push_back({c.from, c.to});
    std::this_thread::sleep_for(std::chrono::microseconds(100));  // a copy takes time
    return absl::OkStatus();
  };
  for (const std::string policy : {"monolithic", "writescope"}) {
    SCOPED_TRACE(policy);
    ASSERT_NO_FATAL_FAILURE(StartEngine(SchedulerOptions{}, policy, copier));
    cpu_->ns_per_token_ = 20000;  // the split loses: r* goes to the probe share
    gpu_->ns_per_token_ = 1.0;
    const uint64_t moved_plans_before = gpu_->kv_moved_plans_.load();
    absl::StatusOr<v1::BenchResponse> response =
        engine_->RunBench(Bench(3, 8 * bt, 24, 0), absl::Seconds(30));
    WS_ASSERT_OK(response.status());
    uint64_t moved = 0;
    int resplit_steps = 0;
    double first_placed = response->steps(0).placed_cpu_share();
    double last_placed = first_placed;
    for (const v1::BenchStep& step : response->steps()) {
      moved += step.resplit_blocks();
      if (step.resplit_blocks() > 0) {
        ++resplit_steps;
        EXPECT_GT(step.resplit_ms(), 0.0);
        // The step's wall time includes the copies.
        EXPECT_GE(step.step_ms(), step.resplit_ms());
        // The placement it read is the target's, within a block of each sequence.
        EXPECT_NEAR(step.placed_cpu_share(), step.target_cpu_share(), 1.0 / 8 + 1e-9);
      }
      if (policy != "monolithic") {
        EXPECT_EQ(step.resplit_ms(), 0.0);
      }
      last_placed = step.placed_cpu_share();
    }
    // Taken out under the copier's lock alone: the engine calls the copier holding the
    // placement mutex, which UsedBlocks below takes.
    std::vector<std::pair<KvBlockRef, KvBlockRef>> copied;
    {
      std::lock_guard<std::mutex> lock(copies->mutex);
      copied.swap(copies->moves);
    }
    if (policy == "monolithic") {
      EXPECT_GT(resplit_steps, 0);
      EXPECT_EQ(copied.size(), moved);
      EXPECT_LT(last_placed, first_placed);
      EXPECT_LT(last_placed, 0.25);
      for (const auto& [from, to] : copied) {
        EXPECT_EQ(from.region, KvRegion::kCpuCompute);
        EXPECT_EQ(to.region, KvRegion::kGpuTransfer);
      }
      EXPECT_EQ(gpu_->kv_moved_plans_.load() - moved_plans_before,
                static_cast<uint64_t>(resplit_steps));
    } else {
      EXPECT_EQ(moved, 0u);
      EXPECT_EQ(gpu_->kv_moved_plans_.load(), moved_plans_before);
      EXPECT_DOUBLE_EQ(last_placed, first_placed);
    }
    EXPECT_EQ(UsedBlocks(), 0u);
  }
}

// A step that carried kv_moved and failed may have failed before the gpu_worker dropped the
// KV rounds it had queued early (slots the re-split wrote): the next plan carries kv_moved
// again.
TEST_F(EngineTest, AFailedStepCarriesKvMovedOnToTheNext) {
  const auto copier = [](absl::Span<const BlockCopy>) { return absl::OkStatus(); };
  ASSERT_NO_FATAL_FAILURE(StartEngine(SchedulerOptions{}, "monolithic", copier));
  cpu_->ns_per_token_ = 20000;  // the split loses: r* goes to the probe share, blocks move
  gpu_->ns_per_token_ = 1.0;
  gpu_->fail_next_moved_ = true;
  const uint32_t bt = kv_.block_tokens();
  const absl::StatusOr<v1::BenchResponse> failed =
      engine_->RunBench(Bench(3, 8 * bt, 24, 0), absl::Seconds(30));
  EXPECT_FALSE(failed.ok());
  EXPECT_FALSE(gpu_->fail_next_moved_.load());  // a re-split ran and its step failed
  std::vector<uint32_t> prompt(10, 9);
  auto next = engine_->Submit(Request(prompt, 2), absl::InfiniteFuture());
  WS_ASSERT_OK(next.status());
  WS_EXPECT_OK(Drain(**next).status);
  std::vector<bool> plans;
  {
    std::lock_guard<std::mutex> lock(gpu_->plans_mutex_);
    plans = gpu_->plans_kv_moved_;
  }
  const auto first_moved = std::find(plans.begin(), plans.end(), true);
  ASSERT_NE(first_moved, plans.end());
  ASSERT_NE(first_moved + 1, plans.end());
  EXPECT_TRUE(*(first_moved + 1)) << "the plan after the failed one";
}

// The hot experts' one-off upload lengthens one step's wall time; the gpu_worker reports
// it and the scheduler does not learn it as the step's rest. Unreported (as before), its
// 600 ms per layer moves the rest of the mode that step ran by a quarter of it at least
// (still ~50 ms after the 4 steps left), far above the fake's ~1 ms steps.
class HotUploadTest : public EngineTest, public ::testing::WithParamInterface<bool> {};

TEST_P(HotUploadTest, TheUploadIsNotLearnedAsStepTime) {
  // The scheduler without its outlier hold and its median, which would drop the one slow step
  // too (SchedulerOptions::rest_outlier_factor, rest_median_of_three): this tests the report
  // alone.
  SchedulerOptions options;
  options.rest_outlier_factor = 0;
  options.rest_median_of_three = false;
  ASSERT_NO_FATAL_FAILURE(StartEngine(options));
  gpu_->report_upload_ = GetParam();
  const v1::BenchRequest request = Bench(2, 4 * kv_.block_tokens(), 16, 0);
  gpu_->upload_at_step_ = gpu_->steps_.load() + 12;  // the lines are ready by then
  absl::StatusOr<v1::BenchResponse> response = engine_->RunBench(request, absl::Seconds(30));
  WS_ASSERT_OK(response.status());
  std::lock_guard<std::mutex> lock(placement_mutex_);
  const double split = scheduler_->rest_split_ns(), gpu_only = scheduler_->rest_gpu_only_ns();
  ASSERT_TRUE(std::isfinite(split) || std::isfinite(gpu_only));
  const double largest = std::max(std::isfinite(split) ? split : 0.0,
                                  std::isfinite(gpu_only) ? gpu_only : 0.0);
  if (GetParam()) {
    EXPECT_LT(largest, 30e6) << "split " << split << ", GPU-only " << gpu_only;
  } else {
    EXPECT_GT(largest, 30e6) << "split " << split << ", GPU-only " << gpu_only;
  }
}

INSTANTIATE_TEST_SUITE_P(Reported, HotUploadTest, ::testing::Bool());

TEST_F(EngineTest, BenchPlacesTheContextAndReportsStepsOfTheWholeBatch) {
  const uint32_t bt = kv_.block_tokens();  // 16
  v1::BenchRequest request = Bench(3, 4 * bt, 6, 2);
  // Meanwhile a real request decodes beside the bench; its tokens stay its own.
  auto other = engine_->Submit(Request({5, 6, 7}, 30), absl::InfiniteFuture());
  WS_ASSERT_OK(other.status());
  absl::StatusOr<v1::BenchResponse> response = engine_->RunBench(request, absl::Seconds(30));
  WS_ASSERT_OK(response.status());
  // The bench contexts were placed, not prefilled: the only prompt tokens computed are the
  // other request's 3.
  // Steps in which all 3 measured sequences decoded: at most 6; every one tagged right.
  EXPECT_GE(response->steps_size(), 1);
  EXPECT_LE(response->steps_size(), 6);
  for (const v1::BenchStep& step : response->steps()) {
    EXPECT_GE(step.decode_sequences(), 3u);      // the bench's 3, and maybe the other one
    EXPECT_GE(step.host_tokens(), 3u * 4 * bt);  // each sequence's placed context
    EXPECT_GT(step.step_ms(), 0.0);
  }
  EXPECT_GT(response->tokens_per_second(), 0.0);
  EXPECT_GT(response->mean_step_ms(), 0.0);
  const Outcome outcome = Drain(**other);
  EXPECT_EQ(outcome.tokens, Expected(7, 30));
  EXPECT_EQ(engine_->Counts().prompt_tokens, 3u);
  // Everything freed.
  EXPECT_EQ(UsedBlocks(), 0u);

  // Refusals.
  request.set_batch(0);
  EXPECT_EQ(engine_->RunBench(request, absl::Seconds(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.set_batch(kv_.max_sequences + 1);
  EXPECT_EQ(engine_->RunBench(request, absl::Seconds(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.set_batch(2);
  request.set_context_tokens(bt + 1);  // not whole blocks
  EXPECT_EQ(engine_->RunBench(request, absl::Seconds(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.set_context_tokens(bt);
  request.set_decode_steps(0);
  EXPECT_EQ(engine_->RunBench(request, absl::Seconds(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.set_decode_steps(Engine::kMaxStepRecords);  // more than the records keep
  EXPECT_EQ(engine_->RunBench(request, absl::Seconds(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // More KV than the regions hold: RESOURCE_EXHAUSTED at once, nothing left behind.
  request.set_decode_steps(4);
  request.set_context_tokens(80 * bt);
  EXPECT_EQ(engine_->RunBench(request, absl::Seconds(5)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(UsedBlocks(), 0u);
  // Beyond the model's context (and absurd sizes): INVALID_ARGUMENT before anything is
  // allocated.
  request.set_context_tokens(uint64_t{1} << 40);
  EXPECT_EQ(engine_->RunBench(request, absl::Seconds(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A context whose sum with the steps wraps around 2^64 (it passed a summed check, and the
  // prompt built from it crashed the coordinator).
  for (const uint32_t steps : {4u, bt}) {
    request.set_decode_steps(steps);
    request.set_warmup_steps(0);
    request.set_context_tokens(std::numeric_limits<uint64_t>::max() - bt + 1);
    EXPECT_EQ(engine_->ValidateBench(request).code(), absl::StatusCode::kInvalidArgument)
        << steps;
    EXPECT_EQ(engine_->RunBench(request, absl::Seconds(5)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // Exactly the model's context is accepted by the check (the regions refuse it here).
  request.set_decode_steps(bt);
  request.set_context_tokens(model_.max_position_embeddings - bt);
  EXPECT_EQ(engine_->ValidateBench(request).code(), absl::StatusCode::kResourceExhausted);
  request.set_context_tokens(model_.max_position_embeddings);
  EXPECT_EQ(engine_->ValidateBench(request).code(), absl::StatusCode::kInvalidArgument);
  // The sampling a request would be refused for is refused by the check itself (the
  // coordinator switches to the bench's policy only after it: a refused bench changes
  // nothing).
  request.set_context_tokens(bt);
  request.set_decode_steps(4);
  for (const auto& [field, set] :
       std::vector<std::pair<std::string, std::function<void(v1::SamplingParams&)>>>{
           {"sampling.temperature", [](v1::SamplingParams& p) { p.set_temperature(-1); }},
           {"sampling.top_p", [](v1::SamplingParams& p) { p.set_top_p(1.5f); }},
           {"sampling.top_k", [&](v1::SamplingParams& p) { p.set_top_k(model_.vocab_size + 1); }},
           {"sampling.logprobs", [](v1::SamplingParams& p) { p.set_logprobs(1000); }}}) {
    v1::BenchRequest bad = request;
    set(*bad.mutable_sampling());
    const absl::Status refused = engine_->ValidateBench(bad);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(refused.message(), ::testing::HasSubstr(field));
  }
  WS_EXPECT_OK(engine_->ValidateBench(request));
  EXPECT_EQ(UsedBlocks(), 0u);
  EXPECT_EQ(engine_->Counts().waiting, 0u);
  // A context over the server's prompt limit: refused by the check, naming the bench's
  // context and the flag (its sequences' prompts are that context).
  engine_->Stop();
  EngineOptions short_prompts;
  short_prompts.max_prompt_tokens = bt;
  engine_ = std::make_unique<Engine>(short_prompts, model_, kv_, &placement_mutex_,
                                     placement_.get(), scheduler_.get(), gpu_.get(), cpu_.get());
  engine_->set_serving(true);
  engine_->Start();
  WS_EXPECT_OK(engine_->ValidateBench(request));
  request.set_context_tokens(2 * bt);
  const absl::Status long_context = engine_->ValidateBench(request);
  EXPECT_EQ(long_context.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(long_context.message(), ::testing::HasSubstr("--max_prompt_tokens"));
}

// A long prompt's log-probabilities come in several chunks before the first token's (a
// default gRPC client refuses a message over 4 MiB, ~18K prompt tokens with 20 alternatives):
// at most logprobs_per_chunk a chunk, in order, one per prompt token after the first.
TEST_F(EngineTest, PromptLogprobsComeInChunksOfTheirLimit) {
  RestartWithChunkLimit(5);
  for (const uint32_t prompt_tokens : {1u, 5u, 6u, 17u, 40u}) {
    std::vector<uint32_t> prompt(prompt_tokens);
    for (uint32_t i = 0; i < prompt_tokens; ++i) prompt[i] = (3 * i + 1) % model_.vocab_size;
    v1::GenerateRequest request = Request(prompt, 3);
    request.mutable_sampling()->set_prompt_logprobs(true);
    auto stream = engine_->Submit(request, absl::InfiniteFuture());
    WS_ASSERT_OK(stream.status());
    std::vector<int> logprobs_per_chunk, tokens_per_chunk;
    v1::GenerateResponse response;
    bool done = false;
    bool complete = false;
    while (true) {
      if ((*stream)->Next(&response, absl::Seconds(10), &done)) {
        if (response.has_chunk()) {
          logprobs_per_chunk.push_back(response.chunk().prompt_logprobs_size());
          tokens_per_chunk.push_back(response.chunk().token_ids_size());
        }
        complete = complete || response.has_complete();
        continue;
      }
      if (!done) ADD_FAILURE() << "the stream did not end within 10 s";
      break;
    }
    EXPECT_TRUE(complete) << prompt_tokens;
    // Every entry once; no chunk over the limit; the pieces before the first token's chunk
    // full and without tokens, and none after it.
    const int wanted = static_cast<int>(prompt_tokens) - 1;
    int total = 0;
    size_t first_with_tokens = tokens_per_chunk.size();
    for (size_t i = 0; i < logprobs_per_chunk.size(); ++i) {
      total += logprobs_per_chunk[i];
      EXPECT_LE(logprobs_per_chunk[i], 5) << prompt_tokens << " chunk " << i;
      if (tokens_per_chunk[i] > 0 && first_with_tokens == tokens_per_chunk.size()) {
        first_with_tokens = i;
      }
    }
    EXPECT_EQ(total, wanted) << prompt_tokens;
    ASSERT_LT(first_with_tokens, tokens_per_chunk.size()) << prompt_tokens;
    EXPECT_EQ(first_with_tokens, static_cast<size_t>(std::max(0, wanted - 1) / 5)) << prompt_tokens;
    for (size_t i = 0; i < first_with_tokens; ++i) {
      EXPECT_EQ(logprobs_per_chunk[i], 5) << prompt_tokens << " chunk " << i;
      EXPECT_EQ(tokens_per_chunk[i], 0) << prompt_tokens << " chunk " << i;
    }
    for (size_t i = first_with_tokens + 1; i < logprobs_per_chunk.size(); ++i) {
      EXPECT_EQ(logprobs_per_chunk[i], 0) << prompt_tokens << " chunk " << i;
    }
  }
  EXPECT_EQ(UsedBlocks(), 0u);
}

TEST_F(EngineTest, AWaitingRequestThatEndsLeavesTheWaitingCount) {
  // The seventh request's client goes away while it waits.
  Crowd crowd;
  ASSERT_NO_FATAL_FAILURE(FillTheSlotsAndQueueOne(&crowd));
  crowd.waiting->Cancel();
  EXPECT_EQ(Drain(*crowd.waiting).reason, v1::FINISH_REASON_ABORT);
  // Dropped from the queue, and counted so, while the others still run.
  EXPECT_EQ(engine_->Counts().waiting, 0u);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(engine_->Abort(absl::StrCat("run-", i)));
  for (const auto& stream : crowd.running) Drain(*stream);
  EXPECT_EQ(UsedBlocks(), 0u);
}

TEST_F(EngineTest, ServerIdsSkipTheOnesClientsChose) {
  // A client names its request as the server would name the next id-less one.
  auto named = engine_->Submit(Request({1, 2}, 1000, "req-1"), absl::InfiniteFuture());
  WS_ASSERT_OK(named.status());
  auto unnamed = engine_->Submit(Request({1, 2}, 3), absl::InfiniteFuture());
  WS_ASSERT_OK(unnamed.status());
  EXPECT_EQ(Drain(**unnamed).tokens, Expected(2, 3));
  EXPECT_TRUE(engine_->Abort("req-1"));
  Drain(**named);
  EXPECT_EQ(UsedBlocks(), 0u);
}

TEST_F(EngineTest, ACancelledBenchEndsAndLeavesNothingBehind) {
  const uint32_t bt = kv_.block_tokens();
  std::atomic<int> polls{0};
  // Cancelled once it has run a while: many steps, so that it cannot end on its own first.
  absl::StatusOr<v1::BenchResponse> response = engine_->RunBench(
      Bench(2, 2 * bt, 500, 0), absl::Seconds(30),
      [&] { return polls.fetch_add(1) >= 3; });
  EXPECT_EQ(response.status().code(), absl::StatusCode::kCancelled) << response.status();
  EXPECT_GE(polls.load(), 4);
  // Its sequences end at the next step: nothing stays placed, and serving goes on.
  auto next = engine_->Submit(Request({4, 5}, 5), absl::InfiniteFuture());
  WS_ASSERT_OK(next.status());
  EXPECT_EQ(Drain(**next).tokens, Expected(5, 5));
  EXPECT_EQ(UsedBlocks(), 0u);
  EXPECT_EQ(engine_->Counts().running, 0u);
}

// Each bench step carries the scheduler's lines after it, and they are the model behind the
// step's r*: without the copy engine's line (this fake GPU times no transfers) r* is the
// attention lines' crossing at the step's host tokens. Before the lines are ready, NaN.
TEST_F(EngineTest, BenchStepsCarryTheLinesBehindTheirShare) {
  const uint32_t bt = kv_.block_tokens();
  absl::StatusOr<v1::BenchResponse> response =
      engine_->RunBench(Bench(3, 8 * bt, 8, 4), absl::Seconds(30));
  WS_ASSERT_OK(response.status());
  int with_lines = 0;
  for (const auto* steps : {&response->warmup_steps(), &response->steps()}) {
    for (const v1::BenchStep& step : *steps) {
      SCOPED_TRACE(step.step_id());
      EXPECT_TRUE(std::isnan(step.dma_ns_per_token()));
      EXPECT_TRUE(std::isnan(step.dma_fixed_us()));
      EXPECT_TRUE(std::isnan(step.chain_extra_us()));
      if (step.bound_ms() == 0.0) {  // the lines were not ready
        EXPECT_TRUE(std::isnan(step.cpu_ns_per_token()));
        EXPECT_TRUE(std::isnan(step.gpu_fixed_us()));
        continue;
      }
      ++with_lines;
      const RooflineParams lines{.cpu_ns_per_token = step.cpu_ns_per_token(),
                                 .gpu_ns_per_token = step.gpu_ns_per_token(),
                                 .cpu_fixed_ns = step.cpu_fixed_us() * 1e3,
                                 .gpu_fixed_ns = step.gpu_fixed_us() * 1e3};
      WS_EXPECT_OK(ValidateRooflineParams(lines));
      EXPECT_NEAR(step.optimal_cpu_share(),
                  OptimalCpuShare(lines, static_cast<double>(step.host_tokens())), 1e-9);
    }
  }
  EXPECT_GT(with_lines, 0);
}

// A bench samples its tokens as its request says (the gpu side gets the options and a draw
// of each sequence's seeded generator), greedy when unset; the sampling fields that are the
// bench's own are refused, and bad options as Generate refuses them, with nothing left behind.
TEST_F(EngineTest, ABenchSamplesAsItsRequestSays) {
  const uint32_t bt = kv_.block_tokens();
  v1::BenchRequest request = Bench(2, 4 * bt, 4, 0);
  WS_ASSERT_OK(engine_->RunBench(request, absl::Seconds(30)).status());
  {
    std::lock_guard<std::mutex> lock(gpu_->sampling_mutex_);
    ASSERT_FALSE(gpu_->samplings_.empty());
    for (const internal::TokenSampling& in : gpu_->samplings_) {
      EXPECT_EQ(in.temperature(), 0.0f);
      EXPECT_EQ(in.draw(), 0.0);  // greedy draws nothing
    }
    gpu_->samplings_.clear();
  }
  v1::SamplingParams* sampling = request.mutable_sampling();
  sampling->set_temperature(0.7f);
  sampling->set_top_k(5);
  sampling->set_top_p(0.9f);
  sampling->set_seed(11);
  sampling->set_logprobs(2);
  absl::StatusOr<v1::BenchResponse> response = engine_->RunBench(request, absl::Seconds(30));
  WS_ASSERT_OK(response.status());
  EXPECT_GE(response->steps_size(), 1);
  {
    std::lock_guard<std::mutex> lock(gpu_->sampling_mutex_);
    ASSERT_EQ(gpu_->samplings_.size(), 2u * 4);  // 2 sequences x 4 tokens
    std::vector<double> draws;
    for (const internal::TokenSampling& in : gpu_->samplings_) {
      EXPECT_EQ(in.temperature(), 0.7f);
      EXPECT_EQ(in.top_k(), 5u);
      EXPECT_EQ(in.top_p(), 0.9f);
      EXPECT_EQ(in.num_top(), 2u);
      draws.push_back(in.draw());
    }
    // Both sequences draw from generators seeded alike: each draw comes twice.
    std::sort(draws.begin(), draws.end());
    for (size_t i = 0; i + 1 < draws.size(); i += 2) EXPECT_EQ(draws[i], draws[i + 1]);
    EXPECT_GT(draws.back(), 0.0);
  }
  EXPECT_EQ(UsedBlocks(), 0u);

  for (const std::string field : {"max_tokens", "stop_token_ids", "ignore_eos", "prompt_logprobs"}) {
    v1::BenchRequest own = Bench(2, 4 * bt, 4, 0);
    if (field == "max_tokens") own.mutable_sampling()->set_max_tokens(3);
    if (field == "stop_token_ids") own.mutable_sampling()->add_stop_token_ids(1);
    if (field == "ignore_eos") own.mutable_sampling()->set_ignore_eos(true);
    if (field == "prompt_logprobs") own.mutable_sampling()->set_prompt_logprobs(true);
    const absl::Status status = engine_->RunBench(own, absl::Seconds(5)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(status.message(), ::testing::HasSubstr("sampling." + field)) << field;
  }
  request.mutable_sampling()->set_temperature(-1.0f);
  const absl::Status bad = engine_->RunBench(request, absl::Seconds(5)).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), ::testing::HasSubstr("sampling.temperature"));
  EXPECT_EQ(UsedBlocks(), 0u);
}

// A bench round's rows start from distinct tokens, the same in every round: fed one id
// (before session 35), a greedy batch was one row repeated, whose routed experts were one
// token's (run 189: DeepSeek's CPU experts 0.85 ms a step greedy, 4.69 sampled, 16 x 8K).
TEST_F(EngineTest, BenchRowsStartFromDistinctTokensInEveryRound) {
  const uint32_t batch = 4;
  const uint32_t vocab = static_cast<uint32_t>(model_.vocab_size);
  std::set<uint32_t> expected;
  for (uint32_t i = 0; i < batch; ++i) expected.insert(BenchFirstToken(i, batch, vocab));
  ASSERT_EQ(expected.size(), batch);
  for (int repeat = 0; repeat < 2; ++repeat) {
    {
      std::lock_guard<std::mutex> lock(gpu_->sampling_mutex_);
      gpu_->fed_.clear();
    }
    WS_ASSERT_OK(engine_->RunBench(Bench(batch, 4 * kv_.block_tokens(), 3, 2),
                                   absl::Seconds(30)).status());
    std::lock_guard<std::mutex> lock(gpu_->sampling_mutex_);
    ASSERT_EQ(gpu_->fed_.size(), 2u * batch) << "repeat " << repeat;  // warm-up + measured
    std::multiset<uint32_t> first;
    for (const auto& [seq, tokens] : gpu_->fed_) {
      ASSERT_FALSE(tokens.empty());
      first.insert(tokens[0]);
      // Greedy after that (the fake's next token is the last + 1): the rows stay apart.
      for (size_t t = 1; t < tokens.size(); ++t) {
        EXPECT_EQ(tokens[t], (tokens[t - 1] + 1) % vocab) << "sequence " << seq;
      }
    }
    std::multiset<uint32_t> twice;
    for (const uint32_t token : expected) twice.insert({token, token});
    EXPECT_EQ(first, twice) << "repeat " << repeat;
  }
}

TEST(CancelledAtDeadlineTest, OnePercentOfTheCallPlusTenMilliseconds) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  // A 10 s call: 110 ms of slack.
  EXPECT_FALSE(CancelledAtDeadline(t0, t0 + absl::Seconds(10), t0 + absl::Milliseconds(9889)));
  EXPECT_TRUE(CancelledAtDeadline(t0, t0 + absl::Seconds(10), t0 + absl::Milliseconds(9890)));
  EXPECT_TRUE(CancelledAtDeadline(t0, t0 + absl::Seconds(10), t0 + absl::Seconds(11)));
  // A 100 ms call: 11 ms.
  EXPECT_FALSE(CancelledAtDeadline(t0, t0 + absl::Milliseconds(100), t0 + absl::Milliseconds(88)));
  EXPECT_TRUE(CancelledAtDeadline(t0, t0 + absl::Milliseconds(100), t0 + absl::Milliseconds(89)));
  // A deadline that had passed on arrival, and none at all.
  EXPECT_TRUE(CancelledAtDeadline(t0, t0 - absl::Seconds(1), t0));
  EXPECT_FALSE(CancelledAtDeadline(t0, absl::InfiniteFuture(), t0 + absl::Hours(1000)));
}

TEST(BenchFirstTokenTest, SpreadOverTheVocabularyAndDistinct) {
  for (const uint32_t vocab : {1u, 2u, 7u, 1000u, 102400u, 151936u}) {
    for (const uint32_t batch : {1u, 2u, 3u, 16u, 32u, 1000u}) {
      std::set<uint32_t> ids;
      for (uint32_t i = 0; i < batch; ++i) {
        const uint32_t id = BenchFirstToken(i, batch, vocab);
        EXPECT_LT(id, vocab) << i << " of " << batch;
        ids.insert(id);
      }
      EXPECT_EQ(ids.size(), std::min(batch, vocab)) << batch << " in " << vocab;
    }
  }
  EXPECT_EQ(BenchFirstToken(0, 1, 1000), 500u);
  EXPECT_EQ(BenchFirstToken(0, 4, 1000), 125u);
  EXPECT_EQ(BenchFirstToken(3, 4, 1000), 875u);
}

// A bench round's requests are admitted together once the round is queued: every step of
// the warm-up and the measured round decodes the whole batch (admitted one by one as they
// were queued, the first steps of a round ran part of it, and the scheduler saw the batch
// change twice per round: 32 -> a few -> 32 in the H200 grid).
TEST_F(EngineTest, ABenchRoundDecodesItsWholeBatchFromItsFirstStep) {
  const v1::BenchRequest request = Bench(kv_.max_sequences, 4 * kv_.block_tokens(), 5, 3);
  for (int repeat = 0; repeat < 3; ++repeat) {
    absl::StatusOr<v1::BenchResponse> response = engine_->RunBench(request, absl::Seconds(30));
    WS_ASSERT_OK(response.status());
    EXPECT_EQ(response->steps_size(), 5) << "repeat " << repeat;
    // The warm-up's steps come apart, before the measured ones.
    ASSERT_EQ(response->warmup_steps_size(), 3) << "repeat " << repeat;
    EXPECT_LT(response->warmup_steps(2).end_unix_s(), response->steps(0).end_unix_s());
  }
  // Rounds 1-6: three warm-ups of 3 steps and three measured rounds of 5.
  for (uint64_t round = 1; round <= 6; ++round) {
    const std::vector<Engine::StepRecord> records = engine_->StepRecords(round);
    EXPECT_EQ(records.size(), round % 2 == 1 ? 3u : 5u) << "round " << round;
    for (const Engine::StepRecord& r : records) {
      EXPECT_EQ(r.bench_sequences, kv_.max_sequences) << "round " << round;
      EXPECT_EQ(r.decode_sequences, kv_.max_sequences) << "round " << round;
    }
  }
  EXPECT_EQ(UsedBlocks(), 0u);
  // A round waits whole in the queue: its size is bounded by max_sequences, not by the queue
  // capacity (here 2).
  engine_->Stop();
  EngineOptions small_queue;
  small_queue.queue_capacity = 2;
  engine_ = std::make_unique<Engine>(small_queue, model_, kv_, &placement_mutex_,
                                     placement_.get(), scheduler_.get(), gpu_.get(), cpu_.get());
  engine_->set_serving(true);
  engine_->Start();
  absl::StatusOr<v1::BenchResponse> response = engine_->RunBench(request, absl::Seconds(30));
  WS_ASSERT_OK(response.status());
  EXPECT_EQ(response->steps_size(), 5);
}

// The GPU path's calibration (issue 7): the probe's sizes come from the KV config, its line
// becomes the scheduler's GPU lines, and the engine probes again every
// recalibration_period_steps decode steps, between steps; a failing probe is skipped (the
// engine serves on, and does not retry at every step).
TEST_F(EngineTest, CalibratesTheGpuPathAtStartAndPeriodically) {
  engine_->Stop();
  SchedulerOptions options;
  options.recalibration_period_steps = 5;
  scheduler_ = *Scheduler::Create("writescope", options);
  engine_ = std::make_unique<Engine>(EngineOptions{}, model_, kv_, &placement_mutex_,
                                     placement_.get(), scheduler_.get(), gpu_.get(), cpu_.get());
  engine_->set_serving(true);
  EXPECT_EQ(engine_->gpu_calibration().count, 0u);
  WS_ASSERT_OK(engine_->CalibrateGpuPath());
  {
    std::lock_guard<std::mutex> lock(gpu_->probe_mutex_);
    // 1/8, 1/4, 1/2 and all of the 40 transfer-region blocks (the ping-pong buffers are
    // larger), 16 tokens each.
    EXPECT_THAT(gpu_->last_probe_.tokens(), ::testing::ElementsAre(80, 160, 320, 640));
    EXPECT_EQ(gpu_->last_probe_.sequences(), kv_.max_sequences);
    EXPECT_EQ(gpu_->last_probe_.layers(), std::min<uint32_t>(kv_.geometry.num_layers, 4));
    EXPECT_EQ(gpu_->last_probe_.repeats(), 3u);
  }
  Engine::PathCalibration calibration = engine_->gpu_calibration();
  EXPECT_EQ(calibration.count, 1u);
  EXPECT_NEAR(calibration.ns_per_token, 3.0, 1e-9);
  EXPECT_NEAR(calibration.fixed_ns, 50000, 1e-6);
  EXPECT_DOUBLE_EQ(calibration.last_ms, 1.5);
  {
    std::lock_guard<std::mutex> lock(placement_mutex_);
    EXPECT_NEAR(scheduler_->gpu_only_estimator().slope(), 3.0, 1e-9);
    EXPECT_TRUE(scheduler_->gpu_estimator().ready());
  }
  engine_->Start();
  // 40 decode steps: a re-measurement after every 5 (the probes count both).
  auto stream = engine_->Submit(Request({1, 2, 3}, 41), absl::InfiniteFuture());
  WS_ASSERT_OK(stream.status());
  WS_EXPECT_OK(Drain(**stream).status);
  calibration = engine_->gpu_calibration();
  EXPECT_GE(calibration.count, 1u + 40 / 5 - 1);
  EXPECT_LE(calibration.count, 1u + 40 / 5);
  // Failing probes: the requests are served, and the probe is tried once per period.
  gpu_->probe_fails_.store(true);
  const uint64_t probes_before = gpu_->probes_.load();
  auto failing = engine_->Submit(Request({1, 2, 3}, 41), absl::InfiniteFuture());
  WS_ASSERT_OK(failing.status());
  const Outcome outcome = Drain(**failing);
  WS_EXPECT_OK(outcome.status);
  EXPECT_EQ(outcome.tokens.size(), 41u);
  EXPECT_EQ(engine_->gpu_calibration().count, calibration.count);
  EXPECT_GE(gpu_->probes_.load() - probes_before, 40u / 5 - 1);
  EXPECT_LE(gpu_->probes_.load() - probes_before, 40u / 5 + 1);
  // An engine whose gpu_worker has no probe (UNIMPLEMENTED) says so.
  EXPECT_EQ(cpu_->ProbeGpuPath({}, absl::Seconds(1)).status().code(),
            absl::StatusCode::kUnimplemented);
}

// The CPU path's start-up probe (the coordinator calls it after the GPU path's): the
// cpu_worker attends 1/8, 1/4, 1/2 and all of the CPU-compute region's blocks in place, and
// the CPU line starts from the fit; a failed probe changes nothing.
TEST_F(EngineTest, CalibratesTheCpuPathFromTheCpuWorkersProbe) {
  {
    std::lock_guard<std::mutex> lock(placement_mutex_);
    EXPECT_FALSE(scheduler_->cpu_estimator().ready());
  }
  EXPECT_EQ(engine_->cpu_calibration().count, 0u);
  cpu_->probe_fails_.store(true);
  const absl::Status failed = engine_->CalibrateCpuPath();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal) << failed;
  EXPECT_EQ(engine_->cpu_calibration().count, 0u);
  {
    std::lock_guard<std::mutex> lock(placement_mutex_);
    EXPECT_FALSE(scheduler_->cpu_estimator().ready());
  }
  cpu_->probe_fails_.store(false);
  cpu_->probe_ns_per_token_ = 7.0;
  WS_ASSERT_OK(engine_->CalibrateCpuPath());
  {
    std::lock_guard<std::mutex> lock(cpu_->probe_mutex_);
    // The 40 CPU-compute blocks of 16 tokens.
    EXPECT_THAT(cpu_->last_probe_.tokens(), ::testing::ElementsAre(80, 160, 320, 640));
    EXPECT_EQ(cpu_->last_probe_.sequences(), kv_.max_sequences);
    EXPECT_EQ(cpu_->last_probe_.layers(), std::min<uint32_t>(kv_.geometry.num_layers, 4));
    EXPECT_EQ(cpu_->last_probe_.repeats(), 3u);
  }
  const Engine::PathCalibration calibration = engine_->cpu_calibration();
  EXPECT_EQ(calibration.count, 1u);
  EXPECT_NEAR(calibration.ns_per_token, 7.0, 1e-9);
  EXPECT_NEAR(calibration.fixed_ns, 50000, 1e-6);
  EXPECT_DOUBLE_EQ(calibration.last_ms, 1.5);
  EXPECT_EQ(engine_->gpu_calibration().count, 0u);  // the GPU path's is its own
  {
    std::lock_guard<std::mutex> lock(placement_mutex_);
    EXPECT_TRUE(scheduler_->cpu_estimator().ready());
    EXPECT_NEAR(scheduler_->cpu_estimator().slope(), 7.0, 1e-9);
    EXPECT_NEAR(scheduler_->cpu_estimator().intercept(), 50000, 1e-6);
    EXPECT_EQ(scheduler_->cpu_estimator().accepted(), 0);
  }
  // A worker without the probe says so.
  EXPECT_EQ(gpu_->ProbeCpuPath({}, absl::Seconds(1)).status().code(),
            absl::StatusCode::kUnimplemented);
}

// What the gpu_worker streams: every GPU-transfer run, and a sequence's CPU-compute runs only
// where it reads them itself.
TEST(StreamedHostTokensTest, CountsTheRoundsTheGpuWorkerCopies) {
  internal::StepPlan plan;
  EXPECT_EQ(StreamedHostTokens(plan), 0u);
  auto add_run = [](internal::SequenceStep* sequence, internal::Region region, uint32_t tokens) {
    internal::BlockRun* run = sequence->add_blocks();
    run->set_region(region);
    run->set_num_tokens(tokens);
  };
  internal::SequenceStep* split = plan.add_sequences();  // the CPU attends its CPU blocks
  add_run(split, internal::REGION_CPU_COMPUTE, 256);
  add_run(split, internal::REGION_GPU_TRANSFER, 512);
  add_run(split, internal::REGION_CPU_COMPUTE, 64);
  internal::SequenceStep* streamed = plan.add_sequences();  // the GPU reads them all
  add_run(streamed, internal::REGION_CPU_COMPUTE, 128);
  add_run(streamed, internal::REGION_GPU_TRANSFER, 32);
  streamed->set_gpu_reads_cpu_blocks(true);
  plan.add_sequences();  // a new prompt's first chunk: nothing placed yet
  EXPECT_EQ(StreamedHostTokens(plan), 512u + 128u + 32u);
  split->set_gpu_reads_cpu_blocks(true);
  EXPECT_EQ(StreamedHostTokens(plan), 256u + 512u + 64u + 128u + 32u);
}

// The scheduler's attention samples: per layer, over the layers after the first by
// default, over all of them when asked or where a step has one layer.
TEST(AttentionSampleTest, LeavesTheFirstLayerOutWhenAsked) {
  internal::StepResult result;
  result.set_attended_tokens(1000);
  result.set_attention_ms(40.0);  // 4 layers: 13 ms in the first, 9 in each of the others
  result.set_first_layer_attention_ms(13.0);
  const CostSample steady = AttentionSample(result, 4, true);
  EXPECT_DOUBLE_EQ(steady.tokens, 1000.0);
  EXPECT_DOUBLE_EQ(steady.ns, 9e6);
  const CostSample mean = AttentionSample(result, 4, false);
  EXPECT_DOUBLE_EQ(mean.tokens, 1000.0);
  EXPECT_DOUBLE_EQ(mean.ns, 10e6);
  // One layer: its own time either way.
  result.set_attention_ms(13.0);
  EXPECT_DOUBLE_EQ(AttentionSample(result, 1, true).ns, 13e6);
  // No layers reported: the sum, never a division by zero.
  EXPECT_DOUBLE_EQ(AttentionSample(result, 0, true).ns, 13e6);
  // A worker that attended nothing.
  internal::StepResult idle;
  EXPECT_DOUBLE_EQ(AttentionSample(idle, 4, true).ns, 0.0);
  EXPECT_DOUBLE_EQ(AttentionSample(idle, 4, true).tokens, 0.0);
  // A first layer reported above the sum (clock noise) never gives a negative sample.
  result.set_attention_ms(10.0);
  result.set_first_layer_attention_ms(10.5);
  EXPECT_DOUBLE_EQ(AttentionSample(result, 2, true).ns, 0.0);
}

// The CPU's chain beyond its sample: a 4-layer step of 100 ms (25 per layer) whose GPU
// attended 40 ms and waited 8 for the CPU (later paths 12 per layer) leaves 13 ms per layer;
// the CPU attended 36 ms, 12 of them in its first layer, so its steady sample (8 per layer)
// misses 1 ms per layer of its own: 14 ms.
TEST(CpuChainExtraTest, IsTheStepOutsideTheLaterPathsPlusTheCpusFirstLayer) {
  internal::StepResult gpu, cpu;
  gpu.set_attention_ms(40.0);
  gpu.set_cpu_attention_wait_ms(8.0);
  cpu.set_attention_ms(36.0);
  cpu.set_first_layer_attention_ms(12.0);
  const double sample_ns = AttentionSample(cpu, 4, true).ns;
  EXPECT_DOUBLE_EQ(sample_ns, 8e6);
  EXPECT_NEAR(CpuChainExtraNs(gpu, cpu, 4, 25e6, sample_ns), 14e6, 1e-3);
  // Over all layers the sample is the CPU's mean: the step outside the later paths alone.
  EXPECT_NEAR(CpuChainExtraNs(gpu, cpu, 4, 25e6, AttentionSample(cpu, 4, false).ns), 13e6, 1e-3);
  // Later paths longer than the step (clock noise) give 0, never a negative.
  gpu.set_attention_ms(120.0);
  EXPECT_DOUBLE_EQ(CpuChainExtraNs(gpu, cpu, 4, 25e6, sample_ns), 0.0);
}

TEST_F(EngineTest, SwitchingTheSchedulerRunsTheNextBenchUnderItsPolicy) {
  const uint32_t bt = kv_.block_tokens();
  WS_ASSERT_OK(engine_->CalibrateGpuPath());
  cpu_->probe_ns_per_token_ = 7.0;
  WS_ASSERT_OK(engine_->CalibrateCpuPath());
  SchedulerOptions options;
  std::unique_ptr<Scheduler> cpu_all = *Scheduler::Create("cpu-all", options);
  std::unique_ptr<Scheduler> transfer_all = *Scheduler::Create("transfer-all", options);
  const v1::BenchRequest request = Bench(2, 4 * bt, 4, 1);

  // Not while a request runs: refused, the policy unchanged.
  auto running = engine_->Submit(Request({1, 2, 3}, 200), absl::InfiniteFuture());
  WS_ASSERT_OK(running.status());
  const absl::Status busy = engine_->SwitchScheduler(cpu_all.get());
  EXPECT_EQ(busy.code(), absl::StatusCode::kFailedPrecondition) << busy;
  EXPECT_THAT(busy.message(), ::testing::HasSubstr("idle"));
  (*running)->Cancel();
  Drain(**running);
  // Idle: the next bench places and reads under the new policy, whose scheduler was fitted
  // to the engine's last probes of the two paths.
  for (Scheduler* scheduler : {cpu_all.get(), transfer_all.get(), scheduler_.get()}) {
    SCOPED_TRACE(scheduler->policy().ToString());
    // The cancelled request ends at the engine's next step boundary.
    absl::Status switched;
    for (int i = 0; i < 200; ++i) {
      switched = engine_->SwitchScheduler(scheduler);
      if (switched.code() != absl::StatusCode::kFailedPrecondition) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    WS_ASSERT_OK(switched);
    {
      std::lock_guard<std::mutex> lock(placement_mutex_);
      EXPECT_NEAR(scheduler->gpu_only_estimator().slope(), 3.0, 1e-9);
      if (scheduler != scheduler_.get()) {  // the engine's own has decoded meanwhile
        EXPECT_NEAR(scheduler->cpu_estimator().slope(), 7.0, 1e-9);
        EXPECT_EQ(scheduler->cpu_estimator().accepted(), 0);
      }
    }
    absl::StatusOr<v1::BenchResponse> response = engine_->RunBench(request, absl::Seconds(30));
    WS_ASSERT_OK(response.status());
    ASSERT_GE(response->steps_size(), 1);
    for (const v1::BenchStep& step : response->steps()) {
      if (scheduler == cpu_all.get()) {
        EXPECT_DOUBLE_EQ(step.target_cpu_share(), 1.0);
        EXPECT_GT(step.read_cpu_share(), 0.0);
      } else if (scheduler == transfer_all.get()) {
        EXPECT_DOUBLE_EQ(step.target_cpu_share(), 0.0);
        EXPECT_DOUBLE_EQ(step.placed_cpu_share(), 0.0);
        EXPECT_DOUBLE_EQ(step.read_cpu_share(), 0.0);
      }
    }
  }
  // The scheduler that decoded is the one that learned: cpu-all's CPU line has samples.
  std::lock_guard<std::mutex> lock(placement_mutex_);
  EXPECT_GT(cpu_all->cpu_estimator().accepted(), 0);
}

}  // namespace
}  // namespace writescope::coordinator
