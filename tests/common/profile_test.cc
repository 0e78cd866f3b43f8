#include "common/profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace writescope {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using Json = nlohmann::json;
using Spans = google::protobuf::RepeatedPtrField<internal::Span>;

std::vector<std::string> Names(const Spans& spans) {
  std::vector<std::string> names;
  for (const internal::Span& span : spans) names.push_back(span.name());
  return names;
}

std::vector<uint64_t> StepIds(const Spans& spans) {
  std::vector<uint64_t> ids;
  for (const internal::Span& span : spans) ids.push_back(span.step_id());
  return ids;
}

internal::Span MakeSpan(const std::string& name, uint64_t start_ns, uint64_t duration_ns,
                        uint64_t step_id, int32_t layer = -1) {
  internal::Span span;
  span.set_name(name);
  span.set_start_ns(start_ns);
  span.set_duration_ns(duration_ns);
  span.set_step_id(step_id);
  span.set_layer(layer);
  return span;
}

// Microseconds with 3 decimals as written by ChromeTraceJson, back to nanoseconds.
uint64_t Nanos(const Json& micros) {
  return static_cast<uint64_t>(std::llround(micros.get<double>() * 1000.0));
}

std::vector<TraceEvent> CompleteEvents(const Json& trace) {
  std::vector<TraceEvent> events;
  for (const Json& event : trace["traceEvents"]) {
    if (event["ph"] != "X") continue;
    events.push_back(TraceEvent{event["pid"].get<int64_t>(), event["tid"].get<int64_t>(),
                                Nanos(event["ts"]), Nanos(event["dur"])});
  }
  return events;
}

TEST(SpanRecorderTest, RingOverwriteKeepsTheNewest) {
  SpanRecorder recorder(5);
  // Steps 1..5, two spans each: records 0..9, of which the ring keeps 5..9 (step 3's "b",
  // steps 4 and 5).
  for (uint64_t step = 1; step <= 5; ++step) {
    recorder.Record("a", step * 100, step * 100 + 40, step);
    recorder.Record("b", step * 100 + 40, step * 100 + 80, step);
  }
  EXPECT_EQ(recorder.recorded(), 10u);
  Spans spans;
  recorder.LastSteps(100, &spans);
  // Step 3 lost its "a" to the overwrite: it is not reported, being partial.
  EXPECT_THAT(StepIds(spans), ElementsAre(4, 4, 5, 5));
  EXPECT_THAT(Names(spans), ElementsAre("a", "b", "a", "b"));
  EXPECT_EQ(spans[0].start_ns(), 400u);
  EXPECT_EQ(spans[0].duration_ns(), 40u);
}

TEST(SpanRecorderTest, RingOfOneKeepsTheLastRecord) {
  SpanRecorder recorder(1);
  recorder.Record("a", 10, 20, 1);
  recorder.Record("b", 30, 40, 2);
  Spans spans;
  recorder.LastSteps(4, &spans);
  // The only survivor is the oldest survivor, so it may be partial: nothing is reported.
  EXPECT_TRUE(spans.empty());
  EXPECT_EQ(recorder.recorded(), 2u);
}

TEST(SpanRecorderTest, LastStepsPicksTheMostRecentStepsAndSorts) {
  SpanRecorder recorder(1024);
  // Each step records its children before its enclosing span (a Scope records on exit).
  for (uint64_t step = 1; step <= 4; ++step) {
    const uint64_t base = step * 1000;
    recorder.Record("child1", base + 10, base + 110, step, 0);
    recorder.Record("child2", base + 200, base + 500, step, 1);
    recorder.Record("step", base, base + 900, step);
  }
  recorder.Record("idle", 2950, 2990, 0);  // before steps 3-4: left out
  recorder.Record("poll", 3950, 3960, 0);  // between steps 3 and 4: kept
  recorder.Record("late", 5000, 5010, 0);  // after step 4 ended (4900): left out

  Spans spans;
  *spans.Add() = MakeSpan("already there", 1, 1, 99);
  recorder.LastSteps(2, &spans);
  EXPECT_THAT(Names(spans), ElementsAre("already there", "step", "child1", "child2", "poll", "step",
                                        "child1", "child2"));
  EXPECT_THAT(StepIds(spans), ElementsAre(99, 3, 3, 3, 0, 4, 4, 4));
  EXPECT_EQ(spans[2].start_ns(), 3010u);
  EXPECT_EQ(spans[2].duration_ns(), 100u);
  EXPECT_EQ(spans[2].layer(), 0);
  EXPECT_EQ(spans[3].layer(), 1);
  EXPECT_EQ(spans[1].layer(), -1);

  Spans none;
  recorder.LastSteps(0, &none);
  EXPECT_TRUE(none.empty());

  Spans all;
  recorder.LastSteps(100, &all);
  EXPECT_EQ(all.size(), 12 + 2);  // "idle" now falls within; "late" still starts after the end
  for (int i = 1; i < all.size(); ++i) EXPECT_LE(all[i - 1].start_ns(), all[i].start_ns());
}

