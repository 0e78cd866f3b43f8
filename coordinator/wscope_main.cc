// wscope: the command-line client of WriteScope.
//
//   wscope health [--wait=30s] ADDRESS...   grpc.health.v1 status of each process
//   wscope info   [--target=ADDRESS]        server info from the coordinator
//   wscope selftest [--target=ADDRESS]      data-plane and KV path check through the trio
//   wscope generate [--target=ADDRESS] --prompt_ids=1,2,3 | --prompt_file=FILE
//          [--max_tokens=N] [--temperature=F] [--top_k=N] [--top_p=F] [--seed=N]
//          [--stop_ids=a,b] [--ignore_eos] [--logprobs=N] [--prompt_logprobs]
//          [--request_id=S] [--stream_interval=N] [--timeout=600s] [--json]
//                                           streams token ids to stdout as they are sampled,
//                                           prefill progress to stderr, then the finish
//                                           reason, usage and timings; --json: one JSON
//                                           object at the end instead ({"error": ...} on
//                                           failure, beside the tokens that came). Exit 1
//                                           on an error.
//   wscope abort --request_id=S [--json]    ends a running or queued request; exit 3 when
//                                           no request has that id
//   wscope load [--streams=N] [--duration=10s] [--prompt_tokens=N] [--max_tokens=N]
//          [--seed=N] [--json]          a bounded load generator: N concurrent Generate
//                                           streams for a fixed time, each repeating random
//                                           prompts; prints completed requests, outcomes by
//                                           status code, tokens/s and latency percentiles
//   wscope bench [--batches=4,16] [--contexts=2048,8192] [--decode_steps=N] [--warmup_steps=N]
//          [--rounds=N] [--turns=N] [--turn_warmup_steps=N] [--bench_for=60s]
//          [--policies=writescope,cpu-all] [--csv=FILE]
//          [--steps_csv=FILE] [--warmup_steps_csv=FILE] [--prewarm_steps=N]
//          [--temperature=F] [--top_k=N] [--top_p=F] [--seed=N] [--logprobs=N]
//                                           steady-state decode at fixed contexts (the KV
//                                           placed, not computed: Bench RPC), one table row
//                                           per point: tokens/s, step time, attention and
//                                           expert time, the CPU share, the roofline bound;
//                                           --policies: every point under each policy in
//                                           turn, in one runtime (reversed every second
//                                           round; --turns: the policies take that many
//                                           turns at a point, alternating); --steps_csv:
//                                           every measured step, timestamped,
//                                           with the scheduler's lines after it, what started
//                                           an exploration, and the gpu_worker's KV copies
//                                           and CPU time;
//                                           --warmup_steps_csv: every warm-up step, alike;
//                                           --prewarm_steps: unrecorded steps first (a
//                                           runtime's first steps pay one-time costs);
//                                           --temperature etc.: the decoded tokens' sampling
//                                           (default greedy; the CSV's sampling column)
//   wscope profile [--steps=N] [--out=trace.json]
//                                           the last N steps of the three processes: writes
//                                           the Chrome trace (Perfetto, chrome://tracing)
//                                           and prints the per-phase summary
//
// --timeout is the deadline of info's and abort's calls (default 10 s); for generate it
// bounds the whole stream and defaults to --generate_timeout (600 s). The others have their
// own: health 2 s an address (retried within --wait), a bench point an hour, selftest
// 120 s, profile 30 s, load's model query 10 s (its requests end 30 s after --duration).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/bench_budget.h"
#include "coordinator/policy.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "writescope/v1/writescope.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "Coordinator address");
ABSL_FLAG(absl::Duration, wait, absl::ZeroDuration(),
          "health: keep polling until every address is SERVING or this much time passed");
ABSL_FLAG(std::optional<absl::Duration>, timeout, std::nullopt,
          "Deadline of each call (default 10s); for generate, of the whole stream (default "
          "--generate_timeout)");
ABSL_FLAG(absl::Duration, generate_timeout, absl::Seconds(600),
          "generate: deadline of the whole stream when --timeout is not given");

ABSL_FLAG(std::string, prompt_ids, "", "generate: prompt token ids, comma separated");
ABSL_FLAG(std::string, prompt_file, "",
          "generate: file of prompt token ids, separated by whitespace or commas ('-': stdin)");
ABSL_FLAG(uint32_t, max_tokens, 0,
          "generate: tokens to generate (0: the rest of the context, or as far as the server's KV "
          "regions hold the sequence)");
ABSL_FLAG(float, temperature, 0.0f, "generate, bench: sampling temperature (0: greedy)");
ABSL_FLAG(uint32_t, top_k, 0, "generate, bench: top-k (0: off)");
ABSL_FLAG(float, top_p, 1.0f, "generate, bench: nucleus sampling p (1: off)");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt,
          "generate, bench: sampling seed (same seed, same prompt, same output)");
ABSL_FLAG(std::string, stop_ids, "", "generate: stop token ids, comma separated");
ABSL_FLAG(bool, ignore_eos, false, "generate: keep generating past the end-of-sequence token");
ABSL_FLAG(uint32_t, logprobs, 0,
          "generate, bench: top alternatives (with log-probabilities) per generated token");
ABSL_FLAG(bool, prompt_logprobs, false, "generate: log p(prompt[i] | prompt[:i]) as well");
ABSL_FLAG(std::string, request_id, "",
          "generate: the request's id (empty: the server picks); abort: the request to end");
ABSL_FLAG(uint32_t, steps, 8, "profile: the last N steps");
ABSL_FLAG(uint32_t, streams, 8, "load: concurrent streams");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "load: how long to run");
ABSL_FLAG(uint32_t, prompt_tokens, 64, "load: prompt length of each request");
ABSL_FLAG(std::string, out, "trace.json", "profile: where to write the Chrome trace JSON");
ABSL_FLAG(std::string, batches, "4", "bench: batch sizes, comma separated");
ABSL_FLAG(std::string, contexts, "2048", "bench: context lengths in tokens, comma separated");
ABSL_FLAG(uint32_t, decode_steps, 16, "bench: measured decode steps per point");
ABSL_FLAG(uint32_t, warmup_steps, 8, "bench: warm-up decode steps per point (the scheduler learns)");
ABSL_FLAG(std::string, csv, "", "bench: also append one row per point to this CSV file");
ABSL_FLAG(uint32_t, rounds, 1,
          "bench: run the list of points this many times (each round places its context anew "
          "at the scheduler's target then)");
ABSL_FLAG(uint32_t, turns, 1,
          "bench: at each point of a round, the policies take this many turns in a row, each "
          "turn --decode_steps measured steps on its context placed anew, the order reversed "
          "every second turn and every second round: shorter turns put the policies' steps "
          "closer in time, so that a drift of the host weighs on them alike (the CSVs' turn "
          "column)");
ABSL_FLAG(std::optional<uint32_t>, turn_warmup_steps, std::nullopt,
          "bench: warm-up steps of a point's turns after its first in a round (the policy's "
          "scheduler learned the point in its first turn; unset: --warmup_steps)");
ABSL_FLAG(std::string, policies, "",
          "bench: run every point under each of these policies in turn, comma separated, in one "
          "runtime (each policy's scheduler kept across its points; the order reversed in every "
          "second round); empty: the coordinator's current policy");
ABSL_FLAG(uint32_t, prewarm_steps, 0,
          "bench: before the first round, this many unrecorded decode steps at the first point "
          "(under static:0.5 with --policies: both paths, and no measured policy's scheduler "
          "learns from them), so that the runtime's one-time costs fall into no point (0: none)");
ABSL_FLAG(absl::Duration, bench_for, absl::ZeroDuration(),
          "bench: end within this long (0: no limit; with --rounds): start no point after it, "
          "nor one whose rounds (its longest since its first; its first, until it has "
          "another), with 10 % to spare, would not end by then (a point runs under all its "
          "policies and turns, or not at all)");
