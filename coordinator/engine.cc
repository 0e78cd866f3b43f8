#include "coordinator/engine.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/fixed_array.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/process.h"
#include "common/status.h"

namespace writescope::coordinator {
namespace {

// A Status with a message of its own. Copies of a Status share the message through a reference
// count inside Abseil, which ThreadSanitizer cannot see (Debian's build is uninstrumented):
// a Status that crosses threads (a caller's into the engine, the engine's into a stream its
// client reads) is copied so, and each thread drops only its own.
absl::Status OwnCopy(const absl::Status& status) {
  return absl::Status(status.code(), status.message());
}

constexpr absl::Duration kIdleWait = absl::Milliseconds(100);

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

internal::Region ToProtoRegion(KvRegion region) {
  return region == KvRegion::kCpuCompute ? internal::REGION_CPU_COMPUTE
                                         : internal::REGION_GPU_TRANSFER;
}

// Appends `blocks` as runs of one region each.
void AddRuns(const std::vector<PlacedBlock>& blocks, size_t begin, size_t end,
             google::protobuf::RepeatedPtrField<internal::BlockRun>* runs, uint32_t block_tokens) {
  internal::BlockRun* run = nullptr;
  for (size_t i = begin; i < end; ++i) {
    const PlacedBlock& block = blocks[i];
    if (run == nullptr || run->region() != ToProtoRegion(block.ref.region)) {
      run = runs->Add();
      run->set_region(ToProtoRegion(block.ref.region));
      run->set_first_token(block.first_token);
    }
    run->add_block_ids(block.ref.slot);
    run->set_num_tokens(run->num_tokens() + block_tokens);
  }
}

// Asks the gpu_worker for the next token with the request's options and its next draw.
void SetSampleNext(const SamplerOptions& options, Sampler& sampler, internal::SequenceStep* step) {
  internal::TokenSampling* sample = step->mutable_sample_next();
  sample->set_temperature(options.temperature);
  sample->set_top_k(options.top_k);
  sample->set_top_p(options.top_p);
  sample->set_num_top(options.num_top);
  sample->set_draw(sampler.NextDraw());
}

// What a failed step, or a plan the placement refused, tells the requests it ends. They were
// valid when submitted, so a worker's or the placement's refusal of the plan is the service's
// fault (INTERNAL), not theirs (INVALID_ARGUMENT and the like say "never retry"); a worker call
// past --step_timeout, or cancelled by the coordinator (a lost worker, shutdown), leaves the
// service unavailable (DEADLINE_EXCEEDED would read as the request's own deadline).
absl::Status PublicStepError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      return absl::UnavailableError(absl::StrCat(
          "a worker's step did not end within --step_timeout (", status.message(), ")"));
    case absl::StatusCode::kCancelled:
      return absl::UnavailableError(status.message());
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kUnknown:
      return absl::InternalError(
          absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message()));
    default:  // INTERNAL, UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED, DATA_LOSS, UNIMPLEMENTED
      return status;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// RequestStream

bool RequestStream::Next(v1::GenerateResponse* out, absl::Duration timeout, bool* done) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                    [&] { return !queue_.empty() || finished_; });
  if (!queue_.empty()) {
    *out = std::move(queue_.front());
    queue_.pop_front();
    *done = false;
    return true;
  }
  *done = finished_;
  return false;
}

CostSample AttentionSample(const internal::StepResult& result, uint32_t layers,
                           bool steady_layers) {
  const double tokens = static_cast<double>(result.attended_tokens());
  if (steady_layers && layers > 1) {
    const double after_first_ms =
        std::max(0.0, result.attention_ms() - result.first_layer_attention_ms());
    return {tokens, after_first_ms * 1e6 / (layers - 1)};
  }
  return {tokens, result.attention_ms() * 1e6 / std::max<uint32_t>(1, layers)};
}

double CpuChainExtraNs(const internal::StepResult& gpu, const internal::StepResult& cpu,
                       double layers, double step_ns, double cpu_sample_ns) {
  const double later_ms = gpu.attention_ms() + gpu.cpu_attention_wait_ms();
  return std::max(0.0, step_ns - later_ms * 1e6 / layers + cpu.attention_ms() * 1e6 / layers -
                           cpu_sample_ns);
}

uint64_t StreamedHostTokens(const internal::StepPlan& plan) {
  uint64_t tokens = 0;
  for (const internal::SequenceStep& sequence : plan.sequences()) {
    for (const internal::BlockRun& run : sequence.blocks()) {
      if (run.region() != internal::REGION_CPU_COMPUTE || sequence.gpu_reads_cpu_blocks()) {
        tokens += run.num_tokens();
      }
    }
  }
  return tokens;
}

absl::Status RequestStream::final_status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

void RequestStream::Push(v1::GenerateResponse response) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back(std::move(response));
  changed_.notify_all();
}

void RequestStream::Finish(absl::Status status) {
  std::lock_guard<std::mutex> lock(mutex_);
  finished_ = true;
  status_ = std::move(status);
  changed_.notify_all();
}

// ---------------------------------------------------------------------------------------------
// Engine

struct Engine::Request {
  std::string id;
  v1::GenerateRequest proto;
  std::vector<int32_t> prompt;
  uint32_t max_tokens = 0;
  absl::Time deadline = absl::InfiniteFuture();
  std::shared_ptr<RequestStream> stream = std::make_shared<RequestStream>();
  // The request's sampling options and its seeded generator: the coordinator takes each
  // token's draw here; the gpu_worker samples with it (common/sampler.h).
  SamplerOptions sampling;
  std::unique_ptr<Sampler> sampler;
  std::atomic<bool> aborted{false};
  absl::Status forced;  // FailAll's status for a running request (guarded by Engine::mutex_)
  bool ended = false;

  SequenceId sequence = 0;
  bool admitted = false;   // holds a sequence in the placement
  bool reserved = false;   // its blocks count in reserved_blocks_
  uint64_t reserved_blocks = 0;
  uint64_t prefilled = 0;  // prompt tokens whose KV is written
  std::vector<int32_t> generated;
  int32_t pending_token = -1;  // sampled, not yet fed to the model
  v1::Chunk chunk;             // tokens not streamed yet
  std::vector<v1::TokenLogprobs> prompt_logprobs;
  bool first_chunk_sent = false;

  absl::Time submitted, admitted_at, first_token_at, last_token_at;
  uint64_t bench_round = 0;  // SubmitBench: the context is placed, not computed
  // A bench round's request waits in the queue until the whole round is queued
  // (ReleaseBenchRound), so that the round decodes its batch from its first step. Guarded by
  // Engine::mutex_.
  bool held = false;
};

Engine::Engine(const EngineOptions& options, const ModelConfig& model, const KvCacheConfig& kv,
               std::mutex* placement_mutex, KvPlacement* placement, Scheduler* scheduler,
               StepWorker* gpu_worker, StepWorker* cpu_worker, Metrics* metrics)
    : options_(options),
      model_(model),
      kv_(kv),
      placement_mutex_(placement_mutex),
      placement_(placement),
      scheduler_(scheduler),
      gpu_worker_(gpu_worker),
      cpu_worker_(cpu_worker),
      metrics_(metrics) {
  limits_.vocab_size = static_cast<uint32_t>(model.vocab_size);
  limits_.max_context = static_cast<uint32_t>(model.max_position_embeddings);
  limits_.max_prompt_tokens = options.max_prompt_tokens;
  max_step_tokens_ = std::max<uint32_t>(options.max_step_tokens, 1);
}

Engine::~Engine() { Stop(); }

void Engine::set_expert_placement(const ExpertPlacement& placement) {
  std::lock_guard<std::mutex> lock(*placement_mutex_);
  experts_ = placement;
}

void Engine::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    work_.notify_all();
    step_ended_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  FailAll(absl::UnavailableError("the server is shutting down"));
}

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(const v1::GenerateRequest& proto,
                                                              absl::Time deadline) {
  absl::StatusOr<std::shared_ptr<RequestStream>> stream = Queue(proto, deadline);
  if (!stream.ok() && metrics_ != nullptr) metrics_->AddRequest("rejected");
  return stream;
}

uint32_t BenchFirstToken(uint32_t index, uint32_t batch, uint32_t vocab) {
  return static_cast<uint32_t>((2 * uint64_t{index} + 1) * vocab / (2 * uint64_t{batch}));
}

