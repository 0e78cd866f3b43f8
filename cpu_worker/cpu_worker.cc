#include "cpu_worker/cpu_worker.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/data_plane.h"
#include "common/data_plane_messages.h"
#include "common/kv_pattern.h"
#include "common/kv_spec.h"
#include "common/log.h"
#include "common/process.h"
#include "common/status.h"
#include "common/worker_model.h"

namespace writescope::cpu {
namespace {

// Maps the used CPU-compute region into this process before a step reads it
// (PrefaultPages): the gpu_worker writes the KV, so without this the first step that
// attends a block this process has not read yet takes its page faults in the middle of
// the step (on the dev machine a fresh mapping's first pass over 1 GiB of shared memory
// took 63-68 ms against 40-44 for the next, 2 threads; one populate pass took 67-69 ms
// per GiB). The gpu_worker pins the same pages with CUDA, so on the GPU machine this
// allocates nothing more. In 64 MiB pieces across the OpenMP threads; stops at the next
// piece once `cancelled`.
absl::Status PrefaultCpuRegion(absl::Span<std::byte> region, const std::atomic<bool>& cancelled) {
  constexpr size_t kPiece = size_t{64} << 20;
  const int64_t pieces = static_cast<int64_t>((region.size() + kPiece - 1) / kPiece);
  std::mutex mutex;
  absl::Status first_error;
  std::atomic<bool> failed{false};
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < pieces; ++i) {
    if (cancelled.load(std::memory_order_relaxed) || failed.load(std::memory_order_relaxed)) {
      continue;
    }
    const size_t begin = static_cast<size_t>(i) * kPiece;
    absl::Status status = PrefaultPages(
        region.subspan(begin, std::min(kPiece, region.size() - begin)), PrefaultAccess::kRead);
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(mutex);
      if (first_error.ok()) first_error = std::move(status);
      failed = true;
    }
  }
  if (!first_error.ok()) {
    return absl::Status(first_error.code(),
                        absl::StrCat("the CPU-compute KV region: ", first_error.message()));
  }
  if (cancelled.load()) {
    return absl::CancelledError("the load was cancelled while mapping the KV region");
  }
  return absl::OkStatus();
}

}  // namespace

CpuWorker::~CpuWorker() { Stop(); }

