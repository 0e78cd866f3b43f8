// cpu_worker: CPU attention over the CPU-compute KV region (in place) and routed experts.
#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/flag_choice.h"
#include "common/log.h"
#include "common/process.h"
#include "cpu_worker/cpu_worker.h"

ABSL_FLAG(int, port, 0, "Loopback port for the internal Worker service (0: pick a free one)");
ABSL_FLAG(std::string, port_file, "", "Write the chosen port to this file once listening");
ABSL_FLAG(std::string, expert_precision, "auto",
          "Routed experts: auto (bf16 where oneDNN has native bf16, else f32), bf16, f32 "
          "(matches the fp32 reference to summation order)");
ABSL_FLAG(std::string, mla_matmul, "auto",
          "MLA decode on the CPU's matrix units, the probabilities split into bf16 hi + lo: amx = "
          "our AMX tile kernel (a CPU with AMX-BF16); onednn (or on) = whole KV blocks through "
          "oneDNN bf16 matmuls; off = our vector kernels; auto = amx where AMX is usable (onednn "
          "for a shape the AMX kernel does not take), else off");
ABSL_FLAG(int, mla_amx_prefetch_steps, 2,
          "The AMX MLA kernel prefetches the latent rows this many 32-token steps ahead, spread "
          "over each step (0 to 8; 0: only the next step's, during its P V)");
ABSL_FLAG(bool, prefault_kv, true,
          "Map the CPU-compute KV region's pages into this process at load, so that no step "
          "takes a page fault on its first read of a block (false: to measure that cost)");
ABSL_FLAG(int64_t, hold_threads_us, 0,
          "While a step is in flight, keep the OpenMP threads spinning after each of its "
          "messages until the next one arrives, at most this many microseconds, so that the "
          "next call does not wake sleeping threads (0: off; they sleep once GOMP_SPINCOUNT "
          "runs out). The spinning takes the cores from other work meanwhile");
ABSL_FLAG(std::string, expert_prepack, "auto",
          "Reorder expert weights into oneDNN's layout once (a copy of them): on, off, auto "
          "(on when the routed experts take at most 4 GiB)");

int main(int argc, char** argv) {
  writescope::BlockTerminationSignals();
  writescope::EndWithSupervisor();  // launch.sh's processes end with it
  writescope::SetLogProcessName("cpu_worker");
  absl::SetProgramUsageMessage("WriteScope CPU worker (started by deploy/launch.sh)");
  absl::ParseCommandLine(argc, argv);

  writescope::cpu::CpuWorkerOptions worker_options;
  worker_options.prefault_kv = absl::GetFlag(FLAGS_prefault_kv);
  const int64_t hold_us = absl::GetFlag(FLAGS_hold_threads_us);
  if (hold_us < 0 || hold_us > 1000000) {
    WS_LOG(ERROR) << "--hold_threads_us=" << hold_us << ": 0 (off) to 1000000 (1 s)";
    return EXIT_FAILURE;
  }
  worker_options.hold_threads = absl::Microseconds(hold_us);
  writescope::cpu::CpuStepOptions& options = worker_options.step;
  using writescope::kernels::MlaMatmulMode;
  using writescope::kernels::experts::ExpertPrecision;
  // Each flag's word, or the error naming the words it takes.
  auto choose = [](auto parsed, auto* out) {
    if (!parsed.ok()) {
      WS_LOG(ERROR) << parsed.status().message();
      return false;
    }
    *out = *std::move(parsed);
    return true;
  };
  using writescope::ParseFlagChoice;
  if (!choose(ParseFlagChoice<ExpertPrecision>("expert_precision",
                                               absl::GetFlag(FLAGS_expert_precision),
                                               {{"auto", ExpertPrecision::kAuto},
                                                {"bf16", ExpertPrecision::kBf16},
                                                {"f32", ExpertPrecision::kF32}}),
              &options.experts.precision) ||
      !choose(ParseFlagChoice<std::string>("expert_prepack", absl::GetFlag(FLAGS_expert_prepack),
                                           {{"auto", "auto"}, {"on", "on"}, {"off", "off"}}),
              &options.prepack_policy) ||
      !choose(ParseFlagChoice<MlaMatmulMode>("mla_matmul", absl::GetFlag(FLAGS_mla_matmul),
                                             {{"auto", MlaMatmulMode::kAuto},
                                              {"amx", MlaMatmulMode::kAmx},
                                              {"onednn", MlaMatmulMode::kOneDnn},
                                              {"on", MlaMatmulMode::kOneDnn},
                                              {"off", MlaMatmulMode::kOff}}),
              &options.attention.mla_matmul)) {
    return EXIT_FAILURE;
  }
  options.attention.mla_amx_prefetch_steps = absl::GetFlag(FLAGS_mla_amx_prefetch_steps);
  if (options.attention.mla_amx_prefetch_steps < 0 ||
      options.attention.mla_amx_prefetch_steps > writescope::kernels::kMaxMlaAmxPrefetchSteps) {
    WS_LOG(ERROR) << "--mla_amx_prefetch_steps=" << options.attention.mla_amx_prefetch_steps
                  << ": 0 to " << writescope::kernels::kMaxMlaAmxPrefetchSteps;
    return EXIT_FAILURE;
  }
  if (absl::Status usable = writescope::kernels::CheckMlaMatmulMode(options.attention.mla_matmul);
      !usable.ok()) {
    WS_LOG(ERROR) << "--mla_matmul: " << usable.message();
    return EXIT_FAILURE;
  }
  // What the CPU kernels run on here (leases of one machine kind can differ).
  WS_LOG(INFO) << "CPU attention kernels: "
               << writescope::kernels::CpuIsaName(writescope::kernels::DetectCpuIsa())
               << ", AMX for MLA " << (writescope::kernels::MlaAmxUsable() ? "usable" : "not usable")
               << ", " << omp_get_max_threads() << " OpenMP threads, held between a step's messages for "
               << hold_us << " us";
  writescope::cpu::CpuWorker worker(worker_options);
  absl::Status status = writescope::RunWorkerServer(
      worker, {.port = absl::GetFlag(FLAGS_port), .port_file = absl::GetFlag(FLAGS_port_file)});
  if (!status.ok()) {
    WS_LOG(ERROR) << status;
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}
