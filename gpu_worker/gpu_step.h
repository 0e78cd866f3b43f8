// The gpu_worker's side of one step (a batch of prefill chunks and decode tokens), layer by
// layer, with the cpu_worker on the other end of the data plane (common/step_layout.h):
//
//   flush the full D-windows the plan names (decode), wait for the writes
//   stream the step's GPU-transfer blocks through the ping-pong buffers (KvCache): round
//   0 queued in layer 0 after its uploads, the next as soon as the current one is ready
//   (its DMA overlaps the current round's attention), and once that attention is queued
//   up to two rounds ahead, across layers too (KvCache::PrefetchAfterAttention); on a
//   device whose small uploads wait behind a round's DMA
//   (Device::small_uploads_wait_for_transfers), each next round after the current round's
//   attention instead
//   x = embed(tokens)
//   per layer:
//     h = input_norm(x); q, kv = project(h)               (DecoderOps)
//     send the CPU-attended queries -> cpu_worker          (kAttention)
//     write kv: prefill blocks into their regions + tail into the D-window; decode token
//               into the D-window                          (KvCache)
//     GPU partials: ping-pong tiles of this layer; the D-window (decode) or the chunk's own
//                   blocks (prefill, causal)               (DeviceAttention)
//     merge with the CPU partial <- cpu_worker             (kAttentionResult)
//     x += o_proj(attention)
//     h = post_norm(x); dense MLP, or router -> cpu_worker (kExperts) while the shared
//     experts run here, + the routed sum <- cpu_worker     (kExpertsResult)
//     (a step with plan.experts_on_gpu runs the routed experts here instead, streaming
//     their weights: DeviceExperts; the cpu_worker then gets no kExperts)
//   wait for the KV writes; kStepEnd -> cpu_worker
//   logits of the rows that need them: the next tokens sampled (with the coordinator's
//   draws, common/sampler.h), prompt log-probabilities. A batch of rows that all sample
//   greedily with no top list needs only each row's stats (common/logit_row_stats.h):
//   GpuStepOptions::logit_stats reduces the rows on the device, so the [rows, vocab]
//   logits never come to the host
//
// The layer math runs through DecoderOps: its matrix products on the device where
// GpuStepOptions::linear is set (cuBLAS on a GPU, gpu_worker/device_linear.h), norms, RoPE
// and routing on the host; attention runs on the device. Not thread-safe: the gpu_worker
// serializes steps.
#ifndef WRITESCOPE_GPU_WORKER_GPU_STEP_H_
#define WRITESCOPE_GPU_WORKER_GPU_STEP_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/data_plane.h"
#include "common/data_plane_messages.h"
#include "common/kv_config.h"
#include "common/model_weights.h"
#include "common/profile.h"
#include "common/sampler.h"
#include "common/step_layout.h"
#include "gpu_worker/device.h"
#include "gpu_worker/device_attention.h"
#include "gpu_worker/device_experts.h"
#include "gpu_worker/hot_experts.h"
#include "gpu_worker/kv_cache.h"
#include "gpu_worker/pinned_array.h"
#include "kernels/model/decoder_ops.h"
#include "writescope/internal/worker.pb.h"

