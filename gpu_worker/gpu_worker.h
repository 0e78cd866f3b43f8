// The gpu_worker's logic: owns the device, maps the arena, pins the GPU-transfer
// region, drives the data plane towards the cpu_worker.
#ifndef WRITESCOPE_GPU_WORKER_GPU_WORKER_H_
#define WRITESCOPE_GPU_WORKER_GPU_WORKER_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/data_plane.h"
#include "common/model_weights.h"
#include "common/shm_arena.h"
#include "common/worker_server.h"
#include "gpu_worker/device.h"
#include "gpu_worker/device_experts.h"
#include "gpu_worker/device_weights.h"
#include "gpu_worker/device_linear.h"
#include "gpu_worker/gpu_step.h"
#include "gpu_worker/kv_cache.h"

namespace writescope::gpu {

struct GpuWorkerOptions {
  // Routed experts on this device for the steps the coordinator's cost rule gives it
  // (long prefill chunks), streaming their weights from host memory: "on", "off", or
  // "auto" (on with a CUDA device). The weights are a second ModelWeights of the routed
  // experts: views of the checkpoint's mmap (shared in the page cache with the
  // cpu_worker's), or of the synthetic weights the cpu_worker shares (one copy in host
  // memory).
  std::string stream_experts = "auto";
  // Hot experts resident in VRAM (gpu_worker/hot_experts.h): "on", "off", or "auto" (on
  // with a CUDA device). Needs the routed experts here (stream_experts); "on" without
  // them fails the load.
  std::string hot_experts = "auto";
  int64_t hot_experts_warmup_tokens = 4096;
  uint64_t hot_experts_max_bytes = 0;  // 0: all the room the VRAM budget leaves
  // Queue the next step's first two ping-pong rounds at the end of each step
  // (GpuStepOptions::prefetch_next_step).
  bool prefetch_next_step = true;
  // ... as soon as the last layer's GPU attention is done
  // (GpuStepOptions::early_rounds_after_attention).
  bool early_rounds_after_attention = true;
  // Time every step's KV rounds on the device (GpuStepOptions::time_transfers).
  bool time_transfers = true;
  // The SwiGLU MLPs (dense layers, shared experts) as one device chain where the matrix
  // products run on the device (DeviceLinear::SwiGlu); false: through its Linear, three
  // round trips with the activation on the host.
  bool device_swiglu = true;
  // A greedy batch's tokens from lm_head's rows reduced on the device where the matrix
  // products run there (DeviceLinear::LinearRowStats, GpuStepOptions::logit_stats); false:
  // the logits copied to the host and reduced there.
  bool device_logit_stats = true;
  // The GQA tensor-core decode kernel on the CUDA device (DeviceAttentionOptions; kDefault:
  // bulk4). The host device runs the CPU kernels whatever it says.
  kernels::cuda::GqaDecodeKernel gqa_decode_kernel = kernels::cuda::GqaDecodeKernel::kDefault;
};

class GpuWorker final : public WorkerBackend {
 public:
  explicit GpuWorker(std::unique_ptr<Device> device, const GpuWorkerOptions& options = {});
  ~GpuWorker() override;

  std::string name() const override { return "gpu_worker"; }
  absl::StatusOr<internal::LoadResponse> Load(const internal::LoadRequest& request) override;
  // Runs the step itself: its waits on the data plane end at their own timeouts, so
  // `cancelled` is not consulted.
  absl::StatusOr<internal::StepResult> RunStep(const internal::StepPlan& plan,
                                               const std::function<bool()>& cancelled) override;
  internal::WorkerStats Stats() override;
  internal::WorkerProfile Profile(uint32_t steps) override;
  absl::StatusOr<internal::ChannelPingResponse> ChannelPing(
      const internal::ChannelPingRequest& request) override;
  absl::StatusOr<internal::KvPatternResponse> KvPattern(
      const internal::KvPatternRequest& request) override;
  absl::StatusOr<internal::PathProbeResponse> ProbeGpuPath(
      const internal::PathProbeRequest& request) override;
  absl::Status ResetDataPlane(bool attach) override;
  void Stop() override;
  void CancelLoad() override {
    load_progress_.cancelled.store(true);
    experts_load_progress_.cancelled.store(true);
  }

 private:
  std::unique_ptr<Device> device_;
  GpuWorkerOptions options_;
  // Serializes RPCs that use the arena and channels (one step at a time).
  std::mutex mutex_;
  absl::StatusOr<internal::KvPatternResponse> WritePattern(const internal::KvPatternRequest& request);
  absl::StatusOr<internal::KvPatternResponse> VerifyPattern(const internal::KvPatternRequest& request);

  std::unique_ptr<ShmArena> arena_;
  std::optional<DataPlane> data_plane_;
  // Pins the transfer region; owns the D-window and the ping-pong buffers.
  std::unique_ptr<KvCache> kv_cache_;
  // The attention side of the weights (embeddings, attention, norms, routers, shared
  // experts, dense layers, lm_head). Progress is readable while Load runs.
  LoadProgress load_progress_;
  LoadProgress experts_load_progress_;  // the routed experts' host copy (--stream_experts)
  std::atomic<bool> loaded_{false};
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<DeviceWeights> device_weights_;
  // Runs the steps (after Load).
  // The attention side's matrix products on the GPU (null: on the host).
  std::unique_ptr<DeviceLinear> linear_;
  // Routed experts streamed to the device (null unless options_.stream_experts).
  std::unique_ptr<ModelWeights> routed_weights_;
  std::unique_ptr<DeviceExperts> experts_;
  std::unique_ptr<GpuStep> step_;
  SpanRecorder spans_;
  std::atomic<uint64_t> steps_{0};
  bool detached_ = false;  // between ResetDataPlane(false) and (true); guarded by mutex_
  uint64_t next_ping_id_ = 0;  // ChannelPing's echoes; guarded by mutex_
};

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_GPU_WORKER_H_