bool CancelledAtDeadline(absl::Time submitted, absl::Time deadline, absl::Time now) {
  if (deadline == absl::InfiniteFuture()) return false;
  if (now >= deadline) return true;
  const absl::Duration slack =
      std::max(deadline - submitted, absl::ZeroDuration()) / 100 + absl::Milliseconds(10);
  return now >= deadline - slack;
}

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::SubmitBench(
    uint64_t context_tokens, uint32_t decode_steps, uint64_t round,
    const v1::SamplingParams& sampling, uint32_t index, uint32_t batch) {
  // The sizes were checked with the request (ValidateBench, before RunBench calls this): the
  // context is whole blocks and, with the steps, within the model's context, so the prompt
  // built below is bounded.
  if (round == 0) return absl::InvalidArgumentError("bench round 0");
  if (batch == 0 || index >= batch) {
    return absl::InvalidArgumentError(absl::StrCat("bench sequence ", index, " of ", batch));
  }
  v1::GenerateRequest proto;
  // The context's ids do not matter (it is not computed); the last one is fed first, and it
  // does: the routed experts a row takes follow its token. Fed one id, every row of a greedy
  // round was the same row (the placed KV is alike too), so a batch routed like one token
  // (DeepSeek 16 x 8K on the H200, run 189: the CPU experts 0.85 ms a step greedy, 4.69
  // sampled). So the rows start from ids spread over the vocabulary, the same ones in every
  // round and policy.
  proto.mutable_prompt_token_ids()->Resize(static_cast<int>(context_tokens), 1);
  proto.set_prompt_token_ids(static_cast<int>(context_tokens) - 1,
                             BenchFirstToken(index, batch, limits_.vocab_size));
  *proto.mutable_sampling() = sampling;
  proto.mutable_sampling()->set_max_tokens(decode_steps);
  proto.mutable_sampling()->set_ignore_eos(true);
  return Queue(proto, absl::InfiniteFuture(), round);
}

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Queue(const v1::GenerateRequest& proto,
                                                             absl::Time deadline,
                                                             uint64_t bench_round) {
  if (!serving_.load()) return absl::UnavailableError("the workers are not serving");
  WS_RETURN_IF_ERROR(ValidateGenerateRequest(proto, limits_));
  auto request = std::make_shared<Request>();
  request->proto = proto;
  request->prompt.assign(proto.prompt_token_ids().begin(), proto.prompt_token_ids().end());
  request->max_tokens = ResolveMaxTokens(proto, limits_);
  request->deadline = deadline;
  request->bench_round = bench_round;
  request->submitted = absl::Now();
  if (request->max_tokens == 0) {
    return absl::InvalidArgumentError("the prompt fills the model's context: no token to generate");
  }
  const uint32_t bt = kv_.block_tokens();
  const uint64_t cpu_slots = kv_.region_slots(KvRegion::kCpuCompute);
  const uint64_t gpu_slots = kv_.region_slots(KvRegion::kGpuTransfer);
  // max_tokens 0: up to the model's context, or as far as the KV regions hold one sequence,
  // whichever ends first (the context alone is refused below wherever it passes the regions).
  const uint64_t kv_tokens = (cpu_slots + gpu_slots) * bt;
  if (proto.sampling().max_tokens() == 0 && request->prompt.size() < kv_tokens &&
      request->prompt.size() + uint64_t{request->max_tokens} > kv_tokens) {
    request->max_tokens = static_cast<uint32_t>(kv_tokens - request->prompt.size());
  }
  const uint64_t context = request->prompt.size() + uint64_t{request->max_tokens};
  request->reserved_blocks = (context + bt - 1) / bt;
  if (request->reserved_blocks > cpu_slots + gpu_slots) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a context of ", request->prompt.size(), " prompt + ", request->max_tokens,
        " new tokens needs ", request->reserved_blocks, " KV blocks of ", bt,
        " tokens; the KV regions hold ", cpu_slots + gpu_slots, " blocks in all (", cpu_slots,
        " cpu_compute + ", gpu_slots, " gpu_transfer): lower sampling.max_tokens or the prompt"));
  }
  request->sampling = SamplerOptionsFrom(proto.sampling(), ResolveSeed(proto.sampling()));
  request->sampler = std::make_unique<Sampler>(request->sampling);
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  // A bench round (held until all of it is queued) is bounded by max_sequences instead.
  if (bench_round == 0 && waiting_.size() >= options_.queue_capacity) {
    return absl::ResourceExhaustedError(absl::StrCat("the queue is full: ", waiting_.size(),
                                                     " requests are waiting (capacity ",
                                                     options_.queue_capacity, ")"));
  }
  if (proto.request_id().empty()) {
    // A client may have chosen a name of this form itself: the next free one.
    do {
      request->id = absl::StrCat("req-", next_auto_id_++);
    } while (by_id_.contains(request->id));
  } else {
    request->id = proto.request_id();
  }
  if (by_id_.contains(request->id)) {
    return absl::AlreadyExistsError(absl::StrCat("request id '", request->id, "' is in flight"));
  }
  by_id_[request->id] = request;
  request->held = bench_round > 0;
  waiting_.push_back(request);
  counts_.waiting = static_cast<uint32_t>(waiting_.size());
  work_.notify_all();
  return request->stream;
}

