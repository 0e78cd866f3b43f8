// The coordinator's Prometheus metrics and the HTTP endpoint that serves them.
//
// Metrics holds every counter, gauge and histogram the coordinator exports and renders
// them in the Prometheus text exposition format 0.0.4. The coordinator feeds it from its
// step loop (counters, histograms) and refreshes the gauges each step or just before a
// scrape (MetricsServer's before_render hook). MetricsServer serves GET /metrics and
// GET /healthz from a background thread; it knows nothing of the coordinator.
//
// Units: seconds for every time, KV blocks for the cache, ns per host-resident token
// per layer for the scheduler's estimates (the roofline A and B of scheduler.h).
#ifndef WRITESCOPE_COORDINATOR_METRICS_H_
#define WRITESCOPE_COORDINATOR_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace writescope::coordinator {

// A histogram's state at one instant: the counts are consistent with each other (taken
// under one lock), so cumulative_counts.back() == count always holds.
struct HistogramSnapshot {
  std::vector<double> upper_bounds;         // finite, strictly increasing; +Inf implied
  std::vector<uint64_t> cumulative_counts;  // [upper_bounds.size() + 1], last is +Inf
  double sum = 0.0;
  uint64_t count = 0;
};

// A Prometheus histogram with fixed upper bounds (seconds). Thread-safe.
class Histogram {
 public:
  // `bounds` must be finite and strictly increasing (checked); the +Inf bucket is
  // implied. Empty bounds give a histogram of one (+Inf) bucket.
  explicit Histogram(std::vector<double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts `value` in the first bucket whose upper bound is >= value (Prometheus `le`).
  // A NaN is dropped: it would turn _sum into NaN for the rest of the process's life.
  void Observe(double value);

  HistogramSnapshot Snapshot() const;

 private:
  const std::vector<double> bounds_;
  // std::mutex, not absl::Mutex: Debian's Abseil is not TSan-instrumented.
  mutable std::mutex mutex_;
  // Guarded by mutex_.
  std::vector<uint64_t> bucket_counts_;  // per bucket, not cumulative
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// Everything the coordinator exports. Thread-safe: the token counters are atomics,
// everything else is under one mutex (each histogram also has its own).
class Metrics {
 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Counters.
  void AddPromptTokens(uint64_t n);
  void AddGeneratedTokens(uint64_t n);
  // `outcome`: "complete", "abort", "error" or "rejected" (these four are exported from
  // the start, at 0); any other value gets a series of its own.
  void AddRequest(absl::string_view outcome);
  // One decode step (no prompt chunk in it): `read` "split" (the CPU attended some of its
  // host tokens) or "gpu_only" (both exported from the start); `explore_reason` what started
  // the exploration it is a step of (coordinator/explore_reason.h: unmeasured, repeat,
  // credit, max_period, guess, rest_shift, rest_rise, exported from the start), "" when it is
  // not exploring. Other values get series of their own.
  void AddDecodeStep(absl::string_view read, absl::string_view explore_reason);

  // Histograms.
  void ObserveTimeToFirstToken(double seconds);
  void ObserveTimePerToken(double seconds);
  // `worker`: "gpu_worker" or "cpu_worker" (exported from the start); others are added.
  void ObserveStepTime(absl::string_view worker, double seconds);

  // Gauges, set by the coordinator each step or on scrape. The scheduler's gauges are
  // NaN until the first SetScheduler; `optimal_cpu_share` may stay NaN until the
  // scheduler has estimates.
  void SetRequests(uint32_t running, uint32_t waiting);
  void SetKvBlocks(absl::string_view region, uint64_t used, uint64_t total);
  void SetScheduler(double target_cpu_share, double optimal_cpu_share, double a_ns_per_token,
                    double b_ns_per_token);

  // The Prometheus text exposition format 0.0.4: a # HELP and a # TYPE line per family,
  // names prefixed "writescope_", label values escaped, histograms as cumulative
  // _bucket{le=...} (ending at le="+Inf") plus _sum and _count. NaN is written NaN.
  std::string Render() const;

 private:
  struct KvBlocks {
    uint64_t used = 0;
    uint64_t total = 0;
  };

  std::atomic<uint64_t> prompt_tokens_{0};
  std::atomic<uint64_t> generated_tokens_{0};
  Histogram time_to_first_token_;
  Histogram time_per_output_token_;

  mutable std::mutex mutex_;
  // Guarded by mutex_. std::map: the exposition lists series in label order, the same
  // on every scrape.
  std::map<std::string, uint64_t, std::less<>> requests_by_outcome_;
  std::map<std::string, uint64_t, std::less<>> decode_steps_by_read_;
  std::map<std::string, uint64_t, std::less<>> exploring_steps_by_reason_;
  // unique_ptr: a Histogram is not movable; the pointers stay valid for our lifetime.
  std::map<std::string, std::unique_ptr<Histogram>, std::less<>> step_time_by_worker_;
  std::map<std::string, KvBlocks, std::less<>> kv_blocks_by_region_;
  uint32_t requests_running_ = 0;
  uint32_t requests_waiting_ = 0;
  double target_cpu_share_;
  double optimal_cpu_share_;
  double cpu_ns_per_token_;
  double gpu_ns_per_token_;
};

// Serves GET /metrics (text/plain; version=0.0.4) and GET /healthz on host:port from a
// background thread (cpp-httplib, two handler threads). Every other path is 404.
// Start and Stop are called from one thread; the handlers run on the server's threads.
class MetricsServer {
 public:
  // `metrics` must outlive the server. `before_render`, when set, runs before every
  // render of /metrics (to refresh the gauges); scrapes are serialized, so it never
  // runs concurrently with itself.
  explicit MetricsServer(const Metrics* metrics, std::function<void()> before_render = {});
  ~MetricsServer();  // Stop()s
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds host:port and starts serving; returns the bound port (port 0 picks a free
  // one). INVALID_ARGUMENT for an empty host or a port outside [0, 65535],
  // FAILED_PRECONDITION when already started, UNAVAILABLE when host:port cannot be
  // resolved or bound (e.g. the port is in use; the message carries errno's text).
  absl::StatusOr<int> Start(const std::string& host, int port);

  // Stops serving and closes the port. Idempotent; a stopped server can Start again.
  void Stop();

 private:
  const Metrics* const metrics_;
  const std::function<void()> before_render_;
  std::mutex scrape_mutex_;  // serializes before_render_ + Render
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::atomic<bool> listener_done_{false};
};

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_METRICS_H_
