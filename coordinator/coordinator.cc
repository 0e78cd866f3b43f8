#include "coordinator/coordinator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iterator>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/data_plane_messages.h"
#include "common/kv_spec.h"
#include "common/log.h"
#include "common/profile.h"
#include "common/status.h"
#include "common/step_layout.h"

namespace writescope::coordinator {
namespace {

constexpr char kVersion[] = "0.1.0";
constexpr absl::Duration kRpcTimeout = absl::Seconds(5);
// A health check: a dead worker fails at once (connection refused), a hung one here.
constexpr absl::Duration kHealthTimeout = absl::Seconds(1);
// Detaching waits for the survivor's step to end (its channel waits fail at once, but a
// long prefill's host math may finish first).
constexpr absl::Duration kResetTimeout = absl::Seconds(60);

// A loaded worker's detail in ServerInfo: its device and weights, then `suffix`.
std::string LoadedDetail(const internal::LoadResponse& load, absl::string_view suffix) {
  return absl::StrFormat("device: %s, weights %.1f MiB%s", load.device(),
                         load.weight_bytes() / 1048576.0, suffix);
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options)
    : options_(std::move(options)),
      gpu_worker_("gpu_worker", options_.gpu_worker_address),
      cpu_worker_("cpu_worker", options_.cpu_worker_address) {
  gpu_status_.set_name(gpu_worker_.name());
  gpu_status_.set_address(gpu_worker_.address());
  cpu_status_.set_name(cpu_worker_.name());
  cpu_status_.set_address(cpu_worker_.address());
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(CoordinatorOptions options) {
  if (options.gpu_worker_address.empty() || options.cpu_worker_address.empty()) {
    return absl::InvalidArgumentError("both --gpu_worker and --cpu_worker addresses are required");
  }
  WS_ASSIGN_OR_RETURN(ModelConfig model, LoadModelConfig(options.model));
  // The KV geometry comes from the model; the block size and budgets from the options.
  options.kv.geometry = model.kv_geometry(options.kv.geometry.block_tokens == 0
                                              ? options.kv.window_tokens
                                              : options.kv.geometry.block_tokens);
  WS_ASSIGN_OR_RETURN(options.kv, ResolveKvCacheConfig(options.kv));
  auto coordinator = std::unique_ptr<Coordinator>(new Coordinator(std::move(options)));
  coordinator->model_config_ = std::move(model);
  WS_LOG(INFO) << "model " << DescribeModelSource(coordinator->options_.model) << ": "
               << coordinator->model_config_.DebugString();
  const KvCacheConfig& kv = coordinator->options_.kv;
  WS_ASSIGN_OR_RETURN(coordinator->placement_, KvPlacement::Create(kv));
  SchedulerOptions scheduler_options = coordinator->options_.scheduler;
  WS_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler,
                      Scheduler::Create(coordinator->options_.policy, scheduler_options));
  Scheduler* const initial = scheduler.get();
  coordinator->scheduler_options_ = scheduler_options;
  coordinator->schedulers_[scheduler->policy().ToString()] = std::move(scheduler);
  // Each channel is sized to carry a step of --max_step_tokens (a message may take half a
  // ring): --channel_mib is a floor, so a long prefill chunk needs no channel arithmetic.
  const StepDims step_dims = StepDimsFor(coordinator->model_config_);
  const uint64_t step_bytes = sizeof(DataPlaneHeader) +
                              uint64_t{coordinator->options_.engine.max_step_tokens} *
                                  step_dims.max_bytes_per_token();
  const uint64_t wanted_channel = (2 * step_bytes + (uint64_t{1} << 20) + (uint64_t{1} << 20) - 1) /
                                  (uint64_t{1} << 20) * (uint64_t{1} << 20);
  if (wanted_channel > coordinator->options_.channel_bytes) {
    WS_LOG(INFO) << "data-plane channels of " << (wanted_channel >> 20) << " MiB each (for steps of "
                 << coordinator->options_.engine.max_step_tokens << " tokens)";
    coordinator->options_.channel_bytes = wanted_channel;
  }
  WS_ASSIGN_OR_RETURN(coordinator->arena_,
                      ShmArena::Create(coordinator->options_.arena_name,
                                       ArenaRegions(kv.arena_sizes(coordinator->options_.channel_bytes))));
  WS_ASSIGN_OR_RETURN(DataPlane plane, CreateDataPlane(*coordinator->arena_));
  // A step's per-layer messages must fit one data-plane message.
  const uint64_t plane_tokens = (plane.to_cpu.max_message_bytes() - sizeof(DataPlaneHeader)) /
                                step_dims.max_bytes_per_token();
  EngineOptions engine = coordinator->options_.engine;
  engine.max_step_tokens = static_cast<uint32_t>(
      std::min<uint64_t>(engine.max_step_tokens, plane_tokens));
  if (engine.max_step_tokens < kv.block_tokens() + kv.max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data plane carries steps of ", plane_tokens, " tokens of this model; a step needs "
        "room for one block (", kv.block_tokens(), ") and a token per sequence (",
        kv.max_sequences, "): raise the channel size"));
  }
  coordinator->engine_ = std::make_unique<Engine>(
      engine, coordinator->model_config_, kv, &coordinator->placement_mutex_,
      coordinator->placement_.get(), initial, &coordinator->gpu_worker_,
      &coordinator->cpu_worker_, &coordinator->metrics_);
  WS_LOG(INFO) << "steps of up to " << engine.max_step_tokens << " tokens";
  coordinator->engine_->set_block_copier(
      [c = coordinator.get(), threads = ResplitCopyThreads()](absl::Span<const BlockCopy> copies) {
        return CopyKvBlocks(*c->arena_, c->options_.kv, copies, threads);
      });
  coordinator->engine_->set_on_step_failure(
      [c = coordinator.get()] { c->check_now_.store(true); });
  WS_RETURN_IF_ERROR(coordinator->StartMetrics());
  WS_LOG(INFO) << "created arena " << coordinator->arena_->name() << " of "
               << coordinator->arena_->size() << " bytes; " << kv.DebugString();
  return coordinator;
}

