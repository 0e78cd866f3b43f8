// libFuzzer target: ParseSafetensorsHeader on arbitrary file bytes (the model files a worker maps).
// Invariants: tests/fuzz/fuzz_checks.h. Run through deploy/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return writescope::fuzz::RunFuzzCheck(&writescope::fuzz::CheckSafetensorsHeader, data, size);
}
