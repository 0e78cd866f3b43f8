#include "coordinator/metrics.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace writescope::coordinator {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;
using ::testing::StartsWith;

using Labels = std::map<std::string, std::string>;

// ---------------------------------------------------------------------------------------
// A small parser of the text exposition format 0.0.4 (what Prometheus accepts of it, no
// timestamps): "# HELP name text", "# TYPE name type", and `name{k="v",...} value`.

struct Sample {
  std::string name;
  Labels labels;
  double value = 0.0;
};

struct Exposition {
  std::map<std::string, std::string> help;  // family -> text (unescaped)
  std::map<std::string, std::string> type;  // family -> counter|gauge|histogram|...
  std::vector<Sample> samples;              // in order
};

bool IsNameStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

absl::StatusOr<double> ParseValue(absl::string_view text) {
  if (text == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (text == "+Inf") return std::numeric_limits<double>::infinity();
  if (text == "-Inf") return -std::numeric_limits<double>::infinity();
  double value;
  if (!absl::SimpleAtod(text, &value) || std::isnan(value) || std::isinf(value)) {
    return absl::InvalidArgumentError(absl::StrCat("bad value '", text, "'"));
  }
  return value;
}

// Reads a metric or label name at text[*pos].
absl::StatusOr<std::string> ParseName(absl::string_view text, size_t* pos) {
  const size_t start = *pos;
  if (start >= text.size() || !IsNameStart(text[start])) {
    return absl::InvalidArgumentError(absl::StrCat("expected a name at ", start));
  }
  while (*pos < text.size() && IsNameChar(text[*pos])) ++*pos;
  return std::string(text.substr(start, *pos - start));
}

absl::StatusOr<Sample> ParseSample(absl::string_view line) {
  Sample sample;
  size_t pos = 0;
  auto name = ParseName(line, &pos);
  if (!name.ok()) return name.status();
  sample.name = *name;
  if (pos < line.size() && line[pos] == '{') {
    ++pos;
    while (pos < line.size() && line[pos] != '}') {
      auto key = ParseName(line, &pos);
      if (!key.ok()) return key.status();
      if (line.substr(pos, 2) != "=\"") return absl::InvalidArgumentError("expected =\"");
      pos += 2;
      std::string value;
      for (;;) {
        if (pos >= line.size()) return absl::InvalidArgumentError("unterminated label value");
        const char c = line[pos++];
        if (c == '"') break;
        if (c == '\n') return absl::InvalidArgumentError("raw newline in a label value");
        if (c != '\\') {
          value += c;
          continue;
        }
        if (pos >= line.size()) return absl::InvalidArgumentError("dangling backslash");
        const char escaped = line[pos++];
        if (escaped == 'n') {
          value += '\n';
        } else if (escaped == '\\' || escaped == '"') {
          value += escaped;
        } else {
          return absl::InvalidArgumentError(absl::StrCat("bad escape \\", std::string(1, escaped)));
        }
      }
      if (!sample.labels.emplace(*key, value).second) {
        return absl::InvalidArgumentError(absl::StrCat("duplicate label ", *key));
      }
      if (pos < line.size() && line[pos] == ',') ++pos;
    }
    if (pos >= line.size()) return absl::InvalidArgumentError("unterminated labels");
    ++pos;  // '}'
  }
  if (pos >= line.size() || line[pos] != ' ') return absl::InvalidArgumentError("expected ' '");
  auto value = ParseValue(line.substr(pos + 1));
  if (!value.ok()) return value.status();
  sample.value = *value;
  return sample;
}

// The family a sample belongs to: its own name, or a histogram's name less the suffix.
std::string FamilyOf(const Exposition& exposition, const std::string& sample_name) {
  if (exposition.type.contains(sample_name)) return sample_name;
  for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (absl::EndsWith(sample_name, suffix)) {
      std::string family(
          absl::string_view(sample_name).substr(0, sample_name.size() - suffix.size()));
      auto it = exposition.type.find(family);
      if (it != exposition.type.end() && it->second == "histogram") return family;
    }
  }
  return sample_name;
}

