// Conversion between absl::Status and grpc::Status, used only at the RPC edges.
#ifndef WRITESCOPE_COMMON_GRPC_STATUS_H_
#define WRITESCOPE_COMMON_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace writescope {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_GRPC_STATUS_H_