TEST(SpanRecorderTest, RecencyIsByTimeNotById) {
  SpanRecorder recorder(64);
  recorder.Record("a", 100, 200, 7);
  recorder.Record("a", 300, 400, 3);
  Spans spans;
  recorder.LastSteps(1, &spans);
  EXPECT_THAT(StepIds(spans), ElementsAre(3));
}

TEST(SpanRecorderTest, EmptyRecorderGivesNothing) {
  SpanRecorder recorder(16);
  Spans spans;
  recorder.LastSteps(8, &spans);
  EXPECT_TRUE(spans.empty());
  EXPECT_EQ(recorder.recorded(), 0u);
}

TEST(SpanRecorderTest, ScopeRecordsItsLifetime) {
  SpanRecorder recorder(16);
  const uint64_t before = MonotonicNanos();
  {
    SpanRecorder::Scope scope(&recorder, "work", 5, 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const uint64_t after = MonotonicNanos();
  ASSERT_EQ(recorder.recorded(), 1u);
  Spans spans;
  recorder.LastSteps(1, &spans);
  ASSERT_EQ(spans.size(), 1);
  EXPECT_EQ(spans[0].name(), "work");
  EXPECT_EQ(spans[0].step_id(), 5u);
  EXPECT_EQ(spans[0].layer(), 2);
  EXPECT_GE(spans[0].start_ns(), before);
  EXPECT_GE(spans[0].duration_ns(), 1000000u);
  EXPECT_LE(spans[0].start_ns() + spans[0].duration_ns(), after);
}

TEST(SpanRecorderTest, ScopeWithNullRecorderIsANoOp) {
  { SpanRecorder::Scope scope(nullptr, "nothing", 1); }
  SUCCEED();
}

TEST(SpanRecorderTest, EndBeforeStartRecordsZeroDuration) {
  SpanRecorder recorder(4);
  recorder.Record("backwards", 100, 50, 1);
  Spans spans;
  recorder.LastSteps(1, &spans);
  ASSERT_EQ(spans.size(), 1);
  EXPECT_EQ(spans[0].duration_ns(), 0u);
}

// Four writers and a reader taking profiles meanwhile: no record is lost while the ring has
// room. Also the TSan check of the recorder.
TEST(SpanRecorderTest, ConcurrentRecordLosesNothing) {
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 20000;
  SpanRecorder recorder(kThreads * kPerThread);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      Spans spans;
      recorder.LastSteps(8, &spans);
      EXPECT_LE(spans.size(), 8);
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&recorder, t] {
      for (uint64_t i = 0; i < kPerThread; ++i) {
        const uint64_t now = MonotonicNanos();
        recorder.Record("w", now, now + 1, t * kPerThread + i + 1, t);
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  done = true;
  reader.join();

  EXPECT_EQ(recorder.recorded(), kThreads * kPerThread);
  Spans spans;
  recorder.LastSteps(kThreads * kPerThread, &spans);
  ASSERT_EQ(spans.size(), static_cast<int>(kThreads * kPerThread));
  std::vector<uint64_t> ids = StepIds(spans);
  std::sort(ids.begin(), ids.end());
  for (uint64_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], i + 1);
  for (const internal::Span& span : spans) {
    EXPECT_EQ(span.layer(), static_cast<int32_t>((span.step_id() - 1) / kPerThread));
  }
}

// A ring much smaller than what is written, read while it wraps: counts stay right and a
// profile never holds more than the ring nor a torn record.
TEST(SpanRecorderTest, ConcurrentRecordIntoAWrappingRing) {
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 20000;
  constexpr size_t kCapacity = 1000;
  SpanRecorder recorder(kCapacity);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      Spans spans;
      recorder.LastSteps(kCapacity, &spans);
      EXPECT_LE(spans.size(), static_cast<int>(kCapacity));
      for (const internal::Span& span : spans) {
        // Fields written by one Record() call belong together.
        ASSERT_EQ(span.duration_ns(), span.step_id() % 97);
      }
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&recorder, t] {
      for (uint64_t i = 0; i < kPerThread; ++i) {
        const uint64_t step = t * kPerThread + i + 1;
        const uint64_t now = MonotonicNanos();
        recorder.Record("w", now, now + step % 97, step, t);
      }
    });
  }
  for (std::thread& writer : writers) writer.join();
  done = true;
  reader.join();
  EXPECT_EQ(recorder.recorded(), kThreads * kPerThread);
  Spans spans;
  recorder.LastSteps(kCapacity, &spans);
  EXPECT_GT(spans.size(), 0);
  EXPECT_LE(spans.size(), static_cast<int>(kCapacity));
}

