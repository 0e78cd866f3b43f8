// The coordinator's serving loop: admits Generate requests, batches them continuously
// (chunked prefill mixed with decode), places their KV (KvPlacement, steered by the
// Scheduler), sends each step's plan to both workers, samples the next tokens and streams
// them back.
//
// One engine thread runs the steps; Generate handlers only Submit and read their
// RequestStream. Per step:
//   1. drop requests that were aborted, cancelled or ran past their deadline (their blocks
//      are freed before the plan is built);
//   2. admit waiting requests while a D-window is free and the regions can hold their whole
//      context (prompt + max_tokens blocks are reserved at admission, so a running request
//      never runs out of KV); a context larger than both regions together is refused at
//      Submit with RESOURCE_EXHAUSTED and the numbers;
//   3. plan: one decode token per generating sequence, then prompt chunks of whole blocks
//      (the last chunk takes the remainder) up to max_step_tokens; new blocks are placed
//      where the scheduler's target CPU share steers them (prefill blocks, D-window flushes);
//   4. RunStep on both workers at once; on failure every request of the step ends with the
//      error and its blocks are freed;
//   5. sample (greedy / temperature / top-k / top-p, per-request seeded generator), stream,
//      stop on max_tokens, a stop id or EOS;
//   6. feed the workers' timings of decode-only steps to the scheduler.
#ifndef WRITESCOPE_COORDINATOR_ENGINE_H_
#define WRITESCOPE_COORDINATOR_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/kv_config.h"
#include "common/model_config.h"
#include "common/profile.h"
#include "coordinator/expert_placement.h"
#include "coordinator/metrics.h"
#include "coordinator/placement.h"
#include "coordinator/request_validation.h"
#include "coordinator/resplit.h"
#include "common/sampler.h"
#include "coordinator/scheduler.h"
#include "writescope/internal/worker.pb.h"
#include "writescope/v1/writescope.pb.h"