absl::Status Engine::ValidateBench(const v1::BenchRequest& request) const {
  if (request.batch() == 0 || request.batch() > kv_.max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("bench batch ", request.batch(),
                                                   ": between 1 and max_sequences (",
                                                   kv_.max_sequences, ")"));
  }
  // The measured round's steps must all stay in the step records.
  constexpr uint32_t kMaxSteps = kMaxStepRecords / 2;
  if (request.decode_steps() == 0 || request.decode_steps() > kMaxSteps ||
      request.warmup_steps() > kMaxSteps) {
    return absl::InvalidArgumentError(absl::StrCat("bench decode_steps ", request.decode_steps(),
                                                   " and warmup_steps ", request.warmup_steps(),
                                                   ": 1..", kMaxSteps, " and 0..", kMaxSteps));
  }
  // The sampling fields that are the bench's own (SubmitBench sets them).
  const v1::SamplingParams& sampling = request.sampling();
  for (const auto& [set, field] : {std::pair{sampling.max_tokens() != 0, "max_tokens"},
                                   std::pair{sampling.stop_token_ids_size() > 0, "stop_token_ids"},
                                   std::pair{sampling.ignore_eos(), "ignore_eos"},
                                   std::pair{sampling.prompt_logprobs(), "prompt_logprobs"}}) {
    if (set) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sampling.", field, ": a bench decodes decode_steps tokens past a placed context; "
          "leave it unset (temperature, top_k, top_p, seed and logprobs may be set)"));
    }
  }
  // The rest of them as a request's: each bench sequence is queued as one (SubmitBench), and
  // a refused bench must fail here, before its policy is switched to.
  WS_RETURN_IF_ERROR(ValidateSamplingParams(sampling, limits_));
  const uint32_t bt = kv_.block_tokens();
  const uint64_t context = request.context_tokens();
  if (context == 0 || context % bt != 0) {
    return absl::InvalidArgumentError(absl::StrCat("bench context of ", context,
                                                   " tokens: a positive multiple of the ", bt,
                                                   "-token KV block"));
  }
  // Compared without a sum that could wrap (a context near 2^64 passed a summed check).
  const uint64_t longest = std::max(request.decode_steps(), request.warmup_steps());
  if (context > limits_.max_context || longest > limits_.max_context - context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bench context of ", context, " tokens + ", longest,
        " decode steps exceeds the model's context of ", limits_.max_context));
  }
  // Its context is each sequence's prompt (SubmitBench), which the server's bound holds to.
  if (limits_.max_prompt_tokens != 0 && context > limits_.max_prompt_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("bench context of ", context, " tokens exceeds this server's prompt limit of ",
                     limits_.max_prompt_tokens, " tokens (--max_prompt_tokens)"));
  }
  const uint64_t blocks = uint64_t{request.batch()} * ((context + longest + bt - 1) / bt);
  const uint64_t slots = kv_.region_slots(KvRegion::kCpuCompute) +
                         kv_.region_slots(KvRegion::kGpuTransfer);
  if (blocks > slots) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "bench batch ", request.batch(), " x ", context, " + ", longest,
        " tokens needs ", blocks, " KV blocks of ", bt, " tokens; the regions hold ", slots));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::BenchResponse> Engine::RunBench(const v1::BenchRequest& request,
                                                   absl::Duration timeout,
                                                   const std::function<bool()>& cancelled) {
  WS_RETURN_IF_ERROR(ValidateBench(request));
  const v1::SamplingParams& sampling = request.sampling();
  const absl::Time deadline = absl::Now() + timeout;
  v1::BenchResponse response;
  for (const bool warmup : {true, false}) {
    const uint32_t steps = warmup ? request.warmup_steps() : request.decode_steps();
    if (steps == 0) continue;
    const uint64_t round = next_bench_round_.fetch_add(1);
    // Whatever happens below, the round's queued requests are let go (a cancelled one is
    // dropped at admission): a held request at the queue's front stops every admission.
    absl::Cleanup release = [this, round] { ReleaseBenchRound(round); };
    std::vector<std::shared_ptr<RequestStream>> streams;
    absl::Status status;
    for (uint32_t b = 0; b < request.batch() && status.ok(); ++b) {
      absl::StatusOr<std::shared_ptr<RequestStream>> stream =
          SubmitBench(request.context_tokens(), steps, round, sampling, b,
                      request.batch());
      if (stream.ok()) {
        streams.push_back(*std::move(stream));
      } else {
        status = stream.status();
      }
    }
    // Every stream to its end (on an error: cancelled, so that nothing is left running).
    for (const auto& stream : streams) {
      if (!status.ok()) stream->Cancel();
    }
    std::move(release).Invoke();
    for (const auto& stream : streams) {
      v1::GenerateResponse ignored;
      bool done = false;
      while (!done) {
        if (absl::Now() > deadline) {
          for (const auto& s : streams) s->Cancel();
          if (status.ok()) status = absl::DeadlineExceededError("the bench ran out of time");
        } else if (status.ok() && cancelled && cancelled()) {
          for (const auto& s : streams) s->Cancel();
          status = absl::CancelledError("the bench was cancelled");
        }
        stream->Next(&ignored, absl::Milliseconds(200), &done);
      }
      if (status.ok() && !stream->final_status().ok()) {
        status = stream->final_status();
        for (const auto& s : streams) s->Cancel();  // the rest end at the next step
      }
    }
    WS_RETURN_IF_ERROR(status);
    {
      // The streams ended inside the round's last step, before its record: wait for the
      // step's end (or the next one's, if another request's step began meanwhile).
      std::unique_lock<std::mutex> lock(mutex_);
      const uint64_t ended = steps_ended_;
      if (!step_ended_.wait_until(lock, absl::ToChronoTime(deadline), [&] {
            return !in_step_ || steps_ended_ != ended || stopping_;
          })) {
        return absl::DeadlineExceededError(
            "the bench ran out of time waiting for its round's last step to end");
      }
    }
    for (const StepRecord& r : StepRecords(round)) {
      if (r.bench_sequences != request.batch()) continue;
      v1::BenchStep* step = warmup ? response.add_warmup_steps() : response.add_steps();
      step->set_step_id(r.step_id);
      step->set_decode_sequences(r.decode_sequences);
      step->set_step_ms(r.step_ms);
      step->set_gpu_attention_ms(r.gpu_attention_ms);
      step->set_cpu_attention_ms(r.cpu_attention_ms);
      step->set_gpu_expert_wait_ms(r.gpu_expert_wait_ms);
      step->set_cpu_expert_ms(r.cpu_expert_ms);
      step->set_target_cpu_share(r.target_cpu_share);
      step->set_placed_cpu_share(r.placed_cpu_share);
      step->set_host_tokens(r.host_tokens);
      step->set_bound_ms(r.bound_ms);
      step->set_optimal_cpu_share(r.optimal_cpu_share);
      step->set_end_unix_s(r.end_unix_s);
      step->set_read_cpu_share(r.read_cpu_share);
      step->set_explore(r.explore);
      step->set_predicted_split_ms(r.predicted_split_ms);
      step->set_predicted_gpu_only_ms(r.predicted_gpu_only_ms);
      step->set_rest_split_ms(r.rest_split_ms);
      step->set_rest_gpu_only_ms(r.rest_gpu_only_ms);
      step->set_gpu_hot_expert_ms(r.gpu_hot_expert_ms);
      step->set_hot_pair_share(r.hot_pair_share);
      step->set_experts_per_layer(r.experts_per_layer);
      step->set_cpu_experts_per_layer(r.cpu_experts_per_layer);
      step->set_early_rounds_missed(r.early_rounds_missed);
      step->set_transfer_ms(r.transfer_ms);
      step->set_cpu_ns_per_token(r.cpu_ns_per_token);
      step->set_cpu_fixed_us(r.cpu_fixed_us);
      step->set_gpu_ns_per_token(r.gpu_ns_per_token);
      step->set_gpu_fixed_us(r.gpu_fixed_us);
      step->set_dma_ns_per_token(r.dma_ns_per_token);
      step->set_dma_fixed_us(r.dma_fixed_us);
      step->set_chain_extra_us(r.chain_extra_us);
      step->set_gpu_waited_cpu_ms(r.gpu_waited_cpu_ms);
      step->set_resplit_ms(r.resplit_ms);
      step->set_resplit_blocks(r.resplit_blocks);
      step->set_gpu_transfer_copies(r.gpu_transfer_copies);
      step->set_gpu_worker_cpu_ms(r.gpu_worker_cpu_ms);
      step->set_explore_reason(std::string(ExploreReasonName(r.explore_reason)));
      step->set_explore_cost_ms(r.explore_cost_ms);
      step->set_explore_debt_ms(r.explore_debt_ms);
    }
  }
  if (response.steps_size() == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no step decoded the whole batch of ", request.batch(),
        " at once (other requests held KV blocks or sequence slots, so the bench sequences "
        "ran in turns)"));
  }
  double total_ms = 0;
  for (const v1::BenchStep& step : response.steps()) total_ms += step.step_ms();
  if (response.steps_size() > 0) {
    response.set_mean_step_ms(total_ms / response.steps_size());
    response.set_tokens_per_second(request.batch() * 1e3 / response.mean_step_ms());
  }
  return response;
}

void Engine::ReleaseBenchRound(uint64_t round) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& request : waiting_) {
    if (request->bench_round == round) request->held = false;
  }
  work_.notify_all();
}

bool Engine::Abort(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_id_.find(request_id);
  if (it == by_id_.end()) return false;
  it->second->aborted.store(true);
  work_.notify_all();
  return true;
}

void Engine::FailAll(const absl::Status& status) {
  std::vector<std::shared_ptr<Request>> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    all.assign(waiting_.begin(), waiting_.end());
    waiting_.clear();
    counts_.waiting = 0;
  }
  for (auto& request : all) Fail(*request, status);
  // Running requests belong to the engine thread: while it runs they are marked and end at
  // its next step (the step in flight, if any, fails); with it stopped they end here.
  std::vector<std::shared_ptr<Request>> running;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (thread_.joinable() && !stopping_) {
      // The engine thread ends them at its next step.
      for (auto& request : running_) {
        request->forced = OwnCopy(status);  // the caller's Status stays the caller's
        request->aborted.store(true);
      }
      work_.notify_all();
      return;
    }
    running = running_;
  }
  for (auto& request : running) Fail(*request, status);
}

bool Engine::ReserveExternal(uint64_t blocks, uint32_t sequences) {
  const uint64_t total = kv_.region_slots(KvRegion::kCpuCompute) +
                         kv_.region_slots(KvRegion::kGpuTransfer);
  std::lock_guard<std::mutex> lock(mutex_);
  if (reserved_blocks_ + blocks > total ||
      running_.size() + external_sequences_ + sequences > kv_.max_sequences) {
    return false;
  }
  reserved_blocks_ += blocks;
  external_sequences_ += sequences;
  return true;
}

void Engine::ReleaseExternal(uint64_t blocks, uint32_t sequences) {
  std::lock_guard<std::mutex> lock(mutex_);
  reserved_blocks_ -= std::min(reserved_blocks_, blocks);
  external_sequences_ -= std::min(external_sequences_, sequences);
  work_.notify_all();
}

