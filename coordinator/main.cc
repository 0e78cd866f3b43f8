// coordinator: the public gRPC API, batching, placement metadata and the scheduler.
#include <atomic>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/flag_choice.h"
#include "common/log.h"
#include "common/process.h"
#include "coordinator/coordinator.h"
#include "coordinator/expert_placement.h"
#include "coordinator/service.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "Public API address (host:port; port 0 picks a free one)");
ABSL_FLAG(std::string, port_file, "", "Write the chosen public port here once listening");
ABSL_FLAG(std::string, gpu_worker, "", "Internal address of the gpu_worker (loopback)");
ABSL_FLAG(std::string, cpu_worker, "", "Internal address of the cpu_worker (loopback)");
ABSL_FLAG(std::string, arena, "", "Shared-memory arena name, fresh per launch (e.g. /ws-1234)");
ABSL_FLAG(std::string, model, "", "Hugging Face model folder (config.json + *.safetensors)");
ABSL_FLAG(std::string, synthetic, "",
          "Instead of --model: random weights of a real architecture's shapes "
          "(qwen3_moe, mixtral, deepseek_v2)");
ABSL_FLAG(int64_t, num_layers, 0, "With --synthetic: keep this many layers (0: all)");
ABSL_FLAG(uint64_t, seed, 0, "With --synthetic: the weights' random seed");
ABSL_FLAG(absl::Duration, load_timeout, absl::Minutes(30), "How long the workers may take to load");
ABSL_FLAG(absl::Duration, step_timeout, absl::Minutes(10),
          "How long one step may take before it fails (its requests end with the error): a hung "
          "worker holds the engine, its queue and its cancellations this long");
ABSL_FLAG(uint64_t, cpu_region_mib, 256, "Host MiB of the CPU-compute KV region");
ABSL_FLAG(uint64_t, transfer_region_mib, 256, "Host MiB of the GPU-transfer KV region (pinned)");
ABSL_FLAG(uint64_t, gpu_kv_budget_mib, 0,
          "GPU KV budget, D-window + ping-pong (0: 2048 for GQA, 307 for MLA)");
ABSL_FLAG(uint32_t, window_tokens, 0,
          "D-window W: decoded tokens kept in VRAM per sequence (0: the largest of 256, 128, "
          "..., 16 whose D-window of --max_sequences takes at most half the GPU KV budget)");
ABSL_FLAG(uint32_t, block_tokens, 0, "Tokens per KV block (0: = window_tokens)");
ABSL_FLAG(uint32_t, max_sequences, 16, "Live sequences (one D-window each)");
ABSL_FLAG(double, vram_budget_gib, 32.0,
          "VRAM the gpu_worker may use in all: weights + KV budget + workspace");
ABSL_FLAG(uint64_t, channel_mib, 16,
          "MiB of each data-plane channel (one per direction), at least; grown to carry a step "
          "of --max_step_tokens");
ABSL_FLAG(uint32_t, max_step_tokens, 512,
          "Tokens per step: decode tokens + prompt chunk tokens (capped by the data plane)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:0",
          "Prometheus metrics over HTTP (GET /metrics) on host:port (port 0: a free one, shown "
          "by wscope info); empty: off");
ABSL_FLAG(uint32_t, queue_capacity, 256, "Requests that may wait for admission");
ABSL_FLAG(uint32_t, max_prompt_tokens, 0, "Longest prompt accepted (0: the model's context)");
ABSL_FLAG(std::string, routed_experts, "auto",
          "Where routed experts run per step: auto (cost rule: long prefill chunks stream the "
          "weights to the GPU when that is faster), cpu, or gpu");
ABSL_FLAG(std::string, prefill_attention, "auto",
          "Prefill chunks: auto (the GPU reads the chunk's earlier CPU-compute blocks when the "
          "roofline says the CPU would be slower) or split (the CPU attends them in place)");
ABSL_FLAG(std::string, policy, "writescope",
          "Split policy: writescope, transfer-all, cpu-all, static:R, monolithic");
ABSL_FLAG(bool, settle_missed_rounds,
          writescope::coordinator::SchedulerOptions{}.settle_missed_rounds,
          "writescope: a decode step whose early KV rounds the gpu_worker could not use whole "
          "teaches the scheduler nothing (false: it teaches, to measure the rule)");
