// Routed experts on the gpu_worker's device, two ways:
// - a resident set of hot experts, kept in VRAM, whose (token, k) pairs the gpu_worker
//   computes beside the cpu_worker's (ForwardResident, below; gpu_worker/hot_experts.h);
// - for steps of many tokens (long prefill chunks), all of a layer's experts (Forward):
// the bf16 weights stay in host memory and are streamed over PCIe, one MoE layer at a time,
// into one of two device buffers, while the previous layer computes (as llama.cpp and
// KTransformers do for prefill). Whether a step runs its routed experts here or on the
// cpu_worker is the coordinator's cost rule (coordinator/expert_placement.h); the
// contract of Forward is CpuExperts::Forward's (kernels/experts/cpu_experts.h):
//
//   x        [tokens, hidden]  fp32, host
//   ids      [tokens, top_k]   int32 in [0, num_experts), distinct within a token (the host
//                              device's also takes -1, CpuExperts' skipped pair; CUDA
//                              refuses it: ForwardResident is the call for skipped pairs)
//   weights  [tokens, top_k]   fp32, the router's final weights
//   y        [tokens, hidden]  fp32, host, overwritten with sum_k w[t,k] * expert_{ids[t,k]}(x[t])
//
// Numerics are CpuExperts' bf16 path: x and the SwiGLU product rounded to bf16, products
// accumulated in fp32, the k terms summed in k order.
//
// Two implementations: CUDA (gpu_worker/cuda/cuda_experts.cc: cuBLAS bf16 GEMMs per expert
// over rows grouped by expert, the weights of layer l+1 copied on their own stream while
// layer l computes) and the host device's (CpuExperts per layer on the same host weights,
// so the whole path runs in CI).
//
// Not thread-safe: one step at a time (the gpu_worker serializes steps).
#ifndef WRITESCOPE_GPU_WORKER_DEVICE_EXPERTS_H_
#define WRITESCOPE_GPU_WORKER_DEVICE_EXPERTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/model_weights.h"
#include "gpu_worker/device.h"

namespace writescope::gpu {

// One routed expert of one layer.
struct ExpertRef {
  int64_t layer = 0;
  int32_t expert = 0;
  friend bool operator==(const ExpertRef&, const ExpertRef&) = default;
};

// What the last Forward cost (for the step result and the cost rule).
struct DeviceExpertsStats {
  uint64_t bytes_streamed = 0;  // weight bytes copied host -> device for this layer
  double wait_ms = 0;           // Forward waiting for this layer's weights to arrive
  double total_ms = 0;          // Forward, call to return
};

class DeviceExperts {
 public:
  virtual ~DeviceExperts() = default;

  // Queues the copy of `layer`'s routed-expert weights (asynchronous; a no-op if already
  // queued or resident). The gpu_worker calls it at the start of a step that runs its
  // experts here, for the first MoE layer; Forward(l) queues the next MoE layer itself.
  virtual absl::Status Prefetch(int64_t layer) = 0;

  // y = the routed-expert sum of `layer` (contract above). Synchronous: y is written on
  // return. INVALID_ARGUMENT for a non-MoE layer, an expert id out of range or repeated in
  // a token; tokens == 0 writes nothing.
  virtual absl::Status Forward(int64_t layer, const float* x, int64_t tokens, int64_t top_k,
                               const int32_t* ids, const float* weights, float* y) = 0;

  // The step is over: waits for any prefetch in flight and forgets which layer is resident
  // (the next step starts with Prefetch again).
  virtual absl::Status EndStep() = 0;

  // --- Hot experts resident in VRAM (issue 5; docs/notes/hot_experts.md) ---------------
  // Besides the streamed layers, a set of experts can stay in device memory of their own,
  // for the steps whose routed experts run on the cpu_worker: the gpu_worker computes the
  // (token, k) pairs of resident experts itself (ForwardResident) while the cpu_worker
  // computes the rest.

  // How many experts the resident set may hold: the room the budget leaves next to the
  // layer buffers and the scratch, over the expert size (on the host device: the budget over
  // the expert size, nothing else is counted there).
  virtual int64_t resident_capacity() const = 0;

