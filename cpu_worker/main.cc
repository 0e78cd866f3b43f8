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
ABSL_FLAG(std::string, expert_precision, "auto",
          "Routed experts: auto (bf16 where oneDNN has native bf16, else f32), bf16, f32 "
          "(matches the fp32 reference to summation order)");
ABSL_FLAG(std::string, mla_matmul, "auto",
          "MLA decode: on = whole KV blocks through oneDNN bf16 matmuls (the CPU's matrix units), "
          "the probabilities split into bf16 hi + lo; off = our vector kernels; auto = on where "
          "oneDNN runs AMX (faster there, slower without it)");
ABSL_FLAG(std::string, expert_prepack, "auto",
          "Reorder expert weights into oneDNN's layout once (a copy of them): on, off, auto "
          "(on when the routed experts take at most 4 GiB)");

int main(int argc, char** argv) {
  writescope::BlockTerminationSignals();
  writescope::SetLogProcessName("cpu_worker");
  absl::SetProgramUsageMessage("WriteScope CPU worker (started by deploy/launch.sh)");
  absl::ParseCommandLine(argc, argv);

  writescope::cpu::CpuStepOptions options;
  const std::string precision = absl::GetFlag(FLAGS_expert_precision);
  using writescope::kernels::experts::ExpertPrecision;
  if (precision == "auto") {
    options.experts.precision = ExpertPrecision::kAuto;
  } else if (precision == "bf16") {
    options.experts.precision = ExpertPrecision::kBf16;
  } else if (precision == "f32") {
    options.experts.precision = ExpertPrecision::kF32;
  } else {
    WS_LOG(ERROR) << "--expert_precision must be auto, bf16 or f32, not '" << precision << "'";
    return EXIT_FAILURE;
  }
  const std::string prepack = absl::GetFlag(FLAGS_expert_prepack);
  if (prepack != "auto" && prepack != "on" && prepack != "off") {
    WS_LOG(ERROR) << "--expert_prepack must be auto, on or off, not '" << prepack << "'";
    return EXIT_FAILURE;
  }
  options.prepack_policy = prepack;
  const std::string mla_matmul = absl::GetFlag(FLAGS_mla_matmul);
  using writescope::kernels::MlaMatmulMode;
  if (mla_matmul == "auto") {
    options.attention.mla_matmul = MlaMatmulMode::kAuto;
  } else if (mla_matmul == "on") {
    options.attention.mla_matmul = MlaMatmulMode::kOn;
  } else if (mla_matmul == "off") {
    options.attention.mla_matmul = MlaMatmulMode::kOff;
  } else {
    WS_LOG(ERROR) << "--mla_matmul must be auto, on or off, not '" << mla_matmul << "'";
    return EXIT_FAILURE;
  }
  writescope::cpu::CpuWorker worker(options);
  absl::Status status = writescope::RunWorkerServer(
      worker, {.port = absl::GetFlag(FLAGS_port), .port_file = absl::GetFlag(FLAGS_port_file)});
  if (!status.ok()) {
    WS_LOG(ERROR) << status;
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}
