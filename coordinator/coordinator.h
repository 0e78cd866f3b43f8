// The coordinator's logic: owns the arena and the placement metadata, brings the
// workers up, watches their health, answers the public API (through the thin gRPC
// adapter in coordinator/service.cc).
#ifndef WRITESCOPE_COORDINATOR_COORDINATOR_H_
#define WRITESCOPE_COORDINATOR_COORDINATOR_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/data_plane.h"
#include "common/kv_config.h"
#include "common/model_config.h"
#include "common/worker_model.h"
#include "coordinator/engine.h"
#include "coordinator/placement.h"
#include "coordinator/scheduler.h"
#include "common/shm_arena.h"
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
  absl::Duration worker_start_timeout = absl::Seconds(60);
  uint64_t vram_budget_bytes = uint64_t{32} << 30;
  // Called once if the workers cannot be brought up (bad model, budget): the process
  // should exit with an error rather than sit NOT_SERVING.
  std::function<void(const absl::Status&)> on_fatal;
  // Loading real-size weights takes minutes.
  absl::Duration load_timeout = absl::Minutes(30);
  absl::Duration health_interval = absl::Milliseconds(500);
  EngineOptions engine;
};

class Coordinator {
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
  absl::StatusOr<v1::ServerInfo> ServerInfo();
  absl::StatusOr<v1::ModelInfo> ModelInfo();
  // The plumbing check behind the public SelfTest RPC (see writescope.proto).
  absl::StatusOr<v1::SelfTestResponse> SelfTest(uint32_t sequences);
  // Generation (Generate, Abort).
  Engine& engine() { return *engine_; }

 private:
  explicit Coordinator(CoordinatorOptions options);
  void Supervise();
  absl::Status LoadWorkers();

  CoordinatorOptions options_;
  ModelConfig model_config_;
  std::unique_ptr<ShmArena> arena_;
  // Placement metadata: which blocks of which sequence live in which region.
  std::mutex placement_mutex_;
  std::unique_ptr<KvPlacement> placement_;
  // The CPU-share policy; guarded by placement_mutex_ (it steers placement).
  std::unique_ptr<Scheduler> scheduler_;
  // Batching and generation; started once the workers serve.
  std::unique_ptr<Engine> engine_;
  uint64_t next_selftest_id_ = uint64_t{1} << 62;
  WorkerClient gpu_worker_;
  WorkerClient cpu_worker_;
  std::function<void(bool)> on_serving_change_;
  std::thread supervisor_;
  absl::Notification stop_;
  std::atomic<bool> serving_{false};
  // Last known state of each worker, for ServerInfo.
  std::mutex status_mutex_;
  v1::WorkerStatus gpu_status_;
  v1::WorkerStatus cpu_status_;
};

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_COORDINATOR_H_