  // Copies `experts` into device memory (synchronous) and makes them the resident set,
  // replacing any earlier one. INVALID_ARGUMENT for a layer without routed experts, an id
  // out of range or a repeated pair; RESOURCE_EXHAUSTED when more than resident_capacity()
  // (with the numbers). On failure the earlier set stays; a replacement holds both sets
  // while it copies (the gpu_worker sets one, once).
  virtual absl::Status SetResident(const std::vector<ExpertRef>& experts) = 0;

  virtual bool IsResident(int64_t layer, int32_t expert) const = 0;
  virtual int64_t num_resident() const = 0;

  // Forward's contract over the resident experts of `layer`: each id is a resident expert
  // of that layer or kernels::experts::kSkippedExpert (-1, adds nothing; all skipped gives
  // y = 0). INVALID_ARGUMENT for an id that is neither. Independent of the streamed layer
  // buffers: callable in any step, between Prefetch and EndStep or not.
  virtual absl::Status ForwardResident(int64_t layer, const float* x, int64_t tokens,
                                       int64_t top_k, const int32_t* ids, const float* weights,
                                       float* y) = 0;

  virtual const DeviceExpertsStats& last_stats() const = 0;
  // Device memory held (the two layer buffers + scratch + the resident experts), counted
  // against the VRAM budget. Thread-safe.
  virtual uint64_t device_bytes() const = 0;
  // Of which the resident experts. Thread-safe.
  virtual uint64_t resident_bytes() const = 0;
  // Host-to-device rate of the weight stream measured at creation (one layer's copy),
  // bytes per millisecond; 0 on the host device (no stream).
  virtual double calibrated_bytes_per_ms() const = 0;
};

// The checks both implementations share. A resident set: every layer has routed experts,
// every id in range, no pair twice, at most `capacity` pairs.
absl::Status CheckResidentSet(const ModelConfig& config, const std::vector<ExpertRef>& experts,
                              int64_t capacity);
// A call's routing: every id but -1 (skipped, when `allow_skipped`) is one `reason` has
// nothing against (it returns why an id is refused, empty when it is fine), and no expert
// twice within a token. INVALID_ARGUMENT "<who>: token t slot k: expert e <reason>" or
// "<who>: token t routed to expert e twice (slots j and k)".
template <typename Reason>
absl::Status CheckRouting(absl::string_view who, const int32_t* ids, int64_t tokens,
                          int64_t top_k, bool allow_skipped, const Reason& reason);
// ForwardResident's ids: a resident expert of the layer (is_resident(id)) or -1.
template <typename IsResident>
absl::Status CheckResidentIds(const int32_t* ids, int64_t tokens, int64_t top_k,
                              const IsResident& is_resident) {
  return CheckRouting("resident experts", ids, tokens, top_k, /*allow_skipped=*/true,
                      [&](int32_t id) {
                        return is_resident(id) ? std::string()
                                               : std::string("is not resident (nor -1, skipped)");
                      });
}

// `routed` holds the routed experts (a ModelWeights of side kCpu or kAll) and must outlive
// the object, as must `device`. RESOURCE_EXHAUSTED (with the numbers) when two layer
// buffers and the scratch for `max_tokens` tokens do not fit `vram_bytes_available`.
// The CUDA version pins the host range of the weights when it can (cudaHostRegister; a
// read-only file mapping may refuse, then the copies are pageable and slower, logged).
absl::StatusOr<std::unique_ptr<DeviceExperts>> CreateDeviceExperts(Device* device,
                                                                   const ModelWeights& routed,
                                                                   int64_t max_tokens,
                                                                   uint64_t vram_bytes_available);

template <typename Reason>
absl::Status CheckRouting(absl::string_view who, const int32_t* ids, int64_t tokens,
                          int64_t top_k, bool allow_skipped, const Reason& reason) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t* row = ids + t * top_k;
    for (int64_t k = 0; k < top_k; ++k) {
      if (allow_skipped && row[k] == -1) continue;
      if (const std::string why = reason(row[k]); !why.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(who, ": token ", t, " slot ", k, ": expert ", row[k], " ", why));
      }
      for (int64_t j = 0; j < k; ++j) {
        if (row[j] == row[k]) {
          return absl::InvalidArgumentError(absl::StrCat(who, ": token ", t, " routed to expert ",
                                                         row[k], " twice (slots ", j, " and ", k,
                                                         ")"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_DEVICE_EXPERTS_H_
