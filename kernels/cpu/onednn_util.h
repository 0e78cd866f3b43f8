// oneDNN helpers shared by the CPU kernels that call it (kernels/cpu/mla_matmul.cc,
// kernels/experts/cpu_experts.cc).
#ifndef WRITESCOPE_KERNELS_CPU_ONEDNN_UTIL_H_
#define WRITESCOPE_KERNELS_CPU_ONEDNN_UTIL_H_

#include <omp.h>

#include "dnnl.hpp"

namespace writescope::kernels::cpu {

// Whether oneDNN runs on AMX here (its bf16 matmuls use the tile units): every bit of
// avx512_core_amx set in the effective ISA (later oneDNN versions add ISAs above it, such
// as avx512_core_amx_fp16). Read once: the first query fixes oneDNN's ISA for the process.
inline bool OneDnnHasAmx() {
  static const bool amx = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto want = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
    return (isa & want) == want;
  }();
  return amx;
}

// The process's CPU engine (never destroyed: primitives may outlive static destruction).
inline dnnl::engine& CpuEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// oneDNN sizes its work split by omp_get_max_threads() when a primitive is created; the
// callers run primitives inside their own parallel loops, one thread each, so they create
// them for one thread. (omp_set_num_threads sets the calling thread's value only.)
class SingleThreadScope {
 public:
  SingleThreadScope() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~SingleThreadScope() { omp_set_num_threads(saved_); }
  SingleThreadScope(const SingleThreadScope&) = delete;
  SingleThreadScope& operator=(const SingleThreadScope&) = delete;

 private:
  int saved_;
};

}  // namespace writescope::kernels::cpu

#endif  // WRITESCOPE_KERNELS_CPU_ONEDNN_UTIL_H_
