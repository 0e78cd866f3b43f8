// Process plumbing shared by the three binaries: termination signals and port files.
#ifndef WRITESCOPE_COMMON_PROCESS_H_
#define WRITESCOPE_COMMON_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

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

// The supervisor a process was started by, from WS_SUPERVISOR_PID (launch.sh sets it to its
// own pid for the three processes it starts): none where `value` is null or empty,
// INVALID_ARGUMENT where it is not a pid (a positive decimal number that fits pid_t).
absl::StatusOr<std::optional<pid_t>> ParseSupervisorPid(const char* value);

// Where WS_SUPERVISOR_PID names this process's parent, SIGTERM reaches the process when that
// parent dies, however it dies (kill -9, the OOM killer): no process outlives its supervisor
// and keeps the arena. A parent gone already (the process was reparented before this call)
// requests termination at once; a bad value is reported on stderr and ignored. Call after
// BlockTerminationSignals, before the watcher starts.
void EndWithSupervisor();

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