// The probes take well under a second on the H200 (the GPU path's 155–300 ms); a worker
// that does not answer in this long holds the engine thread no longer.
constexpr absl::Duration kProbeTimeout = absl::Seconds(30);

namespace {

// A path probe of 1/8, 1/4, 1/2 and all of `blocks` blocks per layer (each size once),
// spread over up to 16 decode sequences, on up to 4 layers, 3 runs each after a warm-up.
// `blocks`: the region's slots, capped at 256 MiB and 128K tokens per layer (the lines are
// straight well before that: 256 MiB are ~5 ms of DMA at 55 GB/s, ~4 ms of DRAM reads at
// 65 GB/s).
internal::PathProbeRequest PathProbe(const KvCacheConfig& kv, uint64_t region_blocks) {
  constexpr uint64_t kMaxProbeBytesPerLayer = uint64_t{256} << 20;
  constexpr uint64_t kMaxProbeTokensPerLayer = uint64_t{128} << 10;
  const uint64_t block_bytes = std::max<uint64_t>(1, kv.geometry.layer_block_bytes());
  const uint64_t blocks = std::min<uint64_t>(
      {region_blocks, std::max<uint64_t>(1, kMaxProbeBytesPerLayer / block_bytes),
       std::max<uint64_t>(1, kMaxProbeTokensPerLayer / kv.block_tokens())});
  internal::PathProbeRequest request;
  uint64_t previous = 0;
  for (const uint64_t divisor : {8, 4, 2, 1}) {
    const uint64_t n = std::max<uint64_t>(1, blocks / divisor);
    if (n == previous) continue;
    request.add_tokens(n * kv.block_tokens());
    previous = n;
  }
  request.set_sequences(std::min<uint32_t>(kv.max_sequences, 16));
  request.set_layers(std::min<uint32_t>(kv.geometry.num_layers, 4));
  request.set_repeats(3);
  return request;
}

std::vector<CostSample> ProbePoints(const internal::PathProbeResponse& response) {
  std::vector<CostSample> points;
  for (const internal::PathProbePoint& point : response.points()) {
    points.push_back({static_cast<double>(point.tokens()), point.ns_per_layer()});
  }
  return points;
}

// "N tokens X ms (slowest run Y), ..." for the log.
std::string PointsTable(const internal::PathProbeResponse& response) {
  std::string table;
  for (const internal::PathProbePoint& point : response.points()) {
    absl::StrAppend(&table, table.empty() ? "" : ", ", point.tokens(), " tokens ",
                    absl::StrFormat("%.3f", point.ns_per_layer() / 1e6), " ms (slowest run ",
                    absl::StrFormat("%.3f", point.slowest_ns_per_layer() / 1e6), ")");
  }
  return table;
}

}  // namespace

absl::Status Engine::CalibrateGpuPath() {
  // At most one ping-pong buffer: one round per layer, as most decode steps run.
  const uint64_t blocks =
      std::min<uint64_t>(kv_.region_slots(KvRegion::kGpuTransfer), kv_.pingpong_blocks);
  if (blocks < 2) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the GPU-transfer region (", kv_.region_slots(KvRegion::kGpuTransfer),
        " blocks) and the ping-pong buffers (", kv_.pingpong_blocks,
        " blocks) leave too little to probe the GPU path"));
  }
  SpanRecorder::Scope span(&spans_, "gpu_calibration", next_step_);
  WS_ASSIGN_OR_RETURN(internal::PathProbeResponse response,
                      gpu_worker_->ProbeGpuPath(PathProbe(kv_, blocks), kProbeTimeout));
  return ApplyCalibration(/*gpu=*/true, response);
}

absl::Status Engine::CalibrateCpuPath() {
  const uint64_t blocks = kv_.region_slots(KvRegion::kCpuCompute);
  if (blocks < 2) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the CPU-compute region (", blocks, " blocks) is too small to probe the CPU path"));
  }
  SpanRecorder::Scope span(&spans_, "cpu_calibration", next_step_);
  WS_ASSIGN_OR_RETURN(internal::PathProbeResponse response,
                      cpu_worker_->ProbeCpuPath(PathProbe(kv_, blocks), kProbeTimeout));
  return ApplyCalibration(/*gpu=*/false, response);
}

absl::Status Engine::ApplyCalibration(bool gpu, const internal::PathProbeResponse& response) {
  const std::vector<CostSample> points = ProbePoints(response);
  double slope, fixed;
  {
    std::lock_guard<std::mutex> lock(*placement_mutex_);
    WS_RETURN_IF_ERROR(gpu ? scheduler_->CalibrateGpu(points) : scheduler_->CalibrateCpu(points));
    const RooflineParams fitted = scheduler_->estimates();
    slope = gpu ? fitted.gpu_ns_per_token : fitted.cpu_ns_per_token;
    fixed = gpu ? fitted.gpu_fixed_ns : fitted.cpu_fixed_ns;
    (gpu ? gpu_calibration_points_ : cpu_calibration_points_) = points;
    schedulers_run_.insert(scheduler_);
  }
  WS_LOG(INFO) << (gpu ? "GPU" : "CPU") << " path calibrated in "
               << absl::StrFormat("%.0f", response.ms()) << " ms: " << (gpu ? "B" : "A")
               << " = " << absl::StrFormat("%.3f", slope) << " ns/token, "
               << (gpu ? "c_G" : "c_C") << " = " << absl::StrFormat("%.1f", fixed / 1e3)
               << " us per layer (" << PointsTable(response) << ")";
  std::lock_guard<std::mutex> lock(mutex_);
  PathCalibration& calibration = gpu ? gpu_calibration_ : cpu_calibration_;
  ++calibration.count;
  calibration.last_ms = response.ms();
  calibration.ns_per_token = slope;
  calibration.fixed_ns = fixed;
  return absl::OkStatus();
}

absl::Status Engine::SwitchScheduler(Scheduler* scheduler) {
  std::lock_guard<std::mutex> placement_lock(*placement_mutex_);
  std::lock_guard<std::mutex> lock(mutex_);
  if (scheduler == scheduler_) return absl::OkStatus();
  if (in_step_ || counts_.running > 0 || !waiting_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "switching to policy ", scheduler->policy().ToString(), " needs an idle coordinator: ",
        counts_.running, " requests running, ", waiting_.size(), " waiting",
        in_step_ ? ", a step under way" : ""));
  }
  if (!schedulers_run_.contains(scheduler)) {
    absl::Status fitted;
    if (!gpu_calibration_points_.empty()) fitted = scheduler->CalibrateGpu(gpu_calibration_points_);
    if (fitted.ok() && !cpu_calibration_points_.empty()) {
      fitted = scheduler->CalibrateCpu(cpu_calibration_points_);
    }
    if (!fitted.ok()) {
      return absl::InternalError(absl::StrCat("calibrating policy ",
                                              scheduler->policy().ToString(), ": ",
                                              fitted.message()));
    }
  }
  schedulers_run_.insert(scheduler_);
  schedulers_run_.insert(scheduler);
  WS_LOG(INFO) << "policy " << scheduler_->policy().ToString() << " -> "
               << scheduler->policy().ToString();
  scheduler_ = scheduler;
  resplit_target_ = std::numeric_limits<double>::quiet_NaN();
  return absl::OkStatus();
}

Engine::PathCalibration Engine::gpu_calibration() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return gpu_calibration_;
}

Engine::PathCalibration Engine::cpu_calibration() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cpu_calibration_;
}

Engine::SchedulerCheck Engine::scheduler_check() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return check_;
}

EngineCounts Engine::Counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

void Engine::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // A bench round held at the queue's front (RunBench is still queueing it) is no work
      // yet: ReleaseBenchRound wakes the loop.
      work_.wait_for(lock, absl::ToChronoMilliseconds(kIdleWait), [&] {
        return stopping_ || (!waiting_.empty() && !waiting_.front()->held) || !running_.empty();
      });
      if (stopping_) break;
    }
    {
      SpanRecorder::Scope span(&spans_, "admission", next_step_);
      DropEnded();
      Admit();
    }
    if (running_.empty()) continue;
    bool recalibrate = false;
    {
      std::lock_guard<std::mutex> lock(*placement_mutex_);
      recalibrate = scheduler_->RecalibrationDue();
    }
    if (recalibrate) {
      // Under the load of the moment (a competing tenant slows the DMA too). A failure is
      // logged and the old lines kept; the period restarts either way.
      absl::Status calibrated = CalibrateGpuPath();
      if (!calibrated.ok()) {
        WS_LOG(WARNING) << "re-measuring the GPU path: " << calibrated;
        std::lock_guard<std::mutex> lock(*placement_mutex_);
        scheduler_->SkipRecalibration();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      in_step_ = true;
    }
    absl::Status status = RunOneStep();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      in_step_ = false;
      ++steps_ended_;
    }
    step_ended_.notify_all();
    if (!status.ok()) {
      WS_LOG(WARNING) << "step failed: " << status;
      if (on_step_failure_) on_step_failure_();
    }
  }
}

