// wscope: the command-line client of WriteScope.
//
//   wscope health [--wait=30s] ADDRESS...   grpc.health.v1 status of each process
//   wscope info   [--target=ADDRESS]        server info from the coordinator
//   wscope selftest [--target=ADDRESS]      data-plane and KV path check through the trio
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "writescope/v1/writescope.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "Coordinator address");
ABSL_FLAG(absl::Duration, wait, absl::ZeroDuration(),
          "health: keep polling until every address is SERVING or this much time passed");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "Deadline of each call");

namespace {

using grpc::health::v1::HealthCheckResponse;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_timeout));
}

std::string HealthOf(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckRequest request;
  HealthCheckResponse response;
  grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return absl::StrCat("UNREACHABLE (", status.error_message(), ")");
  return HealthCheckResponse::ServingStatus_Name(response.status());
}

int Health(const std::vector<std::string>& addresses) {
  if (addresses.empty()) {
    std::fprintf(stderr, "wscope health: give at least one ADDRESS (host:port)\n");
    return 2;
  }
  const absl::Time give_up = absl::Now() + absl::GetFlag(FLAGS_wait);
  while (true) {
    std::vector<std::string> states;
    bool all_serving = true;
    for (const std::string& address : addresses) {
      states.push_back(HealthOf(address));
      all_serving = all_serving && states.back() == "SERVING";
    }
    if (all_serving || absl::Now() >= give_up) {
      for (size_t i = 0; i < addresses.size(); ++i) {
        std::printf("%-22s %s\n", addresses[i].c_str(), states[i].c_str());
      }
      return all_serving ? 0 : 1;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

const char* RegionName(writescope::v1::KvRegion region) {
  switch (region) {
    case writescope::v1::KV_REGION_CPU_COMPUTE:
      return "cpu-compute";
    case writescope::v1::KV_REGION_GPU_TRANSFER:
      return "gpu-transfer";
    case writescope::v1::KV_REGION_GPU_PINGPONG:
      return "gpu-ping-pong";
    case writescope::v1::KV_REGION_GPU_DWINDOW:
      return "gpu-d-window";
    default:
      return "?";
  }
}

int Info() {
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials());
  auto stub = writescope::v1::WriteScope::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  writescope::v1::ServerInfo info;
  grpc::Status status = stub->GetServerInfo(&context, writescope::v1::GetServerInfoRequest(), &info);
  if (!status.ok()) {
    std::fprintf(stderr, "wscope info: %s (code %d)\n", status.error_message().c_str(),
                 static_cast<int>(status.error_code()));
    return 1;
  }
  grpc::ClientContext model_context;
  model_context.set_deadline(Deadline());
  writescope::v1::ModelInfo model;
  if (stub->GetModelInfo(&model_context, writescope::v1::GetModelInfoRequest(), &model).ok()) {
    std::printf("model %s (%s): %u layers, hidden %u, vocab %u, %u experts top-%u, KV %llu B/token\n",
                model.source().c_str(), model.model_type().c_str(), model.num_layers(),
                model.hidden_size(), model.vocab_size(), model.num_experts(),
                model.experts_per_token(), static_cast<unsigned long long>(model.kv_bytes_per_token()));
  }
  std::printf("writescope %s  policy %s  cpu share %.3f (placed %.3f)\n", info.version().c_str(),
              info.policy().c_str(), info.cpu_share(), info.placed_cpu_share());
  std::printf("arena %s  %.1f MiB\n", info.arena_name().c_str(), info.arena_bytes() / 1048576.0);
  for (const auto& region : info.regions()) {
    std::printf("  region %-14s %10.1f MiB  blocks %llu/%llu\n", RegionName(region.region()),
                region.bytes_total() / 1048576.0,
                static_cast<unsigned long long>(region.blocks_used()),
                static_cast<unsigned long long>(region.blocks_total()));
  }
  std::printf("requests running %u  waiting %u\n", info.requests_running(), info.requests_waiting());
  for (const auto& worker : info.workers()) {
    std::printf("  %-11s %-22s %-11s %s\n", worker.name().c_str(), worker.address().c_str(),
                worker.serving() ? "SERVING" : "NOT_SERVING", worker.detail().c_str());
  }
  if (info.channel_round_trip_us() > 0) {
    std::printf("data plane round trip (gpu_worker -> cpu_worker -> gpu_worker): %.1f us\n",
                info.channel_round_trip_us());
  }
  return 0;
}

int SelfTest() {
  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials());
  auto stub = writescope::v1::WriteScope::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  writescope::v1::SelfTestResponse response;
  grpc::Status status = stub->SelfTest(&context, writescope::v1::SelfTestRequest(), &response);
  if (!status.ok()) {
    std::fprintf(stderr, "wscope selftest: %s (code %d)\n", status.error_message().c_str(),
                 static_cast<int>(status.error_code()));
    return 1;
  }
  for (const std::string& check : response.checks()) std::printf("  %s\n", check.c_str());
  std::printf("selftest: %s\n", response.ok() ? "OK" : "FAILED");
  return response.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "wscope health [--wait=30s] ADDRESS... | wscope info|selftest [--target=ADDRESS]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::fprintf(stderr, "usage: %s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  const std::string command = args[1];
  std::vector<std::string> rest(args.begin() + 2, args.end());
  if (command == "health") return Health(rest);
  if (command == "info") return Info();
  if (command == "selftest") return SelfTest();
  std::fprintf(stderr, "wscope: unknown command '%s'\nusage: %s\n", command.c_str(),
               absl::ProgramUsageMessage().data());
  return 2;
}
