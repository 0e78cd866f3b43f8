#include "gpu_worker/gpu_worker.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/data_plane_messages.h"
#include "common/kv_pattern.h"
#include "common/kv_spec.h"
#include "common/model_tensors.h"
#include "common/worker_model.h"
#include "common/log.h"
#include "common/process.h"
#include "common/status.h"

namespace writescope::gpu {
namespace {

constexpr absl::Duration kChannelTimeout = absl::Seconds(5);

// Synthetic weights shrunk to fewer layers than the real model (the benchmarks) would leave
// nearly all of the VRAM budget to hot experts. Their resident set is sized instead as the
// full model's: the room the budget leaves at the real layer count (its attention-side bf16
// weights, which the matrix products use in place, the KV budget, the workspace, the
// streaming buffers), over the real model's MoE layers, times this model's. 0 when the model
// is not shrunk.
absl::StatusOr<uint64_t> ShrunkModelHotBytes(const ModelSource& source, const ModelConfig& here,
                                             const VramBudget& budget, uint64_t kv_bytes,
                                             uint64_t streaming_bytes) {
  if (source.synthetic_arch.empty()) return 0;
  WS_ASSIGN_OR_RETURN(const ModelConfig full, ModelConfig::ForSyntheticArch(source.synthetic_arch));
  if (full.num_layers <= here.num_layers) return 0;
  uint64_t bf16 = 0;
  for (const TensorSpec& spec : ExpectedTensors(full)) {
    if (spec.side == WorkerSide::kGpu) bf16 += spec.bf16_bytes();
  }
  const uint64_t used = bf16 + kv_bytes + budget.workspace_bytes + streaming_bytes;
  if (used >= budget.total_bytes) return 1;  // no room: 1 byte holds no expert
  const uint64_t room = budget.total_bytes - used;
  const int64_t full_moe = full.num_moe_layers();
  const uint64_t share = full_moe > 0 ? room / full_moe * here.num_moe_layers() : 0;
  WS_LOG(INFO) << "hot experts: " << DescribeModelSource(source) << " is shrunk from "
               << full.num_layers << " layers: its resident set is sized as the full model's ("
               << room << " bytes left over " << full_moe << " MoE layers), times its "
               << here.num_moe_layers() << " MoE layers: " << share << " bytes";
  return std::max<uint64_t>(share, 1);
}

}  // namespace

GpuWorker::GpuWorker(std::unique_ptr<Device> device, const GpuWorkerOptions& options)
    : device_(std::move(device)), options_(options) {}

GpuWorker::~GpuWorker() { Stop(); }

absl::StatusOr<internal::LoadResponse> GpuWorker::Load(const internal::LoadRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (arena_ != nullptr) return absl::FailedPreconditionError("gpu_worker is already loaded");
  if (!request.has_kv()) return absl::InvalidArgumentError("Load: the KV cache spec (kv) is missing");
  // A load that fails or is cancelled part way leaves the worker as it found it, so that
  // the coordinator's next Load (a recovery's retry) can run: what it made goes, users
  // before what they use (the channels are the coordinator's: detached, not closed).
  bool loaded = false;
  absl::Cleanup undo = [this, &loaded] {
    if (loaded) return;
    step_.reset();
    experts_.reset();
    routed_weights_.reset();
    linear_.reset();
    device_weights_.reset();
    weights_.reset();
    kv_cache_.reset();
    data_plane_.reset();
    arena_.reset();
  };
  WS_ASSIGN_OR_RETURN(KvCacheConfig config, FromKvSpec(request.kv()));
  if (options_.hot_experts == "on" &&
      !(options_.stream_experts == "on" ||
        (options_.stream_experts == "auto" && device_->is_cuda()))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--hot_experts=on needs the routed experts on the gpu_worker (--stream_experts on, or "
        "auto with CUDA; here --stream_experts=", options_.stream_experts, " on ",
        device_->name(), ")"));
  }
  WS_ASSIGN_OR_RETURN(std::unique_ptr<ShmArena> arena, ShmArena::Open(request.arena().name()));
  WS_ASSIGN_OR_RETURN(DataPlane plane, AttachDataPlane(*arena));
  // Pins the GPU-transfer region (transfers into ping-pong are DMA) and allocates the
  // D-window and both ping-pong buffers once.
  WS_ASSIGN_OR_RETURN(kv_cache_, KvCache::Create(config, *arena, device_.get()));
  arena_ = std::move(arena);
  data_plane_ = plane;
  WS_LOG(INFO) << "mapped arena " << arena_->name() << " (" << arena_->size() << " bytes) on "
               << device_->name() << "; " << config.DebugString();
  const ModelSource source = FromLoadRequest(request);
  load_progress_.cancelled = false;  // a cancelled earlier Load must not end this one
  experts_load_progress_.cancelled = false;
  WS_ASSIGN_OR_RETURN(weights_, LoadWorkerWeights(source, SideFilter::kGpu, &load_progress_));
  WS_RETURN_IF_ERROR(CheckKvMatchesModel(weights_->config(), config));
  // The phases after the weights (uploads, fp32 widening, pinning the experts) take seconds
  // each at 48 layers and are not interruptible inside: a cancelled load stops between them.
  auto check_cancelled = [this](const char* next) -> absl::Status {
    if (!load_progress_.cancelled.load() && !experts_load_progress_.cancelled.load()) {
      return absl::OkStatus();
    }
    return absl::CancelledError(absl::StrCat("the load was cancelled before ", next));
  };
  WS_RETURN_IF_ERROR(check_cancelled("the device uploads"));
  // Weights go where they run: the attention side into VRAM, within the budget.
  VramBudget budget;
  if (request.vram_budget_bytes() > 0) budget.total_bytes = request.vram_budget_bytes();
  WS_ASSIGN_OR_RETURN(device_weights_,
                      DeviceWeights::Upload(*weights_, device_.get(), budget, config.gpu_bytes()));
  // What is left of the budget after weights, KV and workspace (the matrix products' scratch
  // is workspace: they run on the weights' copies above).
  const uint64_t used = device_weights_->bytes() + config.gpu_bytes() + budget.workspace_bytes;
  WS_ASSIGN_OR_RETURN(linear_, CreateDeviceLinear(device_.get(), *weights_, *device_weights_));
  const uint64_t left = budget.total_bytes > used ? budget.total_bytes - used : 0;
  const bool stream_experts =
      options_.stream_experts == "on" || (options_.stream_experts == "auto" && device_->is_cuda());
  internal::LoadResponse response;
  // The step's token bound is the data plane's (the coordinator caps its steps to it); the
  // experts' scratch starts there and runs larger steps in chunks if the budget is short.
  const int64_t max_tokens = static_cast<int64_t>(
      (plane.to_cpu.max_message_bytes() - sizeof(DataPlaneHeader)) /
      StepDimsFor(weights_->config()).max_bytes_per_token());
  if (stream_experts && weights_->config().n_routed_experts > 0) {
    // Synthetic experts: the cpu_worker's copy, shared (one copy in host memory).
    WS_ASSIGN_OR_RETURN(routed_weights_,
                        LoadWorkerWeights(source, SideFilter::kCpu, &experts_load_progress_,
                                          SyntheticExpertsShmName(request.arena().name()),
                                          request.arena().bytes()));
    WS_RETURN_IF_ERROR(check_cancelled("pinning the routed experts"));
    absl::StatusOr<std::unique_ptr<DeviceExperts>> experts = CreateDeviceExperts(
        device_.get(), *routed_weights_, std::max<int64_t>(max_tokens, 1), left);
    if (!experts.ok() && options_.stream_experts == "on") return experts.status();
    if (experts.ok()) {
      experts_ = *std::move(experts);
    } else {
      // auto: the service runs without it (every step's experts on the cpu_worker).
      WS_LOG(WARNING) << "routed experts will not be streamed to " << device_->name() << ": "
                      << experts.status();
      routed_weights_.reset();
    }
  }
  if (experts_ != nullptr) {
    const ModelConfig& model = weights_->config();
    const uint64_t layer_bytes =
        static_cast<uint64_t>(model.n_routed_experts) * model.routed_expert_bytes();
    response.set_streams_experts(true);
    response.set_expert_stream_bytes_per_ms(experts_->calibrated_bytes_per_ms());
    response.set_expert_layer_bytes(layer_bytes);
    WS_LOG(INFO) << "routed experts streamable to " << device_->name() << ": "
                 << routed_weights_->total_bytes() << " host bytes, " << layer_bytes
                 << " per layer, " << experts_->device_bytes() << " device bytes, stream "
                 << experts_->calibrated_bytes_per_ms() / 1e6 << " GB/s, steps up to "
                 << max_tokens << " tokens";
  }
  GpuStepOptions step_options;
  step_options.spans = &spans_;
  step_options.experts = experts_.get();
  step_options.prefetch_next_step = options_.prefetch_next_step;
  step_options.early_rounds_after_attention = options_.early_rounds_after_attention;
  step_options.time_transfers = options_.time_transfers;
  step_options.attention.gqa_decode_kernel = options_.gqa_decode_kernel;
  const bool hot_experts =
      options_.hot_experts == "on" || (options_.hot_experts == "auto" && device_->is_cuda());
  if (hot_experts && weights_->config().n_routed_experts > 0) {
    if (experts_ == nullptr) {
      if (options_.hot_experts == "on") {
        return absl::FailedPreconditionError(
            "--hot_experts=on needs the routed experts on the gpu_worker (--stream_experts on "
            "or auto with CUDA), which it does not have");
      }
    } else {
      WS_ASSIGN_OR_RETURN(const uint64_t shrunk,
                          ShrunkModelHotBytes(source, weights_->config(), budget, config.gpu_bytes(),
                                              experts_->device_bytes()));
      uint64_t max_bytes = options_.hot_experts_max_bytes;
      if (shrunk > 0) max_bytes = max_bytes > 0 ? std::min(max_bytes, shrunk) : shrunk;
      step_options.hot_experts = {.enabled = true,
                                  .warmup_tokens = options_.hot_experts_warmup_tokens,
                                  .max_bytes = max_bytes};
      WS_LOG(INFO) << "hot experts: chosen after " << options_.hot_experts_warmup_tokens
                   << " routed tokens, room for " << experts_->resident_capacity()
                   << " experts in the VRAM budget"
                   << (max_bytes > 0 ? absl::StrCat(", at most ", max_bytes, " bytes")
                                     : std::string());
    }
  }
  if (linear_ != nullptr) {
    step_options.linear = [linear = linear_.get()](const float* x, int64_t tokens,
                                                   const kernels::model::LinearWeight& w, float* y) {
      return linear->Linear(x, tokens, w, y);
    };
    if (options_.device_logit_stats) {
      step_options.logit_stats = [linear = linear_.get()](const float* x, int64_t tokens,
                                                          const kernels::model::LinearWeight& w,
                                                          LogitRowStats* stats) {
        return linear->LinearRowStats(x, tokens, w, stats);
      };
    }
    step_options.mla.absorb = [linear = linear_.get()](const kernels::model::MlaDims& d,
                                                       const float* q, int64_t tokens,
                                                       const kernels::model::LinearWeight& kv_b,
                                                       float* out) {
      return linear->MlaAbsorb(d, q, tokens, kv_b, out);
    };
    step_options.mla.uv = [linear = linear_.get()](const kernels::model::MlaDims& d,
                                                   const float* o, int64_t tokens,
                                                   const kernels::model::LinearWeight& kv_b,
                                                   float* out) {
      return linear->MlaUv(d, o, tokens, kv_b, out);
    };
    if (options_.device_swiglu) {
      step_options.swiglu = [linear = linear_.get()](
                                const float* x, int64_t tokens,
                                const kernels::model::LinearWeight& gate,
                                const kernels::model::LinearWeight& up,
                                const kernels::model::LinearWeight& down, float* y) {
        return linear->SwiGlu(x, tokens, gate, up, down, y);
      };
    }
  }
  WS_ASSIGN_OR_RETURN(step_, GpuStep::Create(*weights_, device_.get(), kv_cache_.get(), plane,
                                             step_options));
  loaded = true;
  loaded_.store(true);
  WS_LOG(INFO) << "weights of " << DescribeModelSource(source) << ": " << weights_->num_tensors()
               << " tensors, " << weights_->total_bytes() << " bytes (attention side), "
               << device_weights_->bytes() << " bytes on " << device_->name() << "; VRAM budget "
               << budget.total_bytes << " bytes";
  response.set_device(device_->name());
  response.set_weight_bytes(weights_->total_bytes());
  return response;
}

