// The cpu_worker's logic: maps the arena, serves the data plane (attention over the
// CPU-compute region in place, routed experts) on its own thread.
#ifndef WRITESCOPE_CPU_WORKER_CPU_WORKER_H_
#define WRITESCOPE_CPU_WORKER_CPU_WORKER_H_

#include <atomic>
#include <condition_variable>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/time/time.h"
#include "common/data_plane.h"
#include "common/data_plane_messages.h"
#include "common/shm_arena.h"
#include "common/kv_config.h"
#include "common/model_weights.h"
#include "common/profile.h"
#include "common/worker_server.h"
#include "common/step_layout.h"
#include "cpu_worker/cpu_step.h"
#include "cpu_worker/kv_view.h"

namespace writescope::cpu {

struct CpuWorkerOptions {
  CpuStepOptions step;
  // Load maps the used CPU-compute region into this process before any step reads it;
  // false leaves each page to fault on the first step that reads it (to measure that).
  bool prefault_kv = true;
  // While a step is in flight, the OpenMP threads spin after each of its messages until the
  // next one arrives, at most this long, instead of going to sleep once GOMP_SPINCOUNT runs
  // out: a step's calls come a layer apart (0.8-18 ms in the H200 traces of runs 25 and 73),
  // and a call that must wake sleeping threads pays for it (0.8-1.5 ms per call on the dev VM,
  // attention_bench --gap-us). The spinning takes the cores from anything else meanwhile
  // (the gpu_worker's host work: GOMP_SPINCOUNT=300000 made run 26's steps 13 % longer).
  // 0: off (until an A/B on the GPU machine says otherwise).
  absl::Duration hold_threads = absl::ZeroDuration();
};

class CpuWorker final : public WorkerBackend {
 public:
  explicit CpuWorker(const CpuWorkerOptions& options = {})
      : step_options_(options.step),
        prefault_kv_(options.prefault_kv),
        hold_threads_(options.hold_threads) {}
  ~CpuWorker() override;

  std::string name() const override { return "cpu_worker"; }
  absl::StatusOr<internal::LoadResponse> Load(const internal::LoadRequest& request) override;
  // Waits for the gpu_worker's end of the step (kStepEnd on the data plane); returns
  // CANCELLED once `cancelled` (checked every 50 ms), UNAVAILABLE at once where the data
  // plane has failed or the worker is stopping.
  absl::StatusOr<internal::StepResult> RunStep(const internal::StepPlan& plan,
                                               const std::function<bool()>& cancelled) override;
  internal::WorkerStats Stats() override;
  internal::WorkerProfile Profile(uint32_t steps) override;
  absl::StatusOr<internal::ChannelPingResponse> ChannelPing(
      const internal::ChannelPingRequest& request) override;
  absl::StatusOr<internal::KvPatternResponse> KvPattern(
      const internal::KvPatternRequest& request) override;
  // CpuStep::ProbeAttention; FAILED_PRECONDITION before Load or while a step runs.
  absl::StatusOr<internal::PathProbeResponse> ProbeCpuPath(
      const internal::PathProbeRequest& request) override;
  absl::Status ResetDataPlane(bool attach) override;
  void Stop() override;
  void CancelLoad() override { load_progress_.cancelled.store(true); }
  // The Load in progress is cancelled; steps waiting in RunStep, and any RunStep after,
  // return UNAVAILABLE; the data-plane loop ends.
  void BeginStop() override;

 private:
  // Serves messages from the gpu_worker until the channel closes or Stop().
  void DataPlaneLoop();
  // Ends every step waiting in RunStep with `status` (the data plane is gone).
  void FailPendingSteps(const absl::Status& status);
  // CpuWorkerOptions::hold_threads: while a step is in flight, the OpenMP team spins until
  // `in` has a message, the hold runs out, or the worker stops. Returns at once otherwise.
  void HoldThreadsForNextMessage(const ShmChannel& in);

  // A step between RunStep (which installs it and waits) and the gpu_worker's kStepEnd.
  struct StepState {
    StepLayout layout;
    bool done = false;
    absl::Status status;  // the first failure of the CPU side
    double attention_ms = 0;
    double first_layer_attention_ms = 0;  // of attention_ms, layer 0's
    double expert_ms = 0;
  };
  // The step a data-plane message belongs to; waits briefly for its RunStep to arrive
  // (the two RPCs race). Null when it does not come.
  std::shared_ptr<StepState> AwaitStep(uint64_t step_id);
  // Handles one step message; replies on `out`.
  void ServeStepMessage(const DataPlaneHeader& header, absl::Span<const std::byte> payload,
                        ShmChannel& out);

  CpuStepOptions step_options_;
  const bool prefault_kv_;
  const absl::Duration hold_threads_;
  std::unique_ptr<CpuStep> step_;
  std::mutex steps_mutex_;
  std::condition_variable steps_changed_;
  std::map<uint64_t, std::shared_ptr<StepState>> steps_;
  // Steps the gpu_worker ended before their RunStep arrived here (the newest 64).
  std::set<uint64_t> ended_steps_;
  // Why the data-plane loop ended on its own (a channel error, not Stop or ResetDataPlane):
  // steps fail at once until ResetDataPlane(attach). Guarded by steps_mutex_.
  absl::Status data_plane_down_;
  std::atomic<uint64_t> steps_run_{0};
  SpanRecorder spans_;

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
  std::atomic<bool> loop_reset_{false};  // ResetDataPlane: end the loop without closing
  std::atomic<uint64_t> messages_served_{0};
};

}  // namespace writescope::cpu

#endif  // WRITESCOPE_CPU_WORKER_CPU_WORKER_H_
