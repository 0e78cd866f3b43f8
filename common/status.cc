#include "common/status.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace writescope {

absl::Status ErrnoToStatus(int error_number, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(error_number));
  return absl::ErrnoToStatus(error_number, message);
}

}  // namespace writescope
