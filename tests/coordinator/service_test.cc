// The public gRPC adapter (coordinator/service.h) through an in-process channel: a real Engine
// over fake step workers for Generate and Abort, a fake backend for the unary calls.
#include "coordinator/service.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/placement.h"
#include "coordinator/scheduler.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/common/test_util.h"
#include "tests/coordinator/engine_fixture.h"

namespace writescope::coordinator {
namespace {

// The gpu side answers every sampled row with the token after its last one; the cpu side
// answers with the step's id. Each step takes `step_us`.
class NextTokenWorker final : public StepWorker {
 public:
  NextTokenWorker(bool gpu, int64_t vocab) : gpu_(gpu), vocab_(vocab) {}

  absl::StatusOr<internal::StepResult> RunStep(const internal::StepPlan& plan,
                                               absl::Duration) override {
    std::this_thread::sleep_for(std::chrono::microseconds(step_us.load()));
    internal::StepResult result;
    result.set_step_id(plan.step_id());
    result.set_num_layers(2);
    if (!gpu_) return result;
    for (const internal::SequenceStep& step : plan.sequences()) {
      internal::SequenceResult* out = result.add_sequences();
      out->set_seq_id(step.seq_id());
      if (!step.has_sample_next()) continue;
      const uint32_t last = step.token_ids(step.num_tokens() - 1);
      out->mutable_next_token()->set_token_id(static_cast<uint32_t>((last + 1) % vocab_));
      out->mutable_next_token()->set_logprob(0.0f);
    }
    return result;
  }
  void CancelStep(uint64_t) override {}

  std::atomic<int> step_us{200};

 private:
  bool gpu_;
  int64_t vocab_;
};

// The unary calls' answers: `failure` where set, else a ModelInfo naming `model_type` and empty
// messages; Bench waits for `cancelled` (at most 10 s) and says whether it saw it.
class FakeBackend final : public ServiceBackend {
 public:
  absl::StatusOr<v1::ServerInfo> ServerInfo() override {
    if (!failure.ok()) return failure;
    return v1::ServerInfo();
  }
  absl::StatusOr<v1::ModelInfo> ModelInfo() override {
    if (!failure.ok()) return failure;
    v1::ModelInfo info;
    info.set_model_type("qwen3_moe");
    info.set_num_layers(2);
    return info;
  }
  absl::StatusOr<v1::SelfTestResponse> SelfTest(uint32_t sequences) override {
    if (!failure.ok()) return failure;
    self_test_sequences = sequences;
    return v1::SelfTestResponse();
  }
  absl::StatusOr<v1::BenchResponse> Bench(const v1::BenchRequest&,
                                          const std::function<bool()>& cancelled) override {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!cancelled() && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    bench_saw_cancel = cancelled();
    return absl::CancelledError("bench cancelled");
  }
  absl::StatusOr<v1::Profile> Profile(uint32_t steps) override {
    if (!failure.ok()) return failure;
    profile_steps = steps;
    return v1::Profile();
  }
  Engine& engine() override { return *engine_; }

  Engine* engine_ = nullptr;
  absl::Status failure;
  std::atomic<uint32_t> self_test_sequences{0}, profile_steps{0};
  std::atomic<bool> bench_saw_cancel{false};
};

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::TinyEngineModel();
    absl::StatusOr<KvCacheConfig> resolved = testing::TinyEngineKv(model_, /*max_sequences=*/4);
    WS_ASSERT_OK(resolved.status());
    kv_ = *resolved;
    absl::StatusOr<std::unique_ptr<KvPlacement>> placement = KvPlacement::Create(kv_);
    WS_ASSERT_OK(placement.status());
    placement_ = *std::move(placement);
    absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
        Scheduler::Create("writescope", SchedulerOptions{});
    WS_ASSERT_OK(scheduler.status());
    scheduler_ = *std::move(scheduler);
    gpu_ = std::make_unique<NextTokenWorker>(true, model_.vocab_size);
    cpu_ = std::make_unique<NextTokenWorker>(false, model_.vocab_size);
    EngineOptions options;
    options.max_step_tokens = 64;
    engine_ = std::make_unique<Engine>(options, model_, kv_, &placement_mutex_, placement_.get(),
                                       scheduler_.get(), gpu_.get(), cpu_.get());
    engine_->set_serving(true);
    engine_->Start();
    backend_.engine_ = engine_.get();
    service_ = std::make_unique<WriteScopeService>(backend_);
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::WriteScope::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
    if (engine_ != nullptr) engine_->Stop();
  }

  static v1::GenerateRequest Request(std::vector<uint32_t> prompt, uint32_t max_tokens,
                                     const std::string& id) {
    v1::GenerateRequest request;
    request.set_request_id(id);
    request.mutable_prompt_token_ids()->Add(prompt.begin(), prompt.end());
    request.mutable_sampling()->set_max_tokens(max_tokens);
    return request;
  }

