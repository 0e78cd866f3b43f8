#include "common/profile.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/log.h"
#include "common/process.h"

namespace writescope {
namespace {

// Entries copied per lock hold by LastSteps(): ~10 us of copying, so a writer waits at most
// about that long while a profile is taken.
constexpr uint64_t kCopyChunk = 4096;

uint64_t SaturatingEnd(uint64_t start_ns, uint64_t duration_ns) {
  return duration_ns > std::numeric_limits<uint64_t>::max() - start_ns
             ? std::numeric_limits<uint64_t>::max()
             : start_ns + duration_ns;
}

// Appends `text` as a JSON string literal. Invalid UTF-8 becomes U+FFFD so the document
// always parses.
void AppendJsonString(std::string* out, absl::string_view text) {
  out->push_back('"');
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out->append("\\\"");
          break;
        case '\\':
          out->append("\\\\");
          break;
        case '\b':
          out->append("\\b");
          break;
        case '\f':
          out->append("\\f");
          break;
        case '\n':
          out->append("\\n");
          break;
        case '\r':
          out->append("\\r");
          break;
        case '\t':
          out->append("\\t");
          break;
        default:
          if (c < 0x20) {
            absl::StrAppendFormat(out, "\\u%04x", c);
          } else {
            out->push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    // Length of the sequence and the range of its second byte (RFC 3629), 0 when invalid.
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
    }
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      valid = k == 1 ? (next >= low && next <= high) : (next >= 0x80 && next <= 0xBF);
    }
    if (valid) {
      out->append(text.data() + i, length);
      i += length;
    } else {
      out->append("\\ufffd");
      ++i;
    }
  }
  out->push_back('"');
}

void AppendMicros(std::string* out, uint64_t ns) {
  absl::StrAppendFormat(out, "%d.%03d", ns / 1000, ns % 1000);
}

// Orders spans by start, the longer first on ties, so that a parent precedes its children.
bool StartsBefore(uint64_t start_a, uint64_t end_a, uint64_t start_b, uint64_t end_b) {
  return start_a != start_b ? start_a < start_b : end_a > end_b;
}

}  // namespace

SpanRecorder::SpanRecorder(size_t capacity)
    // Value-initialized so that the pages are touched now, not by the first lap of Record().
    : capacity_(capacity), ring_(new Entry[capacity > 0 ? capacity : 1]()) {
  WS_CHECK(capacity > 0) << "a SpanRecorder needs room for at least one span";
}

void SpanRecorder::Record(const char* name, uint64_t start_ns, uint64_t end_ns, uint64_t step_id,
                          int32_t layer) {
  const uint64_t duration_ns = end_ns > start_ns ? end_ns - start_ns : 0;
  std::lock_guard<std::mutex> lock(mu_);
  ring_[head_] = Entry{name, start_ns, duration_ns, step_id, layer};
  if (++head_ == capacity_) head_ = 0;
  ++next_;
}

SpanRecorder::Scope::Scope(SpanRecorder* recorder, const char* name, uint64_t step_id,
                           int32_t layer)
    : recorder_(recorder),
      name_(name),
      step_id_(step_id),
      layer_(layer),
      start_ns_(recorder != nullptr ? MonotonicNanos() : 0) {}

SpanRecorder::Scope::~Scope() {
  if (recorder_ != nullptr) recorder_->Record(name_, start_ns_, MonotonicNanos(), step_id_, layer_);
}

uint64_t SpanRecorder::recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_;
}

