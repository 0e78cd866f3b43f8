// gpu_worker: the attention side of WriteScope (CUDA, or the host device without a GPU).
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/log.h"
#include "common/process.h"
#include "gpu_worker/gpu_worker.h"

ABSL_FLAG(int, port, 0, "Loopback port for the internal Worker service (0: pick a free one)");
ABSL_FLAG(std::string, port_file, "", "Write the chosen port to this file once listening");
ABSL_FLAG(std::string, device, "auto", "auto, cuda or host");


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
  writescope::gpu::GpuWorker worker(*std::move(device));
  absl::Status status = writescope::RunWorkerServer(
      worker, {.port = absl::GetFlag(FLAGS_port), .port_file = absl::GetFlag(FLAGS_port_file)});
  if (!status.ok()) {
    WS_LOG(ERROR) << status;
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}
