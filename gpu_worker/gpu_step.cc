#include "gpu_worker/gpu_step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include <omp.h>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/process.h"
#include "common/status.h"
#include "gpu_worker/kv_transfer_plan.h"
#include "kernels/attention_state.h"
#include "kernels/bf16.h"
#include "kernels/model/layers.h"

namespace writescope::gpu {
namespace {

using Clock = std::chrono::steady_clock;

template <typename Array>
absl::Span<const std::byte> Bytes(const Array& v) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(v.data()),
                             v.size() * sizeof(v[0]));
}

// One sequence's tiles for one part of its keys (device addresses).
struct TileList {
  std::vector<const uint16_t*> tiles;
  std::vector<int64_t> positions;
  int32_t last_tokens = 0;  // valid tokens of the last tile

  void Add(const std::byte* tile, int64_t position, int32_t tokens) {
    tiles.push_back(reinterpret_cast<const uint16_t*>(tile));
    positions.push_back(position);
    last_tokens = tokens;
  }
  kernels::KvBlockList List() const {
    kernels::KvBlockList list;
    list.blocks = tiles.data();
    list.num_blocks = static_cast<int32_t>(tiles.size());
    list.last_block_tokens = tiles.empty() ? 0 : last_tokens;
    list.block_positions = positions.data();
    return list;
  }
};

// A partial state over every row of the step, [tokens][heads] rows of o_dim values.
struct Partial {
  explicit Partial(Device* device) : o(device), lse(device) {}
  PinnedArray<float> o;
  PinnedArray<float> lse;

  void Reset(int64_t rows, int64_t o_dim) {
    o.Resize(rows * o_dim);
    lse.Resize(rows);
    kernels::SetEmptyState({o.data(), lse.data()}, rows, static_cast<int32_t>(o_dim));
  }
};

}  // namespace

// Per-layer buffers, kept across layers and steps and pinned: a long prefill chunk's
// activations are hundreds of MB per layer; fresh allocations would fault their pages in
// every layer, and pageable copies to and from the device run at a sixth of the DMA rate.
// Every user overwrites what it reads.
struct GpuStep::Scratch {
  explicit Scratch(Device* d)
      : h(d), y(d), q(d), kv(d), attn(d), routed(d), hot_routed(d), absorbed(d), final_x(d),
        logits(d), kv_bf16(d), qk(d), decode_q(d), acc(d), part(d), decode_out(d) {}
  PinnedArray<float> h, y, q, kv, attn, routed, hot_routed, absorbed;
  // A MoE layer's routing split between the resident experts and the cpu_worker.
  std::vector<int32_t> hot_ids, cold_ids;
  std::vector<float> hot_weights, cold_weights;
  PinnedArray<float> final_x, logits;  // Logits: rows of x, their [rows][vocab] logits
  PinnedArray<uint16_t> kv_bf16, qk;
  // Attention: acc the layer's merged state; part a prefill chunk's; decode_q / decode_out the
  // decode sequences' queries and outputs of one call, gathered.
  PinnedArray<uint16_t> decode_q;
  Partial acc, part, decode_out;
};

template <typename T>
PinnedArray<T>& Sized(PinnedArray<T>& v, int64_t n) {
  v.Resize(n);
  return v;
}

struct GpuStep::Step {
  const internal::StepPlan* plan = nullptr;
  StepLayout layout;
  std::vector<int32_t> tokens;
  std::vector<int64_t> positions;
  TransferPlan transfer;
  uint32_t chunks = 0;
  bool transfer_begun = false;  // round 0 queued (KvCache::BeginTransfer)
  // The ping-pong copies are timed: StepResult.transfer_ms, and with profiling the "dma" spans.
  bool time_dma = false;
  double transfer_ms = 0;  // StepResult.transfer_ms (TimeRounds)
  // The next step's early rounds go after the last layer's GPU attention
  // (GpuStepOptions::early_rounds_after_attention; off for the start-up probe's steps).
  bool early_rounds_in_last_layer = false;
  bool next_rounds_queued = false;  // QueueNextStepRounds ran
  uint32_t early_rounds_missed = 0;  // StepResult.early_rounds_missed
  std::vector<float> x;  // [tokens][hidden]
  // This step's new KV in the device staging buffer: per layer, per sequence.
  std::vector<uint64_t> staging_offset;  // [sequence] within a layer's share
  uint64_t staging_layer_bytes = 0;
  std::vector<KvCache::TokenAppend> appends;  // a layer's decode rows (kv_write)
  std::vector<uint16_t> host_staging;  // the host side of the copies, alive until the end
  double attention_ms = 0;
  double first_layer_attention_ms = 0;  // of attention_ms, layer 0's
  double cpu_attention_wait_ms = 0;  // StepResult.cpu_attention_wait_ms
  double expert_ms = 0;
  bool experts_here = false;  // plan.experts_on_gpu: DeviceExperts, no kExperts
  uint64_t expert_bytes_streamed = 0;
  double expert_stream_wait_ms = 0;
  double hot_expert_ms = 0;   // ForwardResident, summed over layers
  int64_t hot_pairs = 0;      // (token, k) pairs of resident experts, over layers
  int64_t routed_pairs = 0;   // all (token, k) pairs of the steps not experts_on_gpu
  int64_t routed_experts = 0;  // distinct experts chosen per MoE layer, summed over them
  int64_t cpu_routed_experts = 0;  // of them, those the cpu_worker ran (StepResult)
  uint32_t moe_layers = 0;
};

absl::StatusOr<std::unique_ptr<GpuStep>> GpuStep::Create(const ModelWeights& weights,
                                                         Device* device, KvCache* kv_cache,
                                                         DataPlane data_plane,
                                                         const GpuStepOptions& options) {
  auto step = std::unique_ptr<GpuStep>(new GpuStep(device, kv_cache, data_plane, options));
  WS_ASSIGN_OR_RETURN(step->ops_, kernels::model::DecoderOps::Create(weights.config(), weights));
  if (options.linear) step->ops_->set_linear_backend(options.linear);
  step->ops_->set_mla_backend(options.mla);
  if (options.swiglu) step->ops_->set_swiglu_backend(options.swiglu);
  WS_ASSIGN_OR_RETURN(step->attention_, CreateDeviceAttention(device, options.attention));
  step->dims_ = StepDimsFor(weights.config());
  if (options.hot_experts.enabled) {
    if (options.experts == nullptr) {
      return absl::FailedPreconditionError(
          "hot experts need the routed experts on this device (--stream_experts)");
    }
    step->hot_ = std::make_unique<HotExperts>(step->ops_->config(), options.hot_experts);
  }
  return step;
}

GpuStep::GpuStep(Device* device, KvCache* kv_cache, DataPlane data_plane,
                 const GpuStepOptions& options)
    : device_(device),
      kv_cache_(kv_cache),
      data_plane_(data_plane),
      options_(options),
      scratch_(std::make_unique<Scratch>(device)) {}

GpuStep::~GpuStep() {
  const KvCacheStats& stats = kv_cache_->stats();
  if (stats.early_rounds_taken + stats.early_rounds_wasted > 0) {
    WS_LOG(INFO) << "early rounds (the next step's first two KV rounds queued after its last "
                    "attention or at its end): "
                 << stats.early_rounds_taken << " taken (" << stats.early_rounds_completed
                 << " of them in part), " << stats.early_rounds_wasted
                 << " wasted (" << stats.early_rounds_differed << " another plan's, "
                 << stats.early_rounds_overwritten << " written into, "
                 << stats.early_rounds_unoffered << " dropped before a transfer); "
                 << early_after_exploring_
                 << " explorations' last steps queued the rounds of the step before them";
  }
}