// Parses and checks the structure: every line well-formed, HELP and TYPE once per family
// and before its samples, names prefixed, histograms cumulative with +Inf == _count.
absl::StatusOr<Exposition> ParseExposition(absl::string_view text) {
  Exposition exposition;
  if (!text.empty() && text.back() != '\n') return absl::InvalidArgumentError("no final newline");
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  lines.pop_back();  // after the final newline
  for (absl::string_view line : lines) {
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": '", line, "'"));
    };
    if (absl::StartsWith(line, "#")) {
      std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 3));
      if (parts.size() < 3 || parts[0] != "#") return error("bad comment");
      const std::string& family = parts[2];
      const std::string rest = parts.size() == 4 ? parts[3] : "";
      if (parts[1] == "HELP") {
        if (!exposition.help.emplace(family, rest).second) return error("second HELP");
      } else if (parts[1] == "TYPE") {
        static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                     "untyped"};
        if (!kTypes.contains(rest)) return error("bad TYPE");
        if (!exposition.type.emplace(family, rest).second) return error("second TYPE");
      }
      continue;
    }
    if (line.empty()) return error("empty line");
    auto sample = ParseSample(line);
    if (!sample.ok()) return error(sample.status().message());
    const std::string family = FamilyOf(exposition, sample->name);
    if (!absl::StartsWith(family, "writescope_")) return error("not prefixed writescope_");
    if (!exposition.help.contains(family)) return error("no HELP before the sample");
    if (!exposition.type.contains(family)) return error("no TYPE before the sample");
    exposition.samples.push_back(*std::move(sample));
  }

  // Histograms, one series per label set without `le`.
  struct Series {
    std::vector<std::pair<double, double>> buckets;  // (le, cumulative count), in order
    std::optional<double> sum, count;
  };
  std::map<std::pair<std::string, Labels>, Series> histograms;
  for (const Sample& sample : exposition.samples) {
    const std::string family = FamilyOf(exposition, sample.name);
    if (exposition.type.at(family) != "histogram") continue;
    Labels labels = sample.labels;
    if (sample.name == family + "_bucket") {
      auto le = labels.find("le");
      if (le == labels.end()) return absl::InvalidArgumentError(sample.name + " without le");
      auto bound = ParseValue(le->second);
      if (!bound.ok()) return bound.status();
      labels.erase(le);
      histograms[{family, labels}].buckets.emplace_back(*bound, sample.value);
    } else if (sample.name == family + "_sum") {
      histograms[{family, labels}].sum = sample.value;
    } else {
      histograms[{family, labels}].count = sample.value;
    }
  }
  for (const auto& [key, series] : histograms) {
    const std::string name = key.first;
    if (series.buckets.empty() || !series.sum || !series.count) {
      return absl::InvalidArgumentError(name + ": a series lacks buckets, _sum or _count");
    }
    for (size_t i = 1; i < series.buckets.size(); ++i) {
      if (!(series.buckets[i - 1].first < series.buckets[i].first)) {
        return absl::InvalidArgumentError(name + ": le not increasing");
      }
      if (series.buckets[i - 1].second > series.buckets[i].second) {
        return absl::InvalidArgumentError(name + ": buckets not cumulative");
      }
    }
    if (!std::isinf(series.buckets.back().first)) {
      return absl::InvalidArgumentError(name + ": last bucket is not +Inf");
    }
    if (series.buckets.back().second != *series.count) {
      return absl::InvalidArgumentError(name + ": +Inf bucket != _count");
    }
  }
  return exposition;
}

std::optional<double> Value(const Exposition& exposition, absl::string_view name,
                            const Labels& labels = {}) {
  for (const Sample& sample : exposition.samples) {
    if (sample.name == name && sample.labels == labels) return sample.value;
  }
  return std::nullopt;
}