ABSL_FLAG(std::string, steps_csv, "",
          "bench: also append one row per measured step (with its wall-clock time) to this CSV");
ABSL_FLAG(std::string, warmup_steps_csv, "",
          "bench: also append one row per warm-up step to this CSV (the columns of --steps_csv)");
ABSL_FLAG(uint32_t, stream_interval, 0, "generate: one chunk per this many tokens (0: each)");
ABSL_FLAG(bool, json, false,
          "generate, abort: print one JSON object on stdout at the end instead of text");

namespace {

// "INVALID_ARGUMENT" for a google.rpc.Code value (gRPC and Abseil share the numbering), as
// the errors of every command print it.
std::string CodeName(int code) {
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? absl::StrCat("CODE_", code) : name;
}

using grpc::health::v1::HealthCheckResponse;

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() +
         absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_timeout).value_or(absl::Seconds(10)));
}

// A channel that takes replies of any size the server sends: a profile of many steps of a
// deep model passes gRPC's default 4 MiB receive limit.
std::shared_ptr<grpc::Channel> OpenChannel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

// A whole generation takes far longer than one unary call: its own default.
std::chrono::system_clock::time_point GenerateDeadline() {
  return std::chrono::system_clock::now() +
         absl::ToChronoMilliseconds(
             absl::GetFlag(FLAGS_timeout).value_or(absl::GetFlag(FLAGS_generate_timeout)));
}

std::string HealthOf(const std::string& address) {
  auto channel = OpenChannel(address);
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
  auto channel = OpenChannel(absl::GetFlag(FLAGS_target));
  auto stub = writescope::v1::WriteScope::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  writescope::v1::ServerInfo info;
  grpc::Status status = stub->GetServerInfo(&context, writescope::v1::GetServerInfoRequest(), &info);
  if (!status.ok()) {
    std::fprintf(stderr, "wscope info: %s: %s\n",
                 CodeName(static_cast<int>(status.error_code())).c_str(),
                 status.error_message().c_str());
    return 1;
  }
  grpc::ClientContext model_context;
  model_context.set_deadline(Deadline());
  writescope::v1::ModelInfo model;
  if (stub->GetModelInfo(&model_context, writescope::v1::GetModelInfoRequest(), &model).ok()) {
    std::printf(
        "model %s (%s): %u layers, hidden %u, vocab %u, context %u tokens, %u experts "
        "top-%u, KV %llu B/token\n",
        model.source().c_str(), model.model_type().c_str(), model.num_layers(), model.hidden_size(),
        model.vocab_size(), model.max_context(), model.num_experts(), model.experts_per_token(),
        static_cast<unsigned long long>(model.kv_bytes_per_token()));
  }
  std::printf("writescope %s  policy %s  cpu share %.3f (placed %.3f)\n", info.version().c_str(),
              info.policy().c_str(), info.cpu_share(), info.placed_cpu_share());
  if (info.policy() == "monolithic") {
    std::printf("re-splits: %llu blocks moved, %.1f ms of copies\n",
                static_cast<unsigned long long>(info.resplit_blocks()), info.resplit_ms());
  }
  std::printf("arena %s  %.1f MiB  KV blocks of %u tokens\n", info.arena_name().c_str(),
              info.arena_bytes() / 1048576.0, info.block_tokens());
  for (const auto& region : info.regions()) {
    std::printf("  region %-14s %10.1f MiB  blocks %llu/%llu (%llu tokens)\n",
                RegionName(region.region()), region.bytes_total() / 1048576.0,
                static_cast<unsigned long long>(region.blocks_used()),
                static_cast<unsigned long long>(region.blocks_total()),
                static_cast<unsigned long long>(region.blocks_total()) * info.block_tokens());
  }
  if (info.has_gpu_calibration()) {
    const auto& calibration = info.gpu_calibration();
    std::printf("GPU path (probe %llu, %.0f ms): B %.3f ns/token, c_G %.1f us per layer\n",
                static_cast<unsigned long long>(calibration.count()), calibration.probe_ms(),
                calibration.ns_per_token(), calibration.fixed_us());
  }
  if (info.has_cpu_calibration()) {
    const auto& calibration = info.cpu_calibration();
    std::printf("CPU path (probe %llu, %.0f ms): A %.3f ns/token, c_C %.1f us per layer\n",
                static_cast<unsigned long long>(calibration.count()), calibration.probe_ms(),
                calibration.ns_per_token(), calibration.fixed_us());
  }
  if (info.has_hot_experts()) {
    const auto& hot = info.hot_experts();
    if (hot.state() == "uploading" || hot.state() == "failed") {
      std::printf("hot experts: %s (chosen from %llu routed tokens; the gpu_worker's log has "
                  "the details)\n",
                  hot.state() == "failed" ? "the upload failed, all routed experts on the "
                                            "cpu_worker"
                                          : "uploading the resident set",
                  static_cast<unsigned long long>(hot.tokens_seen()));
    } else if (hot.chosen()) {
      std::printf("hot experts: %llu of %llu routed experts resident in VRAM (%.1f MiB), chosen "
                  "from %llu routed tokens\n",
                  static_cast<unsigned long long>(hot.resident_experts()),
                  static_cast<unsigned long long>(hot.total_experts()),
                  hot.resident_bytes() / 1048576.0,
                  static_cast<unsigned long long>(hot.tokens_seen()));
    } else {
      std::printf("hot experts: warming up, %llu of %llu routed tokens counted\n",
                  static_cast<unsigned long long>(hot.tokens_seen()),
                  static_cast<unsigned long long>(hot.warmup_tokens()));
    }
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
  if (!info.metrics_address().empty()) {
    std::printf("metrics: http://%s/metrics\n", info.metrics_address().c_str());
  }
  return 0;
}

int SelfTest() {
  auto channel = OpenChannel(absl::GetFlag(FLAGS_target));
  auto stub = writescope::v1::WriteScope::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  writescope::v1::SelfTestResponse response;
  grpc::Status status = stub->SelfTest(&context, writescope::v1::SelfTestRequest(), &response);
  if (!status.ok()) {
    std::fprintf(stderr, "wscope selftest: %s: %s\n",
                 CodeName(static_cast<int>(status.error_code())).c_str(),
                 status.error_message().c_str());
    return 1;
  }
  for (const std::string& check : response.checks()) std::printf("  %s\n", check.c_str());
  std::printf("selftest: %s\n", response.ok() ? "OK" : "FAILED");
  return response.ok() ? 0 : 1;
}

// The p-quantile of values by nearest rank (the ceil(p·n)-th smallest, p in (0, 1]); 0 for
// none.
double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p * static_cast<double>(values.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(values.size())));
  return values[i - 1];
}

// ---- bench -----------------------------------------------------------------------------

// The columns of the per-point CSV (--csv) and of the per-step ones (--steps_csv,
// --warmup_steps_csv).
constexpr char kPointCsvHeader[] =
    "policy,layers,batch,context,steps,tokens_per_s,step_ms,gpu_attention_ms,"
    "cpu_attention_ms,gpu_expert_wait_ms,cpu_expert_ms,target_cpu_share,placed_cpu_share,"
    "optimal_cpu_share,bound_attention_ms,step_ms_p10,step_ms_p50,step_ms_p90,read_cpu_share,"
    "explore_steps,gpu_hot_expert_ms,hot_pair_share,window_tokens,transfer_ms,"
    "gpu_waited_cpu_ms,sampling,experts_per_layer,round,turn,cpu_experts_per_layer";
