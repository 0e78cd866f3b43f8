// channel_bench: round-trip latency and one-way bandwidth of the shared-memory
// data-plane channel between two processes, against the foundation issue's aims
// (round trip under 20 us, at least 5 GB/s for 1 MiB messages on the dev machine).
// What is timed is defined in common/channel_measure.h.
//
//   channel_bench                     # full table
//   channel_bench --round_trips=2000 --bandwidth_mib=128   # quicker
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/channel_measure.h"

ABSL_FLAG(int, round_trips, 20000, "Recorded round trips per message size.");
ABSL_FLAG(int, idle_round_trips, 500,
          "Round trips of 64 B after an idle pause (peer asleep on its futex); 0 skips them.");
ABSL_FLAG(int, idle_us, 500, "The idle pause before each of those round trips, microseconds.");
ABSL_FLAG(int, bandwidth_mib, 1024, "Payload MiB streamed per message size and repetition.");
ABSL_FLAG(int, repetitions, 5, "Bandwidth repetitions per message size (best and median kept).");
ABSL_FLAG(int, channel_mib, 16, "Channel size per direction, MiB (as the workers' arena).");
ABSL_FLAG(bool, strict, false, "Exit with status 1 when an aim is missed.");

namespace writescope {
namespace {

constexpr double kRoundTripAimUs = 20.0;
constexpr double kBandwidthAimGbps = 5.0;
constexpr size_t kBandwidthAimBytes = size_t{1} << 20;

int Run() {
  ChannelMeasureOptions options;
  options.channel_bytes = uint64_t(absl::GetFlag(FLAGS_channel_mib)) << 20;
  options.round_trips = absl::GetFlag(FLAGS_round_trips);
  options.warmup_round_trips = std::max(100, options.round_trips / 20);
  options.bandwidth_bytes = uint64_t(absl::GetFlag(FLAGS_bandwidth_mib)) << 20;
  options.bandwidth_repetitions = absl::GetFlag(FLAGS_repetitions);

  absl::PrintF(
      "WriteScope channel benchmark: two processes (fork; the peer attaches to the arena\n"
      "by name), SPSC shared-memory channels of %s per direction, %ld online CPUs.\n\n",
      FormatBytes(options.channel_bytes), sysconf(_SC_NPROCESSORS_ONLN));

  std::vector<size_t> latency_sizes;
  for (size_t bytes = 64; bytes <= (size_t{64} << 10); bytes *= 4) latency_sizes.push_back(bytes);
  absl::StatusOr<std::vector<RoundTripResult>> round_trips =
      MeasureChannelRoundTrips(latency_sizes, options);
  if (!round_trips.ok()) {
    absl::FPrintF(stderr, "round trips failed: %s\n", round_trips.status().ToString());
    return 2;
  }
  absl::PrintF(
      "Round trip: Send S bytes -> peer copies them back -> Receive S bytes (%d samples)\n",
      options.round_trips);
  absl::PrintF("%10s %10s %10s %10s %10s\n", "message", "min us", "median us", "p99 us", "max us");
  double worst_median = 0;
  size_t worst_bytes = 0;
  for (const RoundTripResult& r : *round_trips) {
    absl::PrintF("%10s %10.2f %10.2f %10.2f %10.1f\n", FormatBytes(r.message_bytes), r.min_us,
                 r.median_us, r.p99_us, r.max_us);
    if (r.median_us > worst_median) {
      worst_median = r.median_us;
      worst_bytes = r.message_bytes;
    }
  }
  const bool latency_ok = worst_median < kRoundTripAimUs;
  absl::PrintF(
      "aim: median round trip < %.0f us for 64 B .. 64 KiB: %s (worst median %.2f us at %s)\n\n",
      kRoundTripAimUs, latency_ok ? "MET" : "MISSED", worst_median, FormatBytes(worst_bytes));

  if (absl::GetFlag(FLAGS_idle_round_trips) > 0) {
    ChannelMeasureOptions idle = options;
    idle.round_trips = absl::GetFlag(FLAGS_idle_round_trips);
    idle.warmup_round_trips = 10;
    idle.idle_before_round_trip = absl::Microseconds(absl::GetFlag(FLAGS_idle_us));
    const size_t small[] = {64};
    absl::StatusOr<std::vector<RoundTripResult>> woken = MeasureChannelRoundTrips(small, idle);
    if (!woken.ok()) {
      absl::FPrintF(stderr, "idle round trips failed: %s\n", woken.status().ToString());
      return 2;
    }
    const RoundTripResult& r = woken->front();
    absl::PrintF("Round trip of 64 B after %d us idle (peer asleep on its futex, %d samples)\n",
                 absl::GetFlag(FLAGS_idle_us), r.samples);
    absl::PrintF("%10s %10.2f %10.2f %10.2f %10.1f\n\n", "64 B", r.min_us, r.median_us, r.p99_us,
                 r.max_us);
  }

  std::vector<size_t> bandwidth_sizes;
  for (size_t bytes = size_t{64} << 10; bytes <= (size_t{4} << 20); bytes *= 2) {
    bandwidth_sizes.push_back(bytes);
  }
  absl::StatusOr<std::vector<BandwidthResult>> bandwidth =
      MeasureChannelBandwidth(bandwidth_sizes, options);
  if (!bandwidth.ok()) {
    absl::FPrintF(stderr, "bandwidth failed: %s\n", bandwidth.status().ToString());
    return 2;
  }
  absl::PrintF(
      "One-way bandwidth: Send (copy into the ring) -> peer Receive (copy out);\n"
      "payload bytes counted once, %s per size, %d repetitions\n",
      FormatBytes(options.bandwidth_bytes), options.bandwidth_repetitions);
  absl::PrintF("%10s %10s %12s %12s\n", "message", "messages", "best GB/s", "median GB/s");
  double aim_gbps = 0;
  for (const BandwidthResult& r : *bandwidth) {
    absl::PrintF("%10s %10d %12.2f %12.2f\n", FormatBytes(r.message_bytes), r.messages, r.best_gbps,
                 r.median_gbps);
    if (r.message_bytes == kBandwidthAimBytes) aim_gbps = r.median_gbps;
  }
  const bool bandwidth_ok = aim_gbps >= kBandwidthAimGbps;
  absl::PrintF("aim: median >= %.0f GB/s at 1 MiB: %s (%.2f GB/s)\n", kBandwidthAimGbps,
               bandwidth_ok ? "MET" : "MISSED", aim_gbps);

  if (absl::GetFlag(FLAGS_strict) && !(latency_ok && bandwidth_ok)) return 1;
  return 0;
}

}  // namespace
}  // namespace writescope

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return writescope::Run();
}