namespace writescope::coordinator {

// The first token a bench round feeds its sequence `index` of `batch` (index < batch, vocab
// > 0): ids spread evenly over the vocabulary, (index + 1/2) * vocab / batch, so that the
// rows differ (their routed experts follow their tokens) and each round and policy feeds
// the same ones. Distinct while batch <= vocab.
uint32_t BenchFirstToken(uint32_t index, uint32_t batch, uint32_t vocab);

// Whether a client that cancelled its call at `now` did so at its deadline. gRPC sends a call's
// timeout rounded up (to the millisecond below a second, else to about three significant
// figures: at most 1 % more), and the server's copy counts from the call's arrival
// (`submitted`), so it can pass a little after the client's: a client cancelling at its own
// deadline reaches the server just before. Counted as the deadline from 1 % of the call's time
// plus 10 ms before it; never where the deadline is infinite.
bool CancelledAtDeadline(absl::Time submitted, absl::Time deadline, absl::Time now);

// What the engine needs of a worker: run one step, cancel one. WorkerClient (gRPC) in the
// service, fakes in tests.
class StepWorker {
 public:
  virtual ~StepWorker() = default;
  virtual absl::StatusOr<internal::StepResult> RunStep(const internal::StepPlan& plan,
                                                       absl::Duration timeout) = 0;
  // Cancels step `step_id`, also when its call has not started yet.
  virtual void CancelStep(uint64_t step_id) = 0;
  // The gpu_worker's timing of its decode attention path (worker.proto); UNIMPLEMENTED by
  // default (a worker without one).
  virtual absl::StatusOr<internal::PathProbeResponse> ProbeGpuPath(
      const internal::PathProbeRequest& request, absl::Duration timeout) {
    return absl::UnimplementedError("no GPU attention path to probe");
  }
  // The cpu_worker's timing of its decode attention in place (worker.proto); UNIMPLEMENTED
  // by default.
  virtual absl::StatusOr<internal::PathProbeResponse> ProbeCpuPath(
      const internal::PathProbeRequest& request, absl::Duration timeout) {
    return absl::UnimplementedError("no CPU attention path to probe");
  }
};

struct EngineOptions {
  // Tokens per step (decode tokens + prompt chunk tokens); also capped by the data plane.
  uint32_t max_step_tokens = 512;
  uint32_t queue_capacity = 256;
  uint32_t max_prompt_tokens = 0;  // 0: the model's context
  absl::Duration step_timeout = absl::Minutes(10);
  // Prefill chunks: "auto" lets the gpu_worker read the chunk's earlier CPU-compute blocks
  // over PCIe when the roofline says the CPU would be slower (chunk tokens x A > B: a
  // chunk of q queries costs the CPU q times a decode token's attention per key, the GPU
  // one transfer), "split" always attends them on the CPU in place.
  std::string prefill_attention = "auto";
  // The scheduler's per-layer attention samples come from the layers after a decode step's
  // first (both paths; steps of more than one layer). The model balances the two paths per
  // layer, while the step waits per layer for the later of the two, and the first layer is
  // unlike the rest: its GPU side streams over the step boundary's serial work and the early
  // rounds, its CPU side starts the step. Mixtral 32 x 32K on the H200 (4 layers, run 144):
  // the first layer's GPU attention 13.6-24.6 ms against 25-33 for the others, its CPU
  // attention 24.6-29.4 against 19-22; their means came out level while layers 1-3 waited
  // 5-12 ms each for the GPU with the CPU idle. A/B (runs 145, 147): steps 1.01-1.08x faster
  // at 11 of 12 Qwen3 and DeepSeek points (DeepSeek 4 x 8K 0.98x), 1.03x at Mixtral 32 x 32K.
  // false: the means over all layers.
  bool steady_layer_samples = true;
  // Log-probabilities per stream message (>= 1): a chunk holds at most this many prompt
  // entries (Chunk.prompt_logprobs) and at most this many generated tokens, whatever
  // stream_interval asks. Each is at most ~230 bytes with 20 alternatives, so 4096 keep a
  // message under 1 MiB, well inside a default gRPC client's 4 MiB receive limit.
  uint32_t logprobs_per_chunk = 4096;
};

// A worker's attention time per layer, the scheduler's sample (StepSample): its attended
// tokens per layer and its attention time over `layers` layers, or with `steady_layers` and
// more than one layer over the layers after the first (EngineOptions::steady_layer_samples).
CostSample AttentionSample(const internal::StepResult& result, uint32_t layers,
                           bool steady_layers);

// What the CPU's chain spent per layer beyond its attention sample `cpu_sample_ns`
// (StepSample::cpu_chain_extra_ns): the step (`step_ns` per layer) less each layer's later path
// (the gpu_worker's attention and its wait for the CPU's partial), plus the cpu_worker's
// attention over all `layers` layers beyond the sample. At least 0.
double CpuChainExtraNs(const internal::StepResult& gpu, const internal::StepResult& cpu,
                       double layers, double step_ns, double cpu_sample_ns);

// The host tokens a step's plan has the gpu_worker stream per layer (its ping-pong rounds):
// every GPU-transfer block, and the CPU-compute blocks of the sequences whose
// gpu_reads_cpu_blocks is set.
uint64_t StreamedHostTokens(const internal::StepPlan& plan);

// What one Generate call reads: responses in order, then the end.
class RequestStream {
 public:
  // Waits up to `timeout` for the next response. False with *done = true once the stream
  // is over (after its Complete or Error), false with *done = false on timeout.
  bool Next(v1::GenerateResponse* out, absl::Duration timeout, bool* done);
  // The client went away: the request ends at the next step.
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  // The status the RPC ends with (OK, or the error that ended the request).
  absl::Status final_status() const;