constexpr char kStepsCsvHeader[] =
    "policy,round,step,unix_s,step_ms,gpu_attention_ms,cpu_attention_ms,"
    "cpu_expert_ms,target_cpu_share,placed_cpu_share,"
    "optimal_cpu_share,batch,context,read_cpu_share,explore,"
    "predicted_split_ms,predicted_gpu_only_ms,rest_split_ms,"
    "rest_gpu_only_ms,early_rounds_missed,transfer_ms,gpu_waited_cpu_ms,"
    "experts_per_layer,resplit_ms,resplit_blocks,cpu_ns_per_token,"
    "cpu_fixed_us,gpu_ns_per_token,gpu_fixed_us,dma_ns_per_token,"
    "dma_fixed_us,chain_extra_us,host_tokens,gpu_transfer_copies,"
    "gpu_worker_cpu_ms,explore_reason,turn,cpu_experts_per_layer,explore_cost_ms,"
    "explore_debt_ms";

// Opens a bench CSV to append rows of `header`'s columns to, writing the header when the
// file is new or empty. nullptr, with a message and the exit status in `exit_code`, when the
// file starts with other columns (2: an older bench's, whose rows would not line up) or cannot
// be written (1).
std::FILE* OpenCsv(const std::string& path, const char* header, int* exit_code) {
  std::ifstream existing(path);
  std::string first_line;
  const bool fresh = !existing.good() || !std::getline(existing, first_line);
  if (!fresh && first_line != header) {
    std::fprintf(stderr,
                 "wscope bench: %s has other columns (an older bench's); write to a new file\n",
                 path.c_str());
    *exit_code = 2;
    return nullptr;
  }
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    std::fprintf(stderr, "wscope bench: cannot write %s\n", path.c_str());
    *exit_code = 1;
    return nullptr;
  }
  if (fresh) std::fprintf(file, "%s\n", header);
  return file;
}

// One row per step of one point (nothing when `file` is null).
void WriteStepRows(std::FILE* file, const std::string& policy, uint32_t round, uint32_t turn,
                   uint64_t batch, uint64_t context,
                   const google::protobuf::RepeatedPtrField<writescope::v1::BenchStep>& steps) {
  if (file == nullptr) return;
  for (int i = 0; i < steps.size(); ++i) {
    const auto& step = steps[i];
    std::fprintf(file,
                 "%s,%u,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%llu,%llu,%.4f,%d,%.4f,"
                 "%.4f,%.4f,%.4f,%u,%.4f,%.4f,%.2f,%.4f,%llu,%.4f,%.2f,%.4f,%.2f,%.4f,%.2f,"
                 "%.2f,%llu,%llu,%.3f,%s,%u,%.2f,%.4f,%.4f\n",
                 policy.c_str(), round, i, step.end_unix_s(), step.step_ms(),
                 step.gpu_attention_ms(), step.cpu_attention_ms(), step.cpu_expert_ms(),
                 step.target_cpu_share(), step.placed_cpu_share(), step.optimal_cpu_share(),
                 static_cast<unsigned long long>(batch), static_cast<unsigned long long>(context),
                 step.read_cpu_share(), step.explore() ? 1 : 0, step.predicted_split_ms(),
                 step.predicted_gpu_only_ms(), step.rest_split_ms(), step.rest_gpu_only_ms(),
                 step.early_rounds_missed(), step.transfer_ms(), step.gpu_waited_cpu_ms(),
                 step.experts_per_layer(), step.resplit_ms(),
                 static_cast<unsigned long long>(step.resplit_blocks()), step.cpu_ns_per_token(),
                 step.cpu_fixed_us(), step.gpu_ns_per_token(), step.gpu_fixed_us(),
                 step.dma_ns_per_token(), step.dma_fixed_us(), step.chain_extra_us(),
                 static_cast<unsigned long long>(step.host_tokens()),
                 static_cast<unsigned long long>(step.gpu_transfer_copies()),
                 step.gpu_worker_cpu_ms(), step.explore_reason().c_str(), turn,
                 step.cpu_experts_per_layer(), step.explore_cost_ms(), step.explore_debt_ms());
  }
  std::fflush(file);
}

// One table row (and one CSV row) per benched point: means over its measured steps.
void PrintPoint(const writescope::v1::BenchResponse& response, uint64_t batch, uint64_t context,
                uint32_t round, uint32_t turn, const std::string& sampling, std::FILE* csv) {
  // Means over the measured steps.
  double gpu = 0, cpu = 0, experts = 0, expert_wait = 0, target = 0, placed = 0, optimal = 0,
         bound = 0, read = 0, hot = 0, hot_share = 0, transfer = 0, waited = 0,
         experts_per_layer = 0, cpu_experts_per_layer = 0;
  int explore_steps = 0;
  for (const auto& step : response.steps()) {
    gpu += step.gpu_attention_ms();
    cpu += step.cpu_attention_ms();
    experts += step.cpu_expert_ms();
    expert_wait += step.gpu_expert_wait_ms();
    target += step.target_cpu_share();
    placed += step.placed_cpu_share();
    optimal += step.optimal_cpu_share();
    bound += step.bound_ms();
    read += step.read_cpu_share();
    explore_steps += step.explore() ? 1 : 0;
    hot += step.gpu_hot_expert_ms();
    hot_share += step.hot_pair_share();
    transfer += step.transfer_ms();
    waited += step.gpu_waited_cpu_ms();
    experts_per_layer += step.experts_per_layer();
    cpu_experts_per_layer += step.cpu_experts_per_layer();
  }
  const double n = std::max(1, response.steps_size());
  std::vector<double> times;
  for (const auto& step : response.steps()) times.push_back(step.step_ms());
  const double p10 = Percentile(times, 0.1), p50 = Percentile(times, 0.5),
               p90 = Percentile(times, 0.9);
  std::printf("%-12s %5llu %8llu %9.1f %9.2f %6.1f-%-6.1f %9.2f %9.2f %9.2f %6.3f %6.3f "
              "%6.3f %6.3f %9.2f %9.2f\n",
              response.policy().c_str(), static_cast<unsigned long long>(batch),
              static_cast<unsigned long long>(context), response.tokens_per_second(),
              response.mean_step_ms(), p10, p90, gpu / n, cpu / n, experts / n, target / n,
              placed / n, read / n, optimal / n, bound / n, hot / n);
  std::fflush(stdout);
  if (csv != nullptr) {
    std::fprintf(csv,
                 "%s,%u,%llu,%llu,%d,%.3f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,"
                 "%.4f,%.4f,%.4f,%.4f,%d,%.4f,%.4f,%u,%.4f,%.4f,%s,%.2f,%u,%u,%.2f\n",
                 response.policy().c_str(), response.num_layers(),
                 static_cast<unsigned long long>(batch), static_cast<unsigned long long>(context),
                 response.steps_size(), response.tokens_per_second(), response.mean_step_ms(),
                 gpu / n, cpu / n, expert_wait / n, experts / n, target / n, placed / n,
                 optimal / n, bound / n, p10, p50, p90, read / n, explore_steps, hot / n,
                 hot_share / n, response.window_tokens(), transfer / n, waited / n,
                 sampling.c_str(), experts_per_layer / n, round, turn, cpu_experts_per_layer / n);
    std::fflush(csv);
  }
}

// How tokens are sampled, from the flags generate and bench share (--temperature, --top_k,
// --top_p, --seed, --logprobs); generate sets its own fields (max_tokens, stop ids, ...) on
// top.
writescope::v1::SamplingParams SamplingFromFlags() {
  writescope::v1::SamplingParams sampling;
  sampling.set_temperature(absl::GetFlag(FLAGS_temperature));
  sampling.set_top_k(absl::GetFlag(FLAGS_top_k));
  sampling.set_top_p(absl::GetFlag(FLAGS_top_p));
  if (const std::optional<uint64_t> seed = absl::GetFlag(FLAGS_seed)) sampling.set_seed(*seed);
  sampling.set_logprobs(absl::GetFlag(FLAGS_logprobs));
  return sampling;
}