// Not a pass/fail timing: prints what a record costs, for the docs.
TEST(SpanRecorderTest, RecordCost) {
  constexpr int kRecords = 1 << 20;
  SpanRecorder recorder;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRecords; ++i) recorder.Record("bench", i, i + 10, i / 64 + 1, i & 31);
  const double record_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
      kRecords;

  start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRecords; ++i) SpanRecorder::Scope scope(&recorder, "bench", i / 64 + 1);
  const double scope_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
      kRecords;

  start = std::chrono::steady_clock::now();
  uint64_t clock_sum = 0;
  for (int i = 0; i < kRecords; ++i) clock_sum += MonotonicNanos();
  const double clock_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
      kRecords;
  EXPECT_GT(clock_sum, 0u);

  constexpr int kThreads = 4;
  constexpr int kPerThread = kRecords / kThreads;
  start = std::chrono::steady_clock::now();
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&recorder] {
      for (int i = 0; i < kPerThread; ++i) recorder.Record("bench", i, i + 10, i / 64 + 1);
    });
  }
  for (std::thread& writer : writers) writer.join();
  const double contended_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
      kRecords;

  Spans spans;
  start = std::chrono::steady_clock::now();
  recorder.LastSteps(8, &spans);
  const double last_steps_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();

  std::printf(
      "Record: %.1f ns/record; Scope (2 clock reads + Record): %.1f ns; MonotonicNanos: %.1f ns; "
      "%d threads at once: %.1f ns/record (wall / records); LastSteps(8) over a full ring of "
      "%zu: %.0f us\n",
      record_ns, scope_ns, clock_ns, kThreads, contended_ns, recorder.capacity(), last_steps_us);
  EXPECT_EQ(recorder.recorded(), 3u * kRecords);
}