Exposition MustParse(const Metrics& metrics) {
  const std::string text = metrics.Render();
  auto exposition = ParseExposition(text);
  EXPECT_TRUE(exposition.ok()) << exposition.status() << "\n" << text;
  return exposition.ok() ? *std::move(exposition) : Exposition();
}

// ---------------------------------------------------------------------------------------
// Histogram.

TEST(HistogramTest, BucketsAreLessOrEqualAndCumulative) {
  Histogram histogram({1.0, 2.0, 4.0});
  for (double value : {-1.0, 0.5, 1.0, 1.5, 4.0, 4.5, 1e9}) histogram.Observe(value);
  histogram.Observe(std::numeric_limits<double>::quiet_NaN());  // dropped
  const HistogramSnapshot snapshot = histogram.Snapshot();
  EXPECT_THAT(snapshot.upper_bounds, ElementsAre(1.0, 2.0, 4.0));
  //  le=1: -1, 0.5, 1   le=2: +1.5   le=4: +4   +Inf: +4.5, 1e9
  EXPECT_THAT(snapshot.cumulative_counts, ElementsAre(3, 4, 5, 7));
  EXPECT_EQ(snapshot.count, 7u);
  EXPECT_DOUBLE_EQ(snapshot.sum, -1.0 + 0.5 + 1.0 + 1.5 + 4.0 + 4.5 + 1e9);
}

TEST(HistogramTest, NoBoundsIsOneInfBucket) {
  Histogram histogram({});
  histogram.Observe(3.0);
  const HistogramSnapshot snapshot = histogram.Snapshot();
  EXPECT_THAT(snapshot.cumulative_counts, ElementsAre(1));
  EXPECT_EQ(snapshot.count, 1u);
}

TEST(HistogramDeathTest, RejectsBadBounds) {
  EXPECT_DEATH(Histogram({1.0, 1.0}), "strictly increasing");
  EXPECT_DEATH(Histogram({2.0, 1.0}), "strictly increasing");
  EXPECT_DEATH(Histogram({1.0, std::numeric_limits<double>::infinity()}), "bound 1");
}

// ---------------------------------------------------------------------------------------
// Metrics::Render.

TEST(MetricsTest, FreshRenderIsValidAndHasEveryFamily) {
  Metrics metrics;
  const Exposition exposition = MustParse(metrics);
  const std::map<std::string, std::string> expected = {
      {"writescope_requests_running", "gauge"},
      {"writescope_requests_waiting", "gauge"},
      {"writescope_requests_total", "counter"},
      {"writescope_decode_steps_total", "counter"},
      {"writescope_exploring_steps_total", "counter"},
      {"writescope_prompt_tokens_total", "counter"},
      {"writescope_generated_tokens_total", "counter"},
      {"writescope_time_to_first_token_seconds", "histogram"},
      {"writescope_time_per_output_token_seconds", "histogram"},
      {"writescope_step_seconds", "histogram"},
      {"writescope_kv_blocks_used", "gauge"},
      {"writescope_kv_blocks_total", "gauge"},
      {"writescope_cpu_share_target", "gauge"},
      {"writescope_cpu_share_optimal", "gauge"},
      {"writescope_scheduler_cpu_ns_per_token", "gauge"},
      {"writescope_scheduler_gpu_ns_per_token", "gauge"},
  };
  EXPECT_EQ(exposition.type, expected);
  for (const auto& [family, type] : expected) {
    EXPECT_FALSE(exposition.help.at(family).empty()) << family;
  }
  for (const char* outcome : {"complete", "abort", "error", "rejected"}) {
    EXPECT_THAT(Value(exposition, "writescope_requests_total", {{"outcome", outcome}}),
                Optional(0.0))
        << outcome;
  }
  for (const char* worker : {"gpu_worker", "cpu_worker"}) {
    EXPECT_THAT(Value(exposition, "writescope_step_seconds_count", {{"worker", worker}}),
                Optional(0.0))
        << worker;
  }
  for (const char* read : {"split", "gpu_only"}) {
    EXPECT_THAT(Value(exposition, "writescope_decode_steps_total", {{"read", read}}),
                Optional(0.0))
        << read;
  }
  for (const char* reason :
       {"unmeasured", "repeat", "credit", "max_period", "guess", "rest_shift", "rest_rise"}) {
    EXPECT_THAT(Value(exposition, "writescope_exploring_steps_total", {{"reason", reason}}),
                Optional(0.0))
        << reason;
  }
  EXPECT_THAT(Value(exposition, "writescope_requests_running"), Optional(0.0));
  EXPECT_THAT(Value(exposition, "writescope_time_to_first_token_seconds_count"), Optional(0.0));
  // No region yet: the families are declared without samples.
  EXPECT_EQ(Value(exposition, "writescope_kv_blocks_used", {{"region", "cpu"}}), std::nullopt);
  // The scheduler's gauges are NaN until set.
  EXPECT_TRUE(std::isnan(*Value(exposition, "writescope_cpu_share_target")));
  EXPECT_TRUE(std::isnan(*Value(exposition, "writescope_scheduler_gpu_ns_per_token")));
}

