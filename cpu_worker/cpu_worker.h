// The cpu_worker's logic: maps the arena, serves the data plane (attention over the
// CPU-compute region in place, routed experts) on its own thread.
#ifndef WRITESCOPE_CPU_WORKER_CPU_WORKER_H_
#define WRITESCOPE_CPU_WORKER_CPU_WORKER_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/data_plane.h"
#include "common/shm_arena.h"
#include "common/kv_config.h"
#include "common/model_weights.h"
#include "common/worker_server.h"
#include "cpu_worker/kv_view.h"

namespace writescope::cpu {

class CpuWorker final : public WorkerBackend {
 public:
  CpuWorker() = default;
  ~CpuWorker() override;

  std::string name() const override { return "cpu_worker"; }
  absl::StatusOr<internal::LoadResponse> Load(const internal::LoadRequest& request) override;
  absl::StatusOr<internal::StepResult> RunStep(const internal::StepPlan& plan) override;
  internal::WorkerStats Stats() override;
  internal::WorkerProfile Profile(uint32_t steps) override;
  absl::StatusOr<internal::ChannelPingResponse> ChannelPing(
      const internal::ChannelPingRequest& request) override;
  absl::StatusOr<internal::KvPatternResponse> KvPattern(
      const internal::KvPatternRequest& request) override;
  void Stop() override;

 private:
  // Serves messages from the gpu_worker until the channel closes or Stop().
  void DataPlaneLoop();

  std::mutex mutex_;
  std::unique_ptr<ShmArena> arena_;
  std::optional<DataPlane> data_plane_;
  KvCacheConfig kv_config_;
  // Read-only, in place: the CPU-compute region as the attention kernels read it.
  std::optional<KvRegionView> cpu_region_;
  // The routed experts. Progress is readable while Load runs.
  LoadProgress load_progress_;
  std::atomic<bool> loaded_{false};
  std::unique_ptr<ModelWeights> weights_;
  std::thread data_plane_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> messages_served_{0};
};

}  // namespace writescope::cpu

#endif  // WRITESCOPE_CPU_WORKER_CPU_WORKER_H_
