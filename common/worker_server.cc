#include "common/worker_server.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "common/process.h"
#include "common/status.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "writescope/internal/worker.grpc.pb.h"

namespace writescope {
namespace {

// Thin adapter: every RPC forwards to the backend and converts the status.
class WorkerService final : public internal::Worker::Service {
 public:
  WorkerService(WorkerBackend& backend, std::function<void(bool)> set_serving)
      : backend_(backend), set_serving_(std::move(set_serving)) {}

  grpc::Status Load(grpc::ServerContext* context, const internal::LoadRequest* request,
                    internal::LoadResponse* response) override {
    // The caller giving up (its load timeout, a coordinator shutting down) cancels the load
    // itself, not just the call: the loaders stop at their next tensor piece.
    std::atomic<bool> done{false};
    // Again at every poll while the caller stays gone: a Load clears the flag when it
    // starts, which may be after the first call.
    std::thread watcher([&] {
      while (!done.load()) {
        if (context->IsCancelled()) backend_.CancelLoad();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    absl::StatusOr<internal::LoadResponse> result = backend_.Load(*request);
    done.store(true);
    watcher.join();
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    set_serving_(true);
    return grpc::Status::OK;
  }
  grpc::Status RunStep(grpc::ServerContext* context, const internal::StepPlan* plan,
                       internal::StepResult* response) override {
    absl::StatusOr<internal::StepResult> result =
        backend_.RunStep(*plan, [context] { return context->IsCancelled(); });
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    return grpc::Status::OK;
  }
  grpc::Status GetStats(grpc::ServerContext*, const internal::StatsRequest*,
                        internal::WorkerStats* response) override {
    *response = backend_.Stats();
    return grpc::Status::OK;
  }
  grpc::Status GetProfile(grpc::ServerContext*, const internal::WorkerProfileRequest* request,
                          internal::WorkerProfile* response) override {
    *response = backend_.Profile(request->steps());
    return grpc::Status::OK;
  }
  grpc::Status ChannelPing(grpc::ServerContext*, const internal::ChannelPingRequest* request,
                           internal::ChannelPingResponse* response) override {
    absl::StatusOr<internal::ChannelPingResponse> result = backend_.ChannelPing(*request);
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    return grpc::Status::OK;
  }
  grpc::Status KvPattern(grpc::ServerContext*, const internal::KvPatternRequest* request,
                         internal::KvPatternResponse* response) override {
    absl::StatusOr<internal::KvPatternResponse> result = backend_.KvPattern(*request);
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    return grpc::Status::OK;
  }
  grpc::Status ProbeGpuPath(grpc::ServerContext*, const internal::PathProbeRequest* request,
                            internal::PathProbeResponse* response) override {
    absl::StatusOr<internal::PathProbeResponse> result = backend_.ProbeGpuPath(*request);
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    return grpc::Status::OK;
  }
  grpc::Status ProbeCpuPath(grpc::ServerContext*, const internal::PathProbeRequest* request,
                            internal::PathProbeResponse* response) override {
    absl::StatusOr<internal::PathProbeResponse> result = backend_.ProbeCpuPath(*request);
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    return grpc::Status::OK;
  }
  grpc::Status ResetDataPlane(grpc::ServerContext*, const internal::ResetDataPlaneRequest* request,
                              internal::ResetDataPlaneResponse*) override {
    const absl::Status status = backend_.ResetDataPlane(request->attach());
    // Loaded (ResetDataPlane's precondition) and on fresh channels: it serves again, if its
    // old channels' failure had made it stop (WorkerBackend::set_serving_observer).
    if (status.ok() && request->attach()) set_serving_(true);
    return ToGrpcStatus(status);
  }
  grpc::Status Shutdown(grpc::ServerContext*, const internal::ShutdownRequest*,
                        internal::ShutdownResponse*) override {
    WS_LOG(INFO) << "shutdown requested over RPC";
    RequestTermination();
    return grpc::Status::OK;
  }

 private:
  WorkerBackend& backend_;
  std::function<void(bool)> set_serving_;
};

}  // namespace

absl::StatusOr<internal::PathProbeResponse> WorkerBackend::ProbeGpuPath(
    const internal::PathProbeRequest&) {
  return absl::UnimplementedError(absl::StrCat(name(), " has no GPU attention path to probe"));
}

absl::StatusOr<internal::PathProbeResponse> WorkerBackend::ProbeCpuPath(
    const internal::PathProbeRequest&) {
  return absl::UnimplementedError(absl::StrCat(name(), " has no CPU attention path to probe"));
}

absl::Status RunWorkerServer(WorkerBackend& backend, const WorkerServerOptions& options) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  std::unique_ptr<grpc::Server> server;
  WorkerService service(backend, [&server](bool serving) {
    if (server) server->GetHealthCheckService()->SetServingStatus(serving);
  });
  // The backend's own reports (its data plane failed) go the same way. Before the server
  // starts: its threads only run after.
  backend.set_serving_observer([&server](bool serving) {
    if (server) server->GetHealthCheckService()->SetServingStatus(serving);
  });
  absl::Cleanup forget_observer = [&backend] { backend.set_serving_observer(nullptr); };
  grpc::ServerBuilder builder;
  int selected_port = 0;
  const std::string address = absl::StrCat(options.host, ":", options.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &selected_port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(64 << 20);
  server = builder.BuildAndStart();
  if (!server || selected_port == 0) {
    return absl::UnavailableError(absl::StrCat(backend.name(), ": cannot listen on ", address));
  }
  // Not serving until the coordinator has had the weights loaded.
  server->GetHealthCheckService()->SetServingStatus(false);
  if (!options.port_file.empty()) {
    // The server is running already: it stops before `service` (declared after it) goes.
    if (absl::Status written = WritePortFile(options.port_file, selected_port); !written.ok()) {
      backend.BeginStop();
      server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      backend.Stop();
      return written;
    }
  }
  WS_LOG(INFO) << backend.name() << " listening on " << options.host << ":" << selected_port;

  std::thread watcher = StartTerminationWatcher([&] {
    WS_LOG(INFO) << backend.name() << " stopping";
    backend.BeginStop();
    server->GetHealthCheckService()->SetServingStatus(false);
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  });
  server->Wait();
  watcher.join();
  backend.Stop();
  WS_LOG(INFO) << backend.name() << " stopped";
  return absl::OkStatus();
}

}  // namespace writescope