TEST(MetricsTest, BucketBoundsSpanTheAdvertisedRanges) {
  Metrics metrics;
  const Exposition exposition = MustParse(metrics);
  auto bounds = [&](absl::string_view name, const Labels& labels) {
    std::vector<double> les;
    for (const Sample& sample : exposition.samples) {
      if (sample.name != name) continue;
      Labels rest = sample.labels;
      const std::string le = rest["le"];
      rest.erase("le");
      if (rest == labels) les.push_back(*ParseValue(le));
    }
    return les;
  };
  const std::vector<double> ttft = bounds("writescope_time_to_first_token_seconds_bucket", {});
  ASSERT_GE(ttft.size(), 3u);
  EXPECT_DOUBLE_EQ(ttft.front(), 0.005);
  EXPECT_DOUBLE_EQ(ttft[ttft.size() - 2], 60.0);
  const std::vector<double> tpot = bounds("writescope_time_per_output_token_seconds_bucket", {});
  ASSERT_GE(tpot.size(), 3u);
  EXPECT_DOUBLE_EQ(tpot.front(), 0.001);
  EXPECT_DOUBLE_EQ(tpot[tpot.size() - 2], 5.0);
  EXPECT_GE(bounds("writescope_step_seconds_bucket", {{"worker", "gpu_worker"}}).size(), 3u);
}