// The CSV's and the progress lines' name of a bench's sampling: "greedy" (temperature 0, no
// top lists: the GPU reduces the step's end to per-row stats), else its options, e.g.
// "t0.7/k0/p0.9/lp0".
std::string SamplingLabel(const writescope::v1::SamplingParams& sampling) {
  if (!(sampling.temperature() > 0.0f) && sampling.logprobs() == 0) return "greedy";
  return absl::StrFormat("t%g/k%u/p%g/lp%u", sampling.temperature(), sampling.top_k(),
                         sampling.top_p(), sampling.logprobs());
}

// One Bench RPC: `decode_steps` measured steps after `warmup_steps` at (batch, context) under
// `policy` (empty: the coordinator's current one), sampled as `sampling` says, within an hour.
grpc::Status BenchOnePoint(writescope::v1::WriteScope::Stub& stub, uint64_t batch,
                           uint64_t context, uint32_t decode_steps, uint32_t warmup_steps,
                           const std::string& policy,
                           const writescope::v1::SamplingParams& sampling,
                           writescope::v1::BenchResponse* response) {
  writescope::v1::BenchRequest request;
  request.set_batch(static_cast<uint32_t>(batch));
  request.set_context_tokens(context);
  request.set_decode_steps(decode_steps);
  request.set_warmup_steps(warmup_steps);
  request.set_policy(policy);
  *request.mutable_sampling() = sampling;
  grpc::ClientContext call;
  call.set_deadline(std::chrono::system_clock::now() + std::chrono::hours(1));
  return stub.Bench(&call, request, response);
}

