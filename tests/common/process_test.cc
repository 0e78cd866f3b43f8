// The termination watcher (common/process.h): a request made before the watcher starts (a
// Shutdown RPC that arrives between the server's start and the watcher's) fires it as soon
// as it starts, and a request after it fired signals no thread (the watcher has ended). The
// supervisor's pid as launch.sh passes it (WS_SUPERVISOR_PID); the kernel's SIGTERM when
// launch.sh dies is tested end to end (tests/e2e/launch_test.sh).

#include "common/process.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace writescope {
namespace {

TEST(TerminationWatcherTest, ARequestBeforeTheWatcherStartsFiresItAndOneAfterIsHarmless) {
  BlockTerminationSignals();  // as main() does: only the watcher takes the signals
  RequestTermination();
  std::atomic<int> fired{0};
  std::thread watcher = StartTerminationWatcher([&] { fired.fetch_add(1); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (fired.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(fired.load(), 1);
  if (fired.load() == 0) RequestTermination();  // the request was lost: end the wait anyway
  watcher.join();
  // The watcher is gone: this neither signals it nor fires anything again.
  RequestTermination();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(fired.load(), 1);
}

TEST(ParseSupervisorPidTest, APositivePidOrNothing) {
  EXPECT_EQ(*ParseSupervisorPid(nullptr), std::nullopt);
  EXPECT_EQ(*ParseSupervisorPid(""), std::nullopt);
  EXPECT_EQ(*ParseSupervisorPid("1"), std::optional<pid_t>(1));
  EXPECT_EQ(*ParseSupervisorPid("4194304"), std::optional<pid_t>(4194304));
  for (const char* bad : {"0", "-5", "+5", " 5", "5x", "abc", "99999999999", "0x10"}) {
    const absl::StatusOr<std::optional<pid_t>> parsed = ParseSupervisorPid(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(ParseSupervisorPid("abc").status().message()),
              ::testing::HasSubstr("WS_SUPERVISOR_PID='abc'"));
}

}  // namespace
}  // namespace writescope