Coordinator::~Coordinator() { Stop(/*shutdown_workers=*/false); }

absl::Status Coordinator::StartMetrics() {
  const std::string& listen = options_.metrics_listen;
  if (listen.empty()) return absl::OkStatus();
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_listen '", listen,
                                                   "' is not host:port"));
  }
  const std::string host = listen.substr(0, colon);
  metrics_server_ = std::make_unique<MetricsServer>(&metrics_, [this] { RefreshMetrics(); });
  absl::StatusOr<int> bound = metrics_server_->Start(host, port);
  if (!bound.ok()) {
    return absl::Status(bound.status().code(),
                        absl::StrCat("metrics on ", listen, ": ", bound.status().message()));
  }
  metrics_address_ = absl::StrCat(host, ":", *bound);
  WS_LOG(INFO) << "metrics at http://" << metrics_address_ << "/metrics";
  return absl::OkStatus();
}

void Coordinator::RefreshMetrics() {
  const EngineCounts counts = engine_->Counts();
  metrics_.SetRequests(counts.running, counts.waiting);
  std::lock_guard<std::mutex> lock(placement_mutex_);
  for (KvRegion region : {KvRegion::kCpuCompute, KvRegion::kGpuTransfer}) {
    const RegionUsage usage = placement_->Usage(region);
    metrics_.SetKvBlocks(KvRegionName(region), usage.used_blocks, usage.total_blocks);
  }
  // As in ServerInfo: one D-window per live sequence, on the GPU.
  metrics_.SetKvBlocks("gpu_d_window", placement_->num_live(), options_.kv.max_sequences);
  const Scheduler& scheduler = engine_->scheduler();
  const RooflineParams estimates = scheduler.estimates();
  metrics_.SetScheduler(scheduler.target_cpu_share(), scheduler.optimal_cpu_share(),
                        estimates.cpu_ns_per_token, estimates.gpu_ns_per_token);
}

void Coordinator::Start(std::function<void(bool)> on_serving_change) {
  on_serving_change_ = std::move(on_serving_change);
  supervisor_ = std::thread([this] { Supervise(); });
}

internal::LoadRequest Coordinator::MakeLoadRequest() const {
  internal::LoadRequest request;
  request.mutable_arena()->set_name(arena_->name());
  request.mutable_arena()->set_bytes(arena_->size());
  *request.mutable_kv() = ToKvSpec(options_.kv);
  ToLoadRequest(options_.model, &request);
  request.set_vram_budget_bytes(options_.vram_budget_bytes);
  return request;
}