int Bench() {
  std::vector<uint64_t> batches, contexts;
  for (const auto& [name, flag, out, most] :
       {std::tuple{"--batches", absl::GetFlag(FLAGS_batches), &batches,
                   uint64_t{std::numeric_limits<uint32_t>::max()}},
        std::tuple{"--contexts", absl::GetFlag(FLAGS_contexts), &contexts,
                   std::numeric_limits<uint64_t>::max()}}) {
    for (absl::string_view part : absl::StrSplit(flag, ',', absl::SkipWhitespace())) {
      uint64_t value = 0;
      if (!absl::SimpleAtoi(part, &value) || value == 0 || value > most) {
        std::fprintf(stderr, "wscope bench: %s: '%s' is not a number from 1 to %llu\n", name,
                     std::string(part).c_str(), static_cast<unsigned long long>(most));
        return 2;
      }
      if (std::find(out->begin(), out->end(), value) != out->end()) {
        std::fprintf(stderr, "wscope bench: %s: %llu is given twice\n", name,
                     static_cast<unsigned long long>(value));
        return 2;
      }
      out->push_back(value);
    }
    if (out->empty()) {
      std::fprintf(stderr, "wscope bench: %s is empty\n", name);
      return 2;
    }
  }
  std::vector<std::string> policies =
      absl::StrSplit(absl::GetFlag(FLAGS_policies), ',', absl::SkipWhitespace());
  for (size_t i = 0; i < policies.size(); ++i) {
    if (std::find(policies.begin(), policies.begin() + i, policies[i]) != policies.begin() + i) {
      std::fprintf(stderr, "wscope bench: --policies: %s is given twice\n", policies[i].c_str());
      return 2;
    }
  }
  for (const std::string& policy : policies) {  // refused here, before any point runs
    if (absl::StatusOr<writescope::coordinator::PolicySpec> spec =
            writescope::coordinator::ParsePolicy(policy);
        !spec.ok()) {
      std::fprintf(stderr, "wscope bench: --policies: %s\n",
                   std::string(spec.status().message()).c_str());
      return 2;
    }
  }
  if (policies.empty()) policies.push_back("");  // the coordinator's current one
  const uint32_t turns = absl::GetFlag(FLAGS_turns);
  if (turns == 0 || absl::GetFlag(FLAGS_rounds) == 0) {
    std::fprintf(stderr, "wscope bench: --turns and --rounds must be at least 1\n");
    return 2;
  }
  // generate's flags that a bench sets itself: refused rather than ignored.
  for (const auto& [set, flag] :
       {std::pair{absl::GetFlag(FLAGS_max_tokens) != 0, "--max_tokens"},
        std::pair{!absl::GetFlag(FLAGS_stop_ids).empty(), "--stop_ids"},
        std::pair{absl::GetFlag(FLAGS_ignore_eos), "--ignore_eos"},
        std::pair{absl::GetFlag(FLAGS_prompt_logprobs), "--prompt_logprobs"}}) {
    if (set) {
      std::fprintf(stderr,
                   "wscope bench: %s is generate's: a bench decodes --decode_steps tokens past "
                   "a placed context (its sampling: --temperature, --top_k, --top_p, --seed, "
                   "--logprobs)\n",
                   flag);
      return 2;
    }
  }
  const writescope::v1::SamplingParams sampling = SamplingFromFlags();
  const std::string label = SamplingLabel(sampling);
  auto channel = OpenChannel(absl::GetFlag(FLAGS_target));
  auto stub = writescope::v1::WriteScope::NewStub(channel);
  std::FILE* csv = nullptr;
  const std::string csv_path = absl::GetFlag(FLAGS_csv);
  {
    // One file for two CSVs would get both headers (the second opened before the first's
    // was written) and rows of both shapes.
    std::vector<std::pair<const char*, std::string>> paths;
    for (const auto& [flag, path] : {std::pair{"--csv", csv_path},
                                     std::pair{"--steps_csv", absl::GetFlag(FLAGS_steps_csv)},
                                     std::pair{"--warmup_steps_csv",
                                               absl::GetFlag(FLAGS_warmup_steps_csv)}}) {
      if (path.empty()) continue;
      const std::string normal = std::filesystem::absolute(path).lexically_normal().string();
      for (const auto& [other_flag, other] : paths) {
        if (other == normal) {
          std::fprintf(stderr, "wscope bench: %s and %s name one file (%s)\n", other_flag, flag,
                       path.c_str());
          return 2;
        }
      }
      paths.emplace_back(flag, normal);
    }
  }
  if (!csv_path.empty()) {
    int exit_code = 0;
    csv = OpenCsv(csv_path, kPointCsvHeader, &exit_code);
    if (csv == nullptr) return exit_code;
  }
  std::FILE* steps_csv = nullptr;
  std::FILE* warmup_csv = nullptr;
  // False when a file could not be written out (a full disk): the run then exits 1.
  const auto close_all = [&] {
    bool written = true;
    for (std::FILE* f : {csv, steps_csv, warmup_csv}) {
      if (f == nullptr) continue;
      if (std::ferror(f) != 0 || std::fclose(f) != 0) written = false;
    }
    csv = steps_csv = warmup_csv = nullptr;
    if (!written) std::fprintf(stderr, "wscope bench: a CSV could not be written in full\n");
    return written;
  };
  for (const auto& [path, file] :
       {std::pair{absl::GetFlag(FLAGS_steps_csv), &steps_csv},
        std::pair{absl::GetFlag(FLAGS_warmup_steps_csv), &warmup_csv}}) {
    if (path.empty()) continue;
    int exit_code = 0;
    *file = OpenCsv(path, kStepsCsvHeader, &exit_code);
    if (*file == nullptr) {
      close_all();
      return exit_code;
    }
  }
  // Times in ms per step (all layers); "experts": the cpu_worker's routed experts; "bound":
  // the roofline bound of the step's attention at the best split, from the scheduler's
  // current estimates of A and B; "r read": the share of the host tokens the CPU attended
  // (below "r plc" when the GPU streamed CPU-compute blocks).
  // "p10-p90": the spread of the measured steps' times; "hot exp": the gpu_worker's resident
  // (hot) experts, while the cpu_worker runs the rest ("experts").
  std::printf("%-12s %5s %8s %9s %9s %13s %9s %9s %9s %6s %6s %6s %6s %9s %9s\n", "policy",
              "batch", "context", "tok/s", "step ms", "p10-p90", "gpu attn", "cpu attn",
              "experts", "r tgt", "r plc", "r read", "r*", "bound", "hot exp");
  // A runtime's first steps pay for one-time work (the first reads of the KV in place, the
  // kernels' first launches, the hot experts' choice and upload): in one runtime they fell
  // into the first policy's first point (the full DeepSeek-V2-Lite at 32 x 32K on the H200,
  // run 157: writescope's first round stepped 465 ms after its 16 warm-up steps, its second
  // 394). static:0.5 runs both paths, and no measured policy's scheduler learns from it.
  // --bench_for counts from here: the prewarm is part of the bench's time.
  const absl::Duration bench_for = absl::GetFlag(FLAGS_bench_for);
  const absl::Time bench_start = absl::Now();
  if (const uint32_t prewarm = absl::GetFlag(FLAGS_prewarm_steps);
      prewarm > 0 && !batches.empty() && !contexts.empty()) {
    const std::string policy = policies.size() == 1 && policies[0].empty() ? "" : "static:0.5";
    std::fprintf(stderr,
                 "bench: prewarm, %u unrecorded steps at batch %llu, context %llu%s%s ...\n",
                 prewarm, static_cast<unsigned long long>(batches[0]),
                 static_cast<unsigned long long>(contexts[0]), policy.empty() ? "" : ", ",
                 policy.c_str());
    writescope::v1::BenchResponse response;
    const grpc::Status status =
        BenchOnePoint(*stub, batches[0], contexts[0], prewarm, 0, policy, sampling, &response);
    if (status.ok()) {
      std::fprintf(stderr, "bench: prewarm done, %.2f ms per step\n", response.mean_step_ms());
    } else {
      std::fprintf(stderr, "bench: the prewarm failed: %s: %s; the points run anyway\n",
                   CodeName(static_cast<int>(status.error_code())).c_str(),
                   status.error_message().c_str());
    }
  }
  int failures = 0;
  int failures_in_a_row = 0;
  constexpr int kMaxFailuresInARow = 3;  // the server is gone or refuses every point
  const uint32_t rounds = absl::GetFlag(FLAGS_rounds);
  const uint32_t warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  const uint32_t turn_warmup_steps =
      absl::GetFlag(FLAGS_turn_warmup_steps).value_or(warmup_steps);
  // Which points may still start within --bench_for, from their rounds' times.
  writescope::coordinator::BenchBudget budget(bench_for);
  uint32_t skipped = 0;
  uint32_t rounds_started = 0;
  for (uint32_t round = 0; round < rounds; ++round) {
    if (bench_for > absl::ZeroDuration() && absl::Now() - bench_start >= bench_for) break;
    if (failures_in_a_row >= kMaxFailuresInARow) {
      std::fprintf(stderr, "wscope bench: %d points failed in a row; stopping\n",
                   failures_in_a_row);
      break;
    }
    ++rounds_started;
    bool any_point_ran = false;
    uint32_t skipped_in_round = 0;
    for (uint64_t context : contexts) {
      for (uint64_t batch : batches) {
        // A point that would not end within --bench_for is left out whole (BenchBudget).
        if (const absl::Duration elapsed = absl::Now() - bench_start;
            !budget.Fits(batch, context, elapsed)) {
          const absl::Duration estimate = budget.Estimate(batch, context);
          const std::string why =
              estimate > absl::ZeroDuration()
                  ? absl::StrFormat("its rounds take %.1f s, %.1f s of --bench_for left",
                                    absl::ToDoubleSeconds(estimate),
                                    absl::ToDoubleSeconds(budget.Left(elapsed)))
                  : std::string("--bench_for has passed");
          std::fprintf(stderr, "bench: round %u/%u, batch %llu, context %llu left out: %s\n",
                       round + 1, rounds, static_cast<unsigned long long>(batch),
                       static_cast<unsigned long long>(context), why.c_str());
          ++skipped_in_round;
          continue;
        }
        const absl::Time point_start = absl::Now();
        bool point_ok = true;  // every policy and turn of it ran
        for (uint32_t turn = 0; turn < turns; ++turn) {
          // Every second turn in reverse, and every second round starting the other way (with
          // one turn a point: every second round in reverse), so that no policy always runs
          // right after another, nor first after a point's full warm-up.
          std::vector<std::string> order = policies;
          if ((round + turn) % 2 == 1) std::reverse(order.begin(), order.end());
          // The first turn at a point teaches each scheduler the point; the later ones only
          // need the pipeline running again.
          const uint32_t warmup = turn == 0 ? warmup_steps : turn_warmup_steps;
          for (const std::string& policy : order) {
            if (failures_in_a_row >= kMaxFailuresInARow) break;
            writescope::v1::BenchResponse response;
            const std::string turn_label =
                turns > 1 ? absl::StrFormat(", turn %u/%u", turn + 1, turns) : "";
            std::fprintf(stderr, "bench: round %u/%u%s, batch %llu, context %llu%s%s%s%s ...\n",
                         round + 1, rounds, turn_label.c_str(),
                         static_cast<unsigned long long>(batch),
                         static_cast<unsigned long long>(context), policy.empty() ? "" : ", ",
                         policy.c_str(), label == "greedy" ? "" : ", sampling ",
                         label == "greedy" ? "" : label.c_str());
            const grpc::Status status =
                BenchOnePoint(*stub, batch, context, absl::GetFlag(FLAGS_decode_steps), warmup,
                              policy, sampling, &response);
            if (!status.ok()) {
              std::printf("batch %llu context %llu%s%s: %s: %s\n",
                          static_cast<unsigned long long>(batch),
                          static_cast<unsigned long long>(context), policy.empty() ? "" : " ",
                          policy.c_str(), CodeName(static_cast<int>(status.error_code())).c_str(),
                          status.error_message().c_str());
              ++failures;
              ++failures_in_a_row;
              point_ok = false;
              continue;
            }
            failures_in_a_row = 0;
            PrintPoint(response, batch, context, round, turn, label, csv);
            WriteStepRows(steps_csv, response.policy(), round, turn, batch, context,
                          response.steps());
            WriteStepRows(warmup_csv, response.policy(), round, turn, batch, context,
                          response.warmup_steps());
          }
        }
        // A round in which a policy failed (or was never asked, after failures in a row)
        // tells nothing of the point's time.
        if (point_ok && failures_in_a_row < kMaxFailuresInARow) {
          budget.Record(batch, context, absl::Now() - point_start);
        }
        any_point_ran = true;
      }
    }
    // Every point left out: none fits in what is left, which only shrinks.
    if (!any_point_ran) {
      --rounds_started;
      break;
    }
    skipped += skipped_in_round;
  }
  if (bench_for > absl::ZeroDuration()) {
    std::fprintf(stderr,
                 "bench: %u of %u round(s) started within --bench_for=%s, %u point-round(s) "
                 "left out, %.1f s\n",
                 rounds_started, rounds, absl::FormatDuration(bench_for).c_str(), skipped,
                 absl::ToDoubleSeconds(absl::Now() - bench_start));
  }
  const bool written = close_all();
  return failures == 0 && written ? 0 : 1;
}

// ---- load ------------------------------------------------------------------------------

struct LoadTotals {
  std::mutex mutex;
  std::map<std::string, uint64_t> outcomes;  // "OK" or the status code name
  std::vector<double> ttft_ms, request_ms;
  uint64_t tokens = 0;
};