absl::Status GpuStep::Send(DataPlaneMessage type, uint64_t step_id, uint32_t layer,
                           absl::Span<const absl::Span<const std::byte>> parts) {
  uint64_t bytes = 0;
  for (const auto& part : parts) bytes += part.size();
  WS_ASSIGN_OR_RETURN(absl::Span<std::byte> out,
                      data_plane_.to_cpu.Reserve(sizeof(DataPlaneHeader) + bytes,
                                                 options_.reply_timeout));
  const DataPlaneHeader header{type, layer, step_id, bytes};
  std::memcpy(out.data(), &header, sizeof(header));
  uint64_t at = sizeof(header);
  for (const auto& part : parts) {
    if (!part.empty()) std::memcpy(out.data() + at, part.data(), part.size());
    at += part.size();
  }
  data_plane_.to_cpu.Commit();
  if (type == DataPlaneMessage::kAttention || type == DataPlaneMessage::kExperts) {
    ++outstanding_replies_;
  }
  return absl::OkStatus();
}

absl::Status GpuStep::Receive(DataPlaneMessage type, uint64_t step_id, uint32_t layer,
                              absl::Span<std::byte> out) {
  while (true) {
    absl::StatusOr<absl::Span<const std::byte>> message =
        data_plane_.to_gpu.Peek(options_.reply_timeout);
    if (!message.ok()) {
      return absl::UnavailableError(absl::StrCat("no reply from the cpu_worker for layer ", layer,
                                                 " of step ", step_id, ": ",
                                                 message.status().message()));
    }
    DataPlaneHeader header;
    if (message->size() < sizeof(header)) {
      data_plane_.to_gpu.Release();
      --outstanding_replies_;
      return absl::DataLossError("data plane: a reply without a header");
    }
    std::memcpy(&header, message->data(), sizeof(header));
    if (header.type == DataPlaneMessage::kEchoReply) {
      // The echo of a ping that timed out (ChannelPing numbers its own): no step's reply.
      data_plane_.to_gpu.Release();
      WS_LOG(WARNING) << "data plane: dropped a late ping echo (" << header.step_id << ")";
      continue;
    }
    if (header.step_id < step_id) {
      // A late reply of an earlier, failed step (step ids only grow): not ours, drop it.
      data_plane_.to_gpu.Release();
      WS_LOG(WARNING) << "data plane: dropped a late reply of step " << header.step_id;
      continue;
    }
    --outstanding_replies_;
    const auto payload = message->subspan(sizeof(header));
    absl::Status status;
    if (header.type == DataPlaneMessage::kError) {
      // UNAVAILABLE where the cpu_worker is going away, else INTERNAL (common/data_plane.h).
      const size_t n = std::min<size_t>(header.payload_bytes, payload.size());
      status = CpuSideFailure(
          payload.subspan(0, n),
          absl::StrCat("cpu_worker, layer ", header.layer, " of step ", header.step_id, ": "));
    } else if (header.type != type || header.step_id != step_id || header.layer != layer ||
               payload.size() != out.size()) {
      status = absl::DataLossError(absl::StrCat(
          "data plane: expected reply ", static_cast<int>(type), " of step ", step_id, " layer ",
          layer, " (", out.size(), " bytes), got ", static_cast<int>(header.type), " of step ",
          header.step_id, " layer ", header.layer, " (", payload.size(), " bytes)"));
    } else if (!out.empty()) {
      std::memcpy(out.data(), payload.data(), out.size());
    }
    data_plane_.to_gpu.Release();
    return status;
  }
}

absl::StatusOr<internal::StepResult> GpuStep::Run(const internal::StepPlan& plan) {
  // The cpu_worker validates the same plan with the same function: an invalid plan fails
  // there too. Any later failure here must still end the step on its side (kStepEnd), or
  // its RunStep would wait for it.
  absl::StatusOr<StepLayout> layout = MakeStepLayout(plan, kv_cache_->config());
  if (!layout.ok()) return layout.status();
  end_sent_ = false;
  absl::StatusOr<internal::StepResult> result = RunValidated(plan, *std::move(layout));
  if (!end_sent_) {
    absl::Status ended = Send(DataPlaneMessage::kStepEnd, plan.step_id(), 0, {});
    if (!ended.ok()) WS_LOG(WARNING) << "ending step " << plan.step_id() << ": " << ended;
  }
  if (result.ok() && std::exchange(hot_choice_due_, false)) {
    result->set_hot_upload_ms(ChooseHotExperts(plan.step_id()));
  }
  return result;
}

double GpuStep::ChooseHotExperts(uint64_t step_id) {
  SpanRecorder::Scope span(options_.spans, "hot_experts_upload", step_id);
  const auto start = Clock::now();
  const int64_t capacity = options_.experts->resident_capacity();
  const std::vector<ExpertRef> set = hot_->Choose(capacity);
  const absl::Status status = options_.experts->SetResident(set);
  if (!status.ok()) {
    hot_->set_failed();
    WS_LOG(WARNING) << "hot experts: the resident set of " << set.size()
                    << " experts was not uploaded, every routed expert stays on the cpu_worker: "
                    << status;
    return MillisSince(start);
  }
  hot_->set_resident(options_.experts->num_resident(),
                     options_.experts->resident_bytes() > 0
                         ? options_.experts->resident_bytes()
                         : static_cast<uint64_t>(set.size()) * hot_->expert_bytes());
  WS_LOG(INFO) << "hot experts: " << set.size() << " of " << hot_->total_experts()
               << " routed experts resident (room for " << capacity << "), "
               << hot_->resident_bytes() << " bytes, chosen from " << hot_->tokens_seen()
               << " routed tokens, uploaded in " << MillisSince(start) << " ms";
  return MillisSince(start);
}

