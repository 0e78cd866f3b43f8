#include "gpu_worker/gpu_worker.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/data_plane_messages.h"
#include "common/log.h"
#include "common/status.h"

namespace writescope::gpu {
namespace {

constexpr absl::Duration kChannelTimeout = absl::Seconds(5);

}  // namespace

GpuWorker::GpuWorker(std::unique_ptr<Device> device) : device_(std::move(device)) {}

GpuWorker::~GpuWorker() { Stop(); }

absl::StatusOr<internal::LoadResponse> GpuWorker::Load(const internal::LoadRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (arena_ != nullptr) return absl::FailedPreconditionError("gpu_worker is already loaded");
  WS_ASSIGN_OR_RETURN(arena_, ShmArena::Open(request.arena().name()));
  WS_ASSIGN_OR_RETURN(DataPlane plane, AttachDataPlane(*arena_));
  data_plane_ = plane;
  // Pin the GPU-transfer region so transfers into the ping-pong buffers are DMA.
  WS_ASSIGN_OR_RETURN(absl::Span<std::byte> transfer, arena_->Region(kGpuTransferRegion));
  if (!transfer.empty()) {
    WS_RETURN_IF_ERROR(device_->RegisterHost(transfer.data(), transfer.size()));
    pinned_region_ = transfer.data();
  }
  WS_LOG(INFO) << "mapped arena " << arena_->name() << " (" << arena_->size() << " bytes), pinned "
               << transfer.size() << " bytes of the transfer region on " << device_->name();
  internal::LoadResponse response;
  response.set_device(device_->name());
  return response;
}

absl::StatusOr<internal::StepResult> GpuWorker::RunStep(const internal::StepPlan& plan) {
  return absl::UnimplementedError("gpu_worker: model steps arrive with the models issue");
}

internal::WorkerStats GpuWorker::Stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  internal::WorkerStats stats;
  stats.set_name(name());
  stats.set_device(device_->name());
  stats.set_loaded(arena_ != nullptr);
  stats.set_steps(steps_);
  return stats;
}

internal::WorkerProfile GpuWorker::Profile(uint32_t) {
  internal::WorkerProfile profile;
  profile.set_process(name());
  return profile;
}

absl::StatusOr<internal::ChannelPingResponse> GpuWorker::ChannelPing(
    const internal::ChannelPingRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!data_plane_) return absl::FailedPreconditionError("gpu_worker has no arena yet (not loaded)");
  const uint32_t count = std::clamp<uint32_t>(request.count(), 1, 100000);
  const uint64_t payload = request.bytes();
  if (payload + sizeof(DataPlaneHeader) > data_plane_->to_cpu.max_message_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("ping of ", payload, " bytes exceeds the channel limit of ",
                                                   data_plane_->to_cpu.max_message_bytes()));
  }
  std::vector<double> round_trips_us;
  round_trips_us.reserve(count);
  const auto start_all = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < count; ++i) {
    const auto start = std::chrono::steady_clock::now();
    WS_ASSIGN_OR_RETURN(absl::Span<std::byte> out,
                        data_plane_->to_cpu.Reserve(sizeof(DataPlaneHeader) + payload, kChannelTimeout));
    DataPlaneHeader header{DataPlaneMessage::kEcho, 0, i, payload};
    std::memcpy(out.data(), &header, sizeof(header));
    // A pattern that depends on the sequence number, checked on return.
    if (payload > 0) std::memset(out.data() + sizeof(header), static_cast<int>(i & 0xff), payload);
    data_plane_->to_cpu.Commit();

    WS_ASSIGN_OR_RETURN(absl::Span<const std::byte> in, data_plane_->to_gpu.Peek(kChannelTimeout));
    DataPlaneHeader reply;
    if (in.size() != sizeof(reply) + payload) {
      data_plane_->to_gpu.Release();
      return absl::DataLossError(absl::StrCat("echo of ", in.size(), " bytes, expected ", sizeof(reply) + payload));
    }
    std::memcpy(&reply, in.data(), sizeof(reply));
    const bool pattern_ok =
        payload == 0 || (in[sizeof(reply)] == static_cast<std::byte>(i & 0xff) &&
                         in[in.size() - 1] == static_cast<std::byte>(i & 0xff));
    data_plane_->to_gpu.Release();
    if (reply.type != DataPlaneMessage::kEchoReply || reply.step_id != i || !pattern_ok) {
      return absl::DataLossError(absl::StrCat("bad echo for ping ", i));
    }
    round_trips_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_all).count();
  std::sort(round_trips_us.begin(), round_trips_us.end());
  internal::ChannelPingResponse response;
  response.set_count(count);
  response.set_bytes(payload);
  response.set_round_trip_us_median(round_trips_us[round_trips_us.size() / 2]);
  response.set_round_trip_us_p99(round_trips_us[std::min<size_t>(round_trips_us.size() - 1,
                                                                 round_trips_us.size() * 99 / 100)]);
  // Both directions carried the payload.
  response.set_bandwidth_gb_per_s(2.0 * payload * count / total_s / 1e9);
  return response;
}

void GpuWorker::Stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (data_plane_) {
    data_plane_->to_cpu.Close();
    data_plane_.reset();
  }
  if (pinned_region_ != nullptr) {
    absl::Status status = device_->UnregisterHost(pinned_region_);
    if (!status.ok()) WS_LOG(WARNING) << status;
    pinned_region_ = nullptr;
  }
  arena_.reset();
}

}  // namespace writescope::gpu