absl::StatusOr<internal::LoadResponse> CpuWorker::Load(const internal::LoadRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (arena_ != nullptr) return absl::FailedPreconditionError("cpu_worker is already loaded");
  // A cancelled earlier Load must not end this one; a cancel from here on does (the server
  // repeats it while the caller stays gone). BeginStop sets stopping_ before it cancels.
  load_progress_.cancelled = false;
  if (stopping_.load()) return absl::UnavailableError("cpu_worker is stopping");
  if (!request.has_kv()) return absl::InvalidArgumentError("Load: the KV cache spec (kv) is missing");
  // A load that fails or is cancelled part way leaves the worker as it found it, so that
  // the coordinator's next Load (a recovery's retry) can run.
  bool loaded = false;
  absl::Cleanup undo = [this, &loaded] {
    if (loaded) return;
    step_.reset();
    cpu_region_.reset();
    weights_.reset();
    arena_.reset();
  };
  WS_ASSIGN_OR_RETURN(kv_config_, FromKvSpec(request.kv()));
  WS_ASSIGN_OR_RETURN(std::unique_ptr<ShmArena> arena, ShmArena::Open(request.arena().name()));
  WS_ASSIGN_OR_RETURN(DataPlane plane, AttachDataPlane(*arena));
  WS_ASSIGN_OR_RETURN(KvRegionView view, KvRegionView::Open(*arena, kv_config_.geometry));
  if (view.num_slots() != kv_config_.region_slots(KvRegion::kCpuCompute)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the arena's CPU-compute region holds ", view.num_slots(), " blocks, the KV spec says ",
        kv_config_.region_slots(KvRegion::kCpuCompute)));
  }
  const ModelSource source = FromLoadRequest(request);
  // Synthetic experts go to a segment the gpu_worker maps too, when /dev/shm has room for
  // it and the whole KV arena (sparse there until written).
  WS_ASSIGN_OR_RETURN(weights_, LoadWorkerWeights(source, SideFilter::kCpu, &load_progress_,
                                                  SyntheticExpertsShmName(request.arena().name()),
                                                  request.arena().bytes()));
  WS_RETURN_IF_ERROR(CheckKvMatchesModel(weights_->config(), kv_config_));
  WS_LOG(INFO) << "weights of " << DescribeModelSource(source) << ": " << weights_->num_tensors()
               << " tensors, " << weights_->total_bytes() << " bytes (routed experts)";
  if (prefault_kv_) {
    WS_ASSIGN_OR_RETURN(absl::Span<std::byte> region, arena->Region(kCpuComputeRegion));
    const uint64_t used = std::min<uint64_t>(
        region.size(), kv_config_.region_used_bytes(KvRegion::kCpuCompute));
    WS_LOG(INFO) << "mapping the CPU-compute region's " << used << " bytes";
    const auto start = std::chrono::steady_clock::now();
    WS_RETURN_IF_ERROR(PrefaultCpuRegion(region.first(used), load_progress_.cancelled));
    WS_LOG(INFO) << "mapped the CPU-compute region's " << used << " bytes in "
                 << std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - start).count()
                 << " ms (" << omp_get_max_threads() << " threads)";
  }
  arena_ = std::move(arena);
  cpu_region_ = view;
  // The prepack below (a copy of every expert) stops too when the load is cancelled.
  step_options_.experts.cancelled = &load_progress_.cancelled;
  WS_ASSIGN_OR_RETURN(step_, CpuStep::Create(weights_->config(), kv_config_, *weights_,
                                             *cpu_region_, step_options_));
  WS_LOG(INFO) << "routed experts: " << step_->experts_description() << ", "
               << step_->owned_expert_bytes() << " bytes beyond the checkpoint's";
  if (load_progress_.cancelled.load()) {
    return absl::CancelledError("the load was cancelled before measuring the experts");
  }
  // A prefill-sized batch: the expert placement rule compares it with streaming the
  // weights to the GPU.
  WS_ASSIGN_OR_RETURN(const double expert_ms_per_token, step_->MeasureExpertCost(512));
  WS_LOG(INFO) << "routed experts, 512 tokens: " << expert_ms_per_token * 1000
               << " us per token and layer";
  loaded = true;
  loaded_.store(true);
  data_plane_ = plane;
  data_plane_thread_ = std::thread([this] { DataPlaneLoop(); });
  WS_LOG(INFO) << "mapped arena " << arena_->name() << " (" << arena_->size() << " bytes)";
  internal::LoadResponse response;
  response.set_device("cpu");
  response.set_weight_bytes(weights_->total_bytes());
  response.set_expert_ms_per_token(expert_ms_per_token);
  return response;
}

