// gpu_worker: the attention side of WriteScope (CUDA, or the host device without a GPU).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/flag_choice.h"
#include "common/log.h"
#include "common/process.h"
#include "gpu_worker/gpu_worker.h"

ABSL_FLAG(int, port, 0, "Loopback port for the internal Worker service (0: pick a free one)");
ABSL_FLAG(std::string, port_file, "", "Write the chosen port to this file once listening");
ABSL_FLAG(std::string, device, "auto", "auto, cuda or host");
ABSL_FLAG(std::string, stream_experts, "auto",
          "Run routed experts here, streaming their weights, for the steps the coordinator "
          "gives this worker (long prefill chunks): on, off, or auto (on with CUDA)");

ABSL_FLAG(std::string, hot_experts, "auto",
          "Keep the most-routed experts resident in the VRAM the budget leaves, chosen after a "
          "warm-up, and compute their pairs here while the cpu_worker computes the rest: on, "
          "off, or auto (on with CUDA). Needs --stream_experts");
ABSL_FLAG(int64_t, hot_experts_warmup_tokens, 4096,
          "Routed tokens counted before the hot experts are chosen");
ABSL_FLAG(double, hot_experts_max_gib, 0,
          "At most this many GiB of hot experts (0: all the room the VRAM budget leaves)");

ABSL_FLAG(bool, prefetch_next_step, true,
          "Queue the next decode step's first two KV transfer rounds at the end of each step "
          "(the next step uses the blocks its first rounds want at the positions it wants "
          "them, unwritten since, and copies the rest)");

ABSL_FLAG(bool, early_rounds_after_attention, true,
          "Queue those rounds as soon as the step's last layer has read its own (its GPU "
          "attention done), so that they copy under that layer's experts; false: at the end "
          "of the step");

ABSL_FLAG(bool, time_transfers, true,
          "Time each step's KV rounds on the device (two events per round) and report the "
          "copy engine's time on them, from which the coordinator's scheduler learns how "
          "long the transfers take");

ABSL_FLAG(bool, device_swiglu, true,
          "The dense MLPs' and shared experts' SwiGLU on the device as one chain (one upload, "
          "one download); false: three products with the activation on the host between them");

ABSL_FLAG(bool, device_logit_stats, true,
          "A greedy step's tokens from lm_head's rows reduced on the device (max, first argmax, "
          "sum of exps), so that the [rows, vocab] logits stay there; false: the logits copied "
          "to the host and reduced there");

ABSL_FLAG(std::string, gqa_decode_kernel, "default",
          "The GQA tensor-core decode kernel on the CUDA device: default (bulk4), registers "
          "(each warp loads its K/V into registers, 3 CTAs per SM), bulk4 (K/V staged in a 128 "
          "KB shared-memory ring by bulk copies, 1 CTA per SM) or bulk3x2 (a 96 KB ring, 2 CTAs "
          "per SM); the host device ignores it");

int main(int argc, char** argv) {
  writescope::BlockTerminationSignals();
  writescope::EndWithSupervisor();  // launch.sh's processes end with it
  writescope::SetLogProcessName("gpu_worker");
  absl::SetProgramUsageMessage("WriteScope GPU worker (started by deploy/launch.sh)");
  absl::ParseCommandLine(argc, argv);

  auto device = writescope::gpu::CreateDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) {
    WS_LOG(ERROR) << device.status();
    return EXIT_FAILURE;
  }
  WS_LOG(INFO) << "device: " << (*device)->name();
  auto auto_on_off = [](absl::string_view flag, const std::string& text) {
    return writescope::ParseFlagChoice<std::string>(
        flag, text, {{"auto", "auto"}, {"on", "on"}, {"off", "off"}});
  };
  const absl::StatusOr<std::string> stream_experts =
      auto_on_off("stream_experts", absl::GetFlag(FLAGS_stream_experts));
  const absl::StatusOr<std::string> hot_experts =
      auto_on_off("hot_experts", absl::GetFlag(FLAGS_hot_experts));
  for (const absl::StatusOr<std::string>* choice : {&stream_experts, &hot_experts}) {
    if (!choice->ok()) {
      WS_LOG(ERROR) << choice->status().message();
      return EXIT_FAILURE;
    }
  }
  using writescope::kernels::cuda::GqaDecodeKernel;
  const absl::StatusOr<GqaDecodeKernel> gqa_kernel = writescope::ParseFlagChoice<GqaDecodeKernel>(
      "gqa_decode_kernel", absl::GetFlag(FLAGS_gqa_decode_kernel),
      {{"default", GqaDecodeKernel::kDefault},
       {"registers", GqaDecodeKernel::kRegisters},
       {"bulk4", GqaDecodeKernel::kBulk4},
       {"bulk3x2", GqaDecodeKernel::kBulk3x2}});
  if (!gqa_kernel.ok()) {
    WS_LOG(ERROR) << gqa_kernel.status().message();
    return EXIT_FAILURE;
  }
  if (*gqa_kernel != GqaDecodeKernel::kDefault) {
    WS_LOG(INFO) << "GQA decode kernel: " << absl::GetFlag(FLAGS_gqa_decode_kernel)
                 << ((*device)->is_cuda() ? ""
                                          : " (ignored: the host device runs the CPU kernels)");
  }
  const int64_t warmup = absl::GetFlag(FLAGS_hot_experts_warmup_tokens);
  const double max_gib = absl::GetFlag(FLAGS_hot_experts_max_gib);
  if (warmup < 1 || !(max_gib >= 0 && max_gib <= 1e6)) {
    WS_LOG(ERROR) << "--hot_experts_warmup_tokens must be at least 1 (not " << warmup
                  << ") and --hot_experts_max_gib in [0, 1e6] (not " << max_gib << ")";
    return EXIT_FAILURE;
  }
  writescope::gpu::GpuWorker worker(
      *std::move(device),
      {.stream_experts = *stream_experts,
       .hot_experts = *hot_experts,
       .hot_experts_warmup_tokens = warmup,
       .hot_experts_max_bytes = static_cast<uint64_t>(max_gib * 1073741824.0),
       .prefetch_next_step = absl::GetFlag(FLAGS_prefetch_next_step),
       .early_rounds_after_attention = absl::GetFlag(FLAGS_early_rounds_after_attention),
       .time_transfers = absl::GetFlag(FLAGS_time_transfers),
       .device_swiglu = absl::GetFlag(FLAGS_device_swiglu),
       .device_logit_stats = absl::GetFlag(FLAGS_device_logit_stats),
       .gqa_decode_kernel = *gqa_kernel});
  absl::Status status = writescope::RunWorkerServer(
      worker, {.port = absl::GetFlag(FLAGS_port), .port_file = absl::GetFlag(FLAGS_port_file)});
  if (!status.ok()) {
    WS_LOG(ERROR) << status;
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}
