#include "coordinator/coordinator.h"

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"

namespace writescope::coordinator {
namespace {

constexpr char kVersion[] = "0.1.0";
constexpr absl::Duration kRpcTimeout = absl::Seconds(5);

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
  auto coordinator = std::unique_ptr<Coordinator>(new Coordinator(std::move(options)));
  WS_ASSIGN_OR_RETURN(coordinator->arena_,
                      ShmArena::Create(coordinator->options_.arena_name,
                                       ArenaRegions(coordinator->options_.arena_sizes)));
  WS_RETURN_IF_ERROR(CreateDataPlane(*coordinator->arena_).status());
  WS_LOG(INFO) << "created arena " << coordinator->arena_->name() << " of "
               << coordinator->arena_->size() << " bytes";
  return coordinator;
}

Coordinator::~Coordinator() { Stop(/*shutdown_workers=*/false); }

void Coordinator::Start(std::function<void(bool)> on_serving_change) {
  on_serving_change_ = std::move(on_serving_change);
  supervisor_ = std::thread([this] { Supervise(); });
}

absl::Status Coordinator::LoadWorkers() {
  internal::LoadRequest request;
  request.mutable_arena()->set_name(arena_->name());
  request.mutable_arena()->set_bytes(arena_->size());
  for (WorkerClient* worker : {&cpu_worker_, &gpu_worker_}) {
    WS_RETURN_IF_ERROR(worker->WaitUntilReachable(options_.worker_start_timeout));
    WS_ASSIGN_OR_RETURN(internal::LoadResponse response,
                        worker->Load(request, options_.worker_start_timeout));
    std::lock_guard<std::mutex> lock(status_mutex_);
    v1::WorkerStatus& status = (worker == &gpu_worker_) ? gpu_status_ : cpu_status_;
    status.set_detail(absl::StrCat("device: ", response.device()));
    WS_LOG(INFO) << worker->name() << " loaded on " << response.device();
  }
  return absl::OkStatus();
}

void Coordinator::Supervise() {
  absl::Status loaded = LoadWorkers();
  if (!loaded.ok()) {
    WS_LOG(ERROR) << "bringing up the workers failed: " << loaded;
    std::lock_guard<std::mutex> lock(status_mutex_);
    gpu_status_.set_detail(std::string(loaded.message()));
    cpu_status_.set_detail(std::string(loaded.message()));
  }
  while (loaded.ok() && !stop_.WaitForNotificationWithTimeout(absl::ZeroDuration())) {
    bool all_serving = true;
    for (WorkerClient* worker : {&gpu_worker_, &cpu_worker_}) {
      absl::StatusOr<bool> serving = worker->Serving(kRpcTimeout);
      const bool up = serving.ok() && *serving;
      all_serving = all_serving && up;
      std::lock_guard<std::mutex> lock(status_mutex_);
      v1::WorkerStatus& status = (worker == &gpu_worker_) ? gpu_status_ : cpu_status_;
      if (status.serving() != up) {
        WS_LOG(INFO) << worker->name() << (up ? " is serving" : " is not serving")
                                   << (serving.ok() ? "" : absl::StrCat(": ", serving.status().message()));
      }
      status.set_serving(up);
    }
    if (serving_.exchange(all_serving) != all_serving && on_serving_change_) {
      on_serving_change_(all_serving);
    }
    stop_.WaitForNotificationWithTimeout(options_.health_interval);
  }
}

void Coordinator::Stop(bool shutdown_workers) {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (supervisor_.joinable()) supervisor_.join();
  if (shutdown_workers) {
    for (WorkerClient* worker : {&gpu_worker_, &cpu_worker_}) {
      absl::Status status = worker->Shutdown(absl::Seconds(2));
      if (!status.ok()) WS_LOG(INFO) << worker->name() << " shutdown: " << status.message();
    }
  }
  if (arena_ != nullptr) {
    absl::Status status = arena_->Unlink();
    if (!status.ok()) WS_LOG(WARNING) << status;
  }
}

absl::StatusOr<v1::ServerInfo> Coordinator::ServerInfo() {
  v1::ServerInfo info;
  info.set_version(kVersion);
  info.set_policy(options_.policy);
  info.set_arena_name(arena_->name());
  info.set_arena_bytes(arena_->size());
  const std::pair<v1::KvRegion, absl::string_view> regions[] = {
      {v1::KV_REGION_CPU_COMPUTE, kCpuComputeRegion}, {v1::KV_REGION_GPU_TRANSFER, kGpuTransferRegion}};
  for (const auto& [region, name] : regions) {
    WS_ASSIGN_OR_RETURN(absl::Span<std::byte> bytes, arena_->Region(name));
    v1::RegionUsage* usage = info.add_regions();
    usage->set_region(region);
    usage->set_bytes_total(bytes.size());
  }
  {
    std::lock_guard<std::mutex> lock(status_mutex_);
    *info.add_workers() = gpu_status_;
    *info.add_workers() = cpu_status_;
  }
  if (serving_.load()) {
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
  return absl::FailedPreconditionError("no model is loaded yet: models arrive with issue 5");
}

}  // namespace writescope::coordinator