 private:
  friend class Engine;
  void Push(v1::GenerateResponse response);
  void Finish(absl::Status status);

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<v1::GenerateResponse> queue_;
  bool finished_ = false;
  absl::Status status_;
  std::atomic<bool> cancelled_{false};
};

struct EngineCounts {
  uint32_t running = 0;
  uint32_t waiting = 0;
  uint64_t steps = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  uint64_t resplit_blocks = 0;  // moved by the monolithic policy's re-splits
  double resplit_ms = 0;        // their copies' time
};

class Engine {
 public:
  // Everything borrowed must outlive the engine; `placement` and `scheduler` are used
  // under `placement_mutex`.
  // `metrics` may be null.
  Engine(const EngineOptions& options, const ModelConfig& model, const KvCacheConfig& kv,
         std::mutex* placement_mutex, KvPlacement* placement, Scheduler* scheduler,
         StepWorker* gpu_worker, StepWorker* cpu_worker, Metrics* metrics = nullptr);
  ~Engine();

  void Start();
  // Ends every request (UNAVAILABLE) and stops the loop.
  void Stop();

  // Validates and queues a request. INVALID_ARGUMENT naming the field; RESOURCE_EXHAUSTED
  // when its context cannot fit the KV regions or the queue is full; ALREADY_EXISTS for a
  // request id in flight; UNAVAILABLE when not serving.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(const v1::GenerateRequest& request,
                                                        absl::Time deadline);
  // The Bench RPC (writescope.proto): an optional warm-up round, then the measured round of
  // `batch` bench requests, each round admitted together once all of it is queued; returns
  // the measured round's steps in which all `batch` sequences decoded (policy and
  // num_layers are the caller's to fill). `cancelled` (optional) is polled while the
  // rounds run: when it returns true, the bench's requests are cancelled and it ends
  // CANCELLED (the RPC's client went away, or the server is shutting down).
  absl::StatusOr<v1::BenchResponse> RunBench(const v1::BenchRequest& request,
                                             absl::Duration timeout,
                                             const std::function<bool()>& cancelled = {});
  // RunBench's checks of the request alone, before anything runs or changes: INVALID_ARGUMENT
  // naming the field, RESOURCE_EXHAUSTED when its batch cannot fit the KV regions.
  absl::Status ValidateBench(const v1::BenchRequest& request) const;
  // Ends a running or queued request at the next step. False when no such request.
  bool Abort(const std::string& request_id);
  // Ends every request with `status` (a worker died).
  void FailAll(const absl::Status& status);
  // KV blocks and D-window slots taken outside the engine (the self test), counted with the
  // requests' reservations so that neither can run the other out of KV. False (nothing
  // reserved) when they are not free now.
  bool ReserveExternal(uint64_t blocks, uint32_t sequences);
  void ReleaseExternal(uint64_t blocks, uint32_t sequences);