absl::StatusOr<internal::StepResult> GpuStep::RunValidated(const internal::StepPlan& plan,
                                                          StepLayout validated) {
  const auto start = Clock::now();
  const double cpu_start_ms = ProcessCpuMillis();
  const uint64_t copies_before = kv_cache_->stats().transfer_copies;
  const KvCacheConfig& config = kv_cache_->config();
  const KvGeometry& g = config.geometry;
  Step step;
  step.plan = &plan;
  SpanRecorder::Scope step_span(options_.spans, "step", plan.step_id());
  step.layout = std::move(validated);
  const StepLayout& layout = step.layout;
  if (layout.total_tokens == 0) return absl::InvalidArgumentError("a step without tokens");
  const uint64_t max_tokens =
      (data_plane_.to_cpu.max_message_bytes() - sizeof(DataPlaneHeader)) /
      dims_.max_bytes_per_token();
  if (layout.total_tokens > max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("a step of ", layout.total_tokens,
                                                   " tokens exceeds the data plane's ", max_tokens));
  }
  const int64_t vocab = ops_->config().vocab_size;
  for (size_t i = 0; i < layout.sequences.size(); ++i) {
    const internal::SequenceStep& in = plan.sequences(static_cast<int>(i));
    for (uint32_t t = 0; t < in.num_tokens(); ++t) {
      const uint32_t id = in.token_ids(static_cast<int>(t));
      if (id >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", in.seq_id(), ": token id ", id,
                                                       " outside the vocabulary of ", vocab));
      }
      step.tokens.push_back(static_cast<int32_t>(id));
      step.positions.push_back(static_cast<int64_t>(in.position() + t));
    }
  }

  // Checked before anything is queued on the device.
  step.experts_here = plan.experts_on_gpu();
  if (step.experts_here && options_.experts == nullptr) {
    return absl::FailedPreconditionError(
        "the plan puts the routed experts on the gpu_worker, which does not stream them "
        "(--stream_experts)");
  }

  // Staging for the step's new KV: prefill chunks in block layout, decode token rows.
  step.staging_offset.resize(layout.sequences.size());
  for (size_t i = 0; i < layout.sequences.size(); ++i) {
    const StepSequenceLayout& s = layout.sequences[i];
    step.staging_offset[i] = step.staging_layer_bytes;
    const uint64_t bytes =
        s.prefill ? (s.num_tokens + g.block_tokens - 1) / g.block_tokens * g.layer_block_bytes()
                  : g.bytes_per_token_layer();
    step.staging_layer_bytes += (bytes + 255) / 256 * 256;  // tiles stay 256-byte aligned
  }
  const uint64_t staging_bytes = step.staging_layer_bytes * g.num_layers;
  if (staging_.size() < staging_bytes) {
    staging_ = DeviceBuffer();
    WS_ASSIGN_OR_RETURN(staging_, DeviceBuffer::Allocate(device_, staging_bytes));
  }
  step.host_staging.assign(staging_bytes / 2, 0);

  // Full D-windows first: decode tokens land in an empty window, and the cpu_worker may
  // read the flushed blocks of its region in this very step.
  {
    SpanRecorder::Scope span(options_.spans, "dwindow_flush", plan.step_id());
    bool flushed = false;
    absl::Status flush_status;
    for (const StepSequenceLayout& s : layout.sequences) {
      if (s.prefill || s.new_blocks.empty()) continue;
      flush_status = kv_cache_->FlushWindow(s.window_slot, s.new_blocks);
      if (!flush_status.ok()) break;
      flushed = true;
    }
    if (flushed && flush_status.ok()) flush_status = kv_cache_->WaitForWrites();
    if (!flush_status.ok()) {
      // The flushes queued before the failure must not write the host regions after the
      // step has returned (the coordinator frees the failed step's blocks).
      static_cast<void>(device_->SynchronizeAll());
      return flush_status;
    }
  }

  // The coordinator moved blocks since the last step (the monolithic policy's re-split): the
  // rounds queued early may have copied slots it wrote. A step that fails before this line
  // leaves them queued; the coordinator then marks the next plan kv_moved again.
  if (plan.kv_moved()) kv_cache_->DropEarlyRounds();

  // The GPU-transfer blocks of every sequence, streamed layer by layer.
  std::vector<StepSequence> batch;
  for (const StepSequenceLayout& s : layout.sequences) {
    batch.push_back({s.window_slot, s.dwindow_tokens, s.blocks, s.gpu_reads_cpu_blocks});
  }
  WS_ASSIGN_OR_RETURN(step.transfer, BuildTransferPlan(config, batch));
  step.chunks = static_cast<uint32_t>(step.transfer.chunks.size());
  // Time the ping-pong copies on the device (StepResult.transfer_ms, the profile's "dma" spans).
  const bool time_dma = TimesRounds() && step.transfer.num_rounds() > 0;
  kv_cache_->set_time_rounds(time_dma);
  step.time_dma = time_dma;
  // Not in a step with prompt chunks either: their uploads past the SM copies' size go
  // through the copy engine and would wait behind the rounds in the last layer.
  step.early_rounds_in_last_layer =
      options_.early_rounds_after_attention && !step.experts_here &&
      std::none_of(layout.sequences.begin(), layout.sequences.end(),
                   [](const StepSequenceLayout& s) { return s.prefill; });
  // Markers are reset when none is left to read: by the last step before it queued its early
  // rounds (whose markers this step may take), or else here. Early rounds reach a step that
  // resets here only past a step that failed before its transfer: they are taken untimed
  // (their copies ran during that step).
  if (time_dma && !std::exchange(markers_reset_at_end_, false)) {
    WS_RETURN_IF_ERROR(kv_cache_->ResetRoundMarkers());
  }
  // Round 0 is queued in the first layer, after its uploads (Layer), unless the last step
  // queued it early (with round 1).

  outstanding_replies_ = 0;
  absl::Status status;
  if (step.experts_here) {
    // The first MoE layer's weights start streaming now (each Forward queues the next).
    for (uint32_t layer = 0; layer < g.num_layers && status.ok(); ++layer) {
      if (!ops_->config().IsMoeLayer(layer)) continue;
      status = options_.experts->Prefetch(layer);
      break;
    }
  }
  if (status.ok()) status = RunLayers(step);
  if (step.experts_here) status.Update(options_.experts->EndStep());
  // Leave the channel clean for the next step whatever happened.
  while (outstanding_replies_ > 0) {
    absl::StatusOr<absl::Span<const std::byte>> stale =
        data_plane_.to_gpu.Peek(absl::Seconds(5));
    if (!stale.ok()) break;
    data_plane_.to_gpu.Release();
    --outstanding_replies_;
  }
  outstanding_replies_ = 0;
  // The step's KV is in the arena before anyone is told about it. The next step's early
  // rounds, when the last layer queued them, run on (they are all the KV copy-in stream
  // holds then: this step's rounds were read by its attentions); on a failure everything
  // queued finishes first.
  absl::Status written = kv_cache_->WaitForWrites();
  if (written.ok() && status.ok() && step.next_rounds_queued) {
    for (const Stream stream : {Stream::kCompute, Stream::kCopyOut, Stream::kWeightsIn}) {
      if (written.ok()) written = device_->Synchronize(stream);
    }
  } else if (written.ok()) {
    written = device_->SynchronizeAll();
  }
  status.Update(written);
  status.Update(Send(DataPlaneMessage::kStepEnd, layout.step_id, 0, {}));
  end_sent_ = true;
  WS_RETURN_IF_ERROR(status);
  WS_RETURN_IF_ERROR(QueueNextStepRounds(step));  // unless the last layer did

  internal::StepResult result;
  result.set_step_id(layout.step_id);
  {
    SpanRecorder::Scope span(options_.spans, "logits", layout.step_id);
    WS_RETURN_IF_ERROR(Logits(step, &result));
  }
  result.set_attention_ms(step.attention_ms);
  result.set_first_layer_attention_ms(step.first_layer_attention_ms);
  result.set_expert_ms(step.expert_ms);
  result.set_expert_bytes_streamed(step.expert_bytes_streamed);
  result.set_expert_stream_wait_ms(step.expert_stream_wait_ms);
  result.set_hot_expert_ms(step.hot_expert_ms);
  result.set_hot_expert_pairs(static_cast<uint64_t>(step.hot_pairs));
  result.set_routed_pairs(static_cast<uint64_t>(step.routed_pairs));
  result.set_routed_experts(static_cast<uint64_t>(step.routed_experts));
  result.set_cpu_routed_experts(static_cast<uint64_t>(step.cpu_routed_experts));
  result.set_moe_layers(step.moe_layers);
  result.set_attended_tokens(layout.transfer_host_tokens);
  result.set_early_rounds_missed(step.early_rounds_missed);
  result.set_transfer_ms(step.transfer_ms);
  result.set_cpu_attention_wait_ms(step.cpu_attention_wait_ms);
  result.set_num_layers(g.num_layers);
  result.set_transfer_copies(kv_cache_->stats().transfer_copies - copies_before);
  result.set_process_cpu_ms(ProcessCpuMillis() - cpu_start_ms);
  result.set_step_ms(MillisSince(start));
  if (hot_ != nullptr && hot_->EndStep(static_cast<int64_t>(layout.total_tokens))) {
    hot_choice_due_ = true;
  }
  return result;
}

