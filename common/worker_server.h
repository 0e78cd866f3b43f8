// The shared shell of both workers: the internal Worker gRPC service as a thin adapter
// over a WorkerBackend (the logic, returning absl::Status), plus the standard health
// service, server reflection and orderly shutdown on SIGINT/SIGTERM or Shutdown().
#ifndef WRITESCOPE_COMMON_WORKER_SERVER_H_
#define WRITESCOPE_COMMON_WORKER_SERVER_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "writescope/internal/worker.pb.h"

namespace writescope {

class WorkerBackend {
 public:
  virtual ~WorkerBackend() = default;
  virtual std::string name() const = 0;
  virtual absl::StatusOr<internal::LoadResponse> Load(const internal::LoadRequest& request) = 0;
  // `cancelled` says whether the caller gave up on the call (its deadline, or the coordinator
  // cancelling it because the other worker's side of the step failed before it began): a
  // backend that waits for the step's end checks it and returns CANCELLED.
  virtual absl::StatusOr<internal::StepResult> RunStep(const internal::StepPlan& plan,
                                                       const std::function<bool()>& cancelled) = 0;
  virtual internal::WorkerStats Stats() = 0;
  virtual internal::WorkerProfile Profile(uint32_t steps) = 0;
  virtual absl::StatusOr<internal::ChannelPingResponse> ChannelPing(
      const internal::ChannelPingRequest& request) = 0;
  virtual absl::StatusOr<internal::KvPatternResponse> KvPattern(
      const internal::KvPatternRequest& request) = 0;
  // The gpu_worker's timing of its decode attention path (worker.proto); UNIMPLEMENTED on a
  // worker that has none.
  virtual absl::StatusOr<internal::PathProbeResponse> ProbeGpuPath(
      const internal::PathProbeRequest& request);
  // The cpu_worker's timing of its decode attention in place; UNIMPLEMENTED elsewhere.
  virtual absl::StatusOr<internal::PathProbeResponse> ProbeCpuPath(
      const internal::PathProbeRequest& request);
  // The other worker was relaunched: detach (attach = false: end any step in progress, stop
  // using the channels), then attach to the channels the coordinator re-formatted.
  // FAILED_PRECONDITION before Load.
  virtual absl::Status ResetDataPlane(bool attach) = 0;
  // Called once when the server stops: release the arena, close channels.
  virtual void Stop() = 0;
  // Called when the caller of a Load gives up on it, and again every 50 ms while it stays
  // gone: the Load in progress should return soon (CANCELLED) instead of running on. A Load
  // clears it when it starts.
  virtual void CancelLoad() {}
  // Called from the termination watcher before the server shuts down (gRPC waits for the
  // handlers in progress, whatever its deadline): a Load or a step in progress returns
  // soon, and later calls are refused. Stop() follows once the server has stopped.
  virtual void BeginStop() { CancelLoad(); }

  // Set by RunWorkerServer before it serves: the backend reports through it that it can no
  // longer serve steps on its own (its data plane failed), so that the coordinator's health
  // check sees NOT_SERVING and recovers both workers' channels. ResetDataPlane(attach) that
  // succeeds makes it serving again (the server's adapter says so).
  void set_serving_observer(std::function<void(bool)> observer) {
    serving_observer_ = std::move(observer);
  }

 protected:
  void ReportServing(bool serving) {
    if (serving_observer_) serving_observer_(serving);
  }

 private:
  std::function<void(bool)> serving_observer_;
};

struct WorkerServerOptions {
  // Loopback only: internal services never listen on other interfaces.
  std::string host = "127.0.0.1";
  int port = 0;            // 0 picks a free port
  std::string port_file;   // if set, the chosen port is written here once listening
};

// Serves `backend` until SIGINT/SIGTERM or a Shutdown RPC. Health is NOT_SERVING
// until Load succeeds. Blocks the calling thread; call before starting other threads
// so the signal mask is inherited.
absl::Status RunWorkerServer(WorkerBackend& backend, const WorkerServerOptions& options);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_WORKER_SERVER_H_