absl::Status Coordinator::LoadWorkers() {
  const internal::LoadRequest request = MakeLoadRequest();
  for (WorkerClient* worker : {&cpu_worker_, &gpu_worker_}) {
    WS_RETURN_IF_ERROR(worker->WaitUntilReachable(options_.worker_start_timeout));
  }
  // Both workers load their halves of the weights at once; their progress shows in
  // server info meanwhile.
  struct Loading {
    WorkerClient* worker;
    v1::WorkerStatus* status;
    absl::StatusOr<internal::LoadResponse> result = absl::UnknownError("not finished");
    std::atomic<bool> done{false};
    std::thread thread{};
  };
  Loading loads[] = {{&cpu_worker_, &cpu_status_}, {&gpu_worker_, &gpu_status_}};
  for (Loading& load : loads) {
    load.thread = std::thread([&load, &request, this] {
      load.result = load.worker->Load(request, options_.load_timeout);
      load.done.store(true);
    });
  }
  while (!(loads[0].done.load() && loads[1].done.load())) {
    if (stop_.WaitForNotificationWithTimeout(absl::Milliseconds(500))) {
      // Shutting down: do not wait for a long load to finish.
      for (Loading& load : loads) load.worker->CancelLoad();
      absl::SleepFor(absl::Milliseconds(20));  // the call may not have started yet
      continue;
    }
    for (Loading& load : loads) {
      if (load.done.load()) continue;
      absl::StatusOr<internal::WorkerStats> stats = load.worker->Stats(kRpcTimeout);
      if (!stats.ok()) continue;
      std::lock_guard<std::mutex> lock(status_mutex_);
      load.status->set_detail(absl::StrFormat("loading weights: %.0f%%", 100 * stats->load_fraction()));
    }
  }
  absl::Status status = absl::OkStatus();
  for (Loading& load : loads) load.thread.join();
  // Both workers have mapped the synthetic experts they share, or failed: the name goes.
  UnlinkSharedWeights();
  for (Loading& load : loads) {
    std::lock_guard<std::mutex> lock(status_mutex_);
    if (!load.result.ok()) {
      load.status->set_detail(std::string(load.result.status().message()));
      if (status.ok()) status = load.result.status();
      continue;
    }
    load.status->set_detail(LoadedDetail(*load.result, ""));
    WS_LOG(INFO) << load.worker->name() << " loaded on " << load.result->device();
  }
  if (!status.ok()) return status;
  for (Loading& load : loads) LoadOf(load.worker) = *load.result;
  WS_RETURN_IF_ERROR(ConfigureExperts());
  // Before serving, B and c_G from the runtime's own transfer path. Without it the lines
  // learn from the first decode steps, as they would anyway: a warning, not a failure.
  absl::Status calibrated = engine_->CalibrateGpuPath();
  if (!calibrated.ok()) WS_LOG(WARNING) << "calibrating the GPU path: " << calibrated;
  // And A and c_C from the cpu_worker's attention in place (the same: a warning).
  calibrated = engine_->CalibrateCpuPath();
  if (!calibrated.ok()) WS_LOG(WARNING) << "calibrating the CPU path: " << calibrated;
  return absl::OkStatus();
}

absl::Status Coordinator::ConfigureExperts() {
  WS_ASSIGN_OR_RETURN(const ExpertMode mode, ParseExpertMode(options_.routed_experts));
  ExpertPlacementParams params;
  params.num_experts = model_config_.n_routed_experts;
  params.top_k = model_config_.num_experts_per_tok;
  for (int64_t layer = 0; layer < model_config_.num_layers; ++layer) {
    if (model_config_.IsMoeLayer(layer)) ++params.moe_layers;
  }
  params.gpu_streams = gpu_load_.streams_experts();
  params.stream_bytes_per_ms = gpu_load_.expert_stream_bytes_per_ms();
  params.layer_bytes = gpu_load_.expert_layer_bytes();
  params.cpu_ms_per_token = cpu_load_.expert_ms_per_token();
  WS_ASSIGN_OR_RETURN(ExpertPlacement placement, ExpertPlacement::Create(mode, params));
  if (params.gpu_streams && params.cpu_ms_per_token > 0 && params.stream_bytes_per_ms > 0) {
    // The chunk size from which the GPU wins, for the log.
    int64_t from = 1;
    while (from < (int64_t{1} << 20) && !placement.OnGpu(from)) from *= 2;
    WS_LOG(INFO) << "routed experts (" << ExpertModeName(mode) << "): cpu "
                 << params.cpu_ms_per_token * 1e3 << " us per token and layer, gpu stream "
                 << params.stream_bytes_per_ms / 1e6 << " GB/s of " << params.layer_bytes
                 << " bytes per layer; the gpu_worker takes steps from ~" << from << " tokens";
  }
  engine_->set_expert_placement(placement);
  return absl::OkStatus();
}

void Coordinator::Supervise() {
  absl::Status loaded = LoadWorkers();
  if (!loaded.ok()) {
    WS_LOG(ERROR) << "bringing up the workers failed: " << loaded;
    if (options_.on_fatal) options_.on_fatal(loaded);
  }
  bool recovering = false;  // a worker was lost: the data plane is closed until Recover()
  WorkerHealth gpu_health, cpu_health;
  while (loaded.ok() && !stop_.WaitForNotificationWithTimeout(absl::ZeroDuration())) {
    bool all_serving = true, all_reachable = true;
    for (WorkerClient* worker : {&gpu_worker_, &cpu_worker_}) {
      const absl::StatusOr<bool> serving = worker->Serving(kHealthTimeout);
      WorkerHealth& health = worker == &gpu_worker_ ? gpu_health : cpu_health;
      const WorkerHealth::Verdict verdict = health.Observe(serving);
      if (!serving.ok() && verdict.up) {
        WS_LOG(WARNING) << worker->name() << "'s health probe " << health.late_probes() << " of "
                        << WorkerHealth::kLateProbesDown
                        << " late in a row: " << serving.status().message();
      }
      const bool up = verdict.up;
      all_serving = all_serving && up;
      all_reachable = all_reachable && verdict.reachable;
      std::lock_guard<std::mutex> lock(status_mutex_);
      v1::WorkerStatus& status = StatusOf(worker);
      if (status.serving() != up) {
        WS_LOG(INFO) << worker->name() << (up ? " is serving" : " is not serving")
                     << (serving.ok() ? "" : absl::StrCat(": ", serving.status().message()));
        if (!up) status.set_detail(serving.ok() ? "not serving" : "unreachable");
      }
      status.set_serving(up);
    }
    if (serving_.load() && !all_serving) {
      // A worker died or stopped serving: end every request now (UNAVAILABLE) rather than
      // at a timeout, and close the data plane so that the surviving worker's step waits
      // end at once.
      const absl::Status down = absl::UnavailableError(absl::StrCat(
          gpu_status_.serving() ? "cpu_worker" : "gpu_worker", " is not serving (it died or "
          "stopped); requests in flight were ended"));
      serving_.store(false);
      engine_->set_serving(false);
      engine_->FailAll(down);  // first: the cancelled step's requests end with `down`
      gpu_worker_.CancelStep();
      cpu_worker_.CancelStep();
      CloseDataPlane();
      recovering = true;
      WS_LOG(WARNING) << down.message() << "; waiting for the worker to come back";
      if (on_serving_change_) on_serving_change_(false);
    }
    if (recovering && all_reachable) {
      // Both answer again (launch.sh relaunched the dead one): fresh channels, reload it,
      // re-attach the survivor.
      absl::Status recovered = Recover();
      if (recovered.ok()) {
        recovering = false;
        WS_LOG(INFO) << "recovered: both workers are back";
        continue;  // re-check health at once
      }
      WS_LOG(WARNING) << "recovery failed (will retry): " << recovered;
    }
    if (!serving_.load() && all_serving && !recovering) {
      serving_.store(true);
      engine_->set_serving(true);
      engine_->Start();
      if (on_serving_change_) on_serving_change_(true);
    }
    // Until the next poll, or at once when a step failed.
    const absl::Time next = absl::Now() + options_.health_interval;
    while (!check_now_.exchange(false) && absl::Now() < next &&
           !stop_.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
    }
  }
}

