// Process plumbing shared by the three binaries: termination signals and port files.
#ifndef WRITESCOPE_COMMON_PROCESS_H_
#define WRITESCOPE_COMMON_PROCESS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"

namespace writescope {

// Blocks SIGINT and SIGTERM in the calling thread; threads started afterwards inherit
// the mask, so only the watcher started below receives them. Call first in main().
void BlockTerminationSignals();

// Starts a thread that waits for SIGINT/SIGTERM (or RequestTermination()) and then
// calls `on_signal` once. The returned thread must be joined after the server stops.
std::thread StartTerminationWatcher(std::function<void()> on_signal);

// Makes the watcher fire as if a signal had arrived (used by Shutdown RPCs); before the
// watcher starts, it fires as soon as it does; after it fired, nothing more happens.
void RequestTermination();

// Writes `port` to `path` atomically (a temporary file, then rename).
absl::Status WritePortFile(const std::string& path, int port);

// Nanoseconds of CLOCK_MONOTONIC: the clock shared by the three processes' profiles.
uint64_t MonotonicNanos();

// Milliseconds of CPU time this process has used, all its threads (CLOCK_PROCESS_CPUTIME_ID):
// the difference over a span is the CPU the process took from the host's cores meanwhile.
double ProcessCpuMillis();

// One spin-wait pause (PAUSE on x86: it lets a sibling hyperthread run and saves power).
inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// Milliseconds of std::chrono::steady_clock since `start` (timings in results and logs).
inline double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_PROCESS_H_
