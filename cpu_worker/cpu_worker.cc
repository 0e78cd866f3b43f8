#include "cpu_worker/cpu_worker.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/data_plane_messages.h"
#include "common/log.h"
#include "common/status.h"

namespace writescope::cpu {

CpuWorker::~CpuWorker() { Stop(); }

absl::StatusOr<internal::LoadResponse> CpuWorker::Load(const internal::LoadRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (arena_ != nullptr) return absl::FailedPreconditionError("cpu_worker is already loaded");
  WS_ASSIGN_OR_RETURN(arena_, ShmArena::Open(request.arena().name()));
  WS_ASSIGN_OR_RETURN(DataPlane plane, AttachDataPlane(*arena_));
  data_plane_ = plane;
  data_plane_thread_ = std::thread([this] { DataPlaneLoop(); });
  WS_LOG(INFO) << "mapped arena " << arena_->name() << " (" << arena_->size() << " bytes)";
  internal::LoadResponse response;
  response.set_device("cpu");
  return response;
}

void CpuWorker::DataPlaneLoop() {
  ShmChannel in = data_plane_->to_cpu;
  ShmChannel out = data_plane_->to_gpu;
  while (!stopping_.load()) {
    absl::StatusOr<absl::Span<const std::byte>> message = in.Peek(absl::Milliseconds(200));
    if (absl::IsDeadlineExceeded(message.status())) continue;
    if (!message.ok()) {
      if (!stopping_.load()) WS_LOG(INFO) << "data plane ends: " << message.status();
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
      default:
        WS_LOG(ERROR) << "data plane: unknown message type " << static_cast<uint32_t>(header.type);
    }
    in.Release();
    messages_served_.fetch_add(1);
  }
}

absl::StatusOr<internal::StepResult> CpuWorker::RunStep(const internal::StepPlan& plan) {
  return absl::UnimplementedError("cpu_worker: model steps arrive with the models issue");
}

internal::WorkerStats CpuWorker::Stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  internal::WorkerStats stats;
  stats.set_name(name());
  stats.set_device("cpu");
  stats.set_loaded(arena_ != nullptr);
  return stats;
}

internal::WorkerProfile CpuWorker::Profile(uint32_t) {
  internal::WorkerProfile profile;
  profile.set_process(name());
  return profile;
}

absl::StatusOr<internal::ChannelPingResponse> CpuWorker::ChannelPing(
    const internal::ChannelPingRequest&) {
  return absl::FailedPreconditionError("pings start at the gpu_worker; the cpu_worker echoes them");
}

void CpuWorker::Stop() {
  stopping_.store(true);
  std::lock_guard<std::mutex> lock(mutex_);
  if (data_plane_) data_plane_->to_gpu.Close();
  if (data_plane_thread_.joinable()) data_plane_thread_.join();
  data_plane_.reset();
  arena_.reset();
}

}  // namespace writescope::cpu