void Coordinator::CloseDataPlane() {
  absl::StatusOr<DataPlane> plane = AttachDataPlane(*arena_);
  if (!plane.ok()) {
    WS_LOG(ERROR) << "closing the data plane: " << plane.status();
    return;
  }
  plane->to_cpu.Close();
  plane->to_gpu.Close();
}

absl::Status Coordinator::Recover() {
  // 1. The survivor stops using the channels (its step in progress ends: they are closed).
  std::vector<WorkerClient*> survivors, relaunched;
  for (WorkerClient* worker : {&cpu_worker_, &gpu_worker_}) {
    WS_ASSIGN_OR_RETURN(internal::WorkerStats stats, worker->Stats(kRpcTimeout));
    (stats.loaded() ? survivors : relaunched).push_back(worker);
  }
  for (WorkerClient* worker : survivors) {
    WS_RETURN_IF_ERROR(worker->ResetDataPlane(/*attach=*/false, kResetTimeout));
  }
  // 2. Fresh channels; 3. the survivor attaches, the relaunched worker loads.
  WS_RETURN_IF_ERROR(CreateDataPlane(*arena_).status());
  for (WorkerClient* worker : survivors) {
    WS_RETURN_IF_ERROR(worker->ResetDataPlane(/*attach=*/true, kResetTimeout));
    // Its weights are those it loaded before: the detail says so again, not why it was down.
    std::lock_guard<std::mutex> lock(status_mutex_);
    StatusOf(worker).set_detail(LoadedDetail(LoadOf(worker), ""));
  }
  const internal::LoadRequest request = MakeLoadRequest();
  for (WorkerClient* worker : relaunched) {
    WS_LOG(INFO) << "reloading " << worker->name();
    // A segment left by a worker that died while generating would make the reload wait on
    // it: the reload starts from a fresh name, and drops it whatever the outcome.
    UnlinkSharedWeights();
    absl::StatusOr<internal::LoadResponse> loaded = worker->Load(request, options_.load_timeout);
    UnlinkSharedWeights();
    WS_ASSIGN_OR_RETURN(internal::LoadResponse response, std::move(loaded));
    LoadOf(worker) = response;
    WS_RETURN_IF_ERROR(ConfigureExperts());
    std::lock_guard<std::mutex> lock(status_mutex_);
    StatusOf(worker).set_detail(LoadedDetail(response, " (relaunched)"));
  }
  return absl::OkStatus();
}

void Coordinator::Stop(bool shutdown_workers) {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  // The supervisor may be reloading a relaunched worker (Recover): that load must not run
  // out its timeout (30 minutes by default) before the join returns.
  gpu_worker_.CancelLoad();
  cpu_worker_.CancelLoad();
  if (supervisor_.joinable()) supervisor_.join();
  if (metrics_server_ != nullptr) metrics_server_->Stop();
  if (engine_ != nullptr) {
    gpu_worker_.CancelStep();
    cpu_worker_.CancelStep();
    engine_->Stop();
  }
  if (shutdown_workers) {
    for (WorkerClient* worker : {&gpu_worker_, &cpu_worker_}) {
      absl::Status status = worker->Shutdown(absl::Seconds(2));
      if (!status.ok()) WS_LOG(INFO) << worker->name() << " shutdown: " << status.message();
    }
  }
  if (arena_ != nullptr) {
    UnlinkSharedWeights();
    absl::Status status = arena_->Unlink();
    if (!status.ok()) WS_LOG(WARNING) << status;
  }
}

