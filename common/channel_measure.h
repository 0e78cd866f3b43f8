// Measures the shared-memory channel between two processes, the way the workers use
// it: a fresh arena laid out by ArenaRegions(), its two data-plane channels, and a
// forked peer that attaches to the arena by name (so the mapping is its own, at its
// own address). Shared by channel_bench and ws_probe so both report the same thing.
//
// Definitions (what the numbers mean):
// - Round trip: the parent Sends an S-byte message on `to_cpu`; the peer Peeks it,
//   Reserves S bytes on `to_gpu`, copies the message there, Commits and Releases; the
//   parent Receives the S-byte echo into its own buffer. One sample is the steady_clock
//   time from before Send to after Receive.
// - One-way bandwidth: the parent Sends messages of S bytes back to back (a copy from
//   a private buffer into the ring); the peer Receives each into a private buffer
//   (a copy out of the ring); after the last one the parent sends an empty message
//   and waits for the peer's empty acknowledgement. Bandwidth is payload bytes
//   (counted once) over the time from the first Send to the acknowledgement.
#ifndef WRITESCOPE_COMMON_CHANNEL_MEASURE_H_
#define WRITESCOPE_COMMON_CHANNEL_MEASURE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace writescope {

struct ChannelMeasureOptions {
  // Bytes of each data-plane channel (per direction), as ArenaSizes::channel_bytes.
  uint64_t channel_bytes = uint64_t{16} << 20;
  // Round trips per message size (after `warmup_round_trips` unrecorded ones).
  int round_trips = 20000;
  int warmup_round_trips = 1000;
  // Pause before each recorded round trip, so that the peer has gone from spinning to
  // sleeping on its futex: measures the wake-up path. Zero for back-to-back.
  absl::Duration idle_before_round_trip = absl::ZeroDuration();
  // Payload bytes streamed per message size for bandwidth (at least 8 messages), and
  // how many times the stream is repeated; the best and median repetition are kept.
  uint64_t bandwidth_bytes = uint64_t{1} << 30;
  int bandwidth_repetitions = 5;
  // Give up on an unresponsive peer after this long.
  absl::Duration timeout = absl::Seconds(30);
};

struct RoundTripResult {
  size_t message_bytes = 0;
  int samples = 0;
  // Microseconds.
  double min_us = 0;
  double median_us = 0;
  double p99_us = 0;
  double max_us = 0;
};

struct BandwidthResult {
  size_t message_bytes = 0;
  uint64_t messages = 0;  // per repetition
  // Payload GB/s (1e9 bytes per second), counted once.
  double best_gbps = 0;
  double median_gbps = 0;
};

// Round trips for each size in `message_bytes` between this process and a forked peer.
// Call it before the process starts threads (OpenMP, CUDA): it forks.
absl::StatusOr<std::vector<RoundTripResult>> MeasureChannelRoundTrips(
    absl::Span<const size_t> message_bytes, const ChannelMeasureOptions& options);

// One-way bandwidth for each size in `message_bytes` between this process and a
// forked peer. Same caveat about threads.
absl::StatusOr<std::vector<BandwidthResult>> MeasureChannelBandwidth(
    absl::Span<const size_t> message_bytes, const ChannelMeasureOptions& options);

// Median and 99th percentile of samples (sorted in place); helpers for callers that
// time other things the same way.
double Percentile(std::vector<double>& samples, double fraction);

// "64 B", "4 KiB", "1 MiB", "2 GiB" (binary units; exact multiples print without
// decimals) for tables.
std::string FormatBytes(uint64_t bytes);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_CHANNEL_MEASURE_H_