TEST(ChromeTraceJsonTest, ParsesWithNamesPidsTimesAndEscaping) {
  constexpr uint64_t kOrigin = 5'000'000'000;
  internal::WorkerProfile gpu;
  gpu.set_process("gpu_worker");
  *gpu.add_spans() = MakeSpan("step", kOrigin + 1000, 2'000'000, 1);
  *gpu.add_spans() = MakeSpan("attn \"q\\k\"\n", kOrigin + 1'234'567, 1'001, 1, 3);
  internal::WorkerProfile cpu;
  cpu.set_process("cpu \"worker\"");
  *cpu.add_spans() = MakeSpan("attention", kOrigin, 7, 2, 0);

  const std::string text = ChromeTraceJson({gpu, cpu});
  const Json trace = Json::parse(text);  // throws (fails the test) on bad JSON
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  ASSERT_TRUE(trace["traceEvents"].is_array());

  std::vector<std::string> process_names(3);
  std::vector<std::string> complete_names;
  for (const Json& event : trace["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "process_name") {
      process_names.at(event["pid"].get<int>()) = event["args"]["name"];
    }
    if (event["ph"] == "X") complete_names.push_back(event["name"]);
  }
  EXPECT_THAT(process_names, ElementsAre("", "gpu_worker", "cpu \"worker\""));
  EXPECT_THAT(complete_names, ElementsAre("step", "attn \"q\\k\"\n", "attention"));

  // Metadata first, then the complete events.
  const Json& events = trace["traceEvents"];
  bool seen_complete = false;
  for (const Json& event : events) {
    if (event["ph"] == "X") seen_complete = true;
    if (event["ph"] == "M") {
      EXPECT_FALSE(seen_complete);
    }
  }

  const Json* attn = nullptr;
  const Json* cpu_attention = nullptr;
  for (const Json& event : events) {
    if (event["ph"] != "X") continue;
    if (event["name"] == "attn \"q\\k\"\n") attn = &event;
    if (event["name"] == "attention") cpu_attention = &event;
  }
  ASSERT_NE(attn, nullptr);
  ASSERT_NE(cpu_attention, nullptr);
  EXPECT_EQ((*attn)["pid"], 1);
  EXPECT_EQ((*attn)["cat"], "step");
  EXPECT_EQ(Nanos((*attn)["ts"]), 1'234'567u);
  EXPECT_EQ(Nanos((*attn)["dur"]), 1'001u);
  EXPECT_EQ((*attn)["args"]["step"], 1);
  EXPECT_EQ((*attn)["args"]["layer"], 3);
  EXPECT_EQ((*cpu_attention)["pid"], 2);
  EXPECT_EQ(Nanos((*cpu_attention)["ts"]), 0u);
  EXPECT_EQ((*cpu_attention)["args"]["step"], 2);
  // Exact decimals in the text, not a float's approximation.
  EXPECT_NE(text.find(R"("ts":1234.567,"dur":1.001)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("ts":1.000,"dur":2000.000)"), std::string::npos) << text;
}

TEST(ChromeTraceJsonTest, InvalidUtf8AndControlCharactersStillParse) {
  internal::WorkerProfile process;
  process.set_process(std::string("p\x01\xff", 3));
  *process.add_spans() = MakeSpan("bad \xc3( \xe2\x82\xac ok", 0, 1, 1);
  const Json trace = Json::parse(ChromeTraceJson({process}));
  bool found = false;
  for (const Json& event : trace["traceEvents"]) {
    if (event["ph"] == "X") {
      EXPECT_EQ(event["name"], "bad \xef\xbf\xbd( \xe2\x82\xac ok");
      found = true;
    }
    if (event["name"] == "process_name") {
      EXPECT_EQ(event["args"]["name"], "p\x01\xef\xbf\xbd");
    }
  }
  EXPECT_TRUE(found);
}

TEST(ChromeTraceJsonTest, PartialOverlapsGoToOtherTids) {
  internal::WorkerProfile process;
  process.set_process("gpu_worker");
  *process.add_spans() = MakeSpan("b", 50, 100, 1);  // [50, 150): overlaps "a" partially
  *process.add_spans() = MakeSpan("a", 0, 100, 1);   // [0, 100)
  *process.add_spans() = MakeSpan("c", 60, 10, 1);   // [60, 70): inside "a"
  *process.add_spans() = MakeSpan("d", 100, 20, 1);  // [100, 120): after "a", inside "b"
  *process.add_spans() = MakeSpan("e", 90, 70, 1);   // [90, 160): overlaps "a" and "b"
  const Json trace = Json::parse(ChromeTraceJson({process}));
  std::map<std::string, int> tids;
  std::set<int> named_tids;
  for (const Json& event : trace["traceEvents"]) {
    if (event["ph"] == "X") tids[event["name"]] = event["tid"];
    if (event["name"] == "thread_name") named_tids.insert(event["tid"].get<int>());
  }
  EXPECT_EQ(tids["a"], 1);
  EXPECT_EQ(tids["b"], 2);
  EXPECT_EQ(tids["c"], 1);
  EXPECT_EQ(tids["d"], 1);  // "a" closed at 100
  EXPECT_EQ(tids["e"], 3);  // fits inside neither "a" (tid 1) nor "b" (tid 2)
  EXPECT_THAT(named_tids, ElementsAre(1, 2, 3));
  EXPECT_TRUE(TraceEventsNest(CompleteEvents(trace)));
}

TEST(ChromeTraceJsonTest, RandomSpansNestPerTid) {
  std::mt19937_64 rng(42);
  std::vector<internal::WorkerProfile> processes(3);
  size_t total = 0;
  for (size_t p = 0; p < processes.size(); ++p) {
    processes[p].set_process("process " + std::to_string(p));
    for (int i = 0; i < 300; ++i) {
      const uint64_t start = 1'000'000 + rng() % 100'000;
      const uint64_t duration = rng() % 5 == 0 ? 0 : rng() % 20'000;
      *processes[p].add_spans() = MakeSpan("s" + std::to_string(i % 7), start, duration, i % 9);
      ++total;
    }
  }
  // Also identical spans and shared starts/ends.
  *processes[0].add_spans() = MakeSpan("dup", 1'050'000, 1'000, 1);
  *processes[0].add_spans() = MakeSpan("dup", 1'050'000, 1'000, 1);
  total += 2;

  const Json trace = Json::parse(ChromeTraceJson(processes));
  const std::vector<TraceEvent> events = CompleteEvents(trace);
  EXPECT_EQ(events.size(), total);
  EXPECT_TRUE(TraceEventsNest(events));

  // The same spans all on one tid do not nest: the check can fail.
  std::vector<TraceEvent> one_tid = events;
  for (TraceEvent& event : one_tid) event.tid = 1;
  EXPECT_FALSE(TraceEventsNest(one_tid));
}

TEST(ChromeTraceJsonTest, EmptyInputs) {
  const Json none = Json::parse(ChromeTraceJson({}));
  EXPECT_TRUE(none["traceEvents"].empty());
  internal::WorkerProfile process;
  process.set_process("idle");
  const Json empty = Json::parse(ChromeTraceJson({process}));
  EXPECT_FALSE(empty["traceEvents"].empty());  // its names still
  EXPECT_TRUE(CompleteEvents(empty).empty());
}

TEST(TraceEventsNestTest, TouchingAndContainedNestOverlapsDoNot) {
  EXPECT_TRUE(TraceEventsNest({}));
  EXPECT_TRUE(TraceEventsNest({{1, 1, 0, 10}, {1, 1, 10, 10}, {1, 1, 12, 3}, {1, 1, 10, 2}}));
  EXPECT_FALSE(TraceEventsNest({{1, 1, 0, 10}, {1, 1, 5, 10}}));
  // The same overlap on different tids, or different pids, is fine.
  EXPECT_TRUE(TraceEventsNest({{1, 1, 0, 10}, {1, 2, 5, 10}}));
  EXPECT_TRUE(TraceEventsNest({{1, 1, 0, 10}, {2, 1, 5, 10}}));
}

TEST(SummarizePhasesTest, HandMadeExample) {
  constexpr uint64_t kMs = 1'000'000;
  internal::WorkerProfile gpu;
  gpu.set_process("gpu_worker");
  *gpu.add_spans() = MakeSpan("forward", 0, 10 * kMs, 1);
  *gpu.add_spans() = MakeSpan("sample", 10 * kMs, 1 * kMs, 1);
  *gpu.add_spans() = MakeSpan("forward", 20 * kMs, 10 * kMs, 2);
  *gpu.add_spans() = MakeSpan("sample", 30 * kMs, 3 * kMs, 2);
  *gpu.add_spans() = MakeSpan("idle", 40 * kMs, 4 * kMs, 0);
  internal::WorkerProfile cpu;
  cpu.set_process("cpu_worker");
  *cpu.add_spans() = MakeSpan("attention", 20 * kMs, 6 * kMs, 2, 0);
  *cpu.add_spans() = MakeSpan("attention", 50 * kMs, 6 * kMs, 3, 0);
  *cpu.add_spans() = MakeSpan("attention", 56 * kMs, 3 * kMs, 3, 1);
  *cpu.add_spans() = MakeSpan("merge", 59 * kMs, kMs / 2, 3);
  internal::WorkerProfile nothing;
  nothing.set_process("coordinator");

  uint32_t steps = 0;
  const std::vector<v1::PhaseSummary> phases = SummarizePhases({gpu, nothing, cpu}, &steps);
  EXPECT_EQ(steps, 3u);
  ASSERT_EQ(phases.size(), 5u);
  struct Expected {
    const char* process;
    const char* phase;
    double ms_per_step;
  };
  // Every process over the same 3 steps {1, 2, 3}, those it has no spans of at 0 ms.
  const Expected expected[] = {
      {"gpu_worker", "forward", 20.0 / 3},  // 20 ms of steps 1 and 2
      {"gpu_worker", "idle", 4.0 / 3},      // 4 ms of step 0
      {"gpu_worker", "sample", 4.0 / 3},    // ties with idle: by name
      {"cpu_worker", "attention", 5.0},     // 15 ms of steps 2 and 3
      {"cpu_worker", "merge", 0.5 / 3},
  };
  for (size_t i = 0; i < phases.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(phases[i].process(), expected[i].process);
    EXPECT_EQ(phases[i].phase(), expected[i].phase);
    EXPECT_DOUBLE_EQ(phases[i].ms_per_step(), expected[i].ms_per_step);
  }

  // A process without step ids divides by 1; a null `steps` is allowed.
  internal::WorkerProfile stepless;
  stepless.set_process("p");
  *stepless.add_spans() = MakeSpan("x", 0, 3 * kMs, 0);
  const std::vector<v1::PhaseSummary> stepless_phases = SummarizePhases({stepless}, nullptr);
  ASSERT_EQ(stepless_phases.size(), 1u);
  EXPECT_DOUBLE_EQ(stepless_phases[0].ms_per_step(), 3.0);
}

TEST(KeepStepsTest, KeepsTheGivenStepsAndThoseOfNoStepInOrder) {
  internal::WorkerProfile coordinator;
  coordinator.set_process("coordinator");
  // Step 9 is one the workers never ran (admitted as its request was aborted).
  for (const uint64_t step : {7, 0, 8, 9, 8, 0, 9}) {
    *coordinator.add_spans() = MakeSpan(absl::StrCat("s", step), step, 1, step);
  }
  EXPECT_THAT(StepIdsOf(coordinator), ElementsAre(7, 8, 9));
  internal::WorkerProfile gpu;
  *gpu.add_spans() = MakeSpan("step", 0, 1, 8);
  *gpu.add_spans() = MakeSpan("step", 0, 1, 6);
  *gpu.add_spans() = MakeSpan("step", 0, 1, 7);
  *gpu.add_spans() = MakeSpan("step", 0, 1, 8);
  const std::vector<uint64_t> ran = StepIdsOf(gpu);
  EXPECT_THAT(ran, ElementsAre(6, 7, 8));
  // By span name: the steps that have ended (their last span recorded).
  internal::WorkerProfile in_progress = gpu;
  *in_progress.add_spans() = MakeSpan("attention", 0, 1, 9);  // step 9 not ended
  EXPECT_THAT(StepIdsOf(in_progress), ElementsAre(6, 7, 8, 9));
  EXPECT_THAT(StepIdsOf(in_progress, "step"), ElementsAre(6, 7, 8));
  EXPECT_THAT(StepIdsOf(in_progress, "none"), ElementsAre());

  KeepSteps(ran, &coordinator);
  EXPECT_THAT(StepIds(coordinator.spans()), ElementsAre(7, 0, 8, 8, 0));
  uint32_t steps = 0;
  SummarizePhases({coordinator, gpu}, &steps);
  EXPECT_EQ(steps, 3u);  // 6, 7, 8: not 9

  KeepSteps({}, &coordinator);  // nothing ran: the spans of no step stay
  EXPECT_THAT(StepIds(coordinator.spans()), ElementsAre(0, 0));
  EXPECT_TRUE(StepIdsOf(coordinator).empty());
  internal::WorkerProfile empty;
  KeepSteps(ran, &empty);
  EXPECT_EQ(empty.spans_size(), 0);
}

// ProcessCpuMillis counts the CPU the process uses, not the time that passes: a thread busy
// for 30 ms of wall time adds most of that, one asleep as long adds next to nothing.
TEST(ProcessCpuMillisTest, CountsWorkNotSleep) {
  const double before_sleep = ProcessCpuMillis();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const double slept = ProcessCpuMillis() - before_sleep;
  EXPECT_GE(slept, 0.0);
  EXPECT_LT(slept, 10.0);
  const double before_work = ProcessCpuMillis();
  const auto start = std::chrono::steady_clock::now();
  volatile uint64_t sink = 0;
  while (MillisSince(start) < 30.0) sink = sink + 1;
  const double worked = ProcessCpuMillis() - before_work;
  // Descheduled now and then on a loaded machine, so a margin; the bound above is the clock's.
  EXPECT_GT(worked, 10.0);
  EXPECT_LT(worked, MillisSince(start) + 5.0);
}

}  // namespace
}  // namespace writescope