namespace writescope::gpu {

struct GpuStepOptions {
  // How long to wait for one reply of the cpu_worker.
  absl::Duration reply_timeout = absl::Seconds(120);
  // Spans of every step and layer (may be null: no profiling).
  SpanRecorder* spans = nullptr;
  // The layer math's matrix products (empty: the host Linear).
  kernels::model::LinearBackend linear;
  // MLA's absorbed per-head products (empty: the host loops).
  kernels::model::MlaBackend mla;
  // The SwiGLU MLPs (dense layers, shared experts) as one chain (empty: through `linear`).
  kernels::model::SwiGluBackend swiglu;
  // stats[t] = the LogitRowStats of row t of x W^T, for lm_head at a greedy batch
  // (DeviceLinear::LinearRowStats; empty: the logits on the host and ComputeLogitRowStats).
  std::function<absl::Status(const float* x, int64_t tokens, const kernels::model::LinearWeight& w,
                             LogitRowStats* stats)>
      logit_stats;
  // Routed experts on this device, for steps whose plan says experts_on_gpu (null: such
  // plans are refused).
  DeviceExperts* experts = nullptr;
  // Hot experts resident in VRAM (needs `experts`): chosen after a warm-up, then the
  // resident pairs of every step without experts_on_gpu run here (hot_experts.h).
  HotExpertsOptions hot_experts;
  // At the end of each step, queue the step's first two ping-pong rounds again for the
  // next step (KvCache::QueueEarlyRounds): the copies run while the host computes the
  // logits and the coordinator plans, and the next step takes what its first rounds can use
  // of them (after an exploration's last step, the rounds of the step before the
  // exploration are queued).
  bool prefetch_next_step = true;
  // Queue them as soon as the step's last layer has read its last rounds (its GPU attention
  // done), not after the step: the copies then also run under that layer's merge, experts
  // and logits (the step's end does not wait for them). A step whose routed experts stream
  // to this device (experts_on_gpu), or with prompt chunks (their large uploads use the copy
  // engine), queues them at its end, as before. The early rounds were
  // queued after the last layer's CPU experts before: DeepSeek 32 x 32K on the H200 (run 73),
  // the copy engine idle for 5.2 ms under the last layer's merge and experts, the next
  // step's first round queued 2.8 ms before the step's end; where a layer's KV is one round
  // (Mixtral 16 x 8K, 4 x 32K: 0.5 GB a layer, the ping-pong buffers 0.94 GiB each) the first
  // layer's whole transfer (9-10 ms at 55 GB/s) then lies in the next step.
  bool early_rounds_after_attention = true;
  // Time every step's KV rounds on the device (two markers per round on the copy stream) and
  // report the copy engine's time on them (StepResult.transfer_ms), which the scheduler's DMA
  // line learns from. With profiling on they are timed whatever this says (the "dma" spans).
  bool time_transfers = true;
  // The attention kernels' choices (DeviceAttentionOptions: the GQA decode kernel on CUDA).
  DeviceAttentionOptions attention;
};

class GpuStep {
 public:
  // Everything is borrowed and must outlive the object. `weights` holds the attention side.
  static absl::StatusOr<std::unique_ptr<GpuStep>> Create(const ModelWeights& weights,
                                                         Device* device, KvCache* kv_cache,
                                                         DataPlane data_plane,
                                                         const GpuStepOptions& options = {});

  ~GpuStep();

  absl::StatusOr<internal::StepResult> Run(const internal::StepPlan& plan);
  // Times the decode attention path alone (worker.proto's ProbeGpuPath): per point, what a
  // decode step reports as attention_ms per layer (the ping-pong transfer of the point's
  // blocks, and the GPU attention over them and one D-window token per sequence) when
  // blocks [0, n) of the GPU-transfer region are spread over `sequences` decode sequences
  // (window slots [0, sequences)), over the first `layers` layers back to back: `repeats`
  // times after a warm-up, the median. Reads only (the queries are made up; nothing is sent
  // to the cpu_worker). INVALID_ARGUMENT, naming the point, for a size of no block or one
  // beyond the transfer region or a ping-pong buffer; for no sizes, sequences outside
  // [1, max_sequences] or repeats outside [1, 100]. Between steps (not thread-safe).
  absl::StatusOr<internal::PathProbeResponse> ProbeGpuPath(
      const internal::PathProbeRequest& request);
  // The channels were re-formatted (the cpu_worker was relaunched): use these.
  void set_data_plane(DataPlane data_plane) { data_plane_ = data_plane; }
  // The hot experts' warm-up and resident set (null when off). Its getters are thread-safe.
  const HotExperts* hot_experts() const { return hot_.get(); }

