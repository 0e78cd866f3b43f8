// The coordinator's logic: owns the arena and the placement metadata, brings the
// workers up, watches their health, answers the public API (through the thin gRPC
// adapter in coordinator/service.cc).
#ifndef WRITESCOPE_COORDINATOR_COORDINATOR_H_
#define WRITESCOPE_COORDINATOR_COORDINATOR_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/data_plane.h"
#include "common/kv_config.h"
#include "common/model_config.h"
#include "common/shm_arena.h"
#include "common/worker_model.h"
#include "coordinator/engine.h"
#include "coordinator/placement.h"
#include "coordinator/scheduler.h"
#include "coordinator/service_backend.h"
#include "coordinator/worker_client.h"
#include "writescope/v1/writescope.pb.h"

namespace writescope::coordinator {

struct CoordinatorOptions {
  std::string arena_name;  // "/ws-<launch id>"
  // The model, fixed at launch (never taken from a request).
  ModelSource model;
  // The KV cache; Create resolves it (defaults, validation) and sizes the arena from it.
  KvCacheConfig kv;
  uint64_t channel_bytes = uint64_t{16} << 20;
  std::string gpu_worker_address;
  std::string cpu_worker_address;
  std::string policy = "writescope";
  // The scheduler's tuning (Create fills in the KV sizes it derives from the model).
  SchedulerOptions scheduler;
  // Where routed experts run per step: "auto" (the cost rule, coordinator/expert_placement.h),
  // "cpu", or "gpu" (needs a gpu_worker that streams experts).
  std::string routed_experts = "auto";
  absl::Duration worker_start_timeout = absl::Seconds(60);
  uint64_t vram_budget_bytes = uint64_t{32} << 30;
  // Called once if the workers cannot be brought up (bad model, budget): the process
  // should exit with an error rather than sit NOT_SERVING.
  std::function<void(const absl::Status&)> on_fatal;
  // Loading real-size weights takes minutes.
  absl::Duration load_timeout = absl::Minutes(30);
  absl::Duration health_interval = absl::Milliseconds(500);
  EngineOptions engine;
  // Prometheus metrics over HTTP: "host:port" (port 0 picks a free one), empty for none.
  std::string metrics_listen = "127.0.0.1:0";
};

class Coordinator final : public ServiceBackend {
 public:
  // Creates the arena (mode 0600) and formats the data plane. Workers are brought up
  // by Start().
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(CoordinatorOptions options);
  ~Coordinator();

  // Loads both workers in the background, then watches their health every
  // `health_interval`; `on_serving_change` is called whenever the overall state flips.
  void Start(std::function<void(bool)> on_serving_change);
  // Stops the background thread, asks the workers to shut down, unlinks the arena.
  void Stop(bool shutdown_workers);

  bool serving() const { return serving_.load(); }
  absl::StatusOr<v1::ServerInfo> ServerInfo() override;
  absl::StatusOr<v1::ModelInfo> ModelInfo() override;
  // The plumbing check behind the public SelfTest RPC (see writescope.proto).
  absl::StatusOr<v1::SelfTestResponse> SelfTest(uint32_t sequences) override;
  // The Bench RPC (see writescope.proto). The request is checked before its policy is
  // switched to, so a refused one changes nothing; `cancelled` as in Engine::RunBench.
  absl::StatusOr<v1::BenchResponse> Bench(const v1::BenchRequest& request,
                                          const std::function<bool()>& cancelled) override;
  // The last `steps` steps of the three processes: Chrome trace JSON and a per-phase summary.
  absl::StatusOr<v1::Profile> Profile(uint32_t steps) override;
  // Generation (Generate, Abort).
  Engine& engine() override { return *engine_; }

 private:
  explicit Coordinator(CoordinatorOptions options);
  void Supervise();
  absl::Status StartMetrics();
  // Sets the gauges (requests, KV blocks, scheduler) before a scrape.
  void RefreshMetrics();
  absl::Status LoadWorkers();
  internal::LoadRequest MakeLoadRequest() const;
  // A worker was lost: closes both data-plane channels (the survivor's waits end).
  void CloseDataPlane();
  // Both workers answer again: re-formats the channels, loads the relaunched worker and
  // re-attaches the survivor.
  absl::Status Recover();
  // Removes the name of the workers' shared synthetic experts (their mappings stay).
  void UnlinkSharedWeights();
  // The expert placement rule from the workers' latest load responses (after a load).
  absl::Status ConfigureExperts();
  // The Bench RPC's policy: makes the engine run `policy` (its scheduler made the first time;
  // INVALID_ARGUMENT for a bad name, the engine's FAILED_PRECONDITION when not idle).
  absl::Status UseBenchPolicy(absl::string_view policy);

  // A worker's status in ServerInfo (guarded by status_mutex_) and its latest load response.
  v1::WorkerStatus& StatusOf(const WorkerClient* worker) {
    return worker == &gpu_worker_ ? gpu_status_ : cpu_status_;
  }
  internal::LoadResponse& LoadOf(const WorkerClient* worker) {
    return worker == &gpu_worker_ ? gpu_load_ : cpu_load_;
  }

  internal::LoadResponse gpu_load_, cpu_load_;  // the latest; supervisor thread
  CoordinatorOptions options_;
  ModelConfig model_config_;
  std::unique_ptr<ShmArena> arena_;
  // Placement metadata: which blocks of which sequence live in which region.
  std::mutex placement_mutex_;
  std::unique_ptr<KvPlacement> placement_;
  // The CPU-share policies; guarded by placement_mutex_ (they steer placement): one scheduler
  // per policy run (--policy, then those a bench named: UseBenchPolicy), by PolicySpec's
  // ToString. The engine holds the one it runs now (Engine::scheduler()).
  std::map<std::string, std::unique_ptr<Scheduler>> schedulers_;
  SchedulerOptions scheduler_options_;  // the options every policy's scheduler is made with
  // Batching and generation; started once the workers serve.
  Metrics metrics_;
  std::unique_ptr<MetricsServer> metrics_server_;
  std::string metrics_address_;
  std::unique_ptr<Engine> engine_;
  std::timed_mutex bench_mutex_;  // one Bench at a time (its policy holds for its whole run)
  uint64_t next_selftest_id_ = uint64_t{1} << 62;
  WorkerClient gpu_worker_;
  WorkerClient cpu_worker_;
  std::function<void(bool)> on_serving_change_;
  std::thread supervisor_;
  // Set by the engine when a step fails: the supervisor checks health at once.
  std::atomic<bool> check_now_{false};
  absl::Notification stop_;
  std::atomic<bool> serving_{false};
  // Last known state of each worker, for ServerInfo.
  std::mutex status_mutex_;
  v1::WorkerStatus gpu_status_;
  v1::WorkerStatus cpu_status_;
};

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_COORDINATOR_H_
