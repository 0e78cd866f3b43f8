// cpu_worker: CPU attention over the CPU-compute KV region (in place) and routed experts.
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/log.h"
#include "common/process.h"
#include "cpu_worker/cpu_worker.h"

ABSL_FLAG(int, port, 0, "Loopback port for the internal Worker service (0: pick a free one)");
ABSL_FLAG(std::string, port_file, "", "Write the chosen port to this file once listening");

int main(int argc, char** argv) {
  writescope::BlockTerminationSignals();
  writescope::SetLogProcessName("cpu_worker");
  absl::SetProgramUsageMessage("WriteScope CPU worker (started by deploy/launch.sh)");
  absl::ParseCommandLine(argc, argv);

  writescope::cpu::CpuWorker worker;
  absl::Status status = writescope::RunWorkerServer(
      worker, {.port = absl::GetFlag(FLAGS_port), .port_file = absl::GetFlag(FLAGS_port_file)});
  if (!status.ok()) {
    WS_LOG(ERROR) << status;
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}
