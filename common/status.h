// Status helpers used across WriteScope: return-if-error macros and errno conversion.
#ifndef WRITESCOPE_COMMON_STATUS_H_
#define WRITESCOPE_COMMON_STATUS_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace writescope {

// An absl::Status for a failed system call: the code follows errno (ENOENT ->
// NOT_FOUND, ENOMEM/ENOSPC -> RESOURCE_EXHAUSTED, ...) and the message names the call.
absl::Status ErrnoToStatus(int error_number, absl::string_view what);

}  // namespace writescope

#define WS_STATUS_CONCAT_INNER_(a, b) a##b
#define WS_STATUS_CONCAT_(a, b) WS_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` is not OK.
#define WS_RETURN_IF_ERROR(expr)                 \
  do {                                           \
    ::absl::Status ws_status_ = (expr);          \
    if (!ws_status_.ok()) return ws_status_;     \
  } while (0)

// `lhs = value of expr`, or returns its status from the enclosing function.
#define WS_ASSIGN_OR_RETURN(lhs, expr) \
  WS_ASSIGN_OR_RETURN_IMPL_(WS_STATUS_CONCAT_(ws_statusor_, __LINE__), lhs, expr)
#define WS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                              \
  if (!statusor.ok()) return statusor.status();        \
  lhs = std::move(statusor).value()

#endif  // WRITESCOPE_COMMON_STATUS_H_
