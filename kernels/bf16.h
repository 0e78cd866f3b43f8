// bfloat16 stored as uint16_t in host code: the top 16 bits of an IEEE fp32.
// Public headers never include CUDA headers, so bf16 tensors cross every API as
// `uint16_t` (or `const uint16_t*`) and are converted with these helpers.
#ifndef WRITESCOPE_KERNELS_BF16_H_
#define WRITESCOPE_KERNELS_BF16_H_

#include <cstdint>
#include <cstring>

namespace writescope::kernels {

inline float Bf16ToFloat(uint16_t value) {
  const uint32_t bits = uint32_t{value} << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

// Round to nearest, ties to even (what the hardware conversions do). NaN stays a
// quiet NaN; overflow rounds to infinity as IEEE requires.
inline uint16_t FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

}  // namespace writescope::kernels

#endif  // WRITESCOPE_KERNELS_BF16_H_