void Engine::DropEnded() {
  const absl::Time now = absl::Now();
  auto ended = [&](const Request& r) {
    return r.aborted.load() || r.stream->cancelled() || now >= r.deadline;
  };
  std::vector<std::shared_ptr<Request>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (ended(**it)) {
        dropped.push_back(*it);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    counts_.waiting = static_cast<uint32_t>(waiting_.size());
  }
  for (const auto& request : running_) {
    if (ended(*request)) dropped.push_back(request);
  }
  for (auto& request : dropped) {
    absl::Status forced;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      forced = request->forced;
    }
    if (!forced.ok()) {
      Fail(*request, forced);
    } else if (!request->aborted.load() &&
               (now >= request->deadline ||
                (request->stream->cancelled() &&
                 CancelledAtDeadline(request->submitted, request->deadline, now)))) {
      // Also where the stream was cancelled: gRPC cancels the call at its deadline, and the
      // service may pass that on before this check sees the deadline, or before the server's
      // copy of it passes (CancelledAtDeadline).
      Fail(*request, absl::DeadlineExceededError("the request's deadline passed"));
    } else {
      Finish(*request, v1::FINISH_REASON_ABORT);
    }
  }
}

void Engine::Admit() {
  const uint64_t total = kv_.region_slots(KvRegion::kCpuCompute) +
                         kv_.region_slots(KvRegion::kGpuTransfer);
  while (true) {
    std::shared_ptr<Request> request;
    {
      // Moved from waiting to running in one step, so FailAll always finds it.
      std::lock_guard<std::mutex> lock(mutex_);
      if (waiting_.empty()) break;
      request = waiting_.front();
      if (request->held) break;  // its bench round is still being queued
      if (running_.size() + external_sequences_ >= kv_.max_sequences ||
          reserved_blocks_ + request->reserved_blocks > total) {
        break;  // first come, first served: wait for running requests to end
      }
      waiting_.pop_front();
      running_.push_back(request);
      reserved_blocks_ += request->reserved_blocks;
      request->reserved = true;
      counts_.waiting = static_cast<uint32_t>(waiting_.size());
      counts_.running = static_cast<uint32_t>(running_.size());
    }
    request->sequence = next_sequence_++;
    absl::Status admitted;
    {
      std::lock_guard<std::mutex> lock(*placement_mutex_);
      admitted = placement_->Admit(request->sequence);
    }
    if (!admitted.ok()) {
      Fail(*request, admitted);
      continue;
    }
    request->admitted = true;
    request->admitted_at = absl::Now();
    if (request->bench_round > 0) {
      // The context lands where a prefill would have put it, uncomputed.
      absl::Status placed;
      {
        std::lock_guard<std::mutex> lock(*placement_mutex_);
        SteeringChooser chooser(*placement_, scheduler_->PlacementShare(LiveHostTokens() +
                                                                        request->prompt.size()));
        placed = placement_->PlanPrefill(request->sequence, request->prompt.size(), chooser).status();
      }
      if (!placed.ok()) {
        Fail(*request, placed);
        continue;
      }
      request->prefilled = request->prompt.size();
      request->pending_token = request->prompt.back();
      request->first_chunk_sent = true;
    }
  }
}

