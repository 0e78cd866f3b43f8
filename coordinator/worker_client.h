// The coordinator's handle on one worker: the internal Worker service plus health,
// every call returning absl::Status with a deadline.
#ifndef WRITESCOPE_COORDINATOR_WORKER_CLIENT_H_
#define WRITESCOPE_COORDINATOR_WORKER_CLIENT_H_

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "coordinator/engine.h"
#include "writescope/internal/worker.grpc.pb.h"

namespace writescope::coordinator {

// What the health probes of one worker say, one after another. A probe that timed out while
// the worker was up leaves it up until kLateProbesDown of them in a row: a worker whose cores
// a step holds may answer one probe late, and counting it down at once would end every
// request in flight and reset the data plane. A refused connection (its process is gone) and
// NOT_SERVING count at once, as does any answer while it was down.
class WorkerHealth {
 public:
  static constexpr int kLateProbesDown = 3;
  struct Verdict {
    bool up = false;         // serving
    bool reachable = false;  // answered (or is taken as up)
  };
  // `probe`: WorkerClient::Serving's result (DEADLINE_EXCEEDED where it timed out).
  Verdict Observe(const absl::StatusOr<bool>& probe);
  int late_probes() const { return late_; }

 private:
  bool up_ = false;
  int late_ = 0;  // timed-out probes in a row while up
};

class WorkerClient final : public StepWorker {
 public:
  WorkerClient(std::string name, std::string address);

  const std::string& name() const { return name_; }
  const std::string& address() const { return address_; }

  // Waits until the worker's server accepts connections.
  absl::Status WaitUntilReachable(absl::Duration timeout);
  // SERVING -> true, NOT_SERVING -> false, no answer within `timeout` -> DEADLINE_EXCEEDED,
  // unreachable -> UNAVAILABLE.
  absl::StatusOr<bool> Serving(absl::Duration timeout);

  absl::StatusOr<internal::LoadResponse> Load(const internal::LoadRequest& request,
                                              absl::Duration timeout);
  // Cancels a Load in progress (from another thread), and every later one: they return
  // CANCELLED. For shutting down: a Load that had not started yet when this was called
  // (the supervisor's reload of a relaunched worker) must not run its whole timeout.
  void CancelLoad();
  absl::StatusOr<internal::ChannelPingResponse> ChannelPing(uint32_t count, uint32_t bytes,
                                                            absl::Duration timeout);
  absl::StatusOr<internal::WorkerStats> Stats(absl::Duration timeout);
  absl::StatusOr<internal::KvPatternResponse> KvPattern(const internal::KvPatternRequest& request,
                                                        absl::Duration timeout);
  // One step on this worker.
  absl::StatusOr<internal::StepResult> RunStep(const internal::StepPlan& plan,
                                               absl::Duration timeout) override;
  absl::StatusOr<internal::WorkerProfile> Profile(uint32_t steps, absl::Duration timeout);
  absl::StatusOr<internal::PathProbeResponse> ProbeGpuPath(
      const internal::PathProbeRequest& request, absl::Duration timeout) override;
  absl::StatusOr<internal::PathProbeResponse> ProbeCpuPath(
      const internal::PathProbeRequest& request, absl::Duration timeout) override;
  // Cancels a RunStep in progress (from another thread); it returns CANCELLED. With a step
  // id, only that step, also when its call has not started yet (it then ends at once).
  static constexpr uint64_t kAnyStep = ~uint64_t{0};
  void CancelStep(uint64_t step_id = kAnyStep) override;
  absl::Status ResetDataPlane(bool attach, absl::Duration timeout);
  absl::Status Shutdown(absl::Duration timeout);

 private:
  std::string name_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<internal::Worker::Stub> worker_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::mutex load_mutex_;
  grpc::ClientContext* load_context_ = nullptr;  // while Load runs
  bool loads_cancelled_ = false;                 // CancelLoad was called
  grpc::ClientContext* step_context_ = nullptr;  // while RunStep runs
  uint64_t step_id_ = 0;                         // of that call
  uint64_t cancelled_step_ = kAnyStep;           // cancelled before its call began
};

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_WORKER_CLIENT_H_
