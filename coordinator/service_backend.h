// What the public writescope.v1.WriteScope service (coordinator/service.h) answers from: the
// Coordinator in the server, a fake in the service's tests.
#ifndef WRITESCOPE_COORDINATOR_SERVICE_BACKEND_H_
#define WRITESCOPE_COORDINATOR_SERVICE_BACKEND_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "coordinator/engine.h"
#include "writescope/v1/writescope.pb.h"

namespace writescope::coordinator {

class ServiceBackend {
 public:
  virtual ~ServiceBackend() = default;
  virtual absl::StatusOr<v1::ServerInfo> ServerInfo() = 0;
  virtual absl::StatusOr<v1::ModelInfo> ModelInfo() = 0;
  // The SelfTest RPC (see writescope.proto).
  virtual absl::StatusOr<v1::SelfTestResponse> SelfTest(uint32_t sequences) = 0;
  // The Bench RPC; it ends early once `cancelled` returns true (the client gone).
  virtual absl::StatusOr<v1::BenchResponse> Bench(const v1::BenchRequest& request,
                                                  const std::function<bool()>& cancelled) = 0;
  // The GetProfile RPC: the last `steps` steps.
  virtual absl::StatusOr<v1::Profile> Profile(uint32_t steps) = 0;
  // Generation (Generate, Abort).
  virtual Engine& engine() = 0;
};

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_SERVICE_BACKEND_H_