absl::Status Engine::RunOneStep() {
  const auto step_start = std::chrono::steady_clock::now();
  const uint32_t bt = kv_.block_tokens();
  internal::StepPlan plan;
  plan.set_step_id(next_step_++);
  struct Entry {
    std::shared_ptr<Request> request;
    bool prefill;
    uint32_t tokens;
    bool last_chunk;
  };
  std::vector<Entry> entries;
  // Requests whose planning failed, each with its own error.
  std::vector<std::pair<std::shared_ptr<Request>, absl::Status>> failed;
  absl::Status failure;  // the last of them (the step's error when nothing else runs)
  uint32_t budget = max_step_tokens_;
  bool any_prefill = false;
  ReadDecision read;
  double resplit_ms = 0;
  uint64_t resplit_blocks = 0;
  {
    SpanRecorder::Scope span(&spans_, "planning", plan.step_id());
    std::lock_guard<std::mutex> lock(*placement_mutex_);
    plan.set_cpu_share(scheduler_->target_cpu_share());
    // A monolithic cache has one physical state: a new target moves the placed blocks.
    if (block_copier_ && scheduler_->policy().kind == PolicyKind::kMonolithic &&
        scheduler_->target_cpu_share() != resplit_target_) {
      SpanRecorder::Scope resplit_span(&spans_, "resplit", plan.step_id());
      const auto resplit_start = std::chrono::steady_clock::now();
      const double target = scheduler_->target_cpu_share();
      // The engine's own sequences only: the self test's are placed beside them and must
      // stay where its pattern was written.
      std::vector<SequenceId> own;
      own.reserve(running_.size());
      for (const auto& r : running_) own.push_back(r->sequence);
      absl::StatusOr<ResplitStats> moved = ApplyResplit(
          *placement_, PlanResplit(*placement_, std::move(own), target), block_copier_);
      resplit_target_ = target;
      resplit_ms = MillisSince(resplit_start);
      // The moves before a failure are done too: the gpu_worker must drop the rounds it
      // queued early, at the next step it runs.
      kv_moved_unsent_ = kv_moved_unsent_ || !moved.ok() || moved->blocks > 0;
      if (!moved.ok()) {
        return absl::InternalError(absl::StrCat("re-splitting the KV to a CPU share of ", target,
                                                ": ", moved.status().ToString()));
      }
      resplit_blocks = moved->blocks;
      {
        std::lock_guard<std::mutex> counts_lock(mutex_);
        counts_.resplit_blocks += moved->blocks;
        counts_.resplit_ms += resplit_ms;
      }
      if (moved->skipped > 0) {
        WS_LOG(WARNING) << "re-split to a CPU share of " << target << ": " << moved->skipped
                        << " block moves skipped (their region is full)";
      }
    }
    // Decode tokens first: generating sequences never wait behind a long prompt.
    for (const auto& r : running_) {
      if (r->pending_token < 0 || budget == 0) continue;
      internal::SequenceStep* step = plan.add_sequences();
      step->set_seq_id(r->sequence);
      size_t flushed = 0;
      if (placement_->NeedsFlush(r->sequence)) {
        // The chooser snapshots every live sequence's placement: built only when a block
        // is placed, once per W decoded tokens, not for every token.
        SteeringChooser chooser(*placement_, scheduler_->FlushShare());
        absl::StatusOr<FlushPlan> flush = placement_->Flush(r->sequence, chooser);
        if (!flush.ok()) {
          plan.mutable_sequences()->RemoveLast();
          failure = flush.status();
          failed.emplace_back(r, failure);
          continue;
        }
        flushed = flush->blocks.size();
      }
      const SequencePlacement& seq = *placement_->Find(r->sequence);
      step->set_position(seq.num_tokens());
      step->set_dwindow_tokens(seq.window_tokens);
      AddRuns(seq.blocks, 0, seq.blocks.size(), step->mutable_blocks(), bt);
      AddRuns(seq.blocks, seq.blocks.size() - flushed, seq.blocks.size(),
              step->mutable_new_blocks(), bt);
      absl::StatusOr<uint32_t> appended = placement_->AppendDecode(r->sequence);
      WS_CHECK(appended.ok()) << appended.status();
      step->set_num_tokens(1);
      step->add_token_ids(static_cast<uint32_t>(r->pending_token));
      step->set_window_slot(seq.window_slot);
      SetSampleNext(r->sampling, *r->sampler, step);
      step->set_next_prompt_token(-1);
      step->set_prefill(false);
      entries.push_back({r, false, 1, false});
      --budget;
    }
    // Then prompt chunks: whole blocks, the last chunk takes the remainder.
    for (const auto& r : running_) {
      const uint64_t remaining = r->prompt.size() - r->prefilled;
      if (remaining == 0 || budget == 0) continue;
      uint32_t chunk;
      bool last = remaining <= budget;
      if (last) {
        chunk = static_cast<uint32_t>(remaining);
      } else {
        chunk = budget / bt * bt;
        if (chunk == 0) continue;
      }
      const SequencePlacement& before = *placement_->Find(r->sequence);
      const size_t old_blocks = before.blocks.size();
      // Steered for the batch the whole prompt makes (its later chunks land too).
      SteeringChooser chooser(*placement_, scheduler_->PlacementShare(LiveHostTokens() + remaining));
      absl::StatusOr<PrefillPlan> placed = placement_->PlanPrefill(r->sequence, chunk, chooser);
      if (!placed.ok()) {
        failure = placed.status();
        failed.emplace_back(r, failure);
        continue;
      }
      const SequencePlacement& seq = *placement_->Find(r->sequence);
      internal::SequenceStep* step = plan.add_sequences();
      step->set_seq_id(r->sequence);
      step->set_prefill(true);
      step->set_position(r->prefilled);
      step->set_num_tokens(chunk);
      for (uint32_t t = 0; t < chunk; ++t) {
        step->add_token_ids(static_cast<uint32_t>(r->prompt[r->prefilled + t]));
      }
      AddRuns(seq.blocks, 0, old_blocks, step->mutable_blocks(), bt);
      AddRuns(seq.blocks, old_blocks, seq.blocks.size(), step->mutable_new_blocks(), bt);
      step->set_window_slot(seq.window_slot);
      step->set_dwindow_tokens(0);
      if (last) SetSampleNext(r->sampling, *r->sampler, step);
      step->set_want_prompt_logprobs(r->proto.sampling().prompt_logprobs());
      step->set_top_logprobs(r->proto.sampling().logprobs());
      step->set_next_prompt_token(last ? -1 : r->prompt[r->prefilled + chunk]);
      step->set_gpu_reads_cpu_blocks(options_.prefill_attention != "split" &&
                                     PrefillReadsOnGpu(chunk, *scheduler_));
      entries.push_back({r, true, chunk, last});
      budget -= chunk;
      any_prefill = true;
    }
    if (!any_prefill) {
      ChooseDecodeReads(&plan, &read);
    } else {
      queued_cpu_readers_.clear();
    }
  }
  for (const auto& [r, status] : failed) Fail(*r, PublicStepError(status));
  if (entries.empty()) return failure;
  uint64_t step_tokens = 0;
  for (const Entry& e : entries) step_tokens += e.tokens;
  StepRecord record;
  record.step_id = plan.step_id();
  record.target_cpu_share = plan.cpu_share();
  record.resplit_ms = resplit_ms;
  record.resplit_blocks = resplit_blocks;
  record.explore = read.explore;
  record.explore_reason = read.explore_reason;
  record.predicted_split_ms = read.split_ns * model_.num_layers / 1e6;
  record.predicted_gpu_only_ms = read.gpu_only_ns * model_.num_layers / 1e6;
  record.rest_split_ms = read.rest_split_ns * model_.num_layers / 1e6;
  record.rest_gpu_only_ms = read.rest_gpu_only_ns * model_.num_layers / 1e6;
  record.explore_cost_ms = read.explore_cost_ns * model_.num_layers / 1e6;
  record.explore_debt_ms = read.explore_debt_ns * model_.num_layers / 1e6;
  for (const Entry& e : entries) {
    if (e.prefill) {
      record.prefill_tokens += e.tokens;
      continue;
    }
    ++record.decode_sequences;
    const uint64_t round = e.request->bench_round;
    if (round == 0) continue;
    if (record.bench_round == 0) record.bench_round = round;
    if (round == record.bench_round) ++record.bench_sequences;
  }
  for (const internal::SequenceStep& sequence : plan.sequences()) {
    for (const internal::BlockRun& run : sequence.blocks()) record.host_tokens += run.num_tokens();
  }
  // The experts' stream would share the link with the step's KV rounds (ExpertPlacement).
  const uint64_t streamed_bytes = StreamedHostTokens(plan) * kv_.geometry.bytes_per_token_layer();
  {
    std::lock_guard<std::mutex> lock(*placement_mutex_);
    if (experts_.has_value()) {
      plan.set_experts_on_gpu(experts_->OnGpu(static_cast<int64_t>(step_tokens),
                                              experts_->LinkMs(streamed_bytes)));
    }
    // The placement this step reads, taken before the step: sequences that end in it free
    // their blocks before its record is written.
    record.placed_cpu_share = placement_->PlacedCpuShare();
  }
  record.experts_on_gpu = plan.experts_on_gpu();

  // Both workers run the step at once; they meet on the data plane.
  absl::StatusOr<internal::StepResult> cpu_result = absl::UnknownError("not run");
  absl::StatusOr<internal::StepResult> gpu_result = absl::UnknownError("not run");
  {
    SpanRecorder::Scope span(&spans_, "workers", plan.step_id());
    plan.set_kv_moved(std::exchange(kv_moved_unsent_, false));
    std::thread cpu_call([&] { cpu_result = cpu_worker_->RunStep(plan, options_.step_timeout); });
    gpu_result = gpu_worker_->RunStep(plan, options_.step_timeout);
    if (!gpu_result.ok()) cpu_worker_->CancelStep(plan.step_id());
    cpu_call.join();
  }
  absl::Status status = gpu_result.status();
  status.Update(cpu_result.status());
  // A failed step may have ended before the gpu_worker dropped its early rounds (GpuStep drops
  // them once the step's D-window flushes are done): tell the next one again.
  if (!status.ok() && plan.kv_moved()) kv_moved_unsent_ = true;
  if (!status.ok()) {
    for (const Entry& e : entries) {
      absl::Status forced;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        forced = e.request->forced;  // FailAll's reason (a dead worker) beats "cancelled"
      }
      Fail(*e.request, !forced.ok() ? forced : PublicStepError(status));
    }
    return status;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_.steps;
  }
  if (metrics_ != nullptr) {
    metrics_->ObserveStepTime("gpu_worker", gpu_result->step_ms() / 1e3);
    metrics_->ObserveStepTime("cpu_worker", cpu_result->step_ms() / 1e3);
    if (!any_prefill) {
      metrics_->AddDecodeStep(cpu_result->attended_tokens() > 0 ? "split" : "gpu_only",
                              ExploreReasonName(read.explore_reason));
    }
  }
  {
    std::lock_guard<std::mutex> lock(*placement_mutex_);
    if (experts_.has_value()) {
      if (plan.experts_on_gpu()) {
        experts_->ObserveGpu(static_cast<int64_t>(step_tokens), gpu_result->expert_ms());
      } else {
        experts_->ObserveCpu(static_cast<int64_t>(step_tokens), cpu_result->expert_ms());
      }
    }
  }
  SpanRecorder::Scope sampling_span(&spans_, "sampling", plan.step_id());
  absl::flat_hash_map<uint64_t, const internal::SequenceResult*> results;
  for (const internal::SequenceResult& result : gpu_result->sequences()) {
    results[result.seq_id()] = &result;
  }
  for (const Entry& e : entries) {
    Request& r = *e.request;
    if (r.ended) continue;
    auto it = results.find(r.sequence);
    if (it == results.end()) {
      Fail(r, absl::InternalError(absl::StrCat("the gpu_worker returned no result for sequence ",
                                               r.sequence)));
      continue;
    }
    const internal::SequenceResult& result = *it->second;
    if (e.prefill) {
      const uint32_t top = r.proto.sampling().logprobs();
      for (int i = 0; i < result.prompt_logprobs_size(); ++i) {
        v1::TokenLogprobs& lp = r.prompt_logprobs.emplace_back();
        lp.set_logprob(result.prompt_logprobs(i));
        for (uint32_t k = 0; k < top && int(i * top + k) < result.prompt_top_ids_size(); ++k) {
          v1::TopLogprob* alt = lp.add_top();
          alt->set_token_id(result.prompt_top_ids(i * top + k));
          alt->set_logprob(result.prompt_top_logprobs(i * top + k));
        }
      }
      r.prefilled += e.tokens;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        counts_.prompt_tokens += e.tokens;
      }
      if (metrics_ != nullptr) metrics_->AddPromptTokens(e.tokens);
      if (!e.last_chunk) {
        v1::GenerateResponse progress;
        progress.set_request_id(r.id);
        progress.mutable_progress()->set_prompt_tokens_done(r.prefilled);
        progress.mutable_progress()->set_prompt_tokens_total(r.prompt.size());
        r.stream->Push(std::move(progress));
        continue;
      }
    } else {
      r.pending_token = -1;  // fed
    }
    if (!result.has_next_token()) {
      Fail(r, absl::InternalError(absl::StrCat("the gpu_worker sampled no token for sequence ",
                                               r.sequence)));
      continue;
    }
    Sampled(r, result.next_token());
  }
  // The scheduler learns from decode-only steps (its model is a decode step's).
  if (!any_prefill) {
    const double layers = std::max<uint32_t>(1, gpu_result->num_layers());
    StepSample sample;
    const bool steady = options_.steady_layer_samples;
    sample.cpu = AttentionSample(*cpu_result, gpu_result->num_layers(), steady);
    sample.gpu = AttentionSample(*gpu_result, gpu_result->num_layers(), steady);
    // Without the hot experts' one-off upload, which is not step work.
    sample.step_ns = (MillisSince(step_start) - gpu_result->hot_upload_ms()) * 1e6 / layers;
    // The DMA bound's measures (SchedulerOptions::dma_bound): the copy engine's time on the
    // rounds; what the CPU's chain spends beyond sample.cpu: the step outside each layer's
    // later path (the GPU's attention and its wait for the CPU's partial), and the CPU's
    // attention over all layers beyond the sample's (on a GPU-only step: the step less the
    // GPU's attention).
    sample.dma_ns = gpu_result->transfer_ms() * 1e6 / layers;
    if (sample.dma_ns > 0.0) {
      sample.cpu_chain_extra_ns =
          CpuChainExtraNs(*gpu_result, *cpu_result, layers, sample.step_ns, sample.cpu.ns);
    }
    sample.early_rounds_missed = gpu_result->early_rounds_missed() > 0;
    std::lock_guard<std::mutex> lock(*placement_mutex_);
    if (scheduler_->estimates_ready()) {
      // What the lines predicted for this step, before they learn from it.
      const StepPrediction predicted = scheduler_->PredictPaths(sample);
      const double predicted_cpu = predicted.cpu_ns;
      const double predicted_gpu = predicted.gpu_ns;
      std::lock_guard<std::mutex> counts_lock(mutex_);
      constexpr double kKeep = 31.0 / 32.0;
      auto mix = [&](double& mean, double value) {
        mean = check_.steps == 0 ? value : kKeep * mean + (1 - kKeep) * value;
      };
      mix(check_.predicted_cpu_ms, predicted_cpu / 1e6);
      mix(check_.measured_cpu_ms, sample.cpu.ns / 1e6);
      mix(check_.predicted_gpu_ms, predicted_gpu / 1e6);
      mix(check_.measured_gpu_ms, sample.gpu.ns / 1e6);
      ++check_.steps;
    }
    scheduler_->ObserveStep(sample);
    scheduler_->UpdateTarget(LiveHostTokens());
  }
  record.step_ms = MillisSince(step_start);
  if (record.host_tokens > 0) {
    record.read_cpu_share = static_cast<double>(cpu_result->attended_tokens()) /
                            static_cast<double>(record.host_tokens);
  }
  record.end_unix_s = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  record.gpu_attention_ms = gpu_result->attention_ms();
  record.cpu_attention_ms = cpu_result->attention_ms();
  record.gpu_expert_wait_ms = gpu_result->expert_ms();
  record.cpu_expert_ms = cpu_result->expert_ms();
  record.gpu_hot_expert_ms = gpu_result->hot_expert_ms();
  record.early_rounds_missed = gpu_result->early_rounds_missed();
  record.transfer_ms = gpu_result->transfer_ms();
  record.gpu_waited_cpu_ms = gpu_result->cpu_attention_wait_ms();
  record.gpu_transfer_copies = gpu_result->transfer_copies();
  record.gpu_worker_cpu_ms = gpu_result->process_cpu_ms();
  if (gpu_result->moe_layers() > 0) {
    record.experts_per_layer = static_cast<double>(gpu_result->routed_experts()) /
                               static_cast<double>(gpu_result->moe_layers());
    record.cpu_experts_per_layer = static_cast<double>(gpu_result->cpu_routed_experts()) /
                                   static_cast<double>(gpu_result->moe_layers());
  }
  if (gpu_result->routed_pairs() > 0) {
    record.hot_pair_share = static_cast<double>(gpu_result->hot_expert_pairs()) /
                            static_cast<double>(gpu_result->routed_pairs());
  }
  {
    std::lock_guard<std::mutex> lock(*placement_mutex_);
    if (scheduler_->estimates_ready()) {
      const RooflineBound bound = scheduler_->Bound(record.host_tokens);
      record.bound_ms = bound.step_ns * model_.num_layers / 1e6;
      // The share the scheduler steers and reads toward (SplitShare: the lines' crossing, or
      // the DMA bound's where it is later), not the bound's.
      record.optimal_cpu_share = scheduler_->SplitShare(static_cast<double>(record.host_tokens));
      const RooflineParams lines = scheduler_->estimates();
      record.cpu_ns_per_token = lines.cpu_ns_per_token;
      record.cpu_fixed_us = lines.cpu_fixed_ns / 1e3;
      record.gpu_ns_per_token = lines.gpu_ns_per_token;
      record.gpu_fixed_us = lines.gpu_fixed_ns / 1e3;
    }
    if (const LinearCostEstimator& dma = scheduler_->dma_estimator(); dma.ready()) {
      record.dma_ns_per_token = dma.slope();
      record.dma_fixed_us = dma.intercept() / 1e3;
    }
    record.chain_extra_us = scheduler_->cpu_chain_extra_ns() / 1e3;  // NaN until measured
  }
  std::lock_guard<std::mutex> lock(mutex_);
  records_.push_back(record);
  if (records_.size() > kMaxStepRecords) records_.pop_front();
  return absl::OkStatus();
}