TEST(MetricsTest, CountersCount) {
  Metrics metrics;
  metrics.AddPromptTokens(5);
  metrics.AddPromptTokens(7);
  metrics.AddGeneratedTokens(1);
  metrics.AddGeneratedTokens(uint64_t{1} << 40);  // exact beyond a double's %g digits
  metrics.AddRequest("complete");
  metrics.AddRequest("complete");
  metrics.AddRequest("abort");
  metrics.AddRequest("rejected");
  metrics.AddRequest("timeout");  // not one of the four: a series of its own
  metrics.AddDecodeStep("split", "");
  metrics.AddDecodeStep("split", "credit");
  metrics.AddDecodeStep("gpu_only", "rest_shift");
  metrics.AddDecodeStep("gpu_only", "rest_shift");
  metrics.AddDecodeStep("cpu_only", "later");  // unknown values: series of their own
  const Exposition exposition = MustParse(metrics);
  EXPECT_THAT(Value(exposition, "writescope_prompt_tokens_total"), Optional(12.0));
  EXPECT_THAT(Value(exposition, "writescope_generated_tokens_total"),
              Optional(static_cast<double>((uint64_t{1} << 40) + 1)));
  EXPECT_THAT(metrics.Render(), HasSubstr("\nwritescope_generated_tokens_total 1099511627777\n"));
  EXPECT_THAT(Value(exposition, "writescope_requests_total", {{"outcome", "complete"}}),
              Optional(2.0));
  EXPECT_THAT(Value(exposition, "writescope_requests_total", {{"outcome", "abort"}}),
              Optional(1.0));
  EXPECT_THAT(Value(exposition, "writescope_requests_total", {{"outcome", "error"}}),
              Optional(0.0));
  EXPECT_THAT(Value(exposition, "writescope_requests_total", {{"outcome", "rejected"}}),
              Optional(1.0));
  EXPECT_THAT(Value(exposition, "writescope_requests_total", {{"outcome", "timeout"}}),
              Optional(1.0));
  EXPECT_THAT(Value(exposition, "writescope_decode_steps_total", {{"read", "split"}}),
              Optional(2.0));
  EXPECT_THAT(Value(exposition, "writescope_decode_steps_total", {{"read", "gpu_only"}}),
              Optional(2.0));
  EXPECT_THAT(Value(exposition, "writescope_decode_steps_total", {{"read", "cpu_only"}}),
              Optional(1.0));
  EXPECT_THAT(Value(exposition, "writescope_exploring_steps_total", {{"reason", "credit"}}),
              Optional(1.0));
  EXPECT_THAT(Value(exposition, "writescope_exploring_steps_total", {{"reason", "rest_shift"}}),
              Optional(2.0));
  EXPECT_THAT(Value(exposition, "writescope_exploring_steps_total", {{"reason", "later"}}),
              Optional(1.0));
  EXPECT_THAT(Value(exposition, "writescope_exploring_steps_total", {{"reason", "repeat"}}),
              Optional(0.0));
  // A step that does not explore adds to no reason: no series for "".
  EXPECT_EQ(Value(exposition, "writescope_exploring_steps_total", {{"reason", ""}}),
            std::nullopt);
}

TEST(MetricsTest, HistogramsRenderCumulativeBucketsSumAndCount) {
  Metrics metrics;
  for (double seconds : {0.005, 0.007, 1.0, 100.0}) metrics.ObserveTimeToFirstToken(seconds);
  metrics.ObserveStepTime("cpu_worker", 0.003);
  metrics.ObserveStepTime("cpu_worker", 0.2);
  metrics.ObserveStepTime("draft_worker", 0.01);  // a new worker gets its own series
  const Exposition exposition = MustParse(metrics);

  const std::string ttft = "writescope_time_to_first_token_seconds";
  EXPECT_THAT(Value(exposition, ttft + "_bucket", {{"le", "0.005"}}), Optional(1.0));
  EXPECT_THAT(Value(exposition, ttft + "_bucket", {{"le", "0.01"}}), Optional(2.0));
  EXPECT_THAT(Value(exposition, ttft + "_bucket", {{"le", "1"}}), Optional(3.0));
  EXPECT_THAT(Value(exposition, ttft + "_bucket", {{"le", "60"}}), Optional(3.0));
  EXPECT_THAT(Value(exposition, ttft + "_bucket", {{"le", "+Inf"}}), Optional(4.0));
  EXPECT_THAT(Value(exposition, ttft + "_count"), Optional(4.0));
  EXPECT_THAT(Value(exposition, ttft + "_sum"), Optional(DoubleNear(101.012, 1e-9)));

  const std::string step = "writescope_step_seconds";
  EXPECT_THAT(Value(exposition, step + "_bucket", {{"worker", "cpu_worker"}, {"le", "0.0025"}}),
              Optional(0.0));
  EXPECT_THAT(Value(exposition, step + "_bucket", {{"worker", "cpu_worker"}, {"le", "0.005"}}),
              Optional(1.0));
  EXPECT_THAT(Value(exposition, step + "_bucket", {{"worker", "cpu_worker"}, {"le", "+Inf"}}),
              Optional(2.0));
  EXPECT_THAT(Value(exposition, step + "_sum", {{"worker", "cpu_worker"}}),
              Optional(DoubleNear(0.203, 1e-12)));
  EXPECT_THAT(Value(exposition, step + "_count", {{"worker", "gpu_worker"}}), Optional(0.0));
  EXPECT_THAT(Value(exposition, step + "_count", {{"worker", "draft_worker"}}), Optional(1.0));
  // The worker label comes before le.
  EXPECT_THAT(metrics.Render(),
              HasSubstr("\nwritescope_step_seconds_bucket{worker=\"cpu_worker\",le=\"+Inf\"} 2\n"));
}