ABSL_FLAG(double, exploration_share_hold,
          writescope::coordinator::SchedulerOptions{}.exploration_share_hold,
          "writescope: a split exploration's later steps keep its first step's CPU share while "
          "that is predicted to cost at most this fraction of the step (0: never kept)");

ABSL_FLAG(double, placement_headroom,
          writescope::coordinator::SchedulerOptions{}.placement_headroom,
          "writescope: new KV (prompts, D-window flushes) is written this far above the CPU "
          "share, so that later steps may read up to it (a step reads at most what is placed "
          "in the CPU-compute region); 0: at the share");

ABSL_FLAG(bool, hold_queued_readers,
          writescope::coordinator::SchedulerOptions{}.hold_queued_readers,
          "writescope: a split keeps the sequences the CPU attended in the last step that did not "
          "explore unless others save more than a change costs, as --mode_switch_hold_steps "
          "(false: the readers follow r* at every step)");
ABSL_FLAG(uint32_t, mode_switch_hold_steps,
          writescope::coordinator::SchedulerOptions{}.mode_switch_hold_steps,
          "writescope: a decode step keeps the read mode whose KV rounds are queued unless the "
          "other is predicted to save more than a change of mode costs over this many steps, "
          "or the held steps' predicted losses add up to that cost (0: no hold)");
ABSL_FLAG(double, explore_cost_share,
          writescope::coordinator::SchedulerOptions{}.explore_cost_share,
          "writescope: the share of the step time spent, on average, running the read mode "
          "the prediction did not pick, to keep it measured (0: a mode measured once is not "
          "re-measured by the credit)");
ABSL_FLAG(double, max_period_cost_share,
          writescope::coordinator::SchedulerOptions{}.max_period_cost_share,
          "writescope: the split's exploration forced every 40 decisions waits (up to 400) until "
          "its predicted extra cost is at most this share of the decisions' time since the last "
          "exploration (0: forced every 40 whatever it costs)");
ABSL_FLAG(bool, charge_exploration_overrun,
          writescope::coordinator::SchedulerOptions{}.charge_exploration_overrun,
          "writescope: an exploration that cost more than it was predicted to (its steps against "
          "the picked mode's) leaves the overrun as a debt of its mode, repaid by the credit "
          "before another exploration of that mode (false: charged the prediction)");
ABSL_FLAG(double, rest_shift_explore,
          writescope::coordinator::SchedulerOptions{}.rest_shift_explore,
          "writescope: where the chosen read mode's rest fell, since the other mode was last "
          "measured, by more than this share of its step and more than the other is predicted "
          "behind, the other is explored as soon as the minimum exploration period allows "
          "(0: off)");
ABSL_FLAG(bool, rest_shift_scaled,
          writescope::coordinator::SchedulerOptions{}.rest_shift_scaled,
          "writescope: --rest_shift_explore compares with the gap the chosen mode's fall "
          "scaled to the other mode's rest where that is larger (false: the fall alone)");
ABSL_FLAG(double, rest_shift_split_gap_share,
          writescope::coordinator::SchedulerOptions{}.rest_shift_split_gap_share,
          "writescope: while GPU-only is chosen, the split is explored for a fallen rest once "
          "the fall scaled to its rest passes this share of the gap (1: the whole gap)");
ABSL_FLAG(double, rest_rise_gap_share,
          writescope::coordinator::SchedulerOptions{}.rest_rise_gap_share,
          "writescope: where the other read mode's rest rose from the lowest it began a run of "
          "samples at and the chosen mode's latest samples did not rise with it, the other is "
          "explored as soon as the minimum exploration period allows once the unexplained rise "
          "passes this share of the gap (0: off)");
ABSL_FLAG(uint32_t, rest_rise_samples,
          writescope::coordinator::SchedulerOptions{}.rest_rise_samples,
          "writescope: --rest_rise_gap_share waits for this many samples of the chosen mode "
          "(at least 2)");
ABSL_FLAG(bool, rest_median_of_three,
          writescope::coordinator::SchedulerOptions{}.rest_median_of_three,
          "writescope: a read mode's rest sample one step after its previous one enters the "
          "rest as the median of it and the two before it (false: as it is)");
