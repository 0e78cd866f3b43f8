#include "common/process.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <utility>

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
