// The gpu_worker's matrix products on the device (kernels/model/decoder_ops.h LinearBackend):
// every 2-D attention-side weight (projections, routers, shared experts, dense MLPs) widened
// once to fp32 in device memory, y = x W^T by cuBLAS SGEMM on the compute stream, x and y
// copied through device staging buffers. fp32 weights and products keep the GPU's numbers
// equal to the host path's (oneDNN fp32 on the widened bf16 weights) up to summation order,
// at twice the bf16 bytes of VRAM (counted against the budget). lm_head, the largest, stays
// bf16 and its products split x three ways into bf16 (kernels/cuda/cuda_convert.h
// SplitToBf16x3): one tensor-core product with the same fp32 result up to summation order.
//
// Null on the host device (the host Linear runs there) and when the fp32 weights do not fit
// `vram_bytes_available` (then a log line says so, and the host Linear runs).
#ifndef WRITESCOPE_GPU_WORKER_DEVICE_LINEAR_H_
#define WRITESCOPE_GPU_WORKER_DEVICE_LINEAR_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/logit_row_stats.h"
#include "common/model_weights.h"
#include "gpu_worker/device.h"
#include "kernels/model/decoder_ops.h"

namespace writescope::gpu {

class DeviceLinear {
 public:
  virtual ~DeviceLinear() = default;
  virtual absl::Status Linear(const float* x, int64_t tokens, const kernels::model::LinearWeight& w,
                              float* y) = 0;
  // stats[t] = the LogitRowStats (common/logit_row_stats.h) of row t of x W^T: the product
  // stays on the device, reduced there (kernels/cuda/cuda_logits.h), and only the stats come
  // back, synchronized. For lm_head at a greedy step: 24 bytes a row instead of the vocabulary.
  virtual absl::Status LinearRowStats(const float* x, int64_t tokens,
                                      const kernels::model::LinearWeight& w,
                                      LogitRowStats* stats) = 0;
  // MLA's per-head products with kv_b (kernels/model/mla.h MlaAbsorbQuery, MlaApplyUv): one
  // strided-batched product over the heads on the device's fp32 copy of kv_b.
  virtual absl::Status MlaAbsorb(const kernels::model::MlaDims& dims, const float* q, int64_t tokens,
                                 const kernels::model::LinearWeight& kv_b, float* q_absorbed) = 0;
  virtual absl::Status MlaUv(const kernels::model::MlaDims& dims, const float* o_latent,
                             int64_t tokens, const kernels::model::LinearWeight& kv_b,
                             float* out) = 0;
  // y[tokens, hidden] = down(silu(gate(x)) * up(x)) (kernels/model/layers.h SwiGluMlp) with
  // the intermediate products on the device: x up, y down, one synchronization. The
  // activation is computed as the host's SiluMul computes it (in double, rounded to fp32).
  virtual absl::Status SwiGlu(const float* x, int64_t tokens,
                              const kernels::model::LinearWeight& gate,
                              const kernels::model::LinearWeight& up,
                              const kernels::model::LinearWeight& down, float* y) = 0;
  // Device bytes of the widened weights.
  virtual uint64_t weight_bytes() const = 0;
};

// The backend for `device` over the attention-side `weights` (both must outlive it).
absl::StatusOr<std::unique_ptr<DeviceLinear>> CreateDeviceLinear(Device* device,
                                                                 const ModelWeights& weights,
                                                                 uint64_t vram_bytes_available);

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_DEVICE_LINEAR_H_
