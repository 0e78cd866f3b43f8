// Profiling building blocks shared by the three processes: a span recorder cheap enough to
// stay on in production, and the merge of the processes' spans into a Chrome trace and a
// per-phase summary. Timestamps are CLOCK_MONOTONIC nanoseconds (MonotonicNanos()), a clock
// common to every process of the machine, so spans of different processes line up.
//
//   SpanRecorder recorder;
//   { SpanRecorder::Scope scope(&recorder, "attention", step_id, layer); ... }
//   recorder.LastSteps(8, profile.mutable_spans());
#ifndef WRITESCOPE_COMMON_PROFILE_H_
#define WRITESCOPE_COMMON_PROFILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/repeated_field.h"
#include "writescope/internal/worker.pb.h"
#include "writescope/v1/writescope.pb.h"

namespace writescope {

// Spans of the last steps, kept in a fixed-size ring (the oldest are overwritten). Record()
// allocates nothing and holds a mutex only to copy 40 bytes, so it stays on in production.
// Thread-safe.
class SpanRecorder {
 public:
  explicit SpanRecorder(size_t capacity = size_t{1} << 17);

  SpanRecorder(const SpanRecorder&) = delete;
  SpanRecorder& operator=(const SpanRecorder&) = delete;

  // `name` must have static storage (a string literal): only the pointer is kept.
  // `step_id` 0 means "no step"; `layer` -1 means "not per layer".
  void Record(const char* name, uint64_t start_ns, uint64_t end_ns, uint64_t step_id,
              int32_t layer = -1);

  // RAII: records [construction, destruction). A null recorder makes it a no-op (no clock
  // read), so call sites need no branch when profiling is off.
  class Scope {
   public:
    Scope(SpanRecorder* recorder, const char* name, uint64_t step_id, int32_t layer = -1);
    ~Scope();

    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    SpanRecorder* recorder_;
    const char* name_;
    uint64_t step_id_;
    int32_t layer_;
    uint64_t start_ns_;
  };

  // Appends to `out` the spans of the `steps` most recent step ids present (recency: the
  // latest start of a step's spans), sorted by start time (the longer first on ties, so a
  // parent precedes its children). Spans of step 0 ("no step") are included when they start
  // within [earliest start, latest end] of the chosen steps' spans. Once the ring has
  // wrapped, a step that may have lost spans to overwriting is never chosen, since a partial
  // step would skew per-step averages: one with a span starting before the end of the oldest
  // surviving span of a step (lost spans were recorded, i.e. ended, before that one).
  // Holds the lock only in short chunks, so concurrent Record() calls are barely delayed.
  void LastSteps(uint32_t steps, google::protobuf::RepeatedPtrField<internal::Span>* out) const;

  // Total Record() calls since construction (including overwritten ones).
  uint64_t recorded() const;

  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    const char* name;
    uint64_t start_ns;
    uint64_t duration_ns;
    uint64_t step_id;
    int32_t layer;
  };

  const size_t capacity_;
  // A std::mutex rather than absl::Mutex: the system Abseil is not built with TSan, which
  // then cannot see absl::Mutex synchronize, while it intercepts pthread mutexes.
  mutable std::mutex mu_;
  // Entry of record number i lives at ring_[i % capacity_].
  const std::unique_ptr<Entry[]> ring_ ABSL_PT_GUARDED_BY(mu_);
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;  // number of records so far
  size_t head_ ABSL_GUARDED_BY(mu_) = 0;    // next_ % capacity_, without the division
};

// Merges the processes' spans into Chrome trace-event JSON (opens in Perfetto and
// chrome://tracing):
//   {"displayTimeUnit":"ms","traceEvents":[
//     {"name":"process_name","ph":"M","pid":P,"args":{"name":<process>}}, process_sort_index,
//     {"name":"thread_name","ph":"M","pid":P,"tid":T,"args":{"name":...}} per lane,
//     {"name":..,"cat":"step","ph":"X","ts":<us>,"dur":<us>,"pid":P,"tid":T,
//      "args":{"step":N,"layer":L}} per span ]}
// pid is 1, 2, 3... in the order of `processes`. ts is relative to the earliest span of all
// processes; ts and dur are microseconds with 3 decimals (exact nanoseconds). Chrome requires
// the complete events of one thread to nest; spans of one process that partially overlap are
// therefore spread over lanes (tids 1, 2, ...) assigned greedily, so every tid nests.
std::string ChromeTraceJson(absl::Span<const internal::WorkerProfile> processes);

// Per process and span name: total duration / number of distinct step ids (> 0) over all
// processes' spans (1 when there are none), in milliseconds: a step without spans of a
// process counts for it as 0 ms. Ordered by process (given order), then by descending
// ms_per_step, then by name. `steps` (may be null) receives that number of step ids.
std::vector<v1::PhaseSummary> SummarizePhases(absl::Span<const internal::WorkerProfile> processes,
                                              uint32_t* steps);

// The distinct step ids (> 0) among `profile`'s spans named `span_name` (of any name where
// it is empty), ascending.
std::vector<uint64_t> StepIdsOf(const internal::WorkerProfile& profile,
                                absl::string_view span_name = {});

// Keeps of `profile`'s spans those of the step ids in `keep` (ascending) and those of no step
// (step 0); drops the rest, keeping the order.
void KeepSteps(absl::Span<const uint64_t> keep, internal::WorkerProfile* profile);

// One complete event of a trace, as read back from the JSON (ts/dur converted to ns).
struct TraceEvent {
  int64_t pid = 0;
  int64_t tid = 0;
  uint64_t start_ns = 0;
  uint64_t duration_ns = 0;
};

// True when, per (pid, tid), every two events are either disjoint or one contains the other
// (touching ends count as disjoint): the nesting Chrome requires of one thread.
bool TraceEventsNest(absl::Span<const TraceEvent> events);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_PROFILE_H_