void CpuWorker::DataPlaneLoop() {
  ShmChannel in = data_plane_->to_cpu;
  ShmChannel out = data_plane_->to_gpu;
  while (!stopping_.load() && !loop_reset_.load()) {
    HoldThreadsForNextMessage(in);
    absl::StatusOr<absl::Span<const std::byte>> message = in.Peek(absl::Milliseconds(200));
    if (absl::IsDeadlineExceeded(message.status())) continue;
    if (!message.ok()) {
      const absl::Status down = absl::UnavailableError(
          absl::StrCat("the data plane closed: ", message.status().message()));
      if (!stopping_.load() && !loop_reset_.load()) {
        // On its own (a closed or corrupt channel): no step can run until the coordinator
        // gives fresh channels (ResetDataPlane), which NOT_SERVING makes it do.
        WS_LOG(WARNING) << "data plane ends: " << message.status()
                        << "; not serving until the channels are reset";
        {
          std::lock_guard<std::mutex> lock(steps_mutex_);
          data_plane_down_ = down;
        }
        ReportServing(false);
      }
      FailPendingSteps(down);
      return;
    }
    DataPlaneHeader header;
    if (message->size() < sizeof(header)) {
      WS_LOG(ERROR) << "data plane: message of " << message->size() << " bytes has no header";
      in.Release();
      continue;
    }
    std::memcpy(&header, message->data(), sizeof(header));
    switch (header.type) {
      case DataPlaneMessage::kEcho: {
        absl::StatusOr<absl::Span<std::byte>> reply = out.Reserve(message->size(), absl::Seconds(5));
        if (!reply.ok()) {
          WS_LOG(ERROR) << "data plane: cannot reply: " << reply.status();
          break;
        }
        std::memcpy(reply->data(), message->data(), message->size());
        header.type = DataPlaneMessage::kEchoReply;
        std::memcpy(reply->data(), &header, sizeof(header));
        out.Commit();
        break;
      }
      case DataPlaneMessage::kAttention:
      case DataPlaneMessage::kExperts:
      case DataPlaneMessage::kStepEnd:
        ServeStepMessage(header, message->subspan(sizeof(header)), out);
        break;
      default:
        WS_LOG(ERROR) << "data plane: unknown message type " << static_cast<uint32_t>(header.type);
    }
    in.Release();
    messages_served_.fetch_add(1);
  }
}

void CpuWorker::HoldThreadsForNextMessage(const ShmChannel& in) {
  if (hold_threads_ <= absl::ZeroDuration() || in.Pending()) return;
  {
    std::lock_guard<std::mutex> lock(steps_mutex_);
    const bool in_flight = std::any_of(steps_.begin(), steps_.end(),
                                       [](const auto& entry) { return !entry.second->done; });
    if (!in_flight) return;
  }
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(hold_threads_);
  std::atomic<bool> over{false};
  // The team the step's calls run on (the attention kernels and oneDNN's default): its
  // threads spin here and then GOMP_SPINCOUNT more, so the next call finds them awake.
#pragma omp parallel
  {
    if (omp_get_thread_num() == 0) {
      for (uint64_t i = 0;; ++i) {
        if (in.Pending() || in.closed()) break;
        if (i % 256 == 0 && (stopping_.load(std::memory_order_relaxed) ||
                             loop_reset_.load(std::memory_order_relaxed) ||
                             std::chrono::steady_clock::now() >= deadline)) {
          break;
        }
        CpuRelax();
      }
      over.store(true, std::memory_order_release);
    } else {
      while (!over.load(std::memory_order_acquire)) CpuRelax();
    }
  }
}

namespace {

// How long a step message waits for its RunStep, and RunStep for the step's end.
constexpr auto kPlanWait = std::chrono::seconds(5);
constexpr auto kStepWait = std::chrono::minutes(30);
constexpr auto kCancelPoll = std::chrono::milliseconds(50);  // RunStep's check of its caller
constexpr absl::Duration kReplyTimeout = absl::Seconds(30);

}  // namespace

