#include "coordinator/worker_client.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace writescope::coordinator {
namespace {

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
}

}  // namespace

WorkerClient::WorkerClient(std::string name, std::string address)
    : name_(std::move(name)), address_(std::move(address)) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  channel_ = grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args);
  worker_ = internal::Worker::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
}

absl::Status WorkerClient::WaitUntilReachable(absl::Duration timeout) {
  if (channel_->WaitForConnected(std::chrono::system_clock::now() +
                                 absl::ToChronoMilliseconds(timeout))) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(
      absl::StrCat(name_, " at ", address_, " not reachable within ", absl::FormatDuration(timeout)));
}

absl::StatusOr<bool> WorkerClient::Serving(absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = health_->Check(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(
        absl::StrCat(name_, " at ", address_, ": no answer in ", absl::FormatDuration(timeout)));
  }
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat(name_, " at ", address_, ": ", status.error_message()));
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

WorkerHealth::Verdict WorkerHealth::Observe(const absl::StatusOr<bool>& probe) {
  if (absl::IsDeadlineExceeded(probe.status()) && up_ && ++late_ < kLateProbesDown) {
    return {true, true};
  }
  late_ = 0;
  up_ = probe.ok() && *probe;
  return {up_, probe.ok()};
}

absl::StatusOr<internal::LoadResponse> WorkerClient::Load(const internal::LoadRequest& request,
                                                          absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  {
    std::lock_guard<std::mutex> lock(load_mutex_);
    if (loads_cancelled_) return absl::CancelledError(absl::StrCat(name_, " Load: cancelled"));
    load_context_ = &context;
  }
  internal::LoadResponse response;
  grpc::Status status = worker_->Load(&context, request, &response);
  {
    std::lock_guard<std::mutex> lock(load_mutex_);
    load_context_ = nullptr;
  }
  if (!status.ok()) {
    absl::Status error = FromGrpcStatus(status);
    return absl::Status(error.code(), absl::StrCat(name_, " Load: ", error.message()));
  }
  return response;
}

void WorkerClient::CancelLoad() {
  std::lock_guard<std::mutex> lock(load_mutex_);
  loads_cancelled_ = true;
  if (load_context_ != nullptr) load_context_->TryCancel();
}

absl::StatusOr<internal::ChannelPingResponse> WorkerClient::ChannelPing(uint32_t count,
                                                                        uint32_t bytes,
                                                                        absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  internal::ChannelPingRequest request;
  request.set_count(count);
  request.set_bytes(bytes);
  internal::ChannelPingResponse response;
  grpc::Status status = worker_->ChannelPing(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<internal::WorkerStats> WorkerClient::Stats(absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  internal::WorkerStats response;
  grpc::Status status = worker_->GetStats(&context, internal::StatsRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<internal::KvPatternResponse> WorkerClient::KvPattern(
    const internal::KvPatternRequest& request, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  internal::KvPatternResponse response;
  grpc::Status status = worker_->KvPattern(&context, request, &response);
  if (!status.ok()) {
    absl::Status error = FromGrpcStatus(status);
    return absl::Status(error.code(), absl::StrCat(name_, " KvPattern: ", error.message()));
  }
  return response;
}

absl::StatusOr<internal::PathProbeResponse> WorkerClient::ProbeGpuPath(
    const internal::PathProbeRequest& request, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  internal::PathProbeResponse response;
  grpc::Status status = worker_->ProbeGpuPath(&context, request, &response);
  if (!status.ok()) {
    absl::Status error = FromGrpcStatus(status);
    return absl::Status(error.code(), absl::StrCat(name_, " ProbeGpuPath: ", error.message()));
  }
  return response;
}

absl::StatusOr<internal::PathProbeResponse> WorkerClient::ProbeCpuPath(
    const internal::PathProbeRequest& request, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  internal::PathProbeResponse response;
  grpc::Status status = worker_->ProbeCpuPath(&context, request, &response);
  if (!status.ok()) {
    absl::Status error = FromGrpcStatus(status);
    return absl::Status(error.code(), absl::StrCat(name_, " ProbeCpuPath: ", error.message()));
  }
  return response;
}

absl::StatusOr<internal::StepResult> WorkerClient::RunStep(const internal::StepPlan& plan,
                                                          absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  {
    std::lock_guard<std::mutex> lock(load_mutex_);
    step_context_ = &context;
    step_id_ = plan.step_id();
    if (cancelled_step_ == plan.step_id()) context.TryCancel();
  }
  internal::StepResult response;
  grpc::Status status = worker_->RunStep(&context, plan, &response);
  {
    std::lock_guard<std::mutex> lock(load_mutex_);
    step_context_ = nullptr;
  }
  if (!status.ok()) {
    absl::Status error = FromGrpcStatus(status);
    return absl::Status(error.code(), absl::StrCat(name_, " step ", plan.step_id(), ": ",
                                                   error.message()));
  }
  return response;
}

absl::StatusOr<internal::WorkerProfile> WorkerClient::Profile(uint32_t steps,
                                                             absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  internal::WorkerProfileRequest request;
  request.set_steps(steps);
  internal::WorkerProfile response;
  grpc::Status status = worker_->GetProfile(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

void WorkerClient::CancelStep(uint64_t step_id) {
  std::lock_guard<std::mutex> lock(load_mutex_);
  if (step_context_ != nullptr && (step_id == kAnyStep || step_id == step_id_)) {
    step_context_->TryCancel();
  } else if (step_id != kAnyStep) {
    cancelled_step_ = step_id;
  }
}

absl::Status WorkerClient::ResetDataPlane(bool attach, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  internal::ResetDataPlaneRequest request;
  request.set_attach(attach);
  internal::ResetDataPlaneResponse response;
  grpc::Status status = worker_->ResetDataPlane(&context, request, &response);
  if (!status.ok()) {
    absl::Status error = FromGrpcStatus(status);
    return absl::Status(error.code(), absl::StrCat(name_, " ResetDataPlane: ", error.message()));
  }
  return absl::OkStatus();
}

absl::Status WorkerClient::Shutdown(absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  internal::ShutdownResponse response;
  return FromGrpcStatus(worker_->Shutdown(&context, internal::ShutdownRequest(), &response));
}

}  // namespace writescope::coordinator
