// AVX-512 (F/BW/VL/DQ) build of the CPU inner kernels. Only this file is compiled for
// AVX-512; the dispatcher calls it after checking the CPU at run time.
//
// Two namespaces: `avx512` (F/BW/VL/DQ) and `avx512bf16` (the same plus AVX-512 BF16,
// whose fast kernels use vdpbf16ps for the q.k dot products). Avx512Kernels() picks one
// at run time.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>

#include "kernels/cpu/cpu_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
// GCC 12's avx512fintrin.h trips these on _mm512_undefined_*() inside inlined intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace writescope::kernels::cpu {
namespace avx512 {

#include "kernels/cpu/cpu_ops_avx512.inc"

#include "kernels/cpu/cpu_kernels_impl.inc"

#define WS_CPU_BF16_DOT 0
#include "kernels/cpu/cpu_kernels_fast_avx512.inc"
#undef WS_CPU_BF16_DOT

}  // namespace avx512
}  // namespace writescope::kernels::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace writescope::kernels::cpu {
namespace avx512bf16 {

#include "kernels/cpu/cpu_ops_avx512.inc"

#include "kernels/cpu/cpu_kernels_impl.inc"

#define WS_CPU_BF16_DOT 1
#include "kernels/cpu/cpu_kernels_fast_avx512.inc"
#undef WS_CPU_BF16_DOT

}  // namespace avx512bf16
}  // namespace writescope::kernels::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace writescope::kernels::cpu {

const KernelTable& Avx512Kernels() {
  static const KernelTable plain{"avx512",
                                 16,
                                 avx512::GqaSegment,
                                 avx512::MlaSegment,
                                 avx512::GqaTilesSupported,
                                 avx512::GqaTiles,
                                 nullptr,
                                 avx512::MlaSoftmaxHiLo};
  static const KernelTable bf16{"avx512bf16",
                                16,
                                avx512bf16::GqaSegment,
                                avx512bf16::MlaSegment,
                                avx512bf16::GqaTilesSupported,
                                avx512bf16::GqaTiles,
                                avx512bf16::MlaSegmentBf16,
                                avx512bf16::MlaSoftmaxHiLo};
  static const bool use_bf16 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && std::getenv("WS_CPU_NO_AVX512BF16") == nullptr;
  }();
  return use_bf16 ? bf16 : plain;
}

}  // namespace writescope::kernels::cpu
