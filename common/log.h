// Minimal streaming logger. Debian 12's Abseil (20220623) predates absl/log, so the
// services log through this: one line per message on stderr, written with a single
// write(2) so lines of concurrent threads and processes do not interleave.
//
//   WS_LOG(INFO) << "loaded " << n << " tensors";
//   WS_CHECK(ptr != nullptr) << "why this cannot happen";
#ifndef WRITESCOPE_COMMON_LOG_H_
#define WRITESCOPE_COMMON_LOG_H_

#include <sstream>
#include "absl/strings/string_view.h"

namespace writescope {

enum class LogSeverity { kInfo, kWarning, kError, kFatal };

// Sets the process tag printed on every line (e.g. "coordinator").
void SetLogProcessName(absl::string_view name);

class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();  // writes the line; aborts for kFatal
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Swallows the stream when a condition holds (used by WS_CHECK).
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace writescope

#define WS_LOG_SEVERITY_INFO ::writescope::LogSeverity::kInfo
#define WS_LOG_SEVERITY_WARNING ::writescope::LogSeverity::kWarning
#define WS_LOG_SEVERITY_ERROR ::writescope::LogSeverity::kError
#define WS_LOG_SEVERITY_FATAL ::writescope::LogSeverity::kFatal

#define WS_LOG(severity) \
  ::writescope::LogMessage(WS_LOG_SEVERITY_##severity, __FILE__, __LINE__).stream()

#define WS_CHECK(condition)                          \
  (condition) ? (void)0                              \
              : ::writescope::LogVoidify() &         \
                    WS_LOG(FATAL) << "Check failed: " #condition " "

#endif  // WRITESCOPE_COMMON_LOG_H_