  void set_serving(bool serving) { serving_.store(serving); }
  // The scheduler's calibration of the GPU path (issue 7: "B calibrated at start-up with the
  // runtime's own fixed-shape DMA, re-measured periodically"): the gpu_worker streams and
  // attends 1/8, 1/4, 1/2 and all of a fixed number of GPU-transfer blocks per layer
  // (ProbeGpuPath: at most one ping-pong buffer, the transfer region, 256 MiB and 128K
  // tokens per layer), and Scheduler::CalibrateGpu fits its lines through those points.
  // The coordinator calls it once the workers have loaded, before serving; the engine again
  // every recalibration_period_steps decode steps (Scheduler::RecalibrationDue), between
  // steps.
  // FAILED_PRECONDITION, nothing changed, for a transfer region too small to probe (< 2
  // blocks); the worker's error otherwise. While the engine runs, from its thread only.
  absl::Status CalibrateGpuPath();
  // The same for the CPU path, once, when the workers have loaded: the cpu_worker attends
  // 1/8, 1/4, 1/2 and all of a fixed number of CPU-compute blocks per layer in place
  // (ProbeCpuPath: at most the region, 256 MiB and 128K tokens per layer), and
  // Scheduler::CalibrateCpu starts the CPU line from them. Without it the line starts from
  // its first samples with an intercept prior of 0; the samples of a batch all sit at one
  // token count, so the slope took the whole fixed cost and made the CPU look 2-3x slower
  // than it is at a small share, which kept the share small (Qwen3 8K points on the H200,
  // run 130: 75-127 ns per token at a CPU share of 0.09, the other policies' CPU attention
  // 31-45 at the same time). FAILED_PRECONDITION, nothing changed, for a CPU-compute region
  // of < 2 blocks; the worker's error otherwise (UNIMPLEMENTED: a worker without the probe).
  absl::Status CalibrateCpuPath();
  // Makes `scheduler` the one every later step plans with and teaches (the Bench RPC's
  // policy: Coordinator::Bench). Only while no request runs or waits and no step is under
  // way: FAILED_PRECONDITION otherwise, nothing changed. A scheduler the engine has not run
  // before is calibrated with the points of the paths' last probes (the ones the scheduler
  // it replaces was fitted to; INTERNAL if that fit fails, nothing changed). `scheduler` must
  // outlive the engine, or its next switch.
  absl::Status SwitchScheduler(Scheduler* scheduler);
  // The scheduler the steps plan with now; read with the placement mutex held (the one the
  // engine was made with, or the last SwitchScheduler's).
  const Scheduler& scheduler() const { return *scheduler_; }
  struct PathCalibration {
    uint64_t count = 0;        // calibrations done
    double last_ms = 0;        // the last probe's wall time
    double ns_per_token = 0;   // its fitted slope (B or A) and intercept (c_G or c_C), per
    double fixed_ns = 0;       // layer
  };
  PathCalibration gpu_calibration() const;
  PathCalibration cpu_calibration() const;
  // Where routed experts run, per step (after the workers loaded: their load responses
  // carry the rates). Until set, always the cpu_worker.
  void set_expert_placement(const ExpertPlacement& placement);

  // How the monolithic policy moves a block's bytes between the host regions (the
  // coordinator's: CopyKvBlocks in its arena). With it, a monolithic scheduler's target change
  // re-splits the batch before the next step (coordinator/resplit.h): the step pays for the
  // copies, its plan says so (StepPlan.kv_moved). Without it (tests of other policies),
  // monolithic only steers where new blocks land. Set before Start.
  void set_block_copier(BlockCopier copier) { block_copier_ = std::move(copier); }