absl::StatusOr<internal::PathProbeResponse> GpuStep::ProbeGpuPath(
    const internal::PathProbeRequest& request) {
  const auto start = Clock::now();
  const KvCacheConfig& config = kv_cache_->config();
  const KvGeometry& g = config.geometry;
  const uint64_t bt = g.block_tokens;
  const uint64_t slots = config.region_slots(KvRegion::kGpuTransfer);
  WS_ASSIGN_OR_RETURN(
      const std::vector<uint64_t> point_blocks,  // each point's tokens in whole blocks
      PathProbeBlocks(request, g.block_tokens, config.max_sequences,
                      std::min<uint64_t>(slots, config.pingpong_blocks),
                      absl::StrCat("min(", slots, " transfer-region slots, ",
                                   config.pingpong_blocks, " ping-pong blocks)")));
  const uint32_t layers = request.layers() == 0 ? g.num_layers
                                                : std::min(request.layers(), g.num_layers);
  // No spans: the probe is not a step of the profile.
  SpanRecorder* const spans = options_.spans;
  options_.spans = nullptr;
  kv_cache_->set_time_rounds(false);
  absl::StatusOr<internal::PathProbeResponse> response =
      [&]() -> absl::StatusOr<internal::PathProbeResponse> {
    internal::PathProbeResponse out;
    for (const uint64_t blocks : point_blocks) {
      Step step;
      step.layout = PathProbeLayout(blocks, request.sequences(), g.block_tokens,
                                    KvRegion::kGpuTransfer);
      const uint32_t sequences = static_cast<uint32_t>(step.layout.sequences.size());
      std::vector<StepSequence> batch;
      for (const StepSequenceLayout& s : step.layout.sequences) {
        batch.push_back({s.window_slot, 0, s.blocks, false});
      }
      WS_ASSIGN_OR_RETURN(step.transfer, BuildTransferPlan(config, batch));
      step.chunks = static_cast<uint32_t>(step.transfer.chunks.size());
      // Small made-up queries (the values do not change the work).
      PinnedArray<float>& q = Sized(scratch_->q, int64_t{sequences} * ops_->q_values());
      for (size_t k = 0; k < q.size(); ++k) q.data()[k] = 0.01f * static_cast<float>(k % 7);
      PinnedArray<float>& attn = Sized(scratch_->attn, int64_t{sequences} * ops_->attn_values());
      std::vector<double> per_layer_ns;
      for (uint32_t run = 0; run <= request.repeats(); ++run) {  // run 0: the warm-up
        step.attention_ms = 0;
        WS_RETURN_IF_ERROR(kv_cache_->BeginTransfer(step.transfer));
        for (uint32_t layer = 0; layer < layers; ++layer) {
          WS_RETURN_IF_ERROR(Attention(step, layer, q, &attn));
        }
        // The rounds prefetched for the layers not run end here too.
        WS_RETURN_IF_ERROR(device_->SynchronizeAll());
        if (run > 0) per_layer_ns.push_back(step.attention_ms * 1e6 / layers);
      }
      std::sort(per_layer_ns.begin(), per_layer_ns.end());
      internal::PathProbePoint* point = out.add_points();
      point->set_tokens(blocks * bt);
      point->set_ns_per_layer(per_layer_ns[per_layer_ns.size() / 2]);
      point->set_slowest_ns_per_layer(per_layer_ns.back());
    }
    return out;
  }();
  options_.spans = spans;
  // The plan the rounds came from is gone: no round of it is left to ready. On a failure,
  // what was queued finishes before the scratch buffers can be reused or resized.
  kv_cache_->EndTransfer();
  if (!response.ok()) {
    const absl::Status synced = device_->SynchronizeAll();
    if (!synced.ok()) WS_LOG(WARNING) << "after a failed probe: " << synced;
    return response;
  }
  response->set_ms(MillisSince(start));
  return response;
}

absl::Status GpuStep::QueueNextStepRounds(Step& step) {
  if (std::exchange(step.next_rounds_queued, true)) return absl::OkStatus();
  // This step's rounds are all read: their times are taken before the markers are reset.
  if (step.time_dma) TimeRounds(step);
  // Not where small uploads wait for the copy engine: the logits' and the next layer 0's
  // uploads would queue behind. After an exploration's last step, the next one most likely
  // reads as the step before the exploration did, so those rounds go (rounds the next step
  // cannot use delay its own, and a GPU-only step's first rounds are the largest); after any
  // other step, its own. KvCache takes what the next plan's rounds can use of them. (A copy:
  // KvCache points at step.transfer until the next BeginTransfer.)
  if (!step.plan->exploring()) last_transfer_ = step.transfer;
  const bool back_from_exploring = step.plan->exploring() && !step.plan->exploration_continues();
  const TransferPlan& next_rounds = back_from_exploring ? last_transfer_ : step.transfer;
  if (options_.prefetch_next_step && step.transfer_begun &&
      !device_->small_uploads_wait_for_transfers()) {
    if (TimesRounds()) {
      // The anchor is taken on the compute stream (the last attention is done, or the
      // streams are idle at the step's end).
      WS_RETURN_IF_ERROR(kv_cache_->ResetRoundMarkers());
      markers_reset_at_end_ = true;
    }
    if (back_from_exploring && last_transfer_.num_rounds() > 0) ++early_after_exploring_;
    // Behind the region writes queued so far and the attentions that read the buffers
    // (QueueEarlyRounds' stream waits); the next step takes what is unwritten since.
    const absl::Status early = kv_cache_->QueueEarlyRounds(next_rounds);
    if (!early.ok()) WS_LOG(WARNING) << "queueing the next step's first KV rounds early: " << early;
  }
  return absl::OkStatus();
}

void GpuStep::TimeRounds(Step& step) {
  const std::vector<std::pair<int, int>>& markers = kv_cache_->round_markers();
  uint64_t total_ns = 0;
  for (uint32_t round = 0; round < markers.size(); ++round) {
    if (markers[round].first < 0) continue;
    absl::StatusOr<uint64_t> start = device_->MarkerNanos(markers[round].first);
    absl::StatusOr<uint64_t> end = device_->MarkerNanos(markers[round].second);
    if (!start.ok() || !end.ok()) {
      WS_LOG(WARNING) << "timing the transfer: " << (start.ok() ? end.status() : start.status());
      return;  // transfer_ms stays 0: not timed
    }
    total_ns += *end > *start ? *end - *start : 0;
    if (options_.spans != nullptr) {
      options_.spans->Record("dma", *start, *end, step.layout.step_id,
                             static_cast<int32_t>(step.transfer.layer_of_round(round)));
    }
  }
  step.transfer_ms = static_cast<double>(total_ns) / 1e6;
}

absl::Status GpuStep::RunLayers(Step& step) {
  const int64_t tokens = static_cast<int64_t>(step.layout.total_tokens);
  step.x.resize(tokens * ops_->config().hidden_size);
  WS_RETURN_IF_ERROR(ops_->Embed(step.tokens, step.x.data()));
  for (uint32_t layer = 0; layer < ops_->config().num_layers; ++layer) {
    WS_RETURN_IF_ERROR(Layer(step, layer));
  }
  return absl::OkStatus();
}