uint64_t Engine::LiveHostTokens() const {
  uint64_t host_tokens = 0;
  for (SequenceId id : placement_->LiveSequences()) {
    host_tokens += placement_->Find(id)->window_first_token();
  }
  return host_tokens;
}

void Engine::ChooseDecodeReads(internal::StepPlan* plan, ReadDecision* decision) {
  std::vector<uint64_t> cpu_tokens;
  uint64_t host_tokens = 0;
  for (const internal::SequenceStep& sequence : plan->sequences()) {
    uint64_t cpu = 0;
    for (const internal::BlockRun& run : sequence.blocks()) {
      host_tokens += run.num_tokens();
      if (run.region() == internal::REGION_CPU_COMPUTE) cpu += run.num_tokens();
    }
    cpu_tokens.push_back(cpu);
  }
  // The readers whose KV rounds are queued, by sequence (the batch may have changed since).
  absl::FixedArray<bool> queued(cpu_tokens.size());
  for (int i = 0; i < plan->sequences_size(); ++i) {
    queued[i] = std::find(queued_cpu_readers_.begin(), queued_cpu_readers_.end(),
                          plan->sequences(i).seq_id()) != queued_cpu_readers_.end();
  }
  // Whole sequences only: the scheduler predicts the split at the share they make and names
  // them.
  *decision = scheduler_->ChooseDecodeReads(host_tokens, cpu_tokens,
                                            absl::MakeConstSpan(queued));
  WS_CHECK(decision->cpu_readers.size() == cpu_tokens.size());
  if (!decision->explore) queued_cpu_readers_.clear();
  for (int i = 0; i < plan->sequences_size(); ++i) {
    if (cpu_tokens[i] > 0 && !decision->cpu_readers[i]) {
      plan->mutable_sequences(i)->set_gpu_reads_cpu_blocks(true);
    }
    if (!decision->explore && decision->cpu_readers[i]) {
      queued_cpu_readers_.push_back(plan->sequences(i).seq_id());
    }
  }
  plan->set_exploring(decision->explore);
  plan->set_exploration_continues(decision->exploration_continues);
}