absl::StatusOr<internal::StepResult> GpuWorker::RunStep(const internal::StepPlan& plan,
                                                        const std::function<bool()>&) {
  std::lock_guard<std::mutex> lock(mutex_);
  // A relaunched worker before the coordinator reloaded it: not available for steps.
  if (step_ == nullptr) return absl::UnavailableError("gpu_worker is not loaded");
  if (detached_) return absl::UnavailableError("gpu_worker is re-attaching its data plane");
  absl::StatusOr<internal::StepResult> result = step_->Run(plan);
  if (result.ok()) steps_.fetch_add(1);
  return result;
}

absl::StatusOr<internal::PathProbeResponse> GpuWorker::ProbeGpuPath(
    const internal::PathProbeRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);  // between steps
  if (step_ == nullptr) return absl::FailedPreconditionError("gpu_worker is not loaded");
  return step_->ProbeGpuPath(request);
}

internal::WorkerStats GpuWorker::Stats() {
  // No lock: readable while Load runs.
  internal::WorkerStats stats;
  stats.set_name(name());
  stats.set_device(device_->name());
  stats.set_loaded(loaded_.load());
  stats.set_load_fraction(Snapshot(load_progress_).fraction());
  stats.set_resident_bytes(load_progress_.bytes_done.load());
  stats.set_steps(steps_.load());
  if (loaded_.load()) {
    stats.set_device_bytes(device_weights_->bytes() + kv_cache_->device_bytes() +
                           (linear_ != nullptr ? linear_->scratch_bytes() : 0) +
                           (experts_ != nullptr ? experts_->device_bytes() : 0));
    if (const HotExperts* hot = step_->hot_experts(); hot != nullptr) {
      internal::HotExpertsState* out = stats.mutable_hot_experts();
      out->set_warmup_tokens(static_cast<uint64_t>(hot->warmup_tokens()));
      out->set_tokens_seen(static_cast<uint64_t>(hot->tokens_seen()));
      out->set_chosen(hot->chosen());
      out->set_resident_experts(static_cast<uint64_t>(hot->resident_experts()));
      out->set_total_experts(static_cast<uint64_t>(hot->total_experts()));
      out->set_resident_bytes(hot->resident_bytes());
      out->set_state(hot->state());
    }
  }
  return stats;
}