  // What a Generate call delivered and how it ended.
  struct Call {
    std::vector<v1::GenerateResponse> responses;
    std::vector<uint32_t> tokens;
    grpc::Status status;
  };
  Call Generate(const v1::GenerateRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    Call call;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub_->Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_chunk()) {
        call.tokens.insert(call.tokens.end(), response.chunk().token_ids().begin(),
                           response.chunk().token_ids().end());
      }
      call.responses.push_back(response);
    }
    call.status = reader->Finish();
    return call;
  }
  // Waits up to 5 s for the engine to have `running` requests.
  bool WaitForRunning(uint32_t running) {
    for (int i = 0; i < 1000; ++i) {
      if (engine_->Counts().running == running) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  ModelConfig model_;
  KvCacheConfig kv_;
  std::mutex placement_mutex_;
  std::unique_ptr<KvPlacement> placement_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<NextTokenWorker> gpu_, cpu_;
  std::unique_ptr<Engine> engine_;
  FakeBackend backend_;
  std::unique_ptr<WriteScopeService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::WriteScope::Stub> stub_;
};

TEST_F(ServiceTest, GenerateStreamsTheEnginesTokensThenCompletes) {
  const Call call = Generate(Request({1, 2, 3}, 5, "r1"));
  ASSERT_TRUE(call.status.ok()) << call.status.error_message();
  EXPECT_THAT(call.tokens, ::testing::ElementsAre(4, 5, 6, 7, 8));
  ASSERT_FALSE(call.responses.empty());
  EXPECT_TRUE(call.responses.back().has_complete());
  for (const v1::GenerateResponse& response : call.responses) {
    EXPECT_EQ(response.request_id(), "r1");
    EXPECT_FALSE(response.has_error());
  }
}

// Refused before it began: one error message with the refusal's code and text, then the same
// status, and nothing else.
TEST_F(ServiceTest, ARefusedRequestEndsWithItsErrorMessageThenItsStatus) {
  const Call call = Generate(Request({}, 5, "empty"));
  EXPECT_EQ(call.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_FALSE(call.status.error_message().empty());
  ASSERT_EQ(call.responses.size(), 1u);
  const v1::GenerateResponse& only = call.responses[0];
  EXPECT_EQ(only.request_id(), "empty");
  ASSERT_TRUE(only.has_error());
  EXPECT_EQ(only.error().code(), static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(only.error().message(), call.status.error_message());
  EXPECT_EQ(engine_->Counts().running, 0u);
}

// A client that cancels mid-stream ends its request in the engine (its KV slot freed).
TEST_F(ServiceTest, AClientThatCancelsEndsItsRequest) {
  gpu_->step_us = 20000;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, Request({1, 2}, 1000, "long"));
  v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  ASSERT_TRUE(WaitForRunning(1));
  context.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitForRunning(0)) << "the request still runs after its client cancelled";
}

TEST_F(ServiceTest, AbortFindsARunningRequestAndEndsItsStream) {
  gpu_->step_us = 20000;
  Call call;
  std::thread client([&] { call = Generate(Request({1, 2}, 1000, "to-abort")); });
  ASSERT_TRUE(WaitForRunning(1));
  grpc::ClientContext unknown_context, found_context;
  v1::AbortRequest abort;
  v1::AbortResponse answer;
  abort.set_request_id("no-such-request");
  ASSERT_TRUE(stub_->Abort(&unknown_context, abort, &answer).ok());
  EXPECT_FALSE(answer.found());
  abort.set_request_id("to-abort");
  ASSERT_TRUE(stub_->Abort(&found_context, abort, &answer).ok());
  EXPECT_TRUE(answer.found());
  client.join();
  EXPECT_LT(call.tokens.size(), 1000u);
  EXPECT_TRUE(WaitForRunning(0));
}

// The unary calls answer the backend's results, and its errors with their codes and messages.
TEST_F(ServiceTest, UnaryCallsCarryTheBackendsAnswersAndErrors) {
  {
    grpc::ClientContext context;
    v1::ModelInfo info;
    ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.model_type(), "qwen3_moe");
    EXPECT_EQ(info.num_layers(), 2u);
  }
  {
    grpc::ClientContext context;
    v1::GetProfileRequest request;
    request.set_steps(7);
    v1::Profile profile;
    ASSERT_TRUE(stub_->GetProfile(&context, request, &profile).ok());
    EXPECT_EQ(backend_.profile_steps.load(), 7u);
  }
  {
    grpc::ClientContext context;
    v1::SelfTestRequest request;
    request.set_sequences(3);
    v1::SelfTestResponse response;
    ASSERT_TRUE(stub_->SelfTest(&context, request, &response).ok());
    EXPECT_EQ(backend_.self_test_sequences.load(), 3u);
  }
  backend_.failure = absl::UnavailableError("workers are down");
  auto expect_failure = [](const grpc::Status& status, const char* call) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << call;
    EXPECT_EQ(status.error_message(), "workers are down") << call;
  };
  {
    grpc::ClientContext context;
    v1::ModelInfo info;
    expect_failure(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info), "GetModelInfo");
  }
  {
    grpc::ClientContext context;
    v1::ServerInfo info;
    expect_failure(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info),
                   "GetServerInfo");
  }
  {
    grpc::ClientContext context;
    v1::Profile profile;
    expect_failure(stub_->GetProfile(&context, v1::GetProfileRequest(), &profile), "GetProfile");
  }
  {
    grpc::ClientContext context;
    v1::SelfTestResponse response;
    expect_failure(stub_->SelfTest(&context, v1::SelfTestRequest(), &response), "SelfTest");
  }
}

// A Bench whose client goes away (here its deadline) sees `cancelled` turn true.
TEST_F(ServiceTest, ABenchSeesItsClientGo) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  v1::BenchResponse response;
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status status = stub_->Bench(&context, v1::BenchRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The handler returns once it sees the cancellation (the server's shutdown would wait for it).
  for (int i = 0; i < 1000 && !backend_.bench_saw_cancel.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(backend_.bench_saw_cancel.load());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(9));
}

}  // namespace
}  // namespace writescope::coordinator
