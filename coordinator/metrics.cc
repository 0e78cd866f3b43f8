#include "coordinator/metrics.h"

#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "coordinator/explore_reason.h"

namespace writescope::coordinator {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Upper bounds (seconds). Time to first token spans a short prompt on a warm batch to a
// long-context prefill behind a full queue; time per output token spans a fast GPU-only
// step to a slow CPU-bound one; a step is one decode (or prefill chunk) on one worker.
const std::vector<double>& TimeToFirstTokenBounds() {
  static const auto* const kBounds =
      new std::vector<double>{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};
  return *kBounds;
}
const std::vector<double>& TimePerOutputTokenBounds() {
  static const auto* const kBounds =
      new std::vector<double>{0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
  return *kBounds;
}
const std::vector<double>& StepBounds() {
  static const auto* const kBounds = new std::vector<double>{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *kBounds;
}

constexpr const char* kOutcomes[] = {"complete", "abort", "error", "rejected"};
constexpr const char* kWorkers[] = {"gpu_worker", "cpu_worker"};
constexpr const char* kReads[] = {"split", "gpu_only"};

// Adds one to `key`'s count, making its series where it has none.
void Increment(std::map<std::string, uint64_t, std::less<>>& counts, absl::string_view key) {
  auto it = counts.find(key);
  if (it == counts.end()) it = counts.emplace(std::string(key), 0).first;
  ++it->second;
}

// Prometheus's float syntax: NaN, +Inf, -Inf, else the shortest text that reads back
// to the same double (so 0.1 stays "0.1" and large counts keep every digit).
std::string FormatDouble(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  WS_CHECK(error == std::errc()) << "to_chars of " << value;
  return std::string(buffer, end);
}

// Label values escape backslash, double quote and newline; HELP text escapes backslash
// and newline only.
std::string Escape(absl::string_view text, bool escape_quote) {
  std::string escaped;
  escaped.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '\n') {
      escaped += "\\n";
    } else if (c == '"' && escape_quote) {
      escaped += "\\\"";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

// `key="value"`, the value escaped.
std::string Label(absl::string_view key, absl::string_view value) {
  return absl::StrCat(key, "=\"", Escape(value, /*escape_quote=*/true), "\"");
}

// Appends one exposition to a string: family headers, then its samples.
class Exposition {
 public:
  void Family(absl::string_view name, absl::string_view type, absl::string_view help) {
    absl::StrAppend(&text_, "# HELP ", name, " ", Escape(help, /*escape_quote=*/false), "\n",
                    "# TYPE ", name, " ", type, "\n");
  }

  // `labels`: comma-separated Label()s, or empty for none.
  void Sample(absl::string_view name, absl::string_view labels, absl::string_view value) {
    if (labels.empty()) {
      absl::StrAppend(&text_, name, " ", value, "\n");
    } else {
      absl::StrAppend(&text_, name, "{", labels, "} ", value, "\n");
    }
  }
  void Sample(absl::string_view name, absl::string_view labels, uint64_t value) {
    Sample(name, labels, absl::StrCat(value));
  }
  void Sample(absl::string_view name, absl::string_view labels, double value) {
    Sample(name, labels, FormatDouble(value));
  }

  // The _bucket/_sum/_count samples of one histogram series; `labels` precede `le`.
  void Histogram(absl::string_view name, absl::string_view labels,
                 const HistogramSnapshot& snapshot) {
    const std::string bucket = absl::StrCat(name, "_bucket");
    const std::string prefix = labels.empty() ? std::string() : absl::StrCat(labels, ",");
    for (size_t i = 0; i < snapshot.upper_bounds.size(); ++i) {
      Sample(bucket, absl::StrCat(prefix, Label("le", FormatDouble(snapshot.upper_bounds[i]))),
             snapshot.cumulative_counts[i]);
    }
    Sample(bucket, absl::StrCat(prefix, Label("le", "+Inf")), snapshot.cumulative_counts.back());
    Sample(absl::StrCat(name, "_sum"), labels, snapshot.sum);
    Sample(absl::StrCat(name, "_count"), labels, snapshot.count);
  }

  std::string Release() && { return std::move(text_); }

 private:
  std::string text_;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// Histogram.

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), bucket_counts_(bounds_.size() + 1, 0) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    WS_CHECK(std::isfinite(bounds_[i])) << "histogram bound " << i << " is " << bounds_[i];
    WS_CHECK(i == 0 || bounds_[i - 1] < bounds_[i])
        << "histogram bounds not strictly increasing at " << i;
  }
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // The first bound >= value: Prometheus buckets are `le` (less than or equal).
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard lock(mutex_);
  ++bucket_counts_[bucket];
  sum_ += value;
  ++count_;
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot snapshot;
  snapshot.upper_bounds = bounds_;
  snapshot.cumulative_counts.reserve(bounds_.size() + 1);
  std::lock_guard lock(mutex_);
  uint64_t running = 0;
  for (uint64_t n : bucket_counts_) {
    running += n;
    snapshot.cumulative_counts.push_back(running);
  }
  snapshot.sum = sum_;
  snapshot.count = count_;
  return snapshot;
}

// ---------------------------------------------------------------------------------------
// Metrics.

Metrics::Metrics()
    : time_to_first_token_(TimeToFirstTokenBounds()),
      time_per_output_token_(TimePerOutputTokenBounds()),
      target_cpu_share_(kNaN),
      optimal_cpu_share_(kNaN),
      cpu_ns_per_token_(kNaN),
      gpu_ns_per_token_(kNaN) {
  // The known series exist from the start, at 0, so rate() and absent() behave before
  // the first request of each kind.
  std::lock_guard lock(mutex_);
  for (const char* outcome : kOutcomes) requests_by_outcome_.emplace(outcome, 0);
  for (const char* read : kReads) decode_steps_by_read_.emplace(read, 0);
  for (absl::string_view reason : kExploreReasonNames) {
    if (!reason.empty()) exploring_steps_by_reason_.emplace(std::string(reason), 0);
  }
  for (const char* worker : kWorkers) {
    step_time_by_worker_.emplace(worker, std::make_unique<Histogram>(StepBounds()));
  }
}

void Metrics::AddPromptTokens(uint64_t n) {
  prompt_tokens_.fetch_add(n, std::memory_order_relaxed);
}

void Metrics::AddGeneratedTokens(uint64_t n) {
  generated_tokens_.fetch_add(n, std::memory_order_relaxed);
}

void Metrics::AddRequest(absl::string_view outcome) {
  std::lock_guard lock(mutex_);
  Increment(requests_by_outcome_, outcome);
}

void Metrics::AddDecodeStep(absl::string_view read, absl::string_view explore_reason) {
  std::lock_guard lock(mutex_);
  Increment(decode_steps_by_read_, read);
  if (!explore_reason.empty()) Increment(exploring_steps_by_reason_, explore_reason);
}

void Metrics::ObserveTimeToFirstToken(double seconds) { time_to_first_token_.Observe(seconds); }

void Metrics::ObserveTimePerToken(double seconds) { time_per_output_token_.Observe(seconds); }

void Metrics::ObserveStepTime(absl::string_view worker, double seconds) {
  Histogram* histogram;
  {
    std::lock_guard lock(mutex_);
    auto it = step_time_by_worker_.find(worker);
    if (it == step_time_by_worker_.end()) {
      it = step_time_by_worker_
               .emplace(std::string(worker), std::make_unique<Histogram>(StepBounds()))
               .first;
    }
    histogram = it->second.get();  // never erased: valid after the lock
  }
  histogram->Observe(seconds);
}

void Metrics::SetRequests(uint32_t running, uint32_t waiting) {
  std::lock_guard lock(mutex_);
  requests_running_ = running;
  requests_waiting_ = waiting;
}

void Metrics::SetKvBlocks(absl::string_view region, uint64_t used, uint64_t total) {
  std::lock_guard lock(mutex_);
  auto it = kv_blocks_by_region_.find(region);
  if (it == kv_blocks_by_region_.end()) {
    it = kv_blocks_by_region_.emplace(std::string(region), KvBlocks{}).first;
  }
  it->second = KvBlocks{used, total};
}

void Metrics::SetScheduler(double target_cpu_share, double optimal_cpu_share, double a_ns_per_token,
                           double b_ns_per_token) {
  std::lock_guard lock(mutex_);
  target_cpu_share_ = target_cpu_share;
  optimal_cpu_share_ = optimal_cpu_share;
  cpu_ns_per_token_ = a_ns_per_token;
  gpu_ns_per_token_ = b_ns_per_token;
}

std::string Metrics::Render() const {
  // Copy under the lock, format outside it: a scrape holds the step loop up only for
  // the copy.
  std::map<std::string, uint64_t> requests_by_outcome, decode_steps_by_read,
      exploring_steps_by_reason;
  std::map<std::string, HistogramSnapshot> step_time_by_worker;
  std::map<std::string, KvBlocks> kv_blocks_by_region;
  uint32_t requests_running, requests_waiting;
  double target_cpu_share, optimal_cpu_share, cpu_ns_per_token, gpu_ns_per_token;
  {
    std::lock_guard lock(mutex_);
    requests_by_outcome.insert(requests_by_outcome_.begin(), requests_by_outcome_.end());
    decode_steps_by_read.insert(decode_steps_by_read_.begin(), decode_steps_by_read_.end());
    exploring_steps_by_reason.insert(exploring_steps_by_reason_.begin(),
                                     exploring_steps_by_reason_.end());
    for (const auto& [worker, histogram] : step_time_by_worker_) {
      step_time_by_worker.emplace(worker, histogram->Snapshot());
    }
    kv_blocks_by_region.insert(kv_blocks_by_region_.begin(), kv_blocks_by_region_.end());
    requests_running = requests_running_;
    requests_waiting = requests_waiting_;
    target_cpu_share = target_cpu_share_;
    optimal_cpu_share = optimal_cpu_share_;
    cpu_ns_per_token = cpu_ns_per_token_;
    gpu_ns_per_token = gpu_ns_per_token_;
  }

  Exposition out;
  out.Family("writescope_requests_running", "gauge",
             "Requests in the running batch (prefilling or decoding).");
  out.Sample("writescope_requests_running", "", uint64_t{requests_running});
  out.Family("writescope_requests_waiting", "gauge",
             "Admitted requests waiting for a place in the batch.");
  out.Sample("writescope_requests_waiting", "", uint64_t{requests_waiting});

  out.Family("writescope_requests_total", "counter",
             "Finished requests by outcome: complete, abort, error or rejected.");
  for (const auto& [outcome, count] : requests_by_outcome) {
    out.Sample("writescope_requests_total", Label("outcome", outcome), count);
  }
  out.Family("writescope_decode_steps_total", "counter",
             "Decode steps by how they read the host KV: split (the CPU attended some in "
             "place) or gpu_only.");
  for (const auto& [read, count] : decode_steps_by_read) {
    out.Sample("writescope_decode_steps_total", Label("read", read), count);
  }
  out.Family("writescope_exploring_steps_total", "counter",
             "Decode steps that ran the read mode the scheduler's prediction did not pick, by "
             "what started the exploration: unmeasured, repeat, credit, max_period, guess, "
             "rest_shift or rest_rise.");
  for (const auto& [reason, count] : exploring_steps_by_reason) {
    out.Sample("writescope_exploring_steps_total", Label("reason", reason), count);
  }
  out.Family("writescope_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.");
  out.Sample("writescope_prompt_tokens_total", "", prompt_tokens_.load(std::memory_order_relaxed));
  out.Family("writescope_generated_tokens_total", "counter", "Tokens generated (sampled).");
  out.Sample("writescope_generated_tokens_total", "",
             generated_tokens_.load(std::memory_order_relaxed));

  out.Family("writescope_time_to_first_token_seconds", "histogram",
             "Time from a request's arrival to its first generated token.");
  out.Histogram("writescope_time_to_first_token_seconds", "", time_to_first_token_.Snapshot());
  out.Family("writescope_time_per_output_token_seconds", "histogram",
             "Time between consecutive generated tokens of a request.");
  out.Histogram("writescope_time_per_output_token_seconds", "", time_per_output_token_.Snapshot());
  out.Family("writescope_step_seconds", "histogram", "Wall time of one step on a worker.");
  for (const auto& [worker, snapshot] : step_time_by_worker) {
    out.Histogram("writescope_step_seconds", Label("worker", worker), snapshot);
  }

  out.Family("writescope_kv_blocks_used", "gauge",
             "KV cache blocks in use, by region (gpu_d_window: one window per live sequence).");
  for (const auto& [region, blocks] : kv_blocks_by_region) {
    out.Sample("writescope_kv_blocks_used", Label("region", region), blocks.used);
  }
  out.Family("writescope_kv_blocks_total", "gauge", "KV cache blocks in all, by region.");
  for (const auto& [region, blocks] : kv_blocks_by_region) {
    out.Sample("writescope_kv_blocks_total", Label("region", region), blocks.total);
  }

  out.Family("writescope_cpu_share_target", "gauge",
             "The scheduler's target share of host-resident KV tokens attended on the CPU.");
  out.Sample("writescope_cpu_share_target", "", target_cpu_share);
  out.Family("writescope_cpu_share_optimal", "gauge",
             "The roofline model's optimal CPU share r*; NaN until the scheduler has "
             "estimates.");
  out.Sample("writescope_cpu_share_optimal", "", optimal_cpu_share);
  out.Family("writescope_scheduler_cpu_ns_per_token", "gauge",
             "Estimated CPU attention cost A, ns per host-resident token per layer.");
  out.Sample("writescope_scheduler_cpu_ns_per_token", "", cpu_ns_per_token);
  out.Family("writescope_scheduler_gpu_ns_per_token", "gauge",
             "Estimated transfer + GPU attention cost B, ns per host-resident token per "
             "layer.");
  out.Sample("writescope_scheduler_gpu_ns_per_token", "", gpu_ns_per_token);
  return std::move(out).Release();
}

// ---------------------------------------------------------------------------------------
// MetricsServer.

namespace {

constexpr char kExpositionContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Handler threads. Scrapes are serialized anyway; two let /healthz answer during one.
constexpr size_t kHandlerThreads = 2;

// One request per connection, and a short wait for it: a scraper comes back every few
// seconds at most, so keep-alive would only hold handler threads (and delay Stop()).
constexpr time_t kRequestWaitSeconds = 2;
constexpr time_t kIoTimeoutSeconds = 5;

}  // namespace

MetricsServer::MetricsServer(const Metrics* metrics, std::function<void()> before_render)
    : metrics_(metrics), before_render_(std::move(before_render)) {
  WS_CHECK(metrics_ != nullptr);
}

MetricsServer::~MetricsServer() { Stop(); }

absl::StatusOr<int> MetricsServer::Start(const std::string& host, int port) {
  if (server_ != nullptr) {
    return absl::FailedPreconditionError("metrics server: already started");
  }
  if (host.empty()) return absl::InvalidArgumentError("metrics server: empty host");
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("metrics server: port %d outside [0, 65535]", port));
  }