ABSL_FLAG(bool, rest_level_check, writescope::coordinator::SchedulerOptions{}.rest_level_check,
          "writescope: a rest level that two slow steps in a row set is undone by the mode's "
          "next sample where that is back to the level before, and the mode runs until that "
          "sample (false: two slow steps set the level)");
ABSL_FLAG(bool, rest_guess_check, writescope::coordinator::SchedulerOptions{}.rest_guess_check,
          "writescope: a guessed rest's measurement by an exploration that took more than "
          "rest_outlier_factor times both the exploration's settling step and the guess's "
          "prediction is held as a spike and measured again (false: taken as it is)");
ABSL_FLAG(double, rest_tokens_tolerance,
          writescope::coordinator::SchedulerOptions{}.rest_tokens_tolerance,
          "writescope: a relative change of the batch's host tokens that re-levels the read "
          "modes' rests, as a change of the batch does (0: off)");
ABSL_FLAG(double, rest_outlier_factor,
          writescope::coordinator::SchedulerOptions{}.rest_outlier_factor,
          "writescope: a decode step that took more than this factor times its mode's "
          "prediction teaches the mode's rest only if the mode's next step does too (0: every "
          "step teaches)");

ABSL_FLAG(bool, steady_layer_samples,
          writescope::coordinator::EngineOptions{}.steady_layer_samples,
          "the scheduler learns each path's attention time per layer from the layers after a "
          "decode step's first (false: the means over all layers)");

ABSL_FLAG(bool, dma_bound, writescope::coordinator::SchedulerOptions{}.dma_bound,
          "writescope: a split's GPU path takes at least its KV rounds' copy time (as the "
          "gpu_worker times it) less what the CPU's chain spends beyond its attention (the "
          "experts, serial work), under which they copy on; false: the attention lines alone");