absl::Status GpuStep::Layer(Step& step, uint32_t layer) {
  const StepLayout& layout = step.layout;
  const int64_t T = static_cast<int64_t>(layout.total_tokens);
  const int64_t hidden = ops_->config().hidden_size;
  const KvGeometry& g = kv_cache_->config().geometry;
  SpanRecorder* spans = options_.spans;
  const uint64_t id = layout.step_id;
  const int32_t l = static_cast<int32_t>(layer);
  PinnedArray<float>& h = Sized(scratch_->h, T * hidden);
  PinnedArray<float>& y = Sized(scratch_->y, T * hidden);
  PinnedArray<float>& q = Sized(scratch_->q, T * ops_->q_values());
  PinnedArray<float>& kv = Sized(scratch_->kv, T * ops_->kv_row_values());
  {
    SpanRecorder::Scope span(spans, "qkv", id, l);
    ops_->InputNorm(layer, step.x.data(), T, h.data());
    WS_RETURN_IF_ERROR(
        ops_->ProjectQkv(layer, h.data(), T, step.positions.data(), q.data(), kv.data()));
  }

  // This layer's new KV: bf16 rows -> block layout (prefill) or a token row (decode) in the
  // host staging, copied to the device, then written through the KV cache.
  {
    SpanRecorder::Scope kv_span(spans, "kv_write", id, l);
    const int64_t row = ops_->kv_row_values();
    PinnedArray<uint16_t>& kv_bf16 = Sized(scratch_->kv_bf16, static_cast<int64_t>(kv.size()));
    kernels::model::ToBf16(kv.data(), static_cast<int64_t>(kv.size()), kv_bf16.data());
    auto* device_base = static_cast<std::byte*>(staging_.data()) + layer * step.staging_layer_bytes;
    auto* host_base = reinterpret_cast<std::byte*>(step.host_staging.data()) +
                      layer * step.staging_layer_bytes;
    // The layer's share of the host staging, filled, goes over in one copy; then the writes.
    for (size_t i = 0; i < layout.sequences.size(); ++i) {
      const StepSequenceLayout& s = layout.sequences[i];
      std::byte* host = host_base + step.staging_offset[i];
      const auto* rows = reinterpret_cast<const std::byte*>(kv_bf16.data() + s.token_offset * row);
      if (s.prefill) {
        for (uint32_t t = 0; t < s.num_tokens; ++t) {
          ScatterTokenRow(g, rows + uint64_t{t} * row * 2, t % g.block_tokens,
                          host + uint64_t{t / g.block_tokens} * g.layer_block_bytes());
        }
      } else {
        std::memcpy(host, rows, row * 2);
      }
    }
    WS_RETURN_IF_ERROR(
        device_->CopyToDevice(device_base, host_base, step.staging_layer_bytes, Stream::kCompute));
    std::vector<KvCache::TokenAppend>& appends = step.appends;
    appends.clear();
    for (size_t i = 0; i < layout.sequences.size(); ++i) {
      const StepSequenceLayout& s = layout.sequences[i];
      std::byte* device = device_base + step.staging_offset[i];
      if (s.prefill) {
        WS_RETURN_IF_ERROR(kv_cache_->WritePrefillLayer(layer, s.new_blocks, s.window_slot,
                                                        s.num_tokens % g.block_tokens, device));
      } else {
        appends.push_back({s.window_slot, s.dwindow_tokens, device});
      }
    }
    WS_RETURN_IF_ERROR(kv_cache_->AppendTokens(layer, appends));
  }
  PinnedArray<float>& attn = Sized(scratch_->attn, T * ops_->attn_values());
  if (!step.transfer_begun && step.transfer.num_rounds() > 0) {
    // The first round's DMA goes after this layer's small uploads (the products' inputs, the
    // KV rows): where they go through the copy engine, one queued behind it would wait the
    // whole round.
    WS_RETURN_IF_ERROR(kv_cache_->BeginTransfer(step.transfer));
    step.transfer_begun = true;
    step.early_rounds_missed = kv_cache_->transfer_missed_early_rounds();
  }
  WS_RETURN_IF_ERROR(Attention(step, layer, q, &attn));
  {
    SpanRecorder::Scope span(spans, "o_proj", id, l);
    WS_RETURN_IF_ERROR(ops_->OutputProjection(layer, attn.data(), T, y.data()));
    kernels::model::AddInPlace(step.x.data(), y.data(), T * hidden);
    ops_->PostAttentionNorm(layer, step.x.data(), T, h.data());
  }
  if (!ops_->config().IsMoeLayer(layer)) {
    SpanRecorder::Scope span(spans, "dense_mlp", id, l);
    WS_RETURN_IF_ERROR(ops_->DenseMlp(layer, h.data(), T, y.data()));
  } else {
    const kernels::model::RouterSpec& router = ops_->router();
    std::vector<float> logits(T * router.num_experts), weights(T * router.top_k);
    std::vector<int32_t> ids(T * router.top_k);
    {
      SpanRecorder::Scope span(spans, "router", id, l);
      WS_RETURN_IF_ERROR(ops_->RouterLogits(layer, h.data(), T, logits.data()));
      kernels::model::RouteTokens(logits.data(), T, router, ids.data(), weights.data());
      if (hot_ != nullptr) hot_->Count(layer, ids.data(), T, router.top_k);
      step.routed_experts +=
          HotExperts::Distinct(ids.data(), static_cast<int64_t>(ids.size()), router.num_experts);
      ++step.moe_layers;
    }
    PinnedArray<float>& routed = Sized(scratch_->routed, T * hidden);
    if (step.experts_here) {
      std::fill(y.begin(), y.end(), 0.0f);
      if (ops_->config().n_shared_experts > 0) {
        SpanRecorder::Scope span(spans, "shared_experts", id, l);
        WS_RETURN_IF_ERROR(ops_->AddSharedExperts(layer, h.data(), T, y.data()));
      }
      const auto wait = Clock::now();
      SpanRecorder::Scope span(spans, "gpu_experts", id, l);
      WS_RETURN_IF_ERROR(options_.experts->Forward(layer, h.data(), T, router.top_k, ids.data(),
                                                   weights.data(), routed.data()));
      step.expert_bytes_streamed += options_.experts->last_stats().bytes_streamed;
      step.expert_stream_wait_ms += options_.experts->last_stats().wait_ms;
      step.expert_ms += MillisSince(wait);
      kernels::model::AddInPlace(y.data(), routed.data(), T * hidden);
    } else {
      WS_RETURN_IF_ERROR(RoutedOnWorkers(step, layer, h.data(), ids, weights, &routed));
    }
  }
  kernels::model::AddInPlace(step.x.data(), y.data(), T * hidden);
  return absl::OkStatus();
}