int Load() {
  const uint32_t streams = std::max<uint32_t>(1, absl::GetFlag(FLAGS_streams));
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  const uint32_t prompt_tokens = std::max<uint32_t>(1, absl::GetFlag(FLAGS_prompt_tokens));
  const uint32_t max_tokens = absl::GetFlag(FLAGS_max_tokens) == 0 ? 32 : absl::GetFlag(FLAGS_max_tokens);
  if (duration <= absl::ZeroDuration()) {
    std::fprintf(stderr, "wscope load: --duration must be positive\n");
    return 2;
  }
  auto channel = OpenChannel(absl::GetFlag(FLAGS_target));
  auto stub = writescope::v1::WriteScope::NewStub(channel);
  writescope::v1::ModelInfo model;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status status = stub->GetModelInfo(&context, writescope::v1::GetModelInfoRequest(), &model);
    if (!status.ok()) {
      std::fprintf(stderr, "wscope load: %s\n", status.error_message().c_str());
      return 1;
    }
  }
  // Requests the server must refuse would only spin: refused here.
  if (uint64_t{prompt_tokens} + max_tokens > model.max_context()) {
    std::fprintf(stderr,
                 "wscope load: --prompt_tokens=%u + --max_tokens=%u exceed the model's context "
                 "of %u\n",
                 prompt_tokens, max_tokens, model.max_context());
    return 2;
  }
  LoadTotals totals;
  const absl::Time start = absl::Now(), end = start + duration;
  const uint64_t seed = absl::GetFlag(FLAGS_seed).value_or(1);
  std::vector<std::thread> threads;
  for (uint32_t s = 0; s < streams; ++s) {
    threads.emplace_back([&, s] {
      std::mt19937_64 rng(seed * 7919 + s);
      for (uint64_t n = 0; absl::Now() < end; ++n) {
        writescope::v1::GenerateRequest request;
        for (uint32_t t = 0; t < prompt_tokens; ++t) {
          request.add_prompt_token_ids(static_cast<uint32_t>(rng() % model.vocab_size()));
        }
        request.mutable_sampling()->set_max_tokens(max_tokens);
        request.mutable_sampling()->set_temperature(0.7f);
        request.mutable_sampling()->set_seed(rng());
        request.mutable_sampling()->set_ignore_eos(true);
        grpc::ClientContext context;
        // A request still running at the end of the run is cut off by its deadline.
        context.set_deadline(absl::ToChronoTime(end + absl::Seconds(30)));
        const absl::Time sent = absl::Now();
        std::optional<absl::Time> first;
        uint64_t tokens = 0;
        std::string outcome = "OK";
        auto reader = stub->Generate(&context, request);
        writescope::v1::GenerateResponse response;
        while (reader->Read(&response)) {
          if (response.has_chunk() && response.chunk().token_ids_size() > 0) {
            if (!first) first = absl::Now();
            tokens += response.chunk().token_ids_size();
          }
          if (response.has_error()) outcome = CodeName(response.error().code());
        }
        grpc::Status status = reader->Finish();
        if (!status.ok()) outcome = CodeName(static_cast<int>(status.error_code()));
        std::lock_guard<std::mutex> lock(totals.mutex);
        ++totals.outcomes[outcome];
        totals.tokens += tokens;
        if (outcome == "OK") {
          totals.request_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - sent));
          if (first) totals.ttft_ms.push_back(absl::ToDoubleMilliseconds(*first - sent));
        } else {
          // Back off a little: a full queue (RESOURCE_EXHAUSTED, expected beyond capacity)
          // or a server that fails every request would otherwise be asked again at once.
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    });
  }
  // Progress once a second.
  while (absl::Now() < end) {
    absl::SleepFor(std::min(absl::Seconds(1), end - absl::Now()));
    std::lock_guard<std::mutex> lock(totals.mutex);
    uint64_t done = 0;
    for (const auto& [name, count] : totals.outcomes) done += count;
    std::fprintf(stderr, "load: %.0f s, %llu requests, %llu tokens\n",
                 absl::ToDoubleSeconds(absl::Now() - start), static_cast<unsigned long long>(done),
                 static_cast<unsigned long long>(totals.tokens));
  }
  for (std::thread& thread : threads) thread.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  uint64_t requests = 0;
  for (const auto& [name, count] : totals.outcomes) requests += count;
  // A run in which no request came back whole measured nothing: exit 1 (its outcomes are
  // printed all the same).
  const int exit_code = totals.outcomes.contains("OK") ? 0 : 1;
  if (exit_code != 0) {
    std::fprintf(stderr, "wscope load: none of %llu requests completed\n",
                 static_cast<unsigned long long>(requests));
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::string outcomes;
    for (const auto& [name, count] : totals.outcomes) {
      absl::StrAppend(&outcomes, outcomes.empty() ? "" : ",", "\"", name, "\":", count);
    }
    std::printf("{\"streams\":%u,\"seconds\":%.3f,\"requests\":%llu,\"outcomes\":{%s},"
                "\"tokens\":%llu,\"tokens_per_s\":%.3f,\"ttft_ms_p50\":%.3f,"
                "\"ttft_ms_p99\":%.3f,\"request_ms_p50\":%.3f,\"request_ms_p99\":%.3f}\n",
                streams, seconds, static_cast<unsigned long long>(requests), outcomes.c_str(),
                static_cast<unsigned long long>(totals.tokens), totals.tokens / seconds,
                Percentile(totals.ttft_ms, 0.5), Percentile(totals.ttft_ms, 0.99),
                Percentile(totals.request_ms, 0.5), Percentile(totals.request_ms, 0.99));
    return exit_code;
  }
  std::printf("load: %u streams for %.1f s: %llu requests, %llu tokens (%.1f tokens/s)\n",
              streams, seconds, static_cast<unsigned long long>(requests),
              static_cast<unsigned long long>(totals.tokens), totals.tokens / seconds);
  for (const auto& [name, count] : totals.outcomes) {
    std::printf("  %-20s %llu\n", name.c_str(), static_cast<unsigned long long>(count));
  }
  std::printf("time to first token p50 %.1f ms  p99 %.1f ms;  request p50 %.1f ms  p99 %.1f ms\n",
              Percentile(totals.ttft_ms, 0.5), Percentile(totals.ttft_ms, 0.99),
              Percentile(totals.request_ms, 0.5), Percentile(totals.request_ms, 0.99));
  return exit_code;
}

int Profile() {
  auto channel = OpenChannel(absl::GetFlag(FLAGS_target));
  auto stub = writescope::v1::WriteScope::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  writescope::v1::GetProfileRequest request;
  request.set_steps(absl::GetFlag(FLAGS_steps));
  writescope::v1::Profile profile;
  grpc::Status status = stub->GetProfile(&context, request, &profile);
  if (!status.ok()) {
    std::fprintf(stderr, "wscope profile: %s: %s\n",
                 CodeName(static_cast<int>(status.error_code())).c_str(),
                 status.error_message().c_str());
    return 1;
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  std::ofstream file(out, std::ios::binary);
  file << profile.trace_json();
  file.close();  // a failure to write out shows at the close
  if (file.fail()) {
    std::fprintf(stderr, "wscope profile: cannot write %s\n", out.c_str());
    return 1;
  }
  std::printf("profile of the last %u steps -> %s (open in https://ui.perfetto.dev or "
              "chrome://tracing)\n", profile.steps(), out.c_str());
  std::string process;
  for (const auto& phase : profile.phases()) {
    if (phase.process() != process) {
      process = phase.process();
      std::printf("%s\n", process.c_str());
    }
    std::printf("  %-48s %10.3f ms/step\n", phase.phase().c_str(), phase.ms_per_step());
  }
  return 0;
}

// ---- generate / abort ---------------------------------------------------------------

// `text` as a JSON string literal in plain ASCII: quotes, backslashes and control bytes
// escaped, everything above 0x7e as \uXXXX (surrogate pairs above U+FFFF). Bytes that are
// not UTF-8 become U+FFFD, so whatever the server sent, the output parses.
std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  auto append_unit = [&out](uint32_t unit) { absl::StrAppendFormat(&out, "\\u%04x", unit); };
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      if (lead == '"' || lead == '\\') {
        out += '\\';
        out += static_cast<char>(lead);
      } else if (lead < 0x20 || lead == 0x7f) {
        append_unit(lead);
      } else {
        out += static_cast<char>(lead);
      }
      ++i;
      continue;
    }
    // One UTF-8 sequence: lead byte, continuation count, smallest code point it may encode.
    size_t extra = 0;
    uint32_t code_point = 0, min_code_point = 0;
    if (lead >= 0xc2 && lead <= 0xdf) {
      extra = 1;
      code_point = lead & 0x1f;
      min_code_point = 0x80;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      extra = 2;
      code_point = lead & 0x0f;
      min_code_point = 0x800;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      extra = 3;
      code_point = lead & 0x07;
      min_code_point = 0x10000;
    }
    bool valid = extra > 0 && i + extra < text.size();
    for (size_t k = 1; valid && k <= extra; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xc0) == 0x80;
      code_point = (code_point << 6) | (next & 0x3f);
    }
    valid = valid && code_point >= min_code_point && code_point <= 0x10ffff &&
            !(code_point >= 0xd800 && code_point <= 0xdfff);
    if (!valid) {
      append_unit(0xfffd);
      ++i;
      continue;
    }
    if (code_point < 0x10000) {
      append_unit(code_point);
    } else {
      append_unit(0xd800 + ((code_point - 0x10000) >> 10));
      append_unit(0xdc00 + ((code_point - 0x10000) & 0x3ff));
    }
    i += 1 + extra;
  }
  out += '"';
  return out;
}

