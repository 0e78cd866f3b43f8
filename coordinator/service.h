// The public writescope.v1.WriteScope service: a thin adapter over a ServiceBackend (the
// Coordinator).
#ifndef WRITESCOPE_COORDINATOR_SERVICE_H_
#define WRITESCOPE_COORDINATOR_SERVICE_H_

#include "coordinator/service_backend.h"
#include "writescope/v1/writescope.grpc.pb.h"

namespace writescope::coordinator {

class WriteScopeService final : public v1::WriteScope::Service {
 public:
  explicit WriteScopeService(ServiceBackend& backend) : backend_(backend) {}

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Abort(grpc::ServerContext* context, const v1::AbortRequest* request,
                     v1::AbortResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::ModelInfo* response) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context, const v1::GetServerInfoRequest* request,
                             v1::ServerInfo* response) override;
  grpc::Status GetProfile(grpc::ServerContext* context, const v1::GetProfileRequest* request,
                          v1::Profile* response) override;
  grpc::Status SelfTest(grpc::ServerContext* context, const v1::SelfTestRequest* request,
                        v1::SelfTestResponse* response) override;
  grpc::Status Bench(grpc::ServerContext* context, const v1::BenchRequest* request,
                     v1::BenchResponse* response) override;

 private:
  ServiceBackend& backend_;
};

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_SERVICE_H_