absl::Status GpuStep::RoutedOnWorkers(Step& step, uint32_t layer, const float* h,
                                      const std::vector<int32_t>& ids,
                                      const std::vector<float>& weights,
                                      PinnedArray<float>* routed) {
  SpanRecorder* spans = options_.spans;
  const uint64_t id = step.layout.step_id;
  const int32_t l = static_cast<int32_t>(layer);
  const int64_t T = static_cast<int64_t>(step.layout.total_tokens);
  const int64_t hidden = ops_->config().hidden_size;
  const int64_t top_k = ops_->router().top_k;
  PinnedArray<float>& y = scratch_->y;  // sized by Layer: [T, hidden]
  // Resident pairs stay here; the cpu_worker gets the rest (or nothing when all are hot).
  const bool resident = hot_ != nullptr && options_.experts->num_resident() > 0;
  int64_t hot_pairs = 0;
  if (resident) {
    hot_pairs = HotExperts::Split(
        [&](int32_t e) { return options_.experts->IsResident(layer, e); }, ids.data(),
        weights.data(), T, top_k, &scratch_->hot_ids, &scratch_->hot_weights, &scratch_->cold_ids,
        &scratch_->cold_weights);
  }
  const bool cold_any = hot_pairs < T * top_k;
  if (cold_any) {
    const std::vector<int32_t>& send_ids = hot_pairs > 0 ? scratch_->cold_ids : ids;
    const std::vector<float>& send_weights = hot_pairs > 0 ? scratch_->cold_weights : weights;
    step.cpu_routed_experts += HotExperts::Distinct(
        send_ids.data(), static_cast<int64_t>(send_ids.size()), ops_->router().num_experts);
    const absl::Span<const std::byte> parts[] = {
        absl::MakeConstSpan(reinterpret_cast<const std::byte*>(h), T * hidden * sizeof(float)),
        Bytes(send_ids), Bytes(send_weights)};
    WS_RETURN_IF_ERROR(Send(DataPlaneMessage::kExperts, id, layer, parts));
  }
  std::fill(y.begin(), y.begin() + T * hidden, 0.0f);
  if (ops_->config().n_shared_experts > 0) {
    SpanRecorder::Scope span(spans, "shared_experts", id, l);
    WS_RETURN_IF_ERROR(ops_->AddSharedExperts(layer, h, T, y.data()));
  }
  if (hot_pairs > 0) {
    SpanRecorder::Scope span(spans, "hot_experts", id, l);
    const auto start = Clock::now();
    PinnedArray<float>& hot_y = Sized(scratch_->hot_routed, T * hidden);
    WS_RETURN_IF_ERROR(options_.experts->ForwardResident(layer, h, T, top_k,
                                                         scratch_->hot_ids.data(),
                                                         scratch_->hot_weights.data(),
                                                         hot_y.data()));
    kernels::model::AddInPlace(y.data(), hot_y.data(), T * hidden);
    step.hot_expert_ms += MillisSince(start);
    step.hot_pairs += hot_pairs;
  }
  step.routed_pairs += T * top_k;
  if (cold_any) {
    const auto wait = Clock::now();
    SpanRecorder::Scope span(spans, "experts_wait", id, l);
    WS_RETURN_IF_ERROR(Receive(DataPlaneMessage::kExpertsResult, id, layer,
                               absl::MakeSpan(reinterpret_cast<std::byte*>(routed->data()),
                                              routed->size() * sizeof(float))));
    step.expert_ms += MillisSince(wait);
    kernels::model::AddInPlace(y.data(), routed->data(), T * hidden);
  }
  return absl::OkStatus();
}