void SpanRecorder::LastSteps(uint32_t steps,
                             google::protobuf::RepeatedPtrField<internal::Span>* out) const {
  if (steps == 0) return;
  // Copy the records [first, end) in chunks. A chunk that finds its oldest records already
  // overwritten restarts the copy from the oldest surviving one, so `entries` always holds a
  // contiguous run of records ending at `end`.
  uint64_t end;
  {
    std::lock_guard<std::mutex> lock(mu_);
    end = next_;
  }
  uint64_t first = end > capacity_ ? end - capacity_ : 0;
  std::vector<Entry> entries;
  entries.reserve(end - first);
  uint64_t index = first;
  while (index < end) {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t oldest = next_ > capacity_ ? next_ - capacity_ : 0;
    if (index < oldest) {
      entries.clear();
      index = first = oldest;
      if (index >= end) break;
    }
    const uint64_t chunk_end = std::min(end, index + kCopyChunk);
    for (; index < chunk_end; ++index) entries.push_back(ring_[index % capacity_]);
  }

  // Records lost before `first` ended (were recorded) before the oldest surviving step span
  // did: a step with a span starting before that end may be missing spans.
  uint64_t cutoff_ns = 0;
  if (first > 0) {
    for (const Entry& entry : entries) {
      if (entry.step_id != 0) {
        cutoff_ns = SaturatingEnd(entry.start_ns, entry.duration_ns);
        break;
      }
    }
  }

  struct StepExtent {
    uint64_t first_start_ns = std::numeric_limits<uint64_t>::max();
    uint64_t last_start_ns = 0;
    uint64_t last_end_ns = 0;
  };
  absl::flat_hash_map<uint64_t, StepExtent> extents;
  for (const Entry& entry : entries) {
    if (entry.step_id == 0) continue;
    StepExtent& extent = extents[entry.step_id];
    extent.first_start_ns = std::min(extent.first_start_ns, entry.start_ns);
    extent.last_start_ns = std::max(extent.last_start_ns, entry.start_ns);
    extent.last_end_ns =
        std::max(extent.last_end_ns, SaturatingEnd(entry.start_ns, entry.duration_ns));
  }
  std::vector<std::pair<uint64_t, StepExtent>> candidates;
  candidates.reserve(extents.size());
  for (const auto& [step_id, extent] : extents) {
    if (extent.first_start_ns >= cutoff_ns) candidates.emplace_back(step_id, extent);
  }
  // Most recent first; the higher id breaks ties.
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second.last_start_ns, a.first) > std::tie(b.second.last_start_ns, b.first);
  });
  if (candidates.size() > steps) candidates.resize(steps);
  if (candidates.empty()) return;

  absl::flat_hash_map<uint64_t, bool> chosen;
  uint64_t range_start_ns = std::numeric_limits<uint64_t>::max();
  uint64_t range_end_ns = 0;
  for (const auto& [step_id, extent] : candidates) {
    chosen[step_id] = true;
    range_start_ns = std::min(range_start_ns, extent.first_start_ns);
    range_end_ns = std::max(range_end_ns, extent.last_end_ns);
  }
  std::vector<const Entry*> selected;
  for (const Entry& entry : entries) {
    const bool keep = entry.step_id == 0
                          ? entry.start_ns >= range_start_ns && entry.start_ns <= range_end_ns
                          : chosen.contains(entry.step_id);
    if (keep) selected.push_back(&entry);
  }
  std::stable_sort(selected.begin(), selected.end(), [](const Entry* a, const Entry* b) {
    return StartsBefore(a->start_ns, SaturatingEnd(a->start_ns, a->duration_ns), b->start_ns,
                        SaturatingEnd(b->start_ns, b->duration_ns));
  });
  out->Reserve(out->size() + static_cast<int>(selected.size()));
  for (const Entry* entry : selected) {
    internal::Span* span = out->Add();
    span->set_name(entry->name != nullptr ? entry->name : "");
    span->set_start_ns(entry->start_ns);
    span->set_duration_ns(entry->duration_ns);
    span->set_step_id(entry->step_id);
    span->set_layer(entry->layer);
  }
}