absl::StatusOr<internal::StepResult> CpuWorker::RunStep(const internal::StepPlan& plan,
                                                        const std::function<bool()>& cancelled) {
  // A relaunched worker before the coordinator reloaded it: not available for steps.
  if (!loaded_.load()) return absl::UnavailableError("cpu_worker is not loaded");
  const auto start = std::chrono::steady_clock::now();
  auto state = std::make_shared<StepState>();
  WS_ASSIGN_OR_RETURN(state->layout, MakeStepLayout(plan, kv_config_));
  std::unique_lock<std::mutex> lock(steps_mutex_);
  if (stopping_.load()) return absl::UnavailableError("cpu_worker is stopping");
  if (!data_plane_down_.ok()) {
    return absl::UnavailableError(
        absl::StrCat("step ", plan.step_id(), ": ", data_plane_down_.message()));
  }
  if (ended_steps_.erase(plan.step_id()) > 0) {
    // The gpu_worker ended this step before its plan arrived here (it failed early).
    return absl::AbortedError(absl::StrCat("step ", plan.step_id(),
                                           " was ended by the gpu_worker before it began here"));
  }
  if (!steps_.emplace(plan.step_id(), state).second) {
    return absl::AlreadyExistsError(absl::StrCat("step ", plan.step_id(), " is already running"));
  }
  steps_changed_.notify_all();
  // In slices, so that a caller who gave up ends the wait: the coordinator cancels this call
  // when the gpu_worker's side of the step failed before it began (no kStepEnd comes then).
  const auto give_up = std::chrono::steady_clock::now() + kStepWait;
  bool caller_gone = false;
  while (!steps_changed_.wait_for(lock, kCancelPoll,
                                  [&] { return state->done || stopping_.load(); })) {
    if (cancelled && cancelled()) {
      caller_gone = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= give_up) break;
  }
  steps_.erase(plan.step_id());
  if (!state->done) {
    // A message of it being served holds the state; its reply goes out unread.
    if (caller_gone) {
      return absl::CancelledError(absl::StrCat(
          "step ", plan.step_id(), ": the caller gave up before the gpu_worker ended it"));
    }
    return absl::UnavailableError(absl::StrCat(
        "step ", plan.step_id(),
        stopping_.load() ? ": cpu_worker is stopping" : ": the gpu_worker never ended it"));
  }
  WS_RETURN_IF_ERROR(state->status);
  steps_run_.fetch_add(1);
  internal::StepResult result;
  result.set_step_id(plan.step_id());
  result.set_attention_ms(state->attention_ms);
  result.set_first_layer_attention_ms(state->first_layer_attention_ms);
  result.set_expert_ms(state->expert_ms);
  result.set_attended_tokens(state->layout.cpu_host_tokens);
  result.set_num_layers(kv_config_.geometry.num_layers);
  result.set_step_ms(MillisSince(start));
  return result;
}

std::shared_ptr<CpuWorker::StepState> CpuWorker::AwaitStep(uint64_t step_id) {
  std::unique_lock<std::mutex> lock(steps_mutex_);
  std::shared_ptr<StepState> state;
  steps_changed_.wait_for(lock, kPlanWait, [&] {
    auto it = steps_.find(step_id);
    if (it != steps_.end()) state = it->second;
    return state != nullptr || stopping_.load() || loop_reset_.load();
  });
  return state;
}

