// Small helpers shared by the tests.
#ifndef WRITESCOPE_TESTS_COMMON_TEST_UTIL_H_
#define WRITESCOPE_TESTS_COMMON_TEST_UTIL_H_

#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace writescope::testing {

// A shm name unique to this process and test, so tests can run in parallel.
inline std::string UniqueArenaName(absl::string_view tag) {
  static int counter = 0;
  return absl::StrCat("/ws-test-", tag, "-", getpid(), "-", counter++);
}

}  // namespace writescope::testing

#define WS_ASSERT_OK(expr)                               \
  do {                                                   \
    const ::absl::Status ws_test_status_ = (expr);       \
    ASSERT_TRUE(ws_test_status_.ok()) << ws_test_status_; \
  } while (0)

#define WS_EXPECT_OK(expr)                               \
  do {                                                   \
    const ::absl::Status ws_test_status_ = (expr);       \
    EXPECT_TRUE(ws_test_status_.ok()) << ws_test_status_; \
  } while (0)

#endif  // WRITESCOPE_TESTS_COMMON_TEST_UTIL_H_
