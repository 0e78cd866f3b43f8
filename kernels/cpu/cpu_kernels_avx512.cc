// AVX-512 (F/BW/VL/DQ) build of the CPU inner kernels. Only this file is compiled for
// AVX-512; the dispatcher calls it after checking the CPU at run time.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
// GCC 12's avx512fintrin.h trips these on _mm512_undefined_*() inside inlined intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace writescope::kernels::cpu {
namespace avx512 {

struct Ops {
  using V = __m512;
  static constexpr int kLanes = 16;
  static inline V Zero() { return _mm512_setzero_ps(); }
  static inline V Set1(float x) { return _mm512_set1_ps(x); }
  static inline V Load(const float* p) { return _mm512_loadu_ps(p); }
  static inline void Store(float* p, V x) { _mm512_storeu_ps(p, x); }
  // bf16 -> fp32 is exact: widen to 32 bits and shift into the high half.
  static inline V LoadBf16(const uint16_t* p) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
  }
  static inline V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static inline V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static inline V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static inline V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static inline V Max(V a, V b) { return _mm512_max_ps(a, b); }
  static inline float ReduceAdd(V a) { return _mm512_reduce_add_ps(a); }
  // Cephes expf: range reduction by ln2 (split in two constants) and a degree-6
  // polynomial; about 1 ulp. Below ln(FLT_MIN), including -inf, returns exactly 0.
  static inline V Exp(V x) {
    const __mmask16 underflow = _mm512_cmp_ps_mask(x, Set1(-87.3365478515625f), _CMP_LT_OQ);
    x = _mm512_min_ps(x, Set1(88.0f));
    x = _mm512_max_ps(x, Set1(-87.3365478515625f));
    const V fx = _mm512_roundscale_ps(_mm512_mul_ps(x, Set1(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, Set1(0.693359375f), x);
    x = _mm512_fnmadd_ps(fx, Set1(-2.12194440e-4f), x);
    V y = Set1(1.9875691500e-4f);
    y = Fma(y, x, Set1(1.3981999507e-3f));
    y = Fma(y, x, Set1(8.3334519073e-3f));
    y = Fma(y, x, Set1(4.1665795894e-2f));
    y = Fma(y, x, Set1(1.6666665459e-1f));
    y = Fma(y, x, Set1(5.0000001201e-1f));
    y = Fma(y, Mul(x, x), Add(x, Set1(1.0f)));
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), _mm512_scalef_ps(y, fx));
  }
};

#include "kernels/cpu/cpu_kernels_impl.inc"

}  // namespace avx512
}  // namespace writescope::kernels::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace writescope::kernels::cpu {

const KernelTable& Avx512Kernels() {
  static const KernelTable table{"avx512", 16, avx512::GqaSegment, avx512::MlaSegment};
  return table;
}

}  // namespace writescope::kernels::cpu
