#include "common/log.h"

#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace writescope {
namespace {

std::string& ProcessName() {
  static std::string* name = new std::string("writescope");
  return *name;
}

char SeverityLetter(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kInfo:
      return 'I';
    case LogSeverity::kWarning:
      return 'W';
    case LogSeverity::kError:
      return 'E';
    case LogSeverity::kFatal:
      return 'F';
  }
  return '?';
}

}  // namespace

void SetLogProcessName(absl::string_view name) { ProcessName() = std::string(name); }

LogMessage::LogMessage(LogSeverity severity, const char* file, int line) : severity_(severity) {
  absl::string_view path(file);
  const size_t slash = path.rfind('/');
  if (slash != absl::string_view::npos) path.remove_prefix(slash + 1);
  stream_ << SeverityLetter(severity)
          << absl::FormatTime("%m%d %H:%M:%E3S", absl::Now(), absl::LocalTimeZone()) << ' '
          << ProcessName() << '[' << getpid() << "] " << path << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace writescope