void Coordinator::UnlinkSharedWeights() {
  if (arena_ == nullptr) return;
  const std::string name = SyntheticExpertsShmName(arena_->name());
  if (shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    WS_LOG(WARNING) << "cannot unlink " << name << ": " << std::strerror(errno);
  }
}

absl::StatusOr<v1::ServerInfo> Coordinator::ServerInfo() {
  v1::ServerInfo info;
  info.set_version(kVersion);
  info.set_arena_name(arena_->name());
  info.set_arena_bytes(arena_->size());
  const KvCacheConfig& kv = options_.kv;
  {
    std::lock_guard<std::mutex> lock(placement_mutex_);
    for (const auto& [region, kv_region] :
         {std::pair{v1::KV_REGION_CPU_COMPUTE, KvRegion::kCpuCompute},
          std::pair{v1::KV_REGION_GPU_TRANSFER, KvRegion::kGpuTransfer}}) {
      const RegionUsage usage = placement_->Usage(kv_region);
      v1::RegionUsage* out = info.add_regions();
      out->set_region(region);
      out->set_blocks_total(usage.total_blocks);
      out->set_blocks_used(usage.used_blocks);
      out->set_bytes_total(kv.region_used_bytes(kv_region));
    }
    v1::RegionUsage* pingpong = info.add_regions();
    pingpong->set_region(v1::KV_REGION_GPU_PINGPONG);
    pingpong->set_blocks_total(2 * uint64_t{kv.pingpong_blocks});
    pingpong->set_bytes_total(2 * kv.pingpong_buffer_bytes());
    v1::RegionUsage* window = info.add_regions();
    window->set_region(v1::KV_REGION_GPU_DWINDOW);
    window->set_blocks_total(kv.max_sequences);  // one window per live sequence
    window->set_blocks_used(placement_->num_live());
    window->set_bytes_total(kv.window_bytes());
    info.set_placed_cpu_share(placement_->PlacedCpuShare());
    info.set_cpu_share(engine_->scheduler().target_cpu_share());
    info.set_policy(engine_->scheduler().policy().ToString());
  }
  info.set_block_tokens(kv.block_tokens());
  const EngineCounts counts = engine_->Counts();
  info.set_requests_running(counts.running);
  info.set_requests_waiting(counts.waiting);
  info.set_resplit_blocks(counts.resplit_blocks);
  info.set_resplit_ms(counts.resplit_ms);
  info.set_queue_capacity(options_.engine.queue_capacity);
  info.set_metrics_address(metrics_address_);
  auto set_calibration = [](const Engine::PathCalibration& calibration,
                            v1::PathCalibration* out) {
    out->set_count(calibration.count);
    out->set_ns_per_token(calibration.ns_per_token);
    out->set_fixed_us(calibration.fixed_ns / 1e3);
    out->set_probe_ms(calibration.last_ms);
  };
  if (const Engine::PathCalibration gpu = engine_->gpu_calibration(); gpu.count > 0) {
    set_calibration(gpu, info.mutable_gpu_calibration());
  }
  if (const Engine::PathCalibration cpu = engine_->cpu_calibration(); cpu.count > 0) {
    set_calibration(cpu, info.mutable_cpu_calibration());
  }
  {
    std::lock_guard<std::mutex> lock(status_mutex_);
    *info.add_workers() = gpu_status_;
    *info.add_workers() = cpu_status_;
  }
  if (serving_.load()) {
    absl::StatusOr<internal::WorkerStats> gpu_stats = gpu_worker_.Stats(kRpcTimeout);
    if (gpu_stats.ok() && gpu_stats->has_hot_experts()) {
      const internal::HotExpertsState& hot = gpu_stats->hot_experts();
      v1::HotExpertsInfo* out = info.mutable_hot_experts();
      out->set_warmup_tokens(hot.warmup_tokens());
      out->set_tokens_seen(hot.tokens_seen());
      out->set_chosen(hot.chosen());
      out->set_resident_experts(hot.resident_experts());
      out->set_total_experts(hot.total_experts());
      out->set_resident_bytes(hot.resident_bytes());
      out->set_state(hot.state());
    }
    // A live check of the data plane: gpu_worker -> cpu_worker -> gpu_worker.
    absl::StatusOr<internal::ChannelPingResponse> ping = gpu_worker_.ChannelPing(200, 64, kRpcTimeout);
    if (ping.ok()) {
      info.set_channel_round_trip_us(ping->round_trip_us_median());
    } else {
      WS_LOG(WARNING) << "data-plane ping failed: " << ping.status();
    }
  }
  return info;
}