TEST(MetricsTest, GaugesTakeTheLastValue) {
  Metrics metrics;
  metrics.SetRequests(3, 9);
  metrics.SetRequests(4, 8);
  metrics.SetKvBlocks("cpu", 10, 100);
  metrics.SetKvBlocks("transfer", 20, 200);
  metrics.SetKvBlocks("cpu", 11, 100);
  metrics.SetScheduler(0.25, std::numeric_limits<double>::quiet_NaN(), 1.5, 0.75);
  const Exposition exposition = MustParse(metrics);
  EXPECT_THAT(Value(exposition, "writescope_requests_running"), Optional(4.0));
  EXPECT_THAT(Value(exposition, "writescope_requests_waiting"), Optional(8.0));
  EXPECT_THAT(Value(exposition, "writescope_kv_blocks_used", {{"region", "cpu"}}), Optional(11.0));
  EXPECT_THAT(Value(exposition, "writescope_kv_blocks_total", {{"region", "cpu"}}),
              Optional(100.0));
  EXPECT_THAT(Value(exposition, "writescope_kv_blocks_used", {{"region", "transfer"}}),
              Optional(20.0));
  EXPECT_THAT(Value(exposition, "writescope_cpu_share_target"), Optional(0.25));
  EXPECT_THAT(Value(exposition, "writescope_scheduler_cpu_ns_per_token"), Optional(1.5));
  EXPECT_THAT(Value(exposition, "writescope_scheduler_gpu_ns_per_token"), Optional(0.75));
  EXPECT_THAT(metrics.Render(), HasSubstr("\nwritescope_cpu_share_optimal NaN\n"));
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  Metrics metrics;
  const std::string region = "a\"b\\c\nd";
  metrics.SetKvBlocks(region, 1, 2);
  EXPECT_THAT(metrics.Render(),
              HasSubstr("writescope_kv_blocks_used{region=\"a\\\"b\\\\c\\nd\"} 1\n"));
  const Exposition exposition = MustParse(metrics);
  EXPECT_THAT(Value(exposition, "writescope_kv_blocks_total", {{"region", region}}), Optional(2.0));
}

