#include "coordinator/service.h"

#include "common/grpc_status.h"

namespace writescope::coordinator {

grpc::Status WriteScopeService::Generate(grpc::ServerContext* context,
                                         const v1::GenerateRequest* request,
                                         grpc::ServerWriter<v1::GenerateResponse>* writer) {
  const absl::Time deadline = context->deadline() == std::chrono::system_clock::time_point::max()
                                  ? absl::InfiniteFuture()
                                  : absl::FromChrono(context->deadline());
  absl::StatusOr<std::shared_ptr<RequestStream>> stream =
      backend_.engine().Submit(*request, deadline);
  if (!stream.ok()) {
    // Refused before it began: the stream still ends with its one error message, as a request
    // that fails later does (the proto's contract), and then the status.
    v1::GenerateResponse refused;
    refused.set_request_id(request->request_id());
    refused.mutable_error()->set_code(static_cast<int32_t>(stream.status().code()));
    refused.mutable_error()->set_message(std::string(stream.status().message()));
    writer->Write(refused);
    return ToGrpcStatus(stream.status());
  }
  v1::GenerateResponse response;
  bool done = false;
  while (true) {
    if ((*stream)->Next(&response, absl::Milliseconds(50), &done)) {
      if (!writer->Write(response)) (*stream)->Cancel();  // the client is gone
      continue;
    }
    if (done) break;
    if (context->IsCancelled()) (*stream)->Cancel();  // ends at the next step
  }
  return ToGrpcStatus((*stream)->final_status());
}

grpc::Status WriteScopeService::Abort(grpc::ServerContext*, const v1::AbortRequest* request,
                                      v1::AbortResponse* response) {
  response->set_found(backend_.engine().Abort(request->request_id()));
  return grpc::Status::OK;
}

grpc::Status WriteScopeService::GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest*,
                                             v1::ModelInfo* response) {
  absl::StatusOr<v1::ModelInfo> info = backend_.ModelInfo();
  if (!info.ok()) return ToGrpcStatus(info.status());
  *response = *std::move(info);
  return grpc::Status::OK;
}

grpc::Status WriteScopeService::GetServerInfo(grpc::ServerContext*, const v1::GetServerInfoRequest*,
                                              v1::ServerInfo* response) {
  absl::StatusOr<v1::ServerInfo> info = backend_.ServerInfo();
  if (!info.ok()) return ToGrpcStatus(info.status());
  *response = *std::move(info);
  return grpc::Status::OK;
}

grpc::Status WriteScopeService::GetProfile(grpc::ServerContext*, const v1::GetProfileRequest* request,
                                           v1::Profile* response) {
  absl::StatusOr<v1::Profile> profile = backend_.Profile(request->steps());
  if (!profile.ok()) return ToGrpcStatus(profile.status());
  *response = *std::move(profile);
  return grpc::Status::OK;
}

grpc::Status WriteScopeService::SelfTest(grpc::ServerContext*, const v1::SelfTestRequest* request,
                                         v1::SelfTestResponse* response) {
  absl::StatusOr<v1::SelfTestResponse> result = backend_.SelfTest(request->sequences());
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

grpc::Status WriteScopeService::Bench(grpc::ServerContext* context,
                                      const v1::BenchRequest* request,
                                      v1::BenchResponse* response) {
  // A client that goes away (or its deadline, or the server's shutdown) ends the bench.
  absl::StatusOr<v1::BenchResponse> result =
      backend_.Bench(*request, [context] { return context->IsCancelled(); });
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

}  // namespace writescope::coordinator