absl::StatusOr<v1::ModelInfo> Coordinator::ModelInfo() {
  const ModelConfig& m = model_config_;
  v1::ModelInfo info;
  info.set_model_type(std::string(ModelArchName(m.arch)));
  info.set_source(DescribeModelSource(options_.model));
  info.set_num_layers(static_cast<uint32_t>(m.num_layers));
  info.set_hidden_size(static_cast<uint32_t>(m.hidden_size));
  info.set_vocab_size(static_cast<uint32_t>(m.vocab_size));
  info.set_max_context(static_cast<uint32_t>(m.max_position_embeddings));
  info.set_num_attention_heads(static_cast<uint32_t>(m.num_heads));
  info.set_num_kv_heads(static_cast<uint32_t>(m.is_mla() ? 1 : m.num_kv_heads));
  info.set_head_dim(static_cast<uint32_t>(m.is_mla() ? m.kv_lora_rank + m.qk_rope_head_dim : m.head_dim));
  info.set_num_experts(static_cast<uint32_t>(m.n_routed_experts));
  info.set_experts_per_token(static_cast<uint32_t>(m.num_experts_per_tok));
  info.set_kv_bytes_per_token(m.kv_bytes_per_token());
  if (!m.eos_token_ids.empty()) info.set_eos_token_id(static_cast<uint32_t>(m.eos_token_ids[0]));
  return info;
}

absl::Status Coordinator::UseBenchPolicy(absl::string_view policy) {
  WS_ASSIGN_OR_RETURN(const PolicySpec spec, ParsePolicy(policy));
  Scheduler* scheduler = nullptr;
  {
    std::lock_guard<std::mutex> lock(placement_mutex_);
    std::unique_ptr<Scheduler>& slot = schedulers_[spec.ToString()];
    if (slot == nullptr) {
      absl::StatusOr<std::unique_ptr<Scheduler>> made = Scheduler::Create(spec, scheduler_options_);
      if (!made.ok()) {
        schedulers_.erase(spec.ToString());
        return made.status();
      }
      slot = *std::move(made);
    }
    scheduler = slot.get();
  }
  return engine_->SwitchScheduler(scheduler);
}

absl::StatusOr<v1::BenchResponse> Coordinator::Bench(const v1::BenchRequest& request,
                                                     const std::function<bool()>& cancelled) {
  if (!serving_.load()) return absl::UnavailableError("the workers are not serving");
  // One bench at a time: a call that waits for another's end gives up when its client does (its
  // deadline passed, or it went away), and then switches no policy.
  std::unique_lock<std::timed_mutex> bench_lock(bench_mutex_, std::defer_lock);
  while (!bench_lock.try_lock_for(std::chrono::milliseconds(50))) {
    if (cancelled()) {
      return absl::CancelledError("the bench call ended while waiting for another bench's end");
    }
  }
  if (cancelled()) return absl::CancelledError("the bench call ended before it started");
  // A request refused for itself leaves the policy as it was.
  WS_RETURN_IF_ERROR(engine_->ValidateBench(request));
  if (!request.policy().empty()) WS_RETURN_IF_ERROR(UseBenchPolicy(request.policy()));
  WS_ASSIGN_OR_RETURN(v1::BenchResponse response,
                      engine_->RunBench(request, options_.engine.step_timeout * 4, cancelled));
  {
    std::lock_guard<std::mutex> lock(placement_mutex_);
    response.set_policy(engine_->scheduler().policy().ToString());
  }
  response.set_num_layers(static_cast<uint32_t>(model_config_.num_layers));
  response.set_window_tokens(options_.kv.window_tokens);
  return response;
}

