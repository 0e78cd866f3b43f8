// ws_cpu_load: a competing CPU load for the contention experiment (issue 7): N threads
// that stream through memory (a = b + s·c over arrays of --mib MiB each per thread, the
// STREAM triad), so they take both cores and host DRAM bandwidth from the workers, for
// --seconds, then exit. It prints what it achieved each second (GB/s over all threads), so
// the run's log shows the load it applied.
//
//   ws_cpu_load --threads=8 --seconds=30 [--mib=64]
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"

ABSL_FLAG(int, threads, 4, "Threads of load");
ABSL_FLAG(double, seconds, 10.0, "How long to run");
ABSL_FLAG(int, mib, 64, "MiB per array per thread (three arrays each)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ws_cpu_load --threads=N --seconds=S [--mib=M]");
  absl::ParseCommandLine(argc, argv);
  const int threads = absl::GetFlag(FLAGS_threads);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int mib = absl::GetFlag(FLAGS_mib);
  if (threads < 1 || threads > 1024 || !(seconds > 0.0) || mib < 1 || mib > 16384) {
    std::fprintf(stderr,
                 "ws_cpu_load: need 1 <= --threads <= 1024, --seconds > 0, 1 <= --mib <= 16384\n");
    return 2;
  }
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::atomic<uint64_t> bytes{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const size_t n = static_cast<size_t>(mib) << 20 >> 3;
      std::vector<double> a(n, 0.0), b(n, 1.0 + t), c(n, 2.0);
      const double s = 1.0000001;
      while (!stop.load(std::memory_order_relaxed)) {
        for (size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
        std::swap(a, b);
        bytes.fetch_add(3 * n * sizeof(double), std::memory_order_relaxed);
      }
      // Keep the result observable so the loop is not optimized away.
      if (a[n / 2] == -1.0) std::fprintf(stderr, "unreachable\n");
    });
  }
  std::printf("ws_cpu_load: %d threads, %.1f s, %d MiB x 3 per thread\n", threads, seconds, mib);
  std::fflush(stdout);
  uint64_t last = 0;
  auto tick = Clock::now();
  while (Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto now = Clock::now();
    if (now - tick >= std::chrono::seconds(1) || now >= end) {
      const uint64_t total = bytes.load();
      const double dt = std::chrono::duration<double>(now - tick).count();
      std::printf("ws_cpu_load: %.1f GB/s\n", (total - last) / dt / 1e9);
      std::fflush(stdout);
      last = total;
      tick = now;
    }
  }
  stop = true;
  for (std::thread& thread : pool) thread.join();
  return 0;
}
