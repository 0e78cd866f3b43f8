// Routed experts of one MoE layer on the CPU, through oneDNN matmuls, batched per expert
// across the tokens routed to it.
//
//   auto experts = CpuExperts::ForLayer(*weights, layer, {});
//   experts->Forward(x, tokens, top_k, expert_ids, route_weights, y);
//
// Contract (every shape row-major):
//   x              [tokens, hidden]  fp32 (Forward) or bf16 bits (ForwardBf16)
//   expert_ids     [tokens, top_k]   int32 in [0, num_experts), distinct within a token, or
//                                    kSkippedExpert (-1): a pair another device computes
//                                    (hot experts resident in VRAM), which adds nothing here
//   route_weights  [tokens, top_k]   fp32, the router's final weights (scaling included)
//   y              [tokens, hidden]  fp32, overwritten:
//                  y[t] = sum_k w[t,k] * down_e(silu(gate_e x[t]) * up_e x[t]),  e = ids[t,k]
//                  over the pairs not skipped (0 where a token's pairs are all skipped)
//   expert weights bf16 [out, in] as the checkpoint holds them: gate, up [I, H], down [H, I]
//
// Algorithm: gather each expert's tokens into a bf16 block (rows padded to an M bucket so
// that a few cached primitives serve every batch), then two phases, each an OpenMP loop over
// (expert, slice of output rows) tasks running single-threaded oneDNN matmuls:
//   1. gate and up on a slice of I (one matmul on a packed [gate_slice; up_slice] weight, or
//      two in place on the checkpoint's bf16), SiLU(g) * u fused, stored bf16 [m, I];
//   2. down on a slice of H into a per-(token, k) row;
// then y[t] = sum over k in order (deterministic: the same result for any thread count).
// Slicing the output rows gives every thread work even when one token touches 2 experts
// (Mixtral decode); a task reads its weight slice once for all of the expert's rows.
//
// Numerics: bf16 precision rounds x and the SwiGLU product h to bf16 (round to nearest even)
// and accumulates in fp32 (AMX / avx512_core_bf16 dot products). Against the fp32 reference
// (kernels/model/layers.h SwiGluMlp on the same bf16 weights) the relative Frobenius error of
// y is ~2^-8 on random data; tests accept 1e-2. f32 precision (weights widened once at
// load) matches the reference to summation order: relative error <= 1e-5.
//
// Not thread-safe: one Forward at a time per object (it reuses its scratch). Forward may be
// called from a thread that is not inside an OpenMP parallel region only.
#ifndef WRITESCOPE_KERNELS_EXPERTS_CPU_EXPERTS_H_
#define WRITESCOPE_KERNELS_EXPERTS_CPU_EXPERTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_weights.h"

namespace writescope::kernels::experts {

// An expert id that Forward skips: the pair belongs to another device (see the contract).
inline constexpr int32_t kSkippedExpert = -1;

// One expert's three bf16 matrices (borrowed; they must outlive the CpuExperts unless
// prepacked): gate, up [intermediate, hidden]; down [hidden, intermediate].
struct ExpertMatrices {
  const uint16_t* gate = nullptr;
  const uint16_t* up = nullptr;
  const uint16_t* down = nullptr;
};

enum class ExpertPrecision {
  kAuto,  // bf16 when oneDNN's ISA has native bf16 (avx512_core_bf16, AMX), else f32
  kBf16,  // bf16 even without native support (oneDNN may emulate: slow, for tests); needs
          // OneDnnHasBf16Matmul()
  kF32,   // weights widened to fp32 once (2x the bf16 bytes), fp32 activations
};

struct CpuExpertsOptions {
  ExpertPrecision precision = ExpertPrecision::kAuto;
  // Reorder every weight slice once into oneDNN's blocked layout for the ISA (a copy: the
  // layer's expert bytes again). Without it the bf16 weights are used in place and oneDNN
  // re-blocks each slice on every call. Ignored for f32 (which copies anyway).
  bool prepack = true;
  // Output rows per task: of I for gate/up (each task computes gate and up on the slice),
  // of H for down. Multiples of 64 keep oneDNN's N blocks whole.
  int64_t gate_up_slice = 128;
  int64_t down_slice = 256;
  // Set from another thread (the worker stopping mid-load): building the slices (the
  // prepack copies) stops at the next expert and Create returns CANCELLED. May be null.
  const std::atomic<bool>* cancelled = nullptr;
};

class CpuExperts {
 public:
  // INVALID_ARGUMENT for bad shapes or null matrices; INTERNAL when oneDNN refuses.
  static absl::StatusOr<std::unique_ptr<CpuExperts>> Create(int64_t hidden, int64_t intermediate,
                                                            std::vector<ExpertMatrices> experts,
                                                            const CpuExpertsOptions& options = {});
  // The routed experts of `layer` (INVALID_ARGUMENT when it is not an MoE layer).
  static absl::StatusOr<std::unique_ptr<CpuExperts>> ForLayer(
      const ModelWeights& weights, int64_t layer, const CpuExpertsOptions& options = {});

  ~CpuExperts();
  CpuExperts(const CpuExperts&) = delete;
  CpuExperts& operator=(const CpuExperts&) = delete;

  // See the contract above. INVALID_ARGUMENT (naming the token) for an expert id out of
  // range (other than kSkippedExpert) or repeated within a token, and for tokens < 0 or a
  // top_k outside [1, experts]; tokens == 0 (with a valid top_k) is a no-op.
  absl::Status Forward(const float* x, int64_t tokens, int64_t top_k, const int32_t* expert_ids,
                       const float* route_weights, float* y);
  absl::Status ForwardBf16(const uint16_t* x, int64_t tokens, int64_t top_k,
                           const int32_t* expert_ids, const float* route_weights, float* y);

  int64_t hidden() const;
  int64_t intermediate() const;
  int64_t num_experts() const;
  bool bf16() const;  // the precision in use
  bool prepacked() const;
  // Bytes this object holds beyond the borrowed weights (packed or widened copies).
  uint64_t owned_weight_bytes() const;
  // oneDNN's effective ISA ("avx512_core_amx", ...) and the matmul implementation it
  // picked for a decode-sized gate/up slice ("brg:avx512_core_amx", ...).
  std::string isa() const;
  std::string matmul_impl() const;

 private:
  struct Impl;
  explicit CpuExperts(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// oneDNN's effective CPU ISA as a name, and whether it has native bf16 dot products.
std::string OneDnnIsaName();
bool OneDnnHasNativeBf16();
// Whether oneDNN runs a bf16 matmul here at all, natively or emulated (its bf16 kernels need
// avx512_core at least: an AVX2-only CPU has none, and ExpertPrecision::kBf16 is
// UNIMPLEMENTED there). Found once, by creating a small matmul primitive descriptor.
bool OneDnnHasBf16Matmul();

}  // namespace writescope::kernels::experts

#endif  // WRITESCOPE_KERNELS_EXPERTS_CPU_EXPERTS_H_