absl::StatusOr<v1::SelfTestResponse> Coordinator::SelfTest(uint32_t sequences) {
  if (!serving_.load()) return absl::UnavailableError("the workers are not serving");
  sequences = sequences == 0 ? 4 : sequences;
  if (sequences > options_.kv.max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("self test of ", sequences,
                                                   " sequences: at most max_sequences (",
                                                   options_.kv.max_sequences, ")"));
  }
  v1::SelfTestResponse response;
  bool ok = true;

  // 1. The data plane, small and large messages.
  for (const auto& [count, bytes] : {std::pair<uint32_t, uint32_t>{200, 64}, {16, 1u << 20}}) {
    absl::StatusOr<internal::ChannelPingResponse> ping = gpu_worker_.ChannelPing(count, bytes, kRpcTimeout);
    if (!ping.ok()) {
      ok = false;
      response.add_checks(absl::StrCat("data plane ", bytes, " B: FAILED: ", ping.status().message()));
      continue;
    }
    response.add_checks(absl::StrFormat("data plane %u x %u B: round trip median %.1f us, p99 %.1f us, %.2f GB/s",
                                        count, bytes, ping->round_trip_us_median(),
                                        ping->round_trip_us_p99(), ping->bandwidth_gb_per_s()));
  }

  // 2. The KV paths, on synthetic sequences placed block by block in alternating regions.
  // Their blocks and D-windows are reserved with the engine first, so that neither the
  // requests in flight nor the self test can run the other out of KV.
  const uint32_t block = options_.kv.block_tokens();
  // Lengths that cross block boundaries and leave tails of several sizes; sequence k takes
  // the (k % 4)-th.
  const uint64_t lengths[] = {3ull * block + 17, 2ull * block, 5, 4ull * block + block / 2};
  uint64_t selftest_blocks = 0;  // at most a block per started block of each length
  for (uint32_t k = 0; k < sequences; ++k) selftest_blocks += (lengths[k % 4] + block - 1) / block;
  if (!engine_->ReserveExternal(selftest_blocks, sequences)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "self test: the KV regions or D-windows are too busy for ", sequences,
        " test sequences (", selftest_blocks, " blocks); try again when fewer requests run"));
  }
  struct Unreserve {
    Engine* engine;
    uint64_t blocks;
    uint32_t sequences;
    ~Unreserve() { engine->ReleaseExternal(blocks, sequences); }
  } unreserve{engine_.get(), selftest_blocks, sequences};
  // The lock covers the placement changes only, not the worker RPCs below.
  std::unique_lock<std::mutex> lock(placement_mutex_);
  internal::KvPatternRequest request;
  std::vector<SequenceId> admitted;
  absl::Status placed = absl::OkStatus();
  for (uint32_t k = 0; k < sequences && placed.ok(); ++k) {
    const SequenceId id = next_selftest_id_++;
    placed = placement_->Admit(id);
    if (!placed.ok()) break;
    admitted.push_back(id);
    auto choose = [k](const PlacementRequest& r) {
      KvRegion region = (r.block_index + k) % 2 == 0 ? KvRegion::kCpuCompute : KvRegion::kGpuTransfer;
      if (r.free_slots[KvRegionIndex(region)] == 0) {
        region = region == KvRegion::kCpuCompute ? KvRegion::kGpuTransfer : KvRegion::kCpuCompute;
      }
      return region;
    };
    absl::StatusOr<PrefillPlan> plan = placement_->PlanPrefill(id, lengths[k % 4], choose);
    if (!plan.ok()) {
      placed = plan.status();
      break;
    }
    internal::KvPatternSequence* sequence = request.add_sequences();
    sequence->set_seq_id(id);
    sequence->set_window_slot(plan->window_slot);
    sequence->set_window_tokens(plan->window_tokens);
    for (const PlacedBlock& placed_block : plan->blocks) {
      internal::BlockRef* ref = sequence->add_blocks();
      ref->set_region(placed_block.ref.region == KvRegion::kCpuCompute ? internal::REGION_CPU_COMPUTE
                                                                        : internal::REGION_GPU_TRANSFER);
      ref->set_slot(placed_block.ref.slot);
    }
  }
  auto free_all = [&] {
    if (!lock.owns_lock()) lock.lock();
    for (SequenceId id : admitted) {
      absl::Status status = placement_->Free(id);
      if (!status.ok()) WS_LOG(ERROR) << "self test: freeing sequence " << id << ": " << status;
    }
  };
  if (!placed.ok()) {
    free_all();
    return absl::Status(placed.code(), absl::StrCat("self test cannot place its sequences: ", placed.message()));
  }
  auto report = [&](absl::string_view what, const absl::StatusOr<internal::KvPatternResponse>& result) {
    if (!result.ok()) {
      ok = false;
      response.add_checks(absl::StrCat(what, ": FAILED: ", result.status().message()));
      return;
    }
    ok = ok && result->mismatches() == 0;
    response.add_checks(absl::StrFormat("%s: %llu layer-blocks, %llu values, %llu mismatches, %.1f ms%s",
                                        std::string(what), static_cast<unsigned long long>(result->blocks()),
                                        static_cast<unsigned long long>(result->values_checked()),
                                        static_cast<unsigned long long>(result->mismatches()), result->ms(),
                                        result->first_mismatch().empty() ? "" : absl::StrCat(" (first: ", result->first_mismatch(), ")")));
  };
  lock.unlock();
  request.set_mode(internal::KvPatternRequest::WRITE);
  absl::StatusOr<internal::KvPatternResponse> written = gpu_worker_.KvPattern(request, absl::Seconds(60));
  report("kv write (gpu_worker, prefill path into both regions)", written);
  if (written.ok()) {
    request.set_mode(internal::KvPatternRequest::VERIFY);
    report("kv read in place (cpu_worker, CPU-compute region)", cpu_worker_.KvPattern(request, absl::Seconds(60)));
    report("kv read via ping-pong + D-window (gpu_worker)", gpu_worker_.KvPattern(request, absl::Seconds(60)));
  }
  free_all();
  response.set_ok(ok);
  return response;
}

}  // namespace writescope::coordinator

