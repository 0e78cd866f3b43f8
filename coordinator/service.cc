#include "coordinator/service.h"

#include "common/grpc_status.h"

namespace writescope::coordinator {

grpc::Status WriteScopeService::Generate(grpc::ServerContext*, const v1::GenerateRequest*,
                                         grpc::ServerWriter<v1::GenerateResponse>*) {
  return ToGrpcStatus(absl::UnimplementedError(
      "generation needs a model: it arrives with the models and service issues (5, 6)"));
}

grpc::Status WriteScopeService::Abort(grpc::ServerContext*, const v1::AbortRequest*,
                                      v1::AbortResponse* response) {
  response->set_found(false);
  return grpc::Status::OK;
}

grpc::Status WriteScopeService::GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest*,
                                             v1::ModelInfo* response) {
  absl::StatusOr<v1::ModelInfo> info = coordinator_.ModelInfo();
  if (!info.ok()) return ToGrpcStatus(info.status());
  *response = *std::move(info);
  return grpc::Status::OK;
}

grpc::Status WriteScopeService::GetServerInfo(grpc::ServerContext*, const v1::GetServerInfoRequest*,
                                              v1::ServerInfo* response) {
  absl::StatusOr<v1::ServerInfo> info = coordinator_.ServerInfo();
  if (!info.ok()) return ToGrpcStatus(info.status());
  *response = *std::move(info);
  return grpc::Status::OK;
}

grpc::Status WriteScopeService::GetProfile(grpc::ServerContext*, const v1::GetProfileRequest*,
                                           v1::Profile* response) {
  response->set_trace_json("{\"traceEvents\":[]}");
  return grpc::Status::OK;
}

grpc::Status WriteScopeService::SelfTest(grpc::ServerContext*, const v1::SelfTestRequest* request,
                                         v1::SelfTestResponse* response) {
  absl::StatusOr<v1::SelfTestResponse> result = coordinator_.SelfTest(request->sequences());
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

}  // namespace writescope::coordinator