internal::WorkerProfile GpuWorker::Profile(uint32_t steps) {
  internal::WorkerProfile profile;
  profile.set_process(name());
  spans_.LastSteps(steps, profile.mutable_spans());
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
    // Numbered across calls, so that the echo of a ping that timed out in an earlier call is
    // told from this one's.
    const uint64_t id = next_ping_id_++;
    DataPlaneHeader header{DataPlaneMessage::kEcho, 0, id, payload};
    std::memcpy(out.data(), &header, sizeof(header));
    // A pattern that depends on the sequence number, checked on return.
    if (payload > 0) std::memset(out.data() + sizeof(header), static_cast<int>(i & 0xff), payload);
    data_plane_->to_cpu.Commit();

    // A late reply of a failed step, or the echo of an earlier ping that timed out, is not
    // this ping's: dropped.
    absl::Span<const std::byte> in;
    DataPlaneHeader reply{};
    while (true) {
      WS_ASSIGN_OR_RETURN(in, data_plane_->to_gpu.Peek(kChannelTimeout));
      if (in.size() < sizeof(reply)) break;
      std::memcpy(&reply, in.data(), sizeof(reply));
      if (reply.type == DataPlaneMessage::kEchoReply && reply.step_id >= id) break;
      data_plane_->to_gpu.Release();
      WS_LOG(WARNING) << "data plane: a ping dropped a late message (type "
                      << static_cast<int>(reply.type) << ", " << reply.step_id << ")";
    }
    if (in.size() != sizeof(reply) + payload) {
      data_plane_->to_gpu.Release();
      return absl::DataLossError(absl::StrCat("echo of ", in.size(), " bytes, expected ", sizeof(reply) + payload));
    }
    const bool pattern_ok =
        payload == 0 || (in[sizeof(reply)] == static_cast<std::byte>(i & 0xff) &&
                         in[in.size() - 1] == static_cast<std::byte>(i & 0xff));
    data_plane_->to_gpu.Release();
    if (reply.type != DataPlaneMessage::kEchoReply || reply.step_id != id || !pattern_ok) {
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

namespace {

absl::StatusOr<KvBlockRef> ToBlockRef(const internal::BlockRef& block) {
  switch (block.region()) {
    case internal::REGION_CPU_COMPUTE:
      return KvBlockRef{KvRegion::kCpuCompute, block.slot()};
    case internal::REGION_GPU_TRANSFER:
      return KvBlockRef{KvRegion::kGpuTransfer, block.slot()};
    default:
      return absl::InvalidArgumentError("block without a region");
  }
}

absl::StatusOr<std::vector<KvBlockRef>> ToBlockRefs(const internal::KvPatternSequence& sequence) {
  std::vector<KvBlockRef> blocks;
  for (const internal::BlockRef& block : sequence.blocks()) {
    WS_ASSIGN_OR_RETURN(KvBlockRef ref, ToBlockRef(block));
    blocks.push_back(ref);
  }
  return blocks;
}

}  // namespace

absl::StatusOr<internal::KvPatternResponse> GpuWorker::KvPattern(
    const internal::KvPatternRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (kv_cache_ == nullptr) return absl::FailedPreconditionError("gpu_worker is not loaded");
  return request.mode() == internal::KvPatternRequest::WRITE ? WritePattern(request)
                                                              : VerifyPattern(request);
}

// Writes the pattern of every sequence through the prefill write path: the prompt's
// K/V in block layout on the device, then WritePrefillLayer per layer.
absl::StatusOr<internal::KvPatternResponse> GpuWorker::WritePattern(
    const internal::KvPatternRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  const KvCacheConfig& config = kv_cache_->config();
  const KvGeometry& g = config.geometry;
  const uint64_t block_values = g.layer_block_bytes() / 2;
  // Sources stay alive until WaitForWrites.
  std::vector<std::vector<uint16_t>> host_sources;
  std::vector<DeviceBuffer> device_sources;
  internal::KvPatternResponse response;
  for (const internal::KvPatternSequence& sequence : request.sequences()) {
    WS_ASSIGN_OR_RETURN(std::vector<KvBlockRef> blocks, ToBlockRefs(sequence));
    if (sequence.window_tokens() >= g.block_tokens) {
      return absl::InvalidArgumentError("a prefill tail must be shorter than a block");
    }
    const uint64_t source_blocks = blocks.size() + (sequence.window_tokens() > 0 ? 1 : 0);
    if (source_blocks == 0) continue;
    for (uint32_t layer = 0; layer < g.num_layers; ++layer) {
      std::vector<uint16_t>& host = host_sources.emplace_back(source_blocks * block_values, 0);
      for (uint64_t i = 0; i < source_blocks; ++i) {
        const uint32_t tokens = i < blocks.size() ? g.block_tokens : sequence.window_tokens();
        FillKvPatternBlock(g, sequence.seq_id(), i * g.block_tokens, tokens, layer,
                           host.data() + i * block_values);
      }
      WS_ASSIGN_OR_RETURN(DeviceBuffer device,
                          DeviceBuffer::Allocate(device_.get(), host.size() * sizeof(uint16_t)));
      WS_RETURN_IF_ERROR(device_->CopyToDevice(device.data(), host.data(), device.size(),
                                               Stream::kCompute));
      WS_RETURN_IF_ERROR(kv_cache_->WritePrefillLayer(layer, blocks, sequence.window_slot(),
                                                      sequence.window_tokens(), device.data()));
      device_sources.push_back(std::move(device));
      response.set_blocks(response.blocks() + source_blocks);
    }
  }
  WS_RETURN_IF_ERROR(kv_cache_->WaitForWrites());
  WS_RETURN_IF_ERROR(device_->SynchronizeAll());
  response.set_ms(MillisSince(start));
  return response;
}

// Reads back what the GPU attends over: the transfer-region blocks through the
// ping-pong transfer plan of a decode step, and the D-window.
absl::StatusOr<internal::KvPatternResponse> GpuWorker::VerifyPattern(
    const internal::KvPatternRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  const KvCacheConfig& config = kv_cache_->config();
  const KvGeometry& g = config.geometry;
  const uint64_t block_bytes = g.layer_block_bytes();
  std::vector<StepSequence> batch;
  for (const internal::KvPatternSequence& sequence : request.sequences()) {
    // The D-window is read below by its slot and length (WindowAddress checks neither).
    if (sequence.window_slot() >= config.max_sequences ||
        sequence.window_tokens() > config.window_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", sequence.seq_id(), ": D-window slot ", sequence.window_slot(), " of ",
          config.max_sequences, ", ", sequence.window_tokens(), " tokens of ",
          config.window_tokens));
    }
    WS_ASSIGN_OR_RETURN(std::vector<KvBlockRef> blocks, ToBlockRefs(sequence));
    batch.push_back({sequence.window_slot(), sequence.window_tokens(), std::move(blocks)});
  }
  internal::KvPatternResponse response;
  std::string first_mismatch;
  uint64_t mismatches = 0, values = 0;
  auto check = [&](uint64_t seq, uint64_t first_token, uint32_t tokens, uint32_t layer,
                   const std::byte* block) {
    mismatches += CountKvPatternMismatches(g, seq, first_token, tokens, layer,
                                           reinterpret_cast<const uint16_t*>(block), &first_mismatch);
    values += uint64_t{tokens} * g.values_per_token_layer();
    response.set_blocks(response.blocks() + 1);
  };

  WS_ASSIGN_OR_RETURN(TransferPlan plan, BuildTransferPlan(config, batch));
  uint64_t largest_chunk = 1;
  for (const TransferChunk& chunk : plan.chunks) largest_chunk = std::max<uint64_t>(largest_chunk, chunk.num_blocks);
  std::vector<std::byte> host(largest_chunk * block_bytes);
  if (plan.num_rounds() > 0) {
    WS_RETURN_IF_ERROR(kv_cache_->BeginTransfer(plan));
    for (uint32_t round = 0; round < plan.num_rounds(); ++round) {
      WS_ASSIGN_OR_RETURN(PingPongRound ready, kv_cache_->ReadyRound(round));
      WS_RETURN_IF_ERROR(device_->CopyToHost(host.data(), ready.buffer,
                                             ready.chunk_plan->num_blocks * block_bytes,
                                             Stream::kCompute));
      WS_RETURN_IF_ERROR(device_->Synchronize(Stream::kCompute));
      for (const PingPongEntry& entry : ready.chunk_plan->entries) {
        check(request.sequences(entry.sequence_index).seq_id(),
              uint64_t{entry.block_index} * g.block_tokens, g.block_tokens, ready.layer,
              host.data() + uint64_t{entry.pingpong_block} * block_bytes);
      }
    }
    kv_cache_->EndTransfer();  // `plan` dies here
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepSequence& sequence = batch[i];
    const uint64_t window_first = sequence.blocks.size() * uint64_t{g.block_tokens};
    for (uint32_t layer = 0; layer < g.num_layers; ++layer) {
      for (uint32_t done = 0; done < sequence.window_tokens; done += g.block_tokens) {
        const uint32_t tokens = std::min(g.block_tokens, sequence.window_tokens - done);
        WS_RETURN_IF_ERROR(device_->CopyToHost(
            host.data(), kv_cache_->WindowAddress(sequence.window_slot, layer) +
                             uint64_t{done / g.block_tokens} * block_bytes,
            block_bytes, Stream::kCompute));
        WS_RETURN_IF_ERROR(device_->Synchronize(Stream::kCompute));
        check(request.sequences(i).seq_id(), window_first + done, tokens, layer, host.data());
      }
    }
  }
  response.set_values_checked(values);
  response.set_mismatches(mismatches);
  response.set_first_mismatch(first_mismatch);
  response.set_ms(MillisSince(start));
  return response;
}