  auto server = std::make_unique<httplib::Server>();
  // SO_REUSEADDR only. httplib's default sets SO_REUSEPORT, with which a second process
  // of the same user binds a port already in use and the two split the scrapes.
  server->set_socket_options([](int socket) {
    int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->new_task_queue = [] { return new httplib::ThreadPool(kHandlerThreads); };
  server->set_keep_alive_max_count(1);
  server->set_keep_alive_timeout(kRequestWaitSeconds);
  server->set_read_timeout(kIoTimeoutSeconds);
  server->set_write_timeout(kIoTimeoutSeconds);
  server->Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    std::string body;
    {
      std::lock_guard lock(scrape_mutex_);
      if (before_render_) before_render_();
      body = metrics_->Render();
    }
    response.set_content(body, kExpositionContentType);
  });
  server->Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("ok\n", "text/plain; charset=utf-8");
  });

  // httplib reports a failed bind as a bare false/-1; errno still holds the last
  // socket call's error (EADDRINUSE, EADDRNOTAVAIL, ...), which we pass on as a hint.
  errno = 0;
  int bound_port = -1;
  if (port == 0) {
    bound_port = server->bind_to_any_port(host);
  } else if (server->bind_to_port(host, port)) {
    bound_port = port;
  }
  if (bound_port < 0) {
    const int error = errno;
    return absl::UnavailableError(absl::StrFormat(
        "metrics server: cannot listen on %s:%d%s", host, port,
        error != 0 ? absl::StrCat(" (", std::strerror(error), ")") : std::string()));
  }

  listener_done_ = false;
  httplib::Server* listening = server.get();
  server_ = std::move(server);
  listener_ = std::thread([this, listening] {
    // Debian's libcpp-httplib sends without MSG_NOSIGNAL. It gives up a response at the
    // first failed send, which after a reset reports ECONNRESET rather than EPIPE, but a
    // SIGPIPE that slipped through would end the whole process. Blocked here, it is
    // blocked in the handler threads too (this thread spawns them), and send() returns
    // EPIPE instead; the rest of the process keeps its own disposition.
    sigset_t sigpipe;
    sigemptyset(&sigpipe);
    sigaddset(&sigpipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &sigpipe, nullptr);
    if (!listening->listen_after_bind()) {
      WS_LOG(ERROR) << "metrics server: the listener stopped on an error";
    }
    listener_done_ = true;
  });
  // httplib's stop() does nothing until the listener is running, so a Stop() right
  // after Start() would leave it running and join forever: wait for it.
  while (!server_->is_running() && !listener_done_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!server_->is_running()) {
    listener_.join();
    server_.reset();
    return absl::UnavailableError(
        absl::StrFormat("metrics server: the listener on %s:%d exited at once", host, port));
  }
  WS_LOG(INFO) << "metrics server: serving /metrics on " << host << ":" << bound_port;
  return bound_port;
}

void MetricsServer::Stop() {
  if (server_ == nullptr) return;
  server_->stop();
  listener_.join();
  server_.reset();
}

}  // namespace writescope::coordinator