namespace writescope::coordinator {

absl::StatusOr<v1::Profile> Coordinator::Profile(uint32_t steps) {
  steps = std::clamp<uint32_t>(steps == 0 ? 8 : steps, 1, 1000);
  std::vector<internal::WorkerProfile> processes(1);
  processes[0].set_process("coordinator");
  // The steps are those both ended: the gpu_worker records its step span as a step ends, the
  // coordinator its sampling span as the step's last part. A step in progress has neither
  // yet, the one the workers just ended may lack the second, and the coordinator's latest
  // step id is one that no worker has run (its idle loop tags admission spans with the next
  // step's id); the cpu_worker has no spans of a step that needed nothing of it. So every
  // process is asked for a few steps more, and its spans are trimmed to the chosen steps.
  // The coordinator's own are taken last, so its window covers the workers'.
  constexpr uint32_t kSpareSteps = 4;
  std::optional<std::vector<uint64_t>> gpu_steps;
  for (WorkerClient* worker : {&gpu_worker_, &cpu_worker_}) {
    absl::StatusOr<internal::WorkerProfile> profile =
        worker->Profile(steps + kSpareSteps, kRpcTimeout);
    if (!profile.ok()) {
      WS_LOG(WARNING) << worker->name() << " profile: " << profile.status();
      continue;
    }
    if (worker == &gpu_worker_) gpu_steps = StepIdsOf(*profile, "step");
    processes.push_back(*std::move(profile));
  }
  engine_->spans().LastSteps(steps + kSpareSteps, processes[0].mutable_spans());
  std::vector<uint64_t> ended = StepIdsOf(processes[0], "sampling");
  if (gpu_steps.has_value()) {
    std::vector<uint64_t> both;
    std::set_intersection(ended.begin(), ended.end(), gpu_steps->begin(), gpu_steps->end(),
                          std::back_inserter(both));
    ended = std::move(both);
  }
  if (ended.size() > steps) ended.erase(ended.begin(), ended.end() - steps);
  for (internal::WorkerProfile& process : processes) KeepSteps(ended, &process);
  v1::Profile result;
  result.set_trace_json(ChromeTraceJson(processes));
  uint32_t seen = 0;
  std::vector<v1::PhaseSummary> phases = SummarizePhases(processes, &seen);
  result.set_steps(seen);
  // Busy and idle per worker: the gpu_worker's step span is the step; what it waits for the
  // cpu_worker is idle time on its side, the cpu_worker is busy in its two phases (the
  // cpu_attention_* spans are parts of cpu_attention, not counted again).
  double gpu_step = 0, gpu_wait = 0, cpu_busy = 0;
  for (const v1::PhaseSummary& phase : phases) {
    if (phase.process() == "gpu_worker" && phase.phase() == "step") gpu_step = phase.ms_per_step();
    if (phase.process() == "gpu_worker" &&
        (phase.phase() == "cpu_attention_wait" || phase.phase() == "experts_wait")) {
      gpu_wait += phase.ms_per_step();
    }
    if (phase.process() == "cpu_worker" &&
        (phase.phase() == "cpu_attention" || phase.phase() == "cpu_experts")) {
      cpu_busy += phase.ms_per_step();
    }
  }
  auto add = [&](const char* process, const char* phase, double ms) {
    v1::PhaseSummary summary;
    summary.set_process(process);
    summary.set_phase(phase);
    summary.set_ms_per_step(ms);
    phases.push_back(summary);
  };
  if (gpu_step > 0) {
    add("summary", "gpu_worker busy", std::max(0.0, gpu_step - gpu_wait));
    add("summary", "gpu_worker idle (waiting for the cpu_worker)", gpu_wait);
    add("summary", "cpu_worker busy", cpu_busy);
    add("summary", "cpu_worker idle", std::max(0.0, gpu_step - cpu_busy));
  }
  // How much of the ping-pong DMA ran while the cpu_worker computed routed experts (the
  // overlap the design counts on: the next layer's transfer hides behind this layer's
  // experts). Spans of different processes share the clock.
  std::vector<std::pair<uint64_t, uint64_t>> dma, experts;
  for (const internal::WorkerProfile& process : processes) {
    for (const internal::Span& span : process.spans()) {
      const std::pair<uint64_t, uint64_t> interval{span.start_ns(),
                                                   span.start_ns() + span.duration_ns()};
      if (process.process() == "gpu_worker" && span.name() == "dma") dma.push_back(interval);
      if (process.process() == "cpu_worker" && span.name() == "cpu_experts") {
        experts.push_back(interval);
      }
    }
  }
  if (!dma.empty() && seen > 0) {
    double dma_ns = 0, overlap_ns = 0;
    for (const auto& [start, end] : dma) {
      dma_ns += static_cast<double>(end - start);
      for (const auto& [e_start, e_end] : experts) {
        const uint64_t lo = std::max(start, e_start), hi = std::min(end, e_end);
        if (hi > lo) overlap_ns += static_cast<double>(hi - lo);
      }
    }
    add("summary", "dma (ping-pong transfer)", dma_ns / 1e6 / seen);
    add("summary", "dma overlapped with cpu_worker experts", overlap_ns / 1e6 / seen);
  }
  const Engine::SchedulerCheck check = engine_->scheduler_check();
  if (check.steps > 0) {
    // Per layer, decode-only steps: the roofline model's A and B at work.
    add("scheduler", "cpu attention per layer, predicted", check.predicted_cpu_ms);
    add("scheduler", "cpu attention per layer, measured", check.measured_cpu_ms);
    add("scheduler", "gpu attention per layer, predicted", check.predicted_gpu_ms);
    add("scheduler", "gpu attention per layer, measured", check.measured_gpu_ms);
  }
  for (v1::PhaseSummary& phase : phases) *result.add_phases() = std::move(phase);
  return result;
}

}  // namespace writescope::coordinator