absl::Status GpuWorker::ResetDataPlane(bool attach) {
  // A step in progress ends first (the coordinator closed the channels, so its waits fail).
  std::lock_guard<std::mutex> lock(mutex_);
  if (arena_ == nullptr || step_ == nullptr) {
    return absl::FailedPreconditionError("gpu_worker is not loaded");
  }
  if (!attach) {
    detached_ = true;
    WS_LOG(INFO) << "detached from the data plane";
    return absl::OkStatus();
  }
  WS_ASSIGN_OR_RETURN(DataPlane plane, AttachDataPlane(*arena_));
  data_plane_ = plane;
  step_->set_data_plane(plane);
  detached_ = false;
  WS_LOG(INFO) << "re-attached to the data plane";
  return absl::OkStatus();
}

void GpuWorker::Stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Stats reads what goes below without the lock, behind loaded_; Stop runs once the
  // server has stopped serving (RunWorkerServer), so no Stats call is in flight.
  loaded_.store(false);
  if (data_plane_) {
    data_plane_->to_cpu.Close();
    data_plane_.reset();
  }
  step_.reset();
  linear_.reset();
  kv_cache_.reset();  // unpins the transfer region before the arena is unmapped
  device_weights_.reset();
  weights_.reset();
  arena_.reset();
}

}  // namespace writescope::gpu