// %.9g round-trips a float. JSON has no NaN or infinities; these are written the way
// Python's json module reads them (a -inf log-probability is a legitimate value).
std::string JsonNumber(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return absl::StrFormat("%.9g", value);
}

// Token ids separated by whitespace and/or commas; `what` names the source in errors.
absl::StatusOr<std::vector<uint32_t>> ParseTokenIds(absl::string_view text,
                                                    absl::string_view what) {
  std::vector<uint32_t> ids;
  for (absl::string_view field :
       absl::StrSplit(text, absl::ByAnyChar(", \t\r\n\f\v"), absl::SkipEmpty())) {
    uint32_t id = 0;
    if (!absl::SimpleAtoi(field, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": '", field, "' is not a token id (0..4294967295)"));
    }
    ids.push_back(id);
  }
  return ids;
}

absl::StatusOr<std::vector<uint32_t>> PromptFromFlags() {
  const std::string ids = absl::GetFlag(FLAGS_prompt_ids);
  const std::string file = absl::GetFlag(FLAGS_prompt_file);
  if (ids.empty() == file.empty()) {
    return absl::InvalidArgumentError("give exactly one of --prompt_ids and --prompt_file");
  }
  if (!ids.empty()) return ParseTokenIds(ids, "--prompt_ids");
  // stdio, not a stream: a read error (a directory) is a message, not an exception.
  std::FILE* in = file == "-" ? stdin : std::fopen(file.c_str(), "rb");
  if (in == nullptr) {
    const int open_errno = errno;
    const std::string message =
        absl::StrCat("--prompt_file: cannot open ", file, ": ", std::strerror(open_errno));
    return open_errno == ENOENT ? absl::NotFoundError(message)
                                : absl::InvalidArgumentError(message);
  }
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), in)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(in) != 0;
  const int read_errno = errno;  // the failed read's, for the message only
  if (in != stdin) std::fclose(in);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prompt_file: cannot read ", file, ": ", std::strerror(read_errno)));
  }
  return ParseTokenIds(text, file);
}

const char* FinishReasonName(writescope::v1::FinishReason reason) {
  switch (reason) {
    case writescope::v1::FINISH_REASON_LENGTH:
      return "length";
    case writescope::v1::FINISH_REASON_STOP:
      return "stop";
    case writescope::v1::FINISH_REASON_ABORT:
      return "abort";
    default:
      return "unspecified";
  }
}

// The error of a failed call: {"error": ...} on stdout with --json (after `json_fields`, what
// the call got before it failed), a line on stderr otherwise. Returns the exit code.
int ReportError(const char* command, int code, const std::string& message,
                const std::string& json_fields = "") {
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{%s%s\"error\":{\"code\":%s,\"message\":%s}}\n", json_fields.c_str(),
                json_fields.empty() ? "" : ",", JsonString(CodeName(code)).c_str(),
                JsonString(message).c_str());
  } else {
    std::fprintf(stderr, "wscope %s: %s: %s\n", command, CodeName(code).c_str(), message.c_str());
  }
  return 1;
}

// `[lp, ...]` of the chosen (or given) tokens.
std::string JsonChosenLogprobs(const std::vector<writescope::v1::TokenLogprobs>& entries) {
  std::string out = "[";
  for (size_t i = 0; i < entries.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", JsonNumber(entries[i].logprob()));
  }
  return out + "]";
}