int main(int argc, char** argv) {
  using writescope::coordinator::Coordinator;
  writescope::BlockTerminationSignals();
  writescope::EndWithSupervisor();  // launch.sh's processes end with it
  writescope::SetLogProcessName("coordinator");
  absl::SetProgramUsageMessage("WriteScope coordinator (started by deploy/launch.sh)");
  absl::ParseCommandLine(argc, argv);

  writescope::coordinator::CoordinatorOptions options;
  options.arena_name = absl::GetFlag(FLAGS_arena);
  options.model = {.model_path = absl::GetFlag(FLAGS_model),
                   .synthetic_arch = absl::GetFlag(FLAGS_synthetic),
                   .num_layers = absl::GetFlag(FLAGS_num_layers),
                   .seed = absl::GetFlag(FLAGS_seed)};
  options.load_timeout = absl::GetFlag(FLAGS_load_timeout);
  options.vram_budget_bytes =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_vram_budget_gib) * double(uint64_t{1} << 30));
  std::atomic<int> exit_code{EXIT_SUCCESS};
  options.on_fatal = [&exit_code](const absl::Status&) {
    exit_code.store(EXIT_FAILURE);
    writescope::RequestTermination();
  };
  const uint32_t window = absl::GetFlag(FLAGS_window_tokens);
  options.kv.geometry.block_tokens = absl::GetFlag(FLAGS_block_tokens);
  options.kv.window_tokens = window;
  options.kv.cpu_compute_bytes = absl::GetFlag(FLAGS_cpu_region_mib) << 20;
  options.kv.gpu_transfer_bytes = absl::GetFlag(FLAGS_transfer_region_mib) << 20;
  options.kv.gpu_kv_budget_bytes = absl::GetFlag(FLAGS_gpu_kv_budget_mib) << 20;
  options.kv.max_sequences = absl::GetFlag(FLAGS_max_sequences);
  options.channel_bytes = absl::GetFlag(FLAGS_channel_mib) << 20;
  options.gpu_worker_address = absl::GetFlag(FLAGS_gpu_worker);
  options.cpu_worker_address = absl::GetFlag(FLAGS_cpu_worker);
  options.policy = absl::GetFlag(FLAGS_policy);
  options.scheduler.exploration_share_hold = absl::GetFlag(FLAGS_exploration_share_hold);
  options.scheduler.settle_missed_rounds = absl::GetFlag(FLAGS_settle_missed_rounds);
  options.scheduler.mode_switch_hold_steps = absl::GetFlag(FLAGS_mode_switch_hold_steps);
  options.scheduler.hold_queued_readers = absl::GetFlag(FLAGS_hold_queued_readers);
  options.scheduler.dma_bound = absl::GetFlag(FLAGS_dma_bound);
  options.scheduler.placement_headroom = absl::GetFlag(FLAGS_placement_headroom);
  options.scheduler.rest_outlier_factor = absl::GetFlag(FLAGS_rest_outlier_factor);
  options.scheduler.explore_cost_share = absl::GetFlag(FLAGS_explore_cost_share);
  options.scheduler.max_period_cost_share = absl::GetFlag(FLAGS_max_period_cost_share);
  options.scheduler.charge_exploration_overrun = absl::GetFlag(FLAGS_charge_exploration_overrun);
  options.scheduler.rest_shift_explore = absl::GetFlag(FLAGS_rest_shift_explore);
  options.scheduler.rest_shift_scaled = absl::GetFlag(FLAGS_rest_shift_scaled);
  options.scheduler.rest_shift_split_gap_share = absl::GetFlag(FLAGS_rest_shift_split_gap_share);
  options.scheduler.rest_rise_gap_share = absl::GetFlag(FLAGS_rest_rise_gap_share);
  options.scheduler.rest_rise_samples = absl::GetFlag(FLAGS_rest_rise_samples);
  options.scheduler.rest_median_of_three = absl::GetFlag(FLAGS_rest_median_of_three);
  options.scheduler.rest_level_check = absl::GetFlag(FLAGS_rest_level_check);
  options.scheduler.rest_guess_check = absl::GetFlag(FLAGS_rest_guess_check);
  options.scheduler.rest_tokens_tolerance = absl::GetFlag(FLAGS_rest_tokens_tolerance);
  options.routed_experts = absl::GetFlag(FLAGS_routed_experts);
  if (absl::Status mode = writescope::coordinator::ParseExpertMode(options.routed_experts).status();
      !mode.ok()) {
    WS_LOG(ERROR) << mode;
    return EXIT_FAILURE;
  }
  const absl::StatusOr<std::string> prefill_attention = writescope::ParseFlagChoice<std::string>(
      "prefill_attention", absl::GetFlag(FLAGS_prefill_attention),
      {{"auto", "auto"}, {"split", "split"}});
  if (!prefill_attention.ok()) {
    WS_LOG(ERROR) << prefill_attention.status().message();
    return EXIT_FAILURE;
  }
  options.engine.prefill_attention = *prefill_attention;
  options.engine.steady_layer_samples = absl::GetFlag(FLAGS_steady_layer_samples);
  options.engine.max_step_tokens = absl::GetFlag(FLAGS_max_step_tokens);
  options.engine.queue_capacity = absl::GetFlag(FLAGS_queue_capacity);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.engine.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  options.engine.step_timeout = absl::GetFlag(FLAGS_step_timeout);
  if (options.engine.step_timeout <= absl::ZeroDuration()) {
    WS_LOG(ERROR) << "--step_timeout must be positive, not "
                  << absl::FormatDuration(options.engine.step_timeout);
    return EXIT_FAILURE;
  }
  auto coordinator = Coordinator::Create(options);
  if (!coordinator.ok()) {
    WS_LOG(ERROR) << coordinator.status();
    return EXIT_FAILURE;
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  writescope::coordinator::WriteScopeService service(**coordinator);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    WS_LOG(ERROR) << "cannot listen on " << absl::GetFlag(FLAGS_listen);
    return EXIT_FAILURE;
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    absl::Status status = writescope::WritePortFile(absl::GetFlag(FLAGS_port_file), port);
    if (!status.ok()) {
      WS_LOG(ERROR) << status;
      return EXIT_FAILURE;
    }
  }
  WS_LOG(INFO) << "public API on port " << port;

  std::thread watcher = writescope::StartTerminationWatcher([&] {
    WS_LOG(INFO) << "coordinator stopping";
    health->SetServingStatus(false);
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  });
  // After the watcher exists, so a failed start-up can end the process.
  (*coordinator)->Start([health](bool serving) { health->SetServingStatus(serving); });
  server->Wait();
  watcher.join();
  (*coordinator)->Stop(/*shutdown_workers=*/true);
  WS_LOG(INFO) << "coordinator stopped";
  return exit_code.load();
}
