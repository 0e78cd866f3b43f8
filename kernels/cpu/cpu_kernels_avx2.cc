// AVX2 + FMA build of the CPU inner kernels (the fallback for CPUs without AVX-512).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace writescope::kernels::cpu {
namespace avx2 {

struct Ops {
  using V = __m256;
  static constexpr int kLanes = 8;
  static inline V Zero() { return _mm256_setzero_ps(); }
  static inline V Set1(float x) { return _mm256_set1_ps(x); }
  static inline V Load(const float* p) { return _mm256_loadu_ps(p); }
  static inline void Store(float* p, V x) { _mm256_storeu_ps(p, x); }
  static inline V LoadBf16(const uint16_t* p) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
  }
  static inline V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static inline V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static inline V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static inline V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static inline V Max(V a, V b) { return _mm256_max_ps(a, b); }
  static inline float ReduceAdd(V a) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
  }
  // Same Cephes expf as the AVX-512 build; 2^n built in the exponent bits (n in
  // [-126, 127] after the clamp, so always a normal number).
  static inline V Exp(V x) {
    const V underflow = _mm256_cmp_ps(x, Set1(-87.3365478515625f), _CMP_LT_OQ);
    x = _mm256_min_ps(x, Set1(88.0f));
    x = _mm256_max_ps(x, Set1(-87.3365478515625f));
    const V fx = _mm256_round_ps(_mm256_mul_ps(x, Set1(1.44269504088896341f)),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, Set1(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, Set1(-2.12194440e-4f), x);
    V y = Set1(1.9875691500e-4f);
    y = Fma(y, x, Set1(1.3981999507e-3f));
    y = Fma(y, x, Set1(8.3334519073e-3f));
    y = Fma(y, x, Set1(4.1665795894e-2f));
    y = Fma(y, x, Set1(1.6666665459e-1f));
    y = Fma(y, x, Set1(5.0000001201e-1f));
    y = Fma(y, Mul(x, x), Add(x, Set1(1.0f)));
    const __m256i pow2 = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(underflow, _mm256_mul_ps(y, _mm256_castsi256_ps(pow2)));
  }
};

#include "kernels/cpu/cpu_kernels_impl.inc"

}  // namespace avx2
}  // namespace writescope::kernels::cpu

#pragma GCC pop_options

namespace writescope::kernels::cpu {

const KernelTable& Avx2Kernels() {
  static const KernelTable table{"avx2", 8, avx2::GqaSegment, avx2::MlaSegment, nullptr, nullptr,
                                 nullptr, avx2::MlaSoftmaxHiLo};
  return table;
}

}  // namespace writescope::kernels::cpu