std::string ChromeTraceJson(absl::Span<const internal::WorkerProfile> processes) {
  uint64_t origin_ns = std::numeric_limits<uint64_t>::max();
  for (const internal::WorkerProfile& process : processes) {
    for (const internal::Span& span : process.spans())
      origin_ns = std::min(origin_ns, span.start_ns());
  }

  // Per process: its spans in start order and the lane (tid) of each. A lane keeps the ends
  // of its open spans, innermost last; a span joins the first lane where, once the spans
  // that ended by its start are closed, it fits inside the innermost open one (or nothing is
  // open).
  struct Placed {
    const internal::Span* span;
    uint64_t end_ns;
    int tid;
  };
  std::vector<std::vector<Placed>> placed(processes.size());
  std::vector<int> lane_counts(processes.size(), 0);
  for (size_t p = 0; p < processes.size(); ++p) {
    std::vector<Placed>& spans = placed[p];
    spans.reserve(processes[p].spans_size());
    for (const internal::Span& span : processes[p].spans()) {
      spans.push_back(Placed{&span, SaturatingEnd(span.start_ns(), span.duration_ns()), 0});
    }
    std::stable_sort(spans.begin(), spans.end(), [](const Placed& a, const Placed& b) {
      return StartsBefore(a.span->start_ns(), a.end_ns, b.span->start_ns(), b.end_ns);
    });
    std::vector<std::vector<uint64_t>> lanes;
    for (Placed& item : spans) {
      const uint64_t start_ns = item.span->start_ns();
      size_t lane = 0;
      for (; lane < lanes.size(); ++lane) {
        std::vector<uint64_t>& open = lanes[lane];
        while (!open.empty() && open.back() <= start_ns) open.pop_back();
        if (open.empty() || open.back() >= item.end_ns) break;
      }
      if (lane == lanes.size()) lanes.emplace_back();
      lanes[lane].push_back(item.end_ns);
      item.tid = static_cast<int>(lane) + 1;
    }
    lane_counts[p] = std::max<int>(1, static_cast<int>(lanes.size()));
  }

  std::string json = R"({"displayTimeUnit":"ms","traceEvents":[)";
  bool first_event = true;
  auto separate = [&json, &first_event] {
    if (!first_event) json.push_back(',');
    first_event = false;
  };
  for (size_t p = 0; p < processes.size(); ++p) {
    const size_t pid = p + 1;
    separate();
    absl::StrAppend(&json, R"({"name":"process_name","ph":"M","pid":)", pid,
                    R"(,"tid":0,"args":{"name":)");
    AppendJsonString(&json, processes[p].process());
    json.append("}}");
    separate();
    absl::StrAppend(&json, R"({"name":"process_sort_index","ph":"M","pid":)", pid,
                    R"(,"tid":0,"args":{"sort_index":)", pid, "}}");
    for (int tid = 1; tid <= lane_counts[p]; ++tid) {
      separate();
      absl::StrAppend(&json, R"({"name":"thread_name","ph":"M","pid":)", pid, R"(,"tid":)", tid,
                      R"(,"args":{"name":)");
      AppendJsonString(
          &json, tid == 1 ? std::string("spans") : absl::StrCat("overlapping spans ", tid - 1));
      json.append("}}");
    }
  }
  for (size_t p = 0; p < processes.size(); ++p) {
    for (const Placed& item : placed[p]) {
      const internal::Span& span = *item.span;
      separate();
      json.append(R"({"name":)");
      AppendJsonString(&json, span.name());
      json.append(R"(,"cat":"step","ph":"X","ts":)");
      AppendMicros(&json, span.start_ns() - origin_ns);
      json.append(R"(,"dur":)");
      AppendMicros(&json, item.end_ns - span.start_ns());
      absl::StrAppend(&json, R"(,"pid":)", p + 1, R"(,"tid":)", item.tid, R"(,"args":{"step":)",
                      span.step_id(), R"(,"layer":)", span.layer(), "}}");
    }
  }
  json.append("]}");
  return json;
}