std::vector<Engine::StepRecord> Engine::StepRecords(uint64_t bench_round) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<StepRecord> out;
  for (const StepRecord& r : records_) {
    if (bench_round == 0 || r.bench_round == bench_round) out.push_back(r);
  }
  return out;
}

void Engine::Sampled(Request& r, const internal::SampledToken& sampled) {
  if (sampled.token_id() >= static_cast<uint64_t>(model_.vocab_size) ||
      sampled.top_ids_size() != sampled.top_logprobs_size() ||
      sampled.top_ids_size() !=
          static_cast<int>(std::min<uint64_t>(r.sampling.num_top, model_.vocab_size))) {
    Fail(r, absl::InternalError(absl::StrCat(
                "the gpu_worker sampled token ", sampled.token_id(), " with ",
                sampled.top_ids_size(), " alternatives (", sampled.top_logprobs_size(),
                " logprobs) for a vocabulary of ", model_.vocab_size, " and ",
                r.sampling.num_top, " alternatives asked")));
    return;
  }
  SampledToken token;
  token.token_id = static_cast<int32_t>(sampled.token_id());
  token.logprob = sampled.logprob();
  for (int i = 0; i < sampled.top_ids_size(); ++i) {
    token.top.push_back({static_cast<int32_t>(sampled.top_ids(i)), sampled.top_logprobs(i)});
  }
  const absl::Time now = absl::Now();
  if (metrics_ != nullptr) {
    metrics_->AddGeneratedTokens(1);
    if (r.generated.empty()) {
      metrics_->ObserveTimeToFirstToken(absl::ToDoubleSeconds(now - r.submitted));
    } else {
      metrics_->ObserveTimePerToken(absl::ToDoubleSeconds(now - r.last_token_at));
    }
  }
  if (r.generated.empty()) r.first_token_at = now;
  r.last_token_at = now;
  r.generated.push_back(token.token_id);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_.generated_tokens;
  }
  r.chunk.add_token_ids(static_cast<uint32_t>(token.token_id));
  if (r.proto.sampling().logprobs() > 0) {
    v1::TokenLogprobs* lp = r.chunk.add_logprobs();
    lp->set_logprob(token.logprob);
    for (const TokenLogprob& alt : token.top) {
      v1::TopLogprob* out = lp->add_top();
      out->set_token_id(static_cast<uint32_t>(alt.token_id));
      out->set_logprob(alt.logprob);
    }
  }
  const v1::SamplingParams& sampling = r.proto.sampling();
  bool stop = std::find(sampling.stop_token_ids().begin(), sampling.stop_token_ids().end(),
                        static_cast<uint32_t>(token.token_id)) != sampling.stop_token_ids().end();
  if (!sampling.ignore_eos()) {
    stop = stop || std::find(model_.eos_token_ids.begin(), model_.eos_token_ids.end(),
                             token.token_id) != model_.eos_token_ids.end();
  }
  const bool length = r.generated.size() >= r.max_tokens ||
                      r.prompt.size() + r.generated.size() >= limits_.max_context;
  if (stop || length) {
    Finish(r, stop ? v1::FINISH_REASON_STOP : v1::FINISH_REASON_LENGTH);
    return;
  }
  r.pending_token = token.token_id;
  // A chunk holds at most logprobs_per_chunk tokens whatever stream_interval says: with 20
  // log-probabilities a token, ~22K tokens passed a default client's 4 MiB message limit.
  const uint32_t interval = std::clamp<uint32_t>(
      r.proto.stream_interval(), 1, std::max<uint32_t>(1, options_.logprobs_per_chunk));
  if (static_cast<uint32_t>(r.chunk.token_ids_size()) >= interval || !r.first_chunk_sent) {
    PushChunk(r);
  }
}

void Engine::PushChunk(Request& r) {
  v1::GenerateResponse response;
  response.set_request_id(r.id);
  *response.mutable_chunk() = std::move(r.chunk);
  r.chunk.Clear();
  if (!r.first_chunk_sent) {
    // The prompt's log-probabilities travel once, in the first chunks: at most
    // logprobs_per_chunk in each (a long prompt's would pass a default client's 4 MiB
    // message limit), chunks without tokens before the one that carries the first tokens and
    // the rest.
    const size_t per_chunk = std::max<uint32_t>(1, options_.logprobs_per_chunk);
    size_t sent = 0;
    while (r.prompt_logprobs.size() - sent > per_chunk) {
      v1::GenerateResponse piece;
      piece.set_request_id(r.id);
      for (size_t end = sent + per_chunk; sent < end; ++sent) {
        *piece.mutable_chunk()->add_prompt_logprobs() = std::move(r.prompt_logprobs[sent]);
      }
      r.stream->Push(std::move(piece));
    }
    for (; sent < r.prompt_logprobs.size(); ++sent) {
      *response.mutable_chunk()->add_prompt_logprobs() = std::move(r.prompt_logprobs[sent]);
    }
    r.prompt_logprobs.clear();
    r.first_chunk_sent = true;
  }
  r.stream->Push(std::move(response));
}

void Engine::Finish(Request& r, v1::FinishReason reason) {
  if (r.ended) return;
  const absl::Time now = absl::Now();
  if (r.chunk.token_ids_size() > 0 || (!r.first_chunk_sent && !r.prompt_logprobs.empty())) {
    PushChunk(r);
  }
  v1::GenerateResponse response;
  response.set_request_id(r.id);
  v1::Complete* complete = response.mutable_complete();
  complete->set_finish_reason(reason);
  complete->mutable_usage()->set_prompt_tokens(r.prompt.size());
  complete->mutable_usage()->set_completion_tokens(r.generated.size());
  v1::Timings* timings = complete->mutable_timings();
  const absl::Time admitted = r.admitted ? r.admitted_at : now;
  timings->set_queue_ms(Ms(admitted - r.submitted));
  if (!r.generated.empty()) {
    timings->set_time_to_first_token_ms(Ms(r.first_token_at - r.submitted));
    timings->set_prefill_ms(Ms(r.first_token_at - admitted));
    timings->set_decode_ms(Ms(now - r.first_token_at));
    if (r.generated.size() > 1 && now > r.first_token_at) {
      timings->set_decode_tokens_per_s((r.generated.size() - 1) /
                                       absl::ToDoubleSeconds(now - r.first_token_at));
    }
  }
  std::shared_ptr<RequestStream> stream = r.stream;  // Release may drop the last owner of r
  if (metrics_ != nullptr) {
    metrics_->AddRequest(reason == v1::FINISH_REASON_ABORT ? "abort" : "complete");
  }
  stream->Push(std::move(response));
  Release(r);
  stream->Finish(absl::OkStatus());
}

void Engine::Fail(Request& r, const absl::Status& status) {
  if (r.ended) return;
  // The tokens generated so far reach the client before the error (stream_interval may have
  // held them back).
  if (r.chunk.token_ids_size() > 0 || (!r.first_chunk_sent && !r.prompt_logprobs.empty())) {
    PushChunk(r);
  }
  v1::GenerateResponse response;
  response.set_request_id(r.id);
  response.mutable_error()->set_code(static_cast<int32_t>(status.code()));
  response.mutable_error()->set_message(std::string(status.message()));
  std::shared_ptr<RequestStream> stream = r.stream;  // Release may drop the last owner of r
  if (metrics_ != nullptr) metrics_->AddRequest("error");
  stream->Push(std::move(response));
  Release(r);
  // Read on the client's thread while the engine thread drops its own copies.
  stream->Finish(OwnCopy(status));
}

void Engine::Release(Request& r) {
  r.ended = true;
  if (r.admitted) {
    std::lock_guard<std::mutex> lock(*placement_mutex_);
    absl::Status freed = placement_->Free(r.sequence);
    if (!freed.ok()) WS_LOG(ERROR) << "freeing sequence " << r.sequence << ": " << freed;
    r.admitted = false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (r.reserved) {
    reserved_blocks_ -= r.reserved_blocks;
    r.reserved = false;
  }
  by_id_.erase(r.id);
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [&](const std::shared_ptr<Request>& p) { return p.get() == &r; }),
                 running_.end());
  counts_.running = static_cast<uint32_t>(running_.size());
}

}  // namespace writescope::coordinator