void CpuWorker::ServeStepMessage(const DataPlaneHeader& header,
                                 absl::Span<const std::byte> payload, ShmChannel& out) {
  std::shared_ptr<StepState> state = AwaitStep(header.step_id);
  auto reply_error = [&](const absl::Status& status) {
    absl::StatusOr<absl::Span<std::byte>> reply =
        out.Reserve(sizeof(DataPlaneHeader) + ErrorPayloadBytes(status), kReplyTimeout);
    if (!reply.ok()) {
      WS_LOG(ERROR) << "data plane: cannot report " << status << ": " << reply.status();
      return;
    }
    const size_t n = WriteErrorPayload(status, reply->subspan(sizeof(DataPlaneHeader)));
    DataPlaneHeader h{DataPlaneMessage::kError, header.layer, header.step_id, n};
    std::memcpy(reply->data(), &h, sizeof(h));
    out.Commit();
  };
  if (state == nullptr) {
    if (header.type != DataPlaneMessage::kStepEnd) {
      // Stopping or detaching, the worker is going away (UNAVAILABLE, as RunStep says then);
      // otherwise no RunStep brought the step's plan in time.
      reply_error(stopping_.load() ? absl::UnavailableError("cpu_worker is stopping")
                  : loop_reset_.load()
                      ? absl::UnavailableError("cpu_worker: the data plane was reset")
                      : absl::FailedPreconditionError(
                            absl::StrCat("cpu_worker has no plan for step ", header.step_id)));
    } else {
      // Its RunStep may still arrive: it must not wait for this end again.
      std::lock_guard<std::mutex> lock(steps_mutex_);
      ended_steps_.insert(header.step_id);
      while (ended_steps_.size() > 64) ended_steps_.erase(ended_steps_.begin());
    }
    return;
  }
  if (header.type == DataPlaneMessage::kStepEnd) {
    std::lock_guard<std::mutex> lock(steps_mutex_);
    state->done = true;
    steps_changed_.notify_all();
    return;
  }
  const StepLayout& layout = state->layout;
  const StepDims& dims = step_->dims();
  const bool attention = header.type == DataPlaneMessage::kAttention;
  const uint64_t reply_bytes = attention ? dims.attention_result_bytes(layout.cpu_tokens)
                                         : dims.experts_result_bytes(layout.total_tokens);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<absl::Span<std::byte>> reply =
      out.Reserve(sizeof(DataPlaneHeader) + reply_bytes, kReplyTimeout);
  if (!reply.ok()) {
    WS_LOG(ERROR) << "data plane: cannot reply: " << reply.status();
    state->status.Update(reply.status());
    reply_error(reply.status());  // a short message may still fit
    return;
  }
  absl::Span<std::byte> body = reply->subspan(sizeof(DataPlaneHeader));
  absl::Status status;
  kernels::CpuAttentionPhases phases;
  {
    SpanRecorder::Scope span(&spans_, attention ? "cpu_attention" : "cpu_experts", header.step_id,
                             static_cast<int32_t>(header.layer));
    status = attention ? step_->Attention(layout, header.layer, payload, body, &phases)
                       : step_->Experts(layout, header.layer, payload, body);
  }
  if (status.ok() && phases.end_ns != 0) {
    // Inside cpu_attention: the decode call's parts (kernels/cpu_attention.h).
    const int32_t layer = static_cast<int32_t>(header.layer);
    spans_.Record("cpu_attention_prepare", phases.start_ns, phases.prepared_ns, header.step_id,
                  layer);
    spans_.Record("cpu_attention_blocks", phases.prepared_ns, phases.blocks_done_ns,
                  header.step_id, layer);
    spans_.Record("cpu_attention_merge", phases.blocks_done_ns, phases.end_ns, header.step_id,
                  layer);
  }
  if (!status.ok()) {
    // The result's reservation is dropped (nothing was committed): the error is reserved anew
    // at the same place, its own size.
    state->status.Update(status);
    reply_error(status);
    return;
  }
  DataPlaneHeader h{attention ? DataPlaneMessage::kAttentionResult
                              : DataPlaneMessage::kExpertsResult,
                    header.layer, header.step_id, reply_bytes};
  std::memcpy(reply->data(), &h, sizeof(h));
  out.Commit();
  const double ms = MillisSince(start);
  (attention ? state->attention_ms : state->expert_ms) += ms;
  if (attention && header.layer == 0) state->first_layer_attention_ms = ms;
}

internal::WorkerStats CpuWorker::Stats() {
  // No lock: readable while Load runs.
  internal::WorkerStats stats;
  stats.set_name(name());
  stats.set_device("cpu");
  stats.set_loaded(loaded_.load());
  stats.set_load_fraction(Snapshot(load_progress_).fraction());
  stats.set_resident_bytes(load_progress_.bytes_done.load());
  stats.set_steps(steps_run_.load());
  return stats;
}

internal::WorkerProfile CpuWorker::Profile(uint32_t steps) {
  internal::WorkerProfile profile;
  profile.set_process(name());
  spans_.LastSteps(steps, profile.mutable_spans());
  return profile;
}

absl::StatusOr<internal::ChannelPingResponse> CpuWorker::ChannelPing(
    const internal::ChannelPingRequest&) {
  return absl::FailedPreconditionError("pings start at the gpu_worker; the cpu_worker echoes them");
}

