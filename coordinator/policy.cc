#include "coordinator/policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"

namespace writescope::coordinator {
namespace {

constexpr absl::string_view kStaticPrefix = "static:";
constexpr absl::string_view kAcceptedForms =
    "expected one of: writescope, transfer-all, cpu-all, static:R with 0 <= R "
    "<= 1 "
    "(e.g. static:0.3), monolithic";

absl::Status BadPolicy(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad policy \"", absl::CHexEscape(text), "\": ", why, "; ", kAcceptedForms));
}

// The shortest decimal that parses back to exactly `value`.
std::string ShortestDecimal(double value) {
  for (int precision = 1; precision < 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, value);
    double back = 0;
    if (absl::SimpleAtod(text, &back) && back == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

}  // namespace

double PolicySpec::fixed_cpu_share() const {
  switch (kind) {
    case PolicyKind::kTransferAll:
      return 0.0;
    case PolicyKind::kCpuAll:
      return 1.0;
    case PolicyKind::kStatic:
      return static_cpu_share;
    case PolicyKind::kWriteScope:
    case PolicyKind::kMonolithic:
      break;
  }
  WS_CHECK(false) << "policy " << ToString() << " has no fixed CPU share";
  return 0.0;
}

std::string PolicySpec::ToString() const {
  switch (kind) {
    case PolicyKind::kWriteScope:
      return "writescope";
    case PolicyKind::kTransferAll:
      return "transfer-all";
    case PolicyKind::kCpuAll:
      return "cpu-all";
    case PolicyKind::kStatic:
      return absl::StrCat(kStaticPrefix, ShortestDecimal(static_cpu_share));
    case PolicyKind::kMonolithic:
      return "monolithic";
  }
  return "unknown";
}

absl::StatusOr<PolicySpec> ParsePolicy(absl::string_view text) {
  if (text.empty()) return BadPolicy(text, "empty");
  if (text == "writescope") return PolicySpec{.kind = PolicyKind::kWriteScope};
  if (text == "transfer-all") return PolicySpec{.kind = PolicyKind::kTransferAll};
  if (text == "cpu-all") return PolicySpec{.kind = PolicyKind::kCpuAll};
  if (text == "monolithic") return PolicySpec{.kind = PolicyKind::kMonolithic};
  if (text == "static") return BadPolicy(text, "static needs its CPU share, as static:R");
  if (!absl::StartsWith(text, kStaticPrefix)) {
    return BadPolicy(text, "unknown policy name");
  }
  const absl::string_view share_text = text.substr(kStaticPrefix.size());
  if (share_text.empty()) return BadPolicy(text, "static: is missing R");
  if (absl::ascii_isspace(static_cast<unsigned char>(share_text.front())) ||
      absl::ascii_isspace(static_cast<unsigned char>(share_text.back()))) {
    return BadPolicy(text, "R has surrounding whitespace");
  }
  double share = 0;
  if (!absl::SimpleAtod(share_text, &share)) {
    return BadPolicy(text,
                     absl::StrCat("R = \"", absl::CHexEscape(share_text), "\" is not a number"));
  }
  if (!std::isfinite(share) || share < 0.0 || share > 1.0) {
    return BadPolicy(text, absl::StrCat("R = ", share_text, " is outside [0, 1]"));
  }
  return PolicySpec{.kind = PolicyKind::kStatic, .static_cpu_share = share};
}

}  // namespace writescope::coordinator