 private:
  GpuStep(Device* device, KvCache* kv_cache, DataPlane data_plane, const GpuStepOptions& options);

  struct Step;     // per-step state (gpu_step.cc)
  struct Scratch;  // per-layer buffers, reused (gpu_step.cc)
  absl::StatusOr<internal::StepResult> RunValidated(const internal::StepPlan& plan,
                                                    StepLayout validated);
  absl::Status RunLayers(Step& step);
  absl::Status Layer(Step& step, uint32_t layer);
  absl::Status Attention(Step& step, uint32_t layer, const PinnedArray<float>& q,
                         PinnedArray<float>* attn);
  absl::Status Logits(Step& step, internal::StepResult* result);
  // Rows `rows` of step.x gathered into scratch (final_x), returned.
  const float* GatherRows(const Step& step, const std::vector<int64_t>& rows);
  // The greedy tokens of rows `rows` of step.x (logits' batch that samples greedily with no
  // top list) from the rows' stats: options_.logit_stats, else the host's logits.
  absl::Status GreedyTokens(Step& step, const std::vector<int64_t>& rows,
                            std::vector<SampledToken>* tokens);
  // The MoE layer's routed experts that are not experts_on_gpu: the resident pairs here,
  // the rest on the cpu_worker; y gets their sum.
  absl::Status RoutedOnWorkers(Step& step, uint32_t layer, const float* h,
                               const std::vector<int32_t>& ids, const std::vector<float>& weights,
                               PinnedArray<float>* routed);
  // The warm-up is over: choose the resident set and upload it (between steps). Returns
  // the time it took, ms.
  double ChooseHotExperts(uint64_t step_id);
  // The KV rounds are timed on the device: for StepResult.transfer_ms, or the profile's spans.
  bool TimesRounds() const { return options_.spans != nullptr || options_.time_transfers; }
  // The copy engine's time on the step's ping-pong rounds, from the device's markers, into
  // step.transfer_ms (0 when a marker cannot be read), and with profiling the "dma" spans.
  void TimeRounds(Step& step);
  // The next step's first rounds, early (KvCache::QueueEarlyRounds; GpuStepOptions::
  // prefetch_next_step), once per step: after the last layer's GPU attention
  // (early_rounds_after_attention) or at the step's end. Times the step's rounds first
  // when it times them (the markers are reset for the early rounds).
  absl::Status QueueNextStepRounds(Step& step);
  // Data plane.
  absl::Status Send(DataPlaneMessage type, uint64_t step_id, uint32_t layer,
                    absl::Span<const absl::Span<const std::byte>> parts);
  // Receives the reply `type` of (step_id, layer) into `out` (exactly its size).
  absl::Status Receive(DataPlaneMessage type, uint64_t step_id, uint32_t layer,
                       absl::Span<std::byte> out);

  Device* device_;
  KvCache* kv_cache_;
  DataPlane data_plane_;
  GpuStepOptions options_;
  std::unique_ptr<kernels::model::DecoderOps> ops_;
  std::unique_ptr<DeviceAttention> attention_;
  std::unique_ptr<Scratch> scratch_;
  StepDims dims_;
  DeviceBuffer staging_;  // device copies of this step's new KV (grows)
  std::vector<Sampler> samplers_;  // one per OpenMP thread, buffers reused across steps
  uint32_t outstanding_replies_ = 0;
  bool end_sent_ = false;  // this step's kStepEnd went out
  std::unique_ptr<HotExperts> hot_;
  bool hot_choice_due_ = false;
  // The device's markers were reset at the end of the last step (before its early rounds).
  bool markers_reset_at_end_ = false;
  // The transfer plan of the last step that did not explore (StepPlan.exploring): the early
  // rounds after an exploration's last step are this plan's.
  TransferPlan last_transfer_;
  uint64_t early_after_exploring_ = 0;  // explorations' last steps that queued them
};

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_GPU_STEP_H_