// Verifies the CPU-compute blocks of every sequence in place, as CPU attention reads them.
absl::StatusOr<internal::KvPatternResponse> CpuWorker::KvPattern(
    const internal::KvPatternRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!cpu_region_) return absl::FailedPreconditionError("cpu_worker is not loaded");
  if (request.mode() != internal::KvPatternRequest::VERIFY) {
    return absl::InvalidArgumentError("the cpu_worker only reads KV; writes go through the gpu_worker");
  }
  const auto start = std::chrono::steady_clock::now();
  const KvGeometry& g = kv_config_.geometry;
  internal::KvPatternResponse response;
  std::string first_mismatch;
  uint64_t mismatches = 0;
  for (const internal::KvPatternSequence& sequence : request.sequences()) {
    for (int i = 0; i < sequence.blocks_size(); ++i) {
      const internal::BlockRef& block = sequence.blocks(i);
      if (block.region() != internal::REGION_CPU_COMPUTE) continue;
      for (uint32_t layer = 0; layer < g.num_layers; ++layer) {
        WS_RETURN_IF_ERROR(cpu_region_->Check(block.slot(), layer));
        const auto* data =
            reinterpret_cast<const uint16_t*>(cpu_region_->LayerBlock(block.slot(), layer).data());
        mismatches += CountKvPatternMismatches(g, sequence.seq_id(), uint64_t(i) * g.block_tokens,
                                               g.block_tokens, layer, data, &first_mismatch);
        response.set_blocks(response.blocks() + 1);
        response.set_values_checked(response.values_checked() +
                                    uint64_t{g.block_tokens} * g.values_per_token_layer());
      }
    }
  }
  response.set_mismatches(mismatches);
  response.set_first_mismatch(first_mismatch);
  response.set_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return response;
}

absl::StatusOr<internal::PathProbeResponse> CpuWorker::ProbeCpuPath(
    const internal::PathProbeRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!loaded_.load() || step_ == nullptr) {
    return absl::FailedPreconditionError("cpu_worker is not loaded");
  }
  {
    // The coordinator probes between steps; a step's attention beside it would time both.
    std::lock_guard<std::mutex> steps_lock(steps_mutex_);
    if (!steps_.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cpu_worker: the CPU path is probed between steps; step ", steps_.begin()->first,
          " is running"));
    }
  }
  return step_->ProbeAttention(request);
}

void CpuWorker::FailPendingSteps(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(steps_mutex_);
  for (auto& [id, state] : steps_) {
    if (state->done) continue;
    state->status.Update(status);
    state->done = true;
  }
  steps_changed_.notify_all();
}

absl::Status CpuWorker::ResetDataPlane(bool attach) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (arena_ == nullptr || !loaded_.load()) {
    return absl::FailedPreconditionError("cpu_worker is not loaded");
  }
  if (!attach) {
    // The loop has ended (the coordinator closed its channel) or ends within one poll.
    loop_reset_.store(true);
    {
      std::lock_guard<std::mutex> steps_lock(steps_mutex_);
      steps_changed_.notify_all();  // a loop waiting for a plan stops waiting
    }
    if (data_plane_thread_.joinable()) data_plane_thread_.join();
    FailPendingSteps(absl::UnavailableError("the data plane was reset"));
    WS_LOG(INFO) << "detached from the data plane";
    return absl::OkStatus();
  }
  if (data_plane_thread_.joinable()) {
    return absl::FailedPreconditionError("ResetDataPlane(attach) before detach");
  }
  loop_reset_.store(false);
  WS_ASSIGN_OR_RETURN(DataPlane plane, AttachDataPlane(*arena_));
  {
    std::lock_guard<std::mutex> steps_lock(steps_mutex_);
    data_plane_down_ = absl::OkStatus();
  }
  data_plane_ = plane;
  data_plane_thread_ = std::thread([this] { DataPlaneLoop(); });
  WS_LOG(INFO) << "re-attached to the data plane";
  return absl::OkStatus();
}

void CpuWorker::BeginStop() {
  {
    std::lock_guard<std::mutex> lock(steps_mutex_);
    stopping_.store(true);
    steps_changed_.notify_all();
  }
  CancelLoad();  // after: a Load that clears the flag later sees stopping_
}

void CpuWorker::Stop() {
  BeginStop();
  std::lock_guard<std::mutex> lock(mutex_);
  if (data_plane_) data_plane_->to_gpu.Close();
  if (data_plane_thread_.joinable()) data_plane_thread_.join();
  data_plane_.reset();
  step_.reset();
  cpu_region_.reset();
  weights_.reset();
  arena_.reset();
}

}  // namespace writescope::cpu
