// A flag that names one of a few choices: the value its word stands for, or the error every
// process prints for a word it does not know ("--FLAG must be a, b or c, not 'x'").
#ifndef WRITESCOPE_COMMON_FLAG_CHOICE_H_
#define WRITESCOPE_COMMON_FLAG_CHOICE_H_

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace writescope {

// The value paired with `text` in `choices` (in order: the first match), or
// INVALID_ARGUMENT naming the flag, the words it takes and the one it got.
template <typename T>
absl::StatusOr<T> ParseFlagChoice(absl::string_view flag, absl::string_view text,
                                  std::initializer_list<std::pair<absl::string_view, T>> choices) {
  std::string words;
  size_t i = 0;
  for (const auto& [word, value] : choices) {
    if (text == word) return value;
    absl::StrAppend(&words, i == 0 ? "" : (i + 1 == choices.size() ? " or " : ", "), word);
    ++i;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be ", words, ", not '", text, "'"));
}

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_FLAG_CHOICE_H_