  // Called (on the engine thread) when a step fails: the coordinator checks the workers'
  // health at once instead of at its next poll.
  void set_on_step_failure(std::function<void()> callback) {
    on_step_failure_ = std::move(callback);
  }
  // The coordinator's spans (admission, planning, the step's wait for the workers, sampling).
  const SpanRecorder& spans() const { return spans_; }
  // The scheduler at work over the last decode-only steps: per layer, what the roofline
  // model predicted for the chosen split and what the workers measured (ms, means).
  struct SchedulerCheck {
    uint32_t steps = 0;
    double predicted_cpu_ms = 0, measured_cpu_ms = 0;
    double predicted_gpu_ms = 0, measured_gpu_ms = 0;
  };
  SchedulerCheck scheduler_check() const;
  static constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  // What each step cost (the last kMaxStepRecords).
  struct StepRecord {
    uint64_t step_id = 0;
    uint32_t decode_sequences = 0;
    uint32_t prefill_tokens = 0;
    uint64_t bench_round = 0;      // > 0: the step decoded bench sequences of this round
    uint32_t bench_sequences = 0;  // ... this many (other requests may share the step)
    double step_ms = 0;        // planning to the end of sampling
    double gpu_attention_ms = 0, cpu_attention_ms = 0;
    double gpu_expert_wait_ms = 0, cpu_expert_ms = 0;
    bool experts_on_gpu = false;
    double target_cpu_share = 0, placed_cpu_share = 0, optimal_cpu_share = 0;
    // Of the step's host tokens, the share the CPU attended in place (below the placed
    // share when the GPU read CPU-compute blocks); whether that was an exploration.
    double read_cpu_share = 0;
    bool explore = false;
    // writescope's predictions of the two modes for this step, all layers (ms; NaN: no
    // prediction, e.g. another policy or before the lines are ready).
    double predicted_split_ms = 0, predicted_gpu_only_ms = 0;
    double rest_split_ms = 0, rest_gpu_only_ms = 0;  // the rests behind them
    double gpu_hot_expert_ms = 0, hot_pair_share = 0;
    double experts_per_layer = 0;      // StepResult.routed_experts / moe_layers (0: none)
    double cpu_experts_per_layer = 0;  // StepResult.cpu_routed_experts / moe_layers
    uint32_t early_rounds_missed = 0;  // StepResult.early_rounds_missed
    double transfer_ms = 0;            // StepResult.transfer_ms (0: not timed)
    double gpu_waited_cpu_ms = 0;      // StepResult.cpu_attention_wait_ms
    ExploreReason explore_reason = ExploreReason::kNone;  // of the exploration it is part of
    uint64_t gpu_transfer_copies = 0;  // StepResult.transfer_copies
    double gpu_worker_cpu_ms = 0;      // StepResult.process_cpu_ms
    // writescope's ReadDecision::explore_cost_ns (NaN: not an exploration's first step) and
    // explore_debt_ns, all layers.
    double explore_cost_ms = std::numeric_limits<double>::quiet_NaN();
    double explore_debt_ms = 0;
    // The monolithic policy's re-split before this step (set_block_copier): its copies' time
    // (part of step_ms) and the blocks it moved.
    double resplit_ms = 0;
    uint64_t resplit_blocks = 0;
    uint64_t host_tokens = 0;   // per layer, both regions, this step's sequences
    double bound_ms = 0;        // the roofline bound of its attention, all layers (0: no estimates)
    // The scheduler's lines after the step, per layer (BenchStep's fields of these names;
    // NaN: not ready).
    double cpu_ns_per_token = kNan, cpu_fixed_us = kNan;
    double gpu_ns_per_token = kNan, gpu_fixed_us = kNan;
    double dma_ns_per_token = kNan, dma_fixed_us = kNan;
    double chain_extra_us = kNan;
    double end_unix_s = 0;      // wall clock at the step's end, seconds since the Unix epoch
  };
  static constexpr size_t kMaxStepRecords = 8192;
  std::vector<StepRecord> StepRecords(uint64_t bench_round) const;
  EngineCounts Counts() const;
  const RequestLimits& limits() const { return limits_; }
  uint32_t max_step_tokens() const { return max_step_tokens_; }

 private:
  struct Request;
  // A benchmark request of RunBench's, after ValidateBench: `context_tokens` tokens (a
  // multiple of the block size, within the model's context with the steps) are placed
  // in the KV regions at admission, as a prefill would place them but without computing
  // them, then it decodes `decode_steps` tokens (no EOS) sampled as `sampling` says
  // (temperature, top_k, top_p, seed, logprobs; its other fields are the bench's own:
  // RunBench refuses them). Steps that decode sequences of `round` (> 0) are tagged with it
  // (StepRecord). Queued held: admitted only after ReleaseBenchRound(round). It is sequence
  // `index` of `batch`: its first fed token is BenchFirstToken(index, batch, vocab).
  absl::StatusOr<std::shared_ptr<RequestStream>> SubmitBench(uint64_t context_tokens,
                                                             uint32_t decode_steps,
                                                             uint64_t round,
                                                             const v1::SamplingParams& sampling,
                                                             uint32_t index, uint32_t batch);
  absl::StatusOr<std::shared_ptr<RequestStream>> Queue(const v1::GenerateRequest& request,
                                                       absl::Time deadline,
                                                       uint64_t bench_round = 0);
  void Loop();
  // Step phases (engine thread).
  void DropEnded();
  void Admit();
  // Lets the queued requests of bench round `round` be admitted (Queue holds them).
  void ReleaseBenchRound(uint64_t round);
  absl::Status RunOneStep();
  // Host-resident tokens of the live sequences (their blocks, not their D-windows).
  // Callers hold placement_mutex_.
  // A path's probe (`gpu`: the GPU path's, else the CPU's): the running scheduler fitted to its
  // points, which are kept for the schedulers switched to later; logged and counted.
  absl::Status ApplyCalibration(bool gpu, const internal::PathProbeResponse& response);
  uint64_t LiveHostTokens() const;
  // A decode-only step: who reads the CPU-compute blocks (Scheduler::ChooseDecodeReads);
  // marks the sequences whose blocks the GPU streams. Under the placement lock.
  void ChooseDecodeReads(internal::StepPlan* plan, ReadDecision* decision);
  void Finish(Request& request, v1::FinishReason reason);
  void Fail(Request& request, const absl::Status& status);
  void Release(Request& request);
  // Streams and possibly finishes a request whose step sampled a token (on the gpu_worker,
  // with the draw the plan carried).
  void Sampled(Request& request, const internal::SampledToken& token);
  // Streams the request's pending tokens (and, the first time, its prompt logprobs).
  void PushChunk(Request& request);