TEST(MetricsTest, ConcurrentUpdatesAddUp) {
  Metrics metrics;
  constexpr int kThreads = 4;
  constexpr int kIterations = 20000;
  std::atomic<bool> done{false};
  // A scraper renders throughout: every exposition must stay consistent (+Inf == count).
  std::thread scraper([&] {
    while (!done.load()) {
      auto exposition = ParseExposition(metrics.Render());
      ASSERT_TRUE(exposition.ok()) << exposition.status();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics, t] {
      for (int i = 0; i < kIterations; ++i) {
        metrics.AddPromptTokens(2);
        metrics.AddGeneratedTokens(1);
        metrics.AddRequest(i % 2 == 0 ? "complete" : "abort");
        metrics.ObserveTimePerToken(0.001 * (i % 10));
        metrics.ObserveTimeToFirstToken(0.5);
        metrics.ObserveStepTime(t % 2 == 0 ? "gpu_worker" : "cpu_worker", 0.25);
        metrics.SetKvBlocks(absl::StrCat("region", t), i, kIterations);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  done = true;
  scraper.join();

  const Exposition exposition = MustParse(metrics);
  constexpr double kTotal = kThreads * kIterations;
  EXPECT_THAT(Value(exposition, "writescope_prompt_tokens_total"), Optional(2 * kTotal));
  EXPECT_THAT(Value(exposition, "writescope_generated_tokens_total"), Optional(kTotal));
  EXPECT_THAT(Value(exposition, "writescope_requests_total", {{"outcome", "complete"}}),
              Optional(kTotal / 2));
  EXPECT_THAT(Value(exposition, "writescope_requests_total", {{"outcome", "abort"}}),
              Optional(kTotal / 2));
  EXPECT_THAT(Value(exposition, "writescope_time_per_output_token_seconds_count"),
              Optional(kTotal));
  // Σ 0.001·(i mod 10) = 0.045 per ten observations.
  EXPECT_THAT(Value(exposition, "writescope_time_per_output_token_seconds_sum"),
              Optional(DoubleNear(kTotal / 10 * 0.045, 1e-6)));
  EXPECT_THAT(Value(exposition, "writescope_time_to_first_token_seconds_sum"),
              Optional(kTotal * 0.5));
  for (const char* worker : {"gpu_worker", "cpu_worker"}) {
    EXPECT_THAT(Value(exposition, "writescope_step_seconds_count", {{"worker", worker}}),
                Optional(kTotal / 2));
    EXPECT_THAT(Value(exposition, "writescope_step_seconds_sum", {{"worker", worker}}),
                Optional(kTotal / 2 * 0.25));  // 0.25 is exact: so is the sum
  }
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_THAT(
        Value(exposition, "writescope_kv_blocks_used", {{"region", absl::StrCat("region", t)}}),
        Optional(kIterations - 1.0));
  }
}

// ---------------------------------------------------------------------------------------
// MetricsServer.

constexpr char kLocalhost[] = "127.0.0.1";

// True when a TCP connection to localhost:port is refused.
bool ConnectionRefused(int port) {
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool refused =
      connect(sock, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 &&
      errno == ECONNREFUSED;
  close(sock);
  return refused;
}

TEST(MetricsServerTest, ServesMetricsAndHealthz) {
  Metrics metrics;
  metrics.AddGeneratedTokens(42);
  int hook_calls = 0;
  bool sigpipe_blocked = false;
  MetricsServer server(&metrics, [&] {
    metrics.SetRequests(++hook_calls, 7);
    // The hook runs on a handler thread, where httplib's send() must not raise SIGPIPE.
    sigset_t blocked;
    pthread_sigmask(SIG_BLOCK, nullptr, &blocked);
    sigpipe_blocked = sigismember(&blocked, SIGPIPE) == 1;
  });
  absl::StatusOr<int> port = server.Start(kLocalhost, 0);
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_GT(*port, 0);

  httplib::Client client(kLocalhost, *port);
  httplib::Result metrics_response = client.Get("/metrics");
  ASSERT_TRUE(metrics_response) << httplib::to_string(metrics_response.error());
  EXPECT_EQ(metrics_response->status, 200);
  EXPECT_THAT(metrics_response->get_header_value("Content-Type"),
              StartsWith("text/plain; version=0.0.4"));
  EXPECT_EQ(hook_calls, 1);
  EXPECT_TRUE(sigpipe_blocked);
  EXPECT_EQ(metrics_response->body, metrics.Render());  // nothing changed since the hook
  auto exposition = ParseExposition(metrics_response->body);
  ASSERT_TRUE(exposition.ok()) << exposition.status();
  EXPECT_THAT(Value(*exposition, "writescope_generated_tokens_total"), Optional(42.0));
  EXPECT_THAT(Value(*exposition, "writescope_requests_running"), Optional(1.0));
  EXPECT_THAT(Value(*exposition, "writescope_requests_waiting"), Optional(7.0));

  httplib::Result health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");

  httplib::Result missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  httplib::Result post = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_NE(post->status, 200);

  server.Stop();
  EXPECT_TRUE(ConnectionRefused(*port));
  EXPECT_FALSE(client.Get("/healthz"));
  server.Stop();  // idempotent

  // A stopped server starts again.
  absl::StatusOr<int> again = server.Start(kLocalhost, 0);
  ASSERT_TRUE(again.ok()) << again.status();
  httplib::Client client_again(kLocalhost, *again);
  httplib::Result health_again = client_again.Get("/healthz");
  ASSERT_TRUE(health_again);
  EXPECT_EQ(health_again->status, 200);
}

TEST(MetricsServerTest, DestructorStops) {
  Metrics metrics;
  int port;
  {
    MetricsServer server(&metrics);
    absl::StatusOr<int> started = server.Start(kLocalhost, 0);
    ASSERT_TRUE(started.ok()) << started.status();
    port = *started;
    EXPECT_FALSE(ConnectionRefused(port));
  }
  EXPECT_TRUE(ConnectionRefused(port));
}

TEST(MetricsServerTest, StopRightAfterStartReturns) {
  Metrics metrics;
  for (int i = 0; i < 20; ++i) {
    MetricsServer server(&metrics);
    ASSERT_TRUE(server.Start(kLocalhost, 0).ok());
    server.Stop();
  }
}

TEST(MetricsServerTest, PortInUseIsAnError) {
  Metrics metrics;
  MetricsServer first(&metrics);
  absl::StatusOr<int> port = first.Start(kLocalhost, 0);
  ASSERT_TRUE(port.ok()) << port.status();

  MetricsServer second(&metrics);
  absl::StatusOr<int> clash = second.Start(kLocalhost, *port);
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kUnavailable) << clash.status();
  EXPECT_THAT(clash.status().message(), HasSubstr(absl::StrCat(":", *port)));
  second.Stop();  // nothing started: a no-op

  // The first still serves.
  httplib::Client client(kLocalhost, *port);
  httplib::Result health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  // A port some other program listens on, without SO_REUSEPORT.
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(sock, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(sock, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(sock, reinterpret_cast<sockaddr*>(&address), &length), 0);
  MetricsServer third(&metrics);
  EXPECT_EQ(third.Start(kLocalhost, ntohs(address.sin_port)).status().code(),
            absl::StatusCode::kUnavailable);
  close(sock);
}

TEST(MetricsServerTest, BadArguments) {
  Metrics metrics;
  MetricsServer server(&metrics);
  EXPECT_EQ(server.Start(kLocalhost, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.Start(kLocalhost, 65536).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.Start("", 0).status().code(), absl::StatusCode::kInvalidArgument);
  // TEST-NET-1: no local interface has it (EADDRNOTAVAIL), and no resolver is asked.
  EXPECT_EQ(server.Start("192.0.2.1", 0).status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(server.Start(kLocalhost, 0).ok());
  EXPECT_EQ(server.Start(kLocalhost, 0).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A scraper that resets the connection while a large exposition is being written costs
// that response only. (Debian's httplib sends without MSG_NOSIGNAL; the server blocks
// SIGPIPE on its threads, though a reset alone does not reliably raise one.)
TEST(MetricsServerTest, ClientHangingUpMidResponseIsHarmless) {
  Metrics metrics;
  for (int i = 0; i < 20000; ++i) {
    metrics.SetKvBlocks(absl::StrCat("region_with_a_long_name_", i), i, 2 * i);
  }
  ASSERT_GT(metrics.Render().size(), size_t{2} << 20);  // beyond the socket buffers
  MetricsServer server(&metrics);
  absl::StatusOr<int> port = server.Start(kLocalhost, 0);
  ASSERT_TRUE(port.ok()) << port.status();

  for (int attempt = 0; attempt < 3; ++attempt) {
    const int sock = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(*port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(sock, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
    ASSERT_EQ(send(sock, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    char buffer[4096];
    ASSERT_GT(recv(sock, buffer, sizeof(buffer), 0), 0);  // the server is writing
    linger reset{.l_onoff = 1, .l_linger = 0};            // close with an RST
    setsockopt(sock, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    close(sock);
  }
  httplib::Client client(kLocalhost, *port);
  httplib::Result health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

}  // namespace
}  // namespace writescope::coordinator
