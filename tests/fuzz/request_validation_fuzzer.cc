// libFuzzer target: a public GenerateRequest, bytes parsed as v1::GenerateRequest, then
// ValidateGenerateRequest and ResolveMaxTokens (coordinator/request_validation.h).
// Invariants: tests/fuzz/fuzz_checks.h. Run through deploy/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "tests/fuzz/fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const writescope::fuzz::FuzzResult result = writescope::fuzz::CheckGenerateRequest(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!result.violation.empty()) {
    std::fprintf(stderr, "invariant broken: %s\nparser status: %s\n", result.violation.c_str(),
                 result.parse.ToString().c_str());
    std::abort();
  }
  return 0;
}
