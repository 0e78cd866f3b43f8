// libFuzzer target: a public GenerateRequest, bytes parsed as v1::GenerateRequest, then
// ValidateGenerateRequest and ResolveMaxTokens (coordinator/request_validation.h).
// Invariants: tests/fuzz/fuzz_checks.h. Run through deploy/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return writescope::fuzz::RunFuzzCheck(&writescope::fuzz::CheckGenerateRequest, data, size);
}
