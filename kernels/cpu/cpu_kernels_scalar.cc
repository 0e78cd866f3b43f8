// Portable scalar build of the CPU inner kernels: the last fallback, and the baseline
// the SIMD builds are compared with in the tests.
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"

namespace writescope::kernels::cpu {
namespace scalar {

struct Ops {
  using V = float;
  static constexpr int kLanes = 1;
  static inline V Zero() { return 0.0f; }
  static inline V Set1(float x) { return x; }
  static inline V Load(const float* p) { return *p; }
  static inline void Store(float* p, V x) { *p = x; }
  static inline V LoadBf16(const uint16_t* p) {
    const uint32_t bits = uint32_t{*p} << 16;
    float f;
    __builtin_memcpy(&f, &bits, sizeof(f));
    return f;
  }
  static inline V Fma(V a, V b, V c) { return __builtin_fmaf(a, b, c); }
  static inline V Mul(V a, V b) { return a * b; }
  static inline V Add(V a, V b) { return a + b; }
  static inline V Sub(V a, V b) { return a - b; }
  static inline V Max(V a, V b) { return a > b ? a : b; }
  static inline float ReduceAdd(V a) { return a; }
  static inline V Exp(V x) { return __builtin_expf(x); }
};

#include "kernels/cpu/cpu_kernels_impl.inc"

}  // namespace scalar

const KernelTable& ScalarKernels() {
  static const KernelTable table{"scalar", 1, scalar::GqaSegment, scalar::MlaSegment, nullptr, nullptr,
                                 nullptr, scalar::MlaSoftmaxHiLo};
  return table;
}

}  // namespace writescope::kernels::cpu