absl::Status GpuStep::Attention(Step& step, uint32_t layer, const PinnedArray<float>& q,
                                PinnedArray<float>* attn) {
  const StepLayout& layout = step.layout;
  const KvGeometry& g = kv_cache_->config().geometry;
  const bool mla = ops_->config().is_mla();
  const int64_t T = static_cast<int64_t>(layout.total_tokens);
  const int64_t heads = dims_.num_heads, q_dim = dims_.q_dim, o_dim = dims_.o_dim;
  const int32_t bt = static_cast<int32_t>(g.block_tokens);
  const uint64_t lbb = g.layer_block_bytes();

  // Queries as the kernels take them: bf16, MLA absorbed through W_UK.
  PinnedArray<uint16_t>& qk = Sized(scratch_->qk, T * heads * q_dim);
  if (mla) {
    PinnedArray<float>& absorbed = Sized(scratch_->absorbed, T * heads * q_dim);
    WS_RETURN_IF_ERROR(ops_->MlaAbsorb(layer, q.data(), T, absorbed.data()));
    kernels::model::ToBf16(absorbed.data(), static_cast<int64_t>(absorbed.size()), qk.data());
  } else {
    kernels::model::ToBf16(q.data(), static_cast<int64_t>(q.size()), qk.data());
  }
  // The CPU's share first, so that it runs while the GPU side works.
  if (layout.cpu_tokens > 0) {
    std::vector<uint16_t> cpu_q(layout.cpu_tokens * heads * q_dim);
    for (const StepSequenceLayout& s : layout.sequences) {
      if (s.cpu_blocks.empty()) continue;
      std::memcpy(cpu_q.data() + s.cpu_offset * heads * q_dim,
                  qk.data() + s.token_offset * heads * q_dim, s.num_tokens * heads * q_dim * 2);
    }
    const absl::Span<const std::byte> parts[] = {Bytes(cpu_q)};
    WS_RETURN_IF_ERROR(Send(DataPlaneMessage::kAttention, layout.step_id, layer, parts));
  }
  const auto start = Clock::now();
  const uint64_t gpu_start_ns = MonotonicNanos();
  Partial& acc = scratch_->acc;
  Partial& part = scratch_->part;
  acc.Reset(T * heads, o_dim);

  kernels::GqaShape gqa;
  kernels::MlaShape mla_shape;
  if (mla) {
    mla_shape.num_heads = static_cast<int32_t>(heads);
    mla_shape.kv_lora_rank = static_cast<int32_t>(ops_->config().kv_lora_rank);
    mla_shape.rope_dim = static_cast<int32_t>(ops_->config().qk_rope_head_dim);
    mla_shape.block_tokens = bt;
    mla_shape.softmax_scale = ops_->softmax_scale();
  } else {
    gqa.num_q_heads = static_cast<int32_t>(heads);
    gqa.num_kv_heads = static_cast<int32_t>(ops_->config().num_kv_heads);
    gqa.head_dim = static_cast<int32_t>(q_dim);
    gqa.block_tokens = bt;
    gqa.softmax_scale = ops_->softmax_scale();
  }
  // Attends one part of the keys: `lists[i]` are sequence i's tiles (empty: none). A
  // prefill chunk's queries see the keys at positions up to their own (all of an earlier
  // chunk's, a prefix of the chunk's own blocks); decode sequences see all of theirs.
  // Prefill chunks one by one into `part`, merged into acc's rows of the chunks; the decode
  // sequences in one call (rows gathered into pinned buffers), each merged straight into its
  // acc rows. Nothing else is written: a layer attends 2-4 parts, and whole-batch fills and
  // copies of `part` plus pageable transfers were most of each part's ~0.9 ms at DeepSeek 32 x
  // 8K (the D-window's part alone under cpu-all: 0.9-1.1 ms a layer in run 174, 0.37-0.44
  // without them in run 175).
  auto attend = [&](const std::vector<TileList>& lists) -> absl::Status {
    std::vector<size_t> decode;
    bool any_prefill = false;
    for (size_t i = 0; i < layout.sequences.size(); ++i) {
      if (lists[i].tiles.empty()) continue;
      const StepSequenceLayout& s = layout.sequences[i];
      if (!s.prefill) {
        decode.push_back(i);
        continue;
      }
      if (!any_prefill) part.Reset(T * heads, o_dim);
      any_prefill = true;
      const int32_t queries = static_cast<int32_t>(s.num_tokens);
      const int64_t position = static_cast<int64_t>(s.position);
      const uint16_t* chunk_q = qk.data() + s.token_offset * heads * q_dim;
      float* chunk_o = part.o.data() + s.token_offset * heads * o_dim;
      float* chunk_lse = part.lse.data() + s.token_offset * heads;
      const kernels::KvBlockList keys = lists[i].List();
      WS_RETURN_IF_ERROR(mla ? attention_->MlaPrefill({mla_shape, queries, position, chunk_q, keys,
                                                       chunk_o, chunk_lse})
                             : attention_->GqaPrefill({gqa, queries, position, chunk_q, keys,
                                                       chunk_o, chunk_lse}));
      const int64_t rows = int64_t{queries} * heads;
      kernels::MergeStates({acc.o.data() + s.token_offset * heads * o_dim,
                            acc.lse.data() + s.token_offset * heads},
                           {chunk_o, chunk_lse},
                           {acc.o.data() + s.token_offset * heads * o_dim,
                            acc.lse.data() + s.token_offset * heads},
                           rows, static_cast<int32_t>(o_dim));
    }
    if (!decode.empty()) {
      const size_t n = decode.size();
      PinnedArray<uint16_t>& dq = Sized(scratch_->decode_q, n * heads * q_dim);
      Partial& dout = scratch_->decode_out;
      dout.o.Resize(n * heads * o_dim);
      dout.lse.Resize(n * heads);
      std::vector<kernels::KvBlockList> dlists(n);
      for (size_t j = 0; j < n; ++j) {
        const StepSequenceLayout& s = layout.sequences[decode[j]];
        std::memcpy(dq.data() + j * heads * q_dim, qk.data() + s.token_offset * heads * q_dim,
                    heads * q_dim * 2);
        dlists[j] = lists[decode[j]].List();
      }
      const int32_t seqs = static_cast<int32_t>(n);
      WS_RETURN_IF_ERROR(mla ? attention_->MlaDecode({mla_shape, seqs, dq.data(), dlists.data(),
                                                      dout.o.data(), dout.lse.data()})
                             : attention_->GqaDecode({gqa, seqs, dq.data(), dlists.data(),
                                                      dout.o.data(), dout.lse.data()}));
      for (size_t j = 0; j < n; ++j) {
        const uint64_t r = layout.sequences[decode[j]].token_offset;
        float* o = acc.o.data() + r * heads * o_dim;
        float* lse = acc.lse.data() + r * heads;
        kernels::MergeStates({o, lse},
                             {dout.o.data() + j * heads * o_dim, dout.lse.data() + j * heads},
                             {o, lse}, heads, static_cast<int32_t>(o_dim));
      }
    }
    return absl::OkStatus();
  };

  std::vector<TileList> lists(layout.sequences.size());
  // 1. This layer's GPU-transfer blocks, chunk by chunk through the ping-pong buffers.
  // The next round goes into the other buffer as soon as this one is ready, so that its DMA
  // overlaps this round's attention, unless small uploads would queue behind it on the copy
  // engine (Device::small_uploads_wait_for_transfers): then after this round's uploads.
  const bool prefetch_late = device_->small_uploads_wait_for_transfers();
  for (uint32_t chunk = 0; chunk < step.chunks; ++chunk) {
    WS_ASSIGN_OR_RETURN(PingPongRound round, kv_cache_->ReadyRound(layer * step.chunks + chunk,
                                                                  /*prefetch_next=*/!prefetch_late));
    for (TileList& list : lists) list = TileList();
    for (const PingPongEntry& entry : round.chunk_plan->entries) {
      lists[entry.sequence_index].Add(round.buffer + uint64_t{entry.pingpong_block} * lbb,
                                      int64_t{entry.block_index} * bt, bt);
    }
    WS_RETURN_IF_ERROR(attend(lists));
    WS_RETURN_IF_ERROR(prefetch_late ? kv_cache_->PrefetchNext()
                                     : kv_cache_->PrefetchAfterAttention());
  }
  // 2. The D-window (decode; it holds the new token now) and the chunk's own blocks
  // (prefill, causal).
  for (size_t i = 0; i < layout.sequences.size(); ++i) {
    const StepSequenceLayout& s = layout.sequences[i];
    lists[i] = TileList();
    if (s.prefill) continue;
    const uint32_t window = s.dwindow_tokens + 1;
    const std::byte* base = kv_cache_->WindowAddress(s.window_slot, layer);
    const int64_t first = static_cast<int64_t>(s.position) - s.dwindow_tokens;
    for (uint32_t done = 0; done < window; done += bt) {
      lists[i].Add(base + uint64_t{done / bt} * lbb, first + done,
                   static_cast<int32_t>(std::min<uint32_t>(bt, window - done)));
    }
  }
  WS_RETURN_IF_ERROR(attend(lists));
  const auto* staging = static_cast<const std::byte*>(staging_.data()) + layer * step.staging_layer_bytes;
  bool any_prefill = false;
  for (size_t i = 0; i < layout.sequences.size(); ++i) {
    const StepSequenceLayout& s = layout.sequences[i];
    lists[i] = TileList();
    if (!s.prefill) continue;
    any_prefill = true;
    for (uint32_t done = 0; done < s.num_tokens; done += bt) {
      lists[i].Add(staging + step.staging_offset[i] + uint64_t{done / bt} * lbb,
                   static_cast<int64_t>(s.position) + done,
                   static_cast<int32_t>(std::min<uint32_t>(bt, s.num_tokens - done)));
    }
  }
  if (any_prefill) WS_RETURN_IF_ERROR(attend(lists));
  const double attention_ms = MillisSince(start);
  step.attention_ms += attention_ms;
  if (layer == 0) step.first_layer_attention_ms = attention_ms;
  if (options_.spans != nullptr) {
    options_.spans->Record("gpu_attention", gpu_start_ns, MonotonicNanos(), layout.step_id,
                           static_cast<int32_t>(layer));
  }
  // The step's last rounds are read: the next step's first ones copy under this layer's merge,
  // experts and the logits (GpuStepOptions::early_rounds_after_attention).
  if (step.early_rounds_in_last_layer && layer + 1 == ops_->config().num_layers) {
    WS_RETURN_IF_ERROR(QueueNextStepRounds(step));
  }

  // 3. The CPU's partial, merged into the rows it covers.
  if (layout.cpu_tokens > 0) {
    std::vector<float> cpu(layout.cpu_tokens * heads * (o_dim + 1));
    {
      SpanRecorder::Scope span(options_.spans, "cpu_attention_wait", layout.step_id,
                               static_cast<int32_t>(layer));
      const auto wait_start = Clock::now();
      WS_RETURN_IF_ERROR(Receive(DataPlaneMessage::kAttentionResult, layout.step_id, layer,
                                 absl::MakeSpan(reinterpret_cast<std::byte*>(cpu.data()),
                                                cpu.size() * sizeof(float))));
      step.cpu_attention_wait_ms += MillisSince(wait_start);
    }
    SpanRecorder::Scope span(options_.spans, "merge", layout.step_id, static_cast<int32_t>(layer));
    const float* cpu_lse = cpu.data() + layout.cpu_tokens * heads * o_dim;
    for (const StepSequenceLayout& s : layout.sequences) {
      if (s.cpu_blocks.empty()) continue;
      const int64_t rows = int64_t{s.num_tokens} * heads;
      float* o = acc.o.data() + s.token_offset * heads * o_dim;
      float* lse = acc.lse.data() + s.token_offset * heads;
      kernels::MergeStates({o, lse}, {cpu.data() + s.cpu_offset * heads * o_dim,
                                      cpu_lse + s.cpu_offset * heads},
                           {o, lse}, rows, static_cast<int32_t>(o_dim));
    }
  }
  if (mla) {
    WS_RETURN_IF_ERROR(ops_->MlaUv(layer, acc.o.data(), T, attn->data()));
  } else {
    swap(*attn, acc.o);  // both keep their capacity (and pinning) for the next layer
  }
  return absl::OkStatus();
}

const float* GpuStep::GatherRows(const Step& step, const std::vector<int64_t>& rows) {
  const int64_t hidden = ops_->config().hidden_size;
  PinnedArray<float>& xs = Sized(scratch_->final_x, static_cast<int64_t>(rows.size()) * hidden);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(xs.data() + i * hidden, step.x.data() + rows[i] * hidden, hidden * 4);
  }
  return xs.data();
}