// `[[[id, lp], ...], ...]`: the alternatives of each token.
std::string JsonTopLogprobs(const std::vector<writescope::v1::TokenLogprobs>& entries) {
  std::string out = "[";
  for (size_t i = 0; i < entries.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", "[");
    for (int k = 0; k < entries[i].top_size(); ++k) {
      const writescope::v1::TopLogprob& top = entries[i].top(k);
      absl::StrAppend(&out, k ? "," : "", "[", top.token_id(), ",", JsonNumber(top.logprob()), "]");
    }
    out += "]";
  }
  return out + "]";
}

int Generate() {
  absl::StatusOr<std::vector<uint32_t>> prompt = PromptFromFlags();
  absl::StatusOr<std::vector<uint32_t>> stop_ids =
      ParseTokenIds(absl::GetFlag(FLAGS_stop_ids), "--stop_ids");
  for (const absl::Status& status : {prompt.status(), stop_ids.status()}) {
    if (!status.ok()) {
      std::fprintf(stderr, "wscope generate: %s\n", std::string(status.message()).c_str());
      return 2;
    }
  }
  writescope::v1::GenerateRequest request;
  request.set_request_id(absl::GetFlag(FLAGS_request_id));
  request.mutable_prompt_token_ids()->Add(prompt->begin(), prompt->end());
  request.set_stream_interval(absl::GetFlag(FLAGS_stream_interval));
  writescope::v1::SamplingParams* sampling = request.mutable_sampling();
  *sampling = SamplingFromFlags();
  sampling->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  sampling->mutable_stop_token_ids()->Add(stop_ids->begin(), stop_ids->end());
  sampling->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  sampling->set_prompt_logprobs(absl::GetFlag(FLAGS_prompt_logprobs));
  const bool json = absl::GetFlag(FLAGS_json);

  auto channel = OpenChannel(absl::GetFlag(FLAGS_target));
  auto stub = writescope::v1::WriteScope::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(GenerateDeadline());
  std::unique_ptr<grpc::ClientReader<writescope::v1::GenerateResponse>> reader =
      stub->Generate(&context, request);

  std::string request_id = request.request_id();
  std::vector<uint32_t> tokens;
  std::vector<writescope::v1::TokenLogprobs> logprobs, prompt_logprobs;
  std::optional<writescope::v1::Complete> complete;
  std::optional<writescope::v1::Error> error;
  writescope::v1::GenerateResponse response;
  // Read to the end of the stream, so Finish() reports how it really ended.
  while (reader->Read(&response)) {
    if (!response.request_id().empty()) request_id = response.request_id();
    switch (response.response_case()) {
      case writescope::v1::GenerateResponse::kChunk: {
        const writescope::v1::Chunk& chunk = response.chunk();
        for (uint32_t id : chunk.token_ids()) {
          if (!json) std::printf(tokens.empty() ? "%u" : " %u", id);
          tokens.push_back(id);
        }
        logprobs.insert(logprobs.end(), chunk.logprobs().begin(), chunk.logprobs().end());
        prompt_logprobs.insert(prompt_logprobs.end(), chunk.prompt_logprobs().begin(),
                               chunk.prompt_logprobs().end());
        if (!json) std::fflush(stdout);
        break;
      }
      case writescope::v1::GenerateResponse::kProgress:
        std::fprintf(stderr, "prefill %llu/%llu tokens\n",
                     static_cast<unsigned long long>(response.progress().prompt_tokens_done()),
                     static_cast<unsigned long long>(response.progress().prompt_tokens_total()));
        break;
      case writescope::v1::GenerateResponse::kComplete:
        complete = response.complete();
        break;
      case writescope::v1::GenerateResponse::kError:
        error = response.error();
        break;
      default:
        break;
    }
  }
  const grpc::Status status = reader->Finish();
  if (!json && !tokens.empty()) std::printf("\n");
  const bool want_logprobs = sampling->logprobs() > 0;
  // What arrived, as JSON fields: with the completion, or beside the error of a generation
  // that failed part way (its tokens so far are kept, as the text output keeps them).
  std::string fields;
  if (json) {
    fields = absl::StrCat("\"request_id\":", JsonString(request_id), ",\"tokens\":[");
    for (size_t i = 0; i < tokens.size(); ++i) absl::StrAppend(&fields, i ? "," : "", tokens[i]);
    fields += "]";
    if (want_logprobs) {
      absl::StrAppend(&fields, ",\"logprobs\":", JsonChosenLogprobs(logprobs),
                      ",\"top_logprobs\":", JsonTopLogprobs(logprobs));
    }
    if (sampling->prompt_logprobs()) {
      absl::StrAppend(&fields, ",\"prompt_logprobs\":", JsonChosenLogprobs(prompt_logprobs));
      if (want_logprobs) {
        absl::StrAppend(&fields, ",\"prompt_top_logprobs\":", JsonTopLogprobs(prompt_logprobs));
      }
    }
  }
  if (error.has_value()) return ReportError("generate", error->code(), error->message(), fields);
  if (!status.ok()) {
    return ReportError("generate", static_cast<int>(status.error_code()), status.error_message(),
                       fields);
  }
  if (!complete.has_value()) {
    return ReportError("generate", static_cast<int>(absl::StatusCode::kInternal),
                       "the stream ended without a complete or error message", fields);
  }

  const writescope::v1::Usage& usage = complete->usage();
  const writescope::v1::Timings& t = complete->timings();
  if (json) {
    std::string out = absl::StrCat("{", fields);
    absl::StrAppend(&out,
                    ",\"finish_reason\":", JsonString(FinishReasonName(complete->finish_reason())),
                    ",\"usage\":{\"prompt_tokens\":", usage.prompt_tokens(),
                    ",\"completion_tokens\":", usage.completion_tokens(), "}",
                    ",\"timings\":{\"queue_ms\":", JsonNumber(t.queue_ms()),
                    ",\"time_to_first_token_ms\":", JsonNumber(t.time_to_first_token_ms()),
                    ",\"prefill_ms\":", JsonNumber(t.prefill_ms()),
                    ",\"decode_ms\":", JsonNumber(t.decode_ms()),
                    ",\"decode_tokens_per_s\":", JsonNumber(t.decode_tokens_per_s()), "}}\n");
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  if (want_logprobs) {
    for (size_t i = 0; i < logprobs.size(); ++i) {
      std::string line = absl::StrFormat("  %-8u %10.4f  top:", i < tokens.size() ? tokens[i] : 0,
                                         logprobs[i].logprob());
      for (const writescope::v1::TopLogprob& top : logprobs[i].top()) {
        absl::StrAppendFormat(&line, " %u:%.4f", top.token_id(), top.logprob());
      }
      std::printf("%s\n", line.c_str());
    }
  }
  if (sampling->prompt_logprobs()) {
    std::string line = "prompt logprobs:";
    for (const writescope::v1::TokenLogprobs& entry : prompt_logprobs) {
      absl::StrAppendFormat(&line, " %.4f", entry.logprob());
    }
    std::printf("%s\n", line.c_str());
  }
  std::printf("request %s: finish %s, %llu prompt + %llu completion tokens\n", request_id.c_str(),
              FinishReasonName(complete->finish_reason()),
              static_cast<unsigned long long>(usage.prompt_tokens()),
              static_cast<unsigned long long>(usage.completion_tokens()));
  std::printf(
      "time to first token %.1f ms  prefill %.1f ms  decode %.1f ms (%.1f tokens/s)  queue %.1f "
      "ms\n",
      t.time_to_first_token_ms(), t.prefill_ms(), t.decode_ms(), t.decode_tokens_per_s(),
      t.queue_ms());
  return 0;
}

int Abort() {
  const std::string request_id = absl::GetFlag(FLAGS_request_id);
  if (request_id.empty()) {
    std::fprintf(stderr, "wscope abort: give --request_id\n");
    return 2;
  }
  auto channel = OpenChannel(absl::GetFlag(FLAGS_target));
  auto stub = writescope::v1::WriteScope::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  writescope::v1::AbortRequest request;
  request.set_request_id(request_id);
  writescope::v1::AbortResponse response;
  const grpc::Status status = stub->Abort(&context, request, &response);
  if (!status.ok()) {
    return ReportError("abort", static_cast<int>(status.error_code()), status.error_message());
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{\"request_id\":%s,\"found\":%s}\n", JsonString(request_id).c_str(),
                response.found() ? "true" : "false");
  } else {
    std::printf("request %s: %s\n", request_id.c_str(),
                response.found() ? "found, aborted" : "not found");
  }
  return response.found() ? 0 : 3;  // a script can tell "nothing to abort" from success
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "wscope health [--wait=30s] ADDRESS... | wscope info|selftest [--target=ADDRESS] |\n"
      "  wscope generate [--target=ADDRESS] --prompt_ids=1,2,3 | --prompt_file=FILE\n"
      "      [--max_tokens=N] [--temperature=F] [--top_k=N] [--top_p=F] [--seed=N]\n"
      "      [--stop_ids=a,b] [--ignore_eos] [--logprobs=N] [--prompt_logprobs]\n"
      "      [--request_id=S] [--stream_interval=N] [--timeout=600s] [--json] |\n"
      "  wscope abort [--target=ADDRESS] --request_id=S [--json] (exit 3: no such request) |\n"
      "  wscope profile [--target=ADDRESS] [--steps=N] [--out=trace.json] |\n"
      "  wscope load [--target=ADDRESS] [--streams=N] [--duration=10s] [--prompt_tokens=N]\n"
      "      [--max_tokens=N] [--seed=N] [--json] |\n"
      "  wscope bench [--target=ADDRESS] [--batches=4,16] [--contexts=2048,8192]\n"
      "      [--decode_steps=N] [--warmup_steps=N] [--rounds=N] [--turns=N]\n"
      "      [--turn_warmup_steps=N] [--bench_for=D]\n"
      "      [--policies=P,P] [--csv=FILE] [--steps_csv=FILE] [--warmup_steps_csv=FILE]\n"
      "      [--prewarm_steps=N] [--temperature=F] [--top_k=N] [--top_p=F] [--seed=N]\n"
      "      [--logprobs=N]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::fprintf(stderr, "usage: %s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  const std::string command = args[1];
  std::vector<std::string> rest(args.begin() + 2, args.end());
  const bool known = command == "health" || command == "info" || command == "selftest" ||
                     command == "profile" || command == "load" || command == "bench" ||
                     command == "generate" || command == "abort";
  // Only health takes arguments (its addresses): a stray one elsewhere is refused, not
  // ignored (a value meant for a flag would be dropped and the defaults run).
  if (known && command != "health" && !rest.empty()) {
    std::fprintf(stderr, "wscope %s: unexpected argument '%s'%s\n", command.c_str(),
                 rest.front().c_str(),
                 command == "generate" ? " (ids go in --prompt_ids)" : " (flags start with --)");
    return 2;
  }
  if (command == "health") return Health(rest);
  if (command == "info") return Info();
  if (command == "selftest") return SelfTest();
  if (command == "profile") return Profile();
  if (command == "load") return Load();
  if (command == "bench") return Bench();
  if (command == "generate") return Generate();
  if (command == "abort") return Abort();
  std::fprintf(stderr, "wscope: unknown command '%s'\nusage: %s\n", command.c_str(),
               absl::ProgramUsageMessage().data());
  return 2;
}
