// Why a writescope decode step explored: the read mode its prediction did not pick ran, so
// that both stay measured (coordinator/scheduler.h, ReadDecision::explore_reason). Its own
// header, so that the metrics (coordinator/metrics.h) name the same reasons without the
// scheduler.
#ifndef WRITESCOPE_COORDINATOR_EXPLORE_REASON_H_
#define WRITESCOPE_COORDINATOR_EXPLORE_REASON_H_

#include <array>
#include <cstddef>

#include "absl/strings/string_view.h"

namespace writescope::coordinator {

// In the order checked: the other mode was never measured (or its prediction is unknown);
// it repeats one that measured nothing; the credit covered its predicted extra cost; the
// maximum period forced it (the credit short of it); the other mode's rest was a guess after
// a re-level (measured at the first chance); the chosen mode's rest fell
// (SchedulerOptions::rest_shift_explore); the other mode's rest rose without the chosen's
// (SchedulerOptions::rest_rise_gap_share).
enum class ExploreReason {
  kNone,
  kUnmeasured,
  kRepeat,
  kCredit,
  kMaxPeriod,
  kGuess,
  kRestShift,
  kRestRise
};

// The reasons' names in the enum's order: "" for kNone, else one word.
inline constexpr std::array<absl::string_view, 8> kExploreReasonNames = {
    "", "unmeasured", "repeat", "credit", "max_period", "guess", "rest_shift", "rest_rise"};

inline absl::string_view ExploreReasonName(ExploreReason reason) {
  const auto i = static_cast<size_t>(reason);
  return i < kExploreReasonNames.size() ? kExploreReasonNames[i] : "";
}

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_EXPLORE_REASON_H_
