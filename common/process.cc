#include "common/process.h"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace writescope {
namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR2);  // RequestTermination
  return set;
}

// The watcher RequestTermination signals, and a request made before it started (a Shutdown
// RPC between the server's start and the watcher's), which the watcher then acts on at once.
std::mutex g_watcher_mutex;
pthread_t g_watcher;
bool g_watcher_started = false;  // and waiting
bool g_watcher_fired = false;
bool g_termination_pending = false;

}  // namespace

void BlockTerminationSignals() {
  sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

std::thread StartTerminationWatcher(std::function<void()> on_signal) {
  std::lock_guard<std::mutex> lock(g_watcher_mutex);
  const bool pending = std::exchange(g_termination_pending, false);
  std::thread watcher([on_signal = std::move(on_signal), pending] {
    if (!pending) {
      sigset_t set = TerminationSignals();
      int signal_number = 0;
      while (sigwait(&set, &signal_number) != 0) {
      }
    }
    {
      // Fired once: a later request must not signal a thread that is about to end.
      std::lock_guard<std::mutex> lock(g_watcher_mutex);
      g_watcher_started = false;
      g_watcher_fired = true;
    }
    on_signal();
  });
  g_watcher = watcher.native_handle();
  g_watcher_started = true;
  return watcher;
}

void RequestTermination() {
  std::lock_guard<std::mutex> lock(g_watcher_mutex);
  if (g_watcher_started) {
    pthread_kill(g_watcher, SIGUSR2);
  } else if (!g_watcher_fired) {
    g_termination_pending = true;
  }
}

absl::StatusOr<std::optional<pid_t>> ParseSupervisorPid(const char* value) {
  if (value == nullptr || *value == '\0') return std::nullopt;
  int64_t pid = 0;
  if (!absl::SimpleAtoi(value, &pid) || pid <= 0 || pid > std::numeric_limits<pid_t>::max() ||
      !absl::ascii_isdigit(static_cast<unsigned char>(value[0]))) {
    return absl::InvalidArgumentError(
        absl::StrCat("WS_SUPERVISOR_PID='", value, "' is not a process id"));
  }
  return static_cast<pid_t>(pid);
}

void EndWithSupervisor() {
  const absl::StatusOr<std::optional<pid_t>> supervisor =
      ParseSupervisorPid(std::getenv("WS_SUPERVISOR_PID"));
  if (!supervisor.ok()) {
    std::fprintf(stderr, "%s; not watching a supervisor\n",
                 std::string(supervisor.status().message()).c_str());
    return;
  }
  if (!supervisor->has_value()) return;
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) {
    std::fprintf(stderr, "prctl(PR_SET_PDEATHSIG): errno %d; not watching the supervisor\n", errno);
    return;
  }
  // Armed from now on: a parent that died before this call sent nothing, so that case is
  // told by the parent having changed (the process was reparented).
  if (getppid() != **supervisor) {
    std::fprintf(stderr, "the supervisor (pid %d) is gone; stopping\n",
                 static_cast<int>(**supervisor));
    RequestTermination();
  }
}

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string temp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(temp, std::ios::trunc);
    if (!out) return ErrnoToStatus(errno, absl::StrCat("open ", temp));
    out << port << "\n";
    if (!out.flush()) return ErrnoToStatus(errno, absl::StrCat("write ", temp));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("rename ", temp, " -> ", path));
  }
  return absl::OkStatus();
}

double ProcessCpuMillis() {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

uint64_t MonotonicNanos() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace writescope