absl::Status GpuStep::GreedyTokens(Step& step, const std::vector<int64_t>& rows,
                                   std::vector<SampledToken>* tokens) {
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t hidden = ops_->config().hidden_size, vocab = ops_->config().vocab_size;
  std::vector<LogitRowStats> stats(n);
  {
    SpanRecorder::Scope span(options_.spans, "lm_head", step.layout.step_id);
    const float* xs = GatherRows(step, rows);
    if (options_.logit_stats) {
      std::vector<float> normed(n * hidden);
      ops_->FinalNorm(xs, n, normed.data());
      WS_RETURN_IF_ERROR(options_.logit_stats(normed.data(), n, ops_->LmHead(), stats.data()));
    } else {
      PinnedArray<float>& logits = Sized(scratch_->logits, n * vocab);
      WS_RETURN_IF_ERROR(ops_->FinalLogits(xs, n, logits.data()));
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
      for (int64_t r = 0; r < n; ++r) {
        stats[r] = ComputeLogitRowStats(absl::MakeConstSpan(logits.data() + r * vocab, vocab));
      }
    }
  }
  SpanRecorder::Scope span(options_.spans, "sample", step.layout.step_id);
  for (int64_t r = 0; r < n; ++r) (*tokens)[r] = GreedyTokenFromStats(stats[r], vocab);
  return absl::OkStatus();
}

absl::Status GpuStep::Logits(Step& step, internal::StepResult* result) {
  const StepLayout& layout = step.layout;
  const int64_t vocab = ops_->config().vocab_size;
  // Rows in batches, so that a long chunk's prompt log-probs do not need [T, vocab] at once.
  constexpr int64_t kBatchRows = 64;
  PinnedArray<float>& logits = scratch_->logits;
  auto compute = [&](const std::vector<int64_t>& rows) -> absl::Status {
    SpanRecorder::Scope span(options_.spans, "lm_head", layout.step_id);
    const int64_t n = static_cast<int64_t>(rows.size());
    Sized(logits, n * vocab);
    return ops_->FinalLogits(GatherRows(step, rows), n, logits.data());
  };
  std::vector<internal::SequenceResult*> outs(layout.sequences.size());
  for (size_t i = 0; i < layout.sequences.size(); ++i) {
    outs[i] = result->add_sequences();
    outs[i]->set_seq_id(layout.sequences[i].seq_id);
  }
  // The next tokens: the last rows of the sequences that ask, kBatchRows per product, each
  // row sampled here with the draw the coordinator took (only the token goes back).
  std::vector<size_t> sampled;
  for (size_t i = 0; i < layout.sequences.size(); ++i) {
    if (step.plan->sequences(static_cast<int>(i)).has_sample_next()) sampled.push_back(i);
  }
  if (samplers_.size() < static_cast<size_t>(std::max(1, omp_get_max_threads()))) {
    samplers_.resize(std::max(1, omp_get_max_threads()), Sampler(SamplerOptions{}));
  }
  for (size_t begin = 0; begin < sampled.size(); begin += kBatchRows) {
    const size_t n = std::min<size_t>(kBatchRows, sampled.size() - begin);
    std::vector<int64_t> rows(n);
    for (size_t r = 0; r < n; ++r) {
      const StepSequenceLayout& s = layout.sequences[sampled[begin + r]];
      rows[r] = static_cast<int64_t>(s.token_offset + s.num_tokens - 1);
    }
    auto sampling = [&](size_t r) -> const internal::TokenSampling& {
      return step.plan->sequences(static_cast<int>(sampled[begin + r])).sample_next();
    };
    // Greedy rows with no top list need only their stats (GreedyTokens); the others their
    // whole logits, sampled here. A batch that mixes them takes each way for its own rows.
    std::vector<size_t> by_stats, by_logits;  // indices into rows
    for (size_t r = 0; r < n; ++r) {
      const bool greedy = IsGreedy(sampling(r).temperature()) && sampling(r).num_top() == 0;
      (greedy ? by_stats : by_logits).push_back(r);
    }
    const auto rows_of = [&](const std::vector<size_t>& picked) {
      std::vector<int64_t> out(picked.size());
      for (size_t i = 0; i < picked.size(); ++i) out[i] = rows[picked[i]];
      return out;
    };
    std::vector<SampledToken> tokens(n);
    if (!by_stats.empty()) {
      std::vector<SampledToken> greedy_tokens(by_stats.size());
      WS_RETURN_IF_ERROR(GreedyTokens(step, rows_of(by_stats), &greedy_tokens));
      for (size_t i = 0; i < by_stats.size(); ++i) tokens[by_stats[i]] = greedy_tokens[i];
    }
    if (!by_logits.empty()) {
      const int64_t m = static_cast<int64_t>(by_logits.size());
      WS_RETURN_IF_ERROR(compute(rows_of(by_logits)));
      SpanRecorder::Scope span(options_.spans, "sample", layout.step_id);
#pragma omp parallel for schedule(dynamic, 1) if (m > 1)
      for (int64_t i = 0; i < m; ++i) {
        const internal::TokenSampling& in = sampling(by_logits[i]);
        Sampler& sampler = samplers_[omp_get_thread_num()];
        sampler.Reset(SamplerOptions{.temperature = in.temperature(),
                                     .top_k = in.top_k(),
                                     .top_p = in.top_p(),
                                     .num_top = in.num_top()});
        tokens[by_logits[i]] =
            sampler.Sample(absl::MakeConstSpan(logits.data() + i * vocab, vocab), in.draw());
      }
    }
    for (size_t r = 0; r < n; ++r) {
      internal::SampledToken* out = outs[sampled[begin + r]]->mutable_next_token();
      out->set_token_id(static_cast<uint32_t>(tokens[r].token_id));
      out->set_logprob(tokens[r].logprob);
      for (const TokenLogprob& alt : tokens[r].top) {
        out->add_top_ids(static_cast<uint32_t>(alt.token_id));
        out->add_top_logprobs(alt.logprob);
      }
    }
  }
  std::vector<float> logprobs(vocab);
  for (size_t i = 0; i < layout.sequences.size(); ++i) {
    const StepSequenceLayout& s = layout.sequences[i];
    const internal::SequenceStep& in = step.plan->sequences(static_cast<int>(i));
    internal::SequenceResult* out = outs[i];
    if (!in.want_prompt_logprobs()) continue;
    // Position t of the chunk predicts token t + 1 (the next chunk's first for the last).
    const uint32_t targets = s.num_tokens - (in.next_prompt_token() >= 0 ? 0 : 1);
    const uint32_t top = std::min<uint32_t>(in.top_logprobs(), static_cast<uint32_t>(vocab));
    std::vector<int32_t> order(vocab);
    for (uint32_t begin = 0; begin < targets; begin += kBatchRows) {
      const uint32_t n = std::min<uint32_t>(kBatchRows, targets - begin);
      std::vector<int64_t> rows(n);
      for (uint32_t r = 0; r < n; ++r) rows[r] = static_cast<int64_t>(s.token_offset + begin + r);
      WS_RETURN_IF_ERROR(compute(rows));
      for (uint32_t r = 0; r < n; ++r) {
        const uint32_t t = begin + r;
        const int64_t target = t + 1 < s.num_tokens ? in.token_ids(static_cast<int>(t + 1))
                                                    : in.next_prompt_token();
        if (target < 0 || target >= vocab) {
          return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id,
                                                         ": prompt target ", target,
                                                         " outside the vocabulary"));
        }
        kernels::model::LogSoftmax(logits.data() + r * vocab, 1, vocab, logprobs.data());
        out->add_prompt_logprobs(logprobs[target]);
        if (top == 0) continue;
        for (int32_t v = 0; v < vocab; ++v) order[v] = v;
        std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int32_t a, int32_t b) {
          return logprobs[a] > logprobs[b] || (logprobs[a] == logprobs[b] && a < b);
        });
        for (uint32_t k = 0; k < top; ++k) {
          out->add_prompt_top_ids(static_cast<uint32_t>(order[k]));
          out->add_prompt_top_logprobs(logprobs[order[k]]);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace writescope::gpu