std::vector<v1::PhaseSummary> SummarizePhases(absl::Span<const internal::WorkerProfile> processes,
                                              uint32_t* steps) {
  // Every process's phases over the same steps: a step that needed nothing of a process (a
  // GPU-only step with its experts on the GPU: no cpu_worker span) counts for it as 0 ms.
  std::vector<uint64_t> all_step_ids;
  for (const internal::WorkerProfile& process : processes) {
    const std::vector<uint64_t> ids = StepIdsOf(process);
    all_step_ids.insert(all_step_ids.end(), ids.begin(), ids.end());
  }
  std::sort(all_step_ids.begin(), all_step_ids.end());
  all_step_ids.erase(std::unique(all_step_ids.begin(), all_step_ids.end()), all_step_ids.end());
  if (steps != nullptr) *steps = static_cast<uint32_t>(all_step_ids.size());
  const double divisor = static_cast<double>(std::max<size_t>(1, all_step_ids.size()));

  std::vector<v1::PhaseSummary> summaries;
  for (const internal::WorkerProfile& process : processes) {
    absl::flat_hash_map<absl::string_view, uint64_t> total_ns;
    for (const internal::Span& span : process.spans()) total_ns[span.name()] += span.duration_ns();
    const size_t begin = summaries.size();
    for (const auto& [name, ns] : total_ns) {
      v1::PhaseSummary& summary = summaries.emplace_back();
      summary.set_process(process.process());
      summary.set_phase(std::string(name));
      summary.set_ms_per_step(static_cast<double>(ns) / 1e6 / divisor);
    }
    std::sort(summaries.begin() + begin, summaries.end(),
              [](const v1::PhaseSummary& a, const v1::PhaseSummary& b) {
                if (a.ms_per_step() != b.ms_per_step()) return a.ms_per_step() > b.ms_per_step();
                return a.phase() < b.phase();
              });
  }
  return summaries;
}

std::vector<uint64_t> StepIdsOf(const internal::WorkerProfile& profile,
                                absl::string_view span_name) {
  std::vector<uint64_t> ids;
  for (const internal::Span& span : profile.spans()) {
    if (span.step_id() != 0 && (span_name.empty() || span.name() == span_name)) {
      ids.push_back(span.step_id());
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void KeepSteps(absl::Span<const uint64_t> keep, internal::WorkerProfile* profile) {
  google::protobuf::RepeatedPtrField<internal::Span>* spans = profile->mutable_spans();
  int kept = 0;
  for (int i = 0; i < spans->size(); ++i) {
    const uint64_t step = spans->Get(i).step_id();
    if (step != 0 && !std::binary_search(keep.begin(), keep.end(), step)) continue;
    if (kept != i) spans->SwapElements(kept, i);
    ++kept;
  }
  spans->DeleteSubrange(kept, spans->size() - kept);
}

bool TraceEventsNest(absl::Span<const TraceEvent> events) {
  std::vector<TraceEvent> sorted(events.begin(), events.end());
  std::sort(sorted.begin(), sorted.end(), [](const TraceEvent& a, const TraceEvent& b) {
    if (a.pid != b.pid) return a.pid < b.pid;
    if (a.tid != b.tid) return a.tid < b.tid;
    return StartsBefore(a.start_ns, SaturatingEnd(a.start_ns, a.duration_ns), b.start_ns,
                        SaturatingEnd(b.start_ns, b.duration_ns));
  });
  std::vector<uint64_t> open_ends;  // of the current (pid, tid), innermost last
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TraceEvent& event = sorted[i];
    if (i == 0 || event.pid != sorted[i - 1].pid || event.tid != sorted[i - 1].tid) {
      open_ends.clear();
    }
    const uint64_t end_ns = SaturatingEnd(event.start_ns, event.duration_ns);
    while (!open_ends.empty() && open_ends.back() <= event.start_ns) open_ends.pop_back();
    if (!open_ends.empty() && open_ends.back() < end_ns) return false;
    open_ends.push_back(end_ns);
  }
  return true;
}

}  // namespace writescope
