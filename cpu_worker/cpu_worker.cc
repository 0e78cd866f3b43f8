#include "cpu_worker/cpu_worker.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/data_plane_messages.h"
#include "common/kv_pattern.h"
#include "common/kv_spec.h"
#include "common/worker_model.h"
#include "common/log.h"
#include "common/status.h"

namespace writescope::cpu {

CpuWorker::~CpuWorker() { Stop(); }

absl::StatusOr<internal::LoadResponse> CpuWorker::Load(const internal::LoadRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (arena_ != nullptr) return absl::FailedPreconditionError("cpu_worker is already loaded");
  if (!request.has_kv()) return absl::InvalidArgumentError("Load: the KV cache spec (kv) is missing");
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
  WS_ASSIGN_OR_RETURN(weights_, LoadWorkerWeights(source, SideFilter::kCpu, &load_progress_));
  WS_RETURN_IF_ERROR(CheckKvMatchesModel(weights_->config(), kv_config_));
  WS_LOG(INFO) << "weights of " << DescribeModelSource(source) << ": " << weights_->num_tensors()
               << " tensors, " << weights_->total_bytes() << " bytes (routed experts)";
  loaded_.store(true);
  arena_ = std::move(arena);
  cpu_region_ = view;
  data_plane_ = plane;
  data_plane_thread_ = std::thread([this] { DataPlaneLoop(); });
  WS_LOG(INFO) << "mapped arena " << arena_->name() << " (" << arena_->size() << " bytes)";
  internal::LoadResponse response;
  response.set_device("cpu");
  response.set_weight_bytes(weights_->total_bytes());
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
  // No lock: readable while Load runs.
  internal::WorkerStats stats;
  stats.set_name(name());
  stats.set_device("cpu");
  stats.set_loaded(loaded_.load());
  stats.set_load_fraction(Snapshot(load_progress_).fraction());
  stats.set_resident_bytes(load_progress_.bytes_done.load());
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

void CpuWorker::Stop() {
  stopping_.store(true);
  std::lock_guard<std::mutex> lock(mutex_);
  if (data_plane_) data_plane_->to_gpu.Close();
  if (data_plane_thread_.joinable()) data_plane_thread_.join();
  data_plane_.reset();
  cpu_region_.reset();
  weights_.reset();
  arena_.reset();
}

}  // namespace writescope::cpu