  EngineOptions options_;
  ModelConfig model_;
  KvCacheConfig kv_;
  RequestLimits limits_;
  uint32_t max_step_tokens_ = 0;
  std::mutex* placement_mutex_;
  KvPlacement* placement_;
  Scheduler* scheduler_;  // guarded by placement_mutex_ (SwitchScheduler changes it)
  BlockCopier block_copier_;
  // The target the placement was last re-split to (monolithic; NaN: none yet, or a new
  // scheduler). Engine thread, under placement_mutex_.
  double resplit_target_ = std::numeric_limits<double>::quiet_NaN();
  // Blocks moved since the last plan sent (StepPlan.kv_moved). Engine thread.
  bool kv_moved_unsent_ = false;
  StepWorker* gpu_worker_;
  StepWorker* cpu_worker_;
  Metrics* metrics_;
  std::function<void()> on_step_failure_;

  mutable std::mutex mutex_;  // the queues and the request map
  std::condition_variable work_;
  std::deque<std::shared_ptr<Request>> waiting_;
  std::vector<std::shared_ptr<Request>> running_;  // engine thread only
  absl::flat_hash_map<std::string, std::shared_ptr<Request>> by_id_;
  uint64_t reserved_blocks_ = 0;     // guarded by mutex_
  uint32_t external_sequences_ = 0;  // guarded by mutex_
  uint64_t next_sequence_ = 1;
  uint64_t next_step_ = 1;
  uint64_t next_auto_id_ = 1;
  std::atomic<bool> serving_{false};
  bool stopping_ = false;
  EngineCounts counts_;
  SpanRecorder spans_;
  SchedulerCheck check_;  // guarded by mutex_; decays (last ~32 steps)
  std::deque<StepRecord> records_;  // guarded by mutex_
  // A step is running (RunOneStep); steps_ended_ counts those that returned, a step that
  // succeeded after its record (guarded by mutex_; step_ended_ is signalled at each end and
  // at Stop). A request's stream ends inside its last step, before that step's record:
  // RunBench waits for the step's end.
  bool in_step_ = false;
  uint64_t steps_ended_ = 0;
  std::condition_variable step_ended_;
  std::atomic<uint64_t> next_bench_round_{1};
  std::optional<ExpertPlacement> experts_;  // guarded by placement_mutex_
  // The sequences (seq_id) whose CPU-compute blocks the CPU attended in the last decode-only
  // step that did not explore: the gpu_worker queues that step's first KV rounds early for
  // the next one (Scheduler::ChooseDecodeReads' queued_readers). Empty after a step with
  // prompt chunks (engine thread).
  std::vector<uint64_t> queued_cpu_readers_;
  PathCalibration gpu_calibration_;          // guarded by mutex_
  PathCalibration cpu_calibration_;          // guarded by mutex_
  // The last probes' points, and the schedulers that ran here (guarded by
  // placement_mutex_): a scheduler switched to for the first time is fitted to them.
  std::vector<CostSample> gpu_calibration_points_;
  std::vector<CostSample> cpu_calibration_points_;
  absl::flat_hash_set<const Scheduler*> schedulers_run_;
  std::thread thread_;
};

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_ENGINE_H_
