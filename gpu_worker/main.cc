// gpu_worker: the attention side of WriteScope (CUDA, or the host device without a GPU).
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/log.h"
#include "common/process.h"
#include "gpu_worker/gpu_worker.h"

ABSL_FLAG(int, port, 0, "Loopback port for the internal Worker service (0: pick a free one)");
ABSL_FLAG(std::string, port_file, "", "Write the chosen port to this file once listening");
ABSL_FLAG(std::string, device, "auto", "auto, cuda or host");
ABSL_FLAG(std::string, stream_experts, "auto",
          "Run routed experts here, streaming their weights, for the steps the coordinator "
          "gives this worker (long prefill chunks): on, off, or auto (on with CUDA)");


int main(int argc, char** argv) {
  writescope::BlockTerminationSignals();
  writescope::SetLogProcessName("gpu_worker");
  absl::SetProgramUsageMessage("WriteScope GPU worker (started by deploy/launch.sh)");
  absl::ParseCommandLine(argc, argv);

  auto device = writescope::gpu::CreateDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) {
    WS_LOG(ERROR) << device.status();
    return EXIT_FAILURE;
  }
  WS_LOG(INFO) << "device: " << (*device)->name();
  const std::string stream_experts = absl::GetFlag(FLAGS_stream_experts);
  if (stream_experts != "auto" && stream_experts != "on" && stream_experts != "off") {
    WS_LOG(ERROR) << "--stream_experts must be auto, on or off, not '" << stream_experts << "'";
    return EXIT_FAILURE;
  }
  writescope::gpu::GpuWorker worker(*std::move(device), {.stream_experts = stream_experts});
  absl::Status status = writescope::RunWorkerServer(
      worker, {.port = absl::GetFlag(FLAGS_port), .port_file = absl::GetFlag(FLAGS_port_file)});
  if (!status.ok()) {
    WS_LOG(ERROR) << status;
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}
