// DeviceLinear on the CUDA device: cuBLAS SGEMM over fp32 copies of the weights; SwiGLU
// MLPs as one chain on the device.
#include <cublas_v2.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/model_tensors.h"
#include "common/status.h"
#include "gpu_worker/device_linear.h"
#include "gpu_worker/cuda/pinned_host.h"
#include "gpu_worker/pinned_array.h"
#include "kernels/model/layers.h"
#include "kernels/cuda/cuda_convert.h"
#include "kernels/cuda/cuda_logits.h"

namespace writescope::gpu {
namespace {

absl::Status CublasStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuBLAS status ", static_cast<int>(status)));
}
absl::Status AsStatus(cublasStatus_t status, const char* what) { return CublasStatus(status, what); }
absl::Status AsStatus(absl::Status status, const char*) { return status; }

class CudaLinear final : public DeviceLinear {
 public:
  explicit CudaLinear(Device* device) : device_(device), bounce_(device) {}
  ~CudaLinear() override {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }

  absl::Status Init(const ModelWeights& weights, uint64_t vram_bytes_available) {
    // Every 2-D attention-side tensor but the embedding table (a gather, not a product),
    // unless it is also lm_head (tied).
    // lm_head stays bf16 (SplitProduct): at decode its fp32 SGEMM was the largest product of
    // a step (0.94 ms at DeepSeek batch 32 on the H200, against 0.11 for one bf16 product of
    // that shape, run 181).
    const Bf16Tensor* lm_head = weights.Find("lm_head.weight");
    std::vector<const Bf16Tensor*> tensors;
    uint64_t bytes = 0, split_bytes = 0;
    for (const TensorSpec& spec : weights.specs()) {
      if (spec.shape.size() != 2 || spec.side != WorkerSide::kGpu) continue;
      const Bf16Tensor* tensor = weights.Find(spec.name);
      if (tensor == nullptr) continue;
      if (spec.name == "model.embed_tokens.weight" &&
          (lm_head == nullptr || lm_head->data != tensor->data)) {
        continue;
      }
      if (weights_.contains(tensor->data) || split_weights_.contains(tensor->data)) continue;
      if (lm_head != nullptr && tensor->data == lm_head->data) {
        split_weights_[tensor->data] = nullptr;
        split_bytes += 2 * static_cast<uint64_t>(tensor->numel());
        continue;
      }
      weights_[tensor->data] = nullptr;
      tensors.push_back(tensor);
      bytes += 4 * static_cast<uint64_t>(tensor->numel());
    }
    uint64_t largest = 0;
    for (const Bf16Tensor* t : tensors) largest = std::max<uint64_t>(largest, t->numel());
    // The widening goes through a bf16 staging buffer of the largest tensor (freed after).
    if (bytes + split_bytes + 2 * largest > vram_bytes_available) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "weights for the GPU matrix products need ", bytes, " bytes in fp32 and ", split_bytes,
          " in bf16 (+ ", 2 * largest, " of staging), ", vram_bytes_available,
          " are left in the VRAM budget"));
    }
    if (cublasCreate(&handle_) != CUBLAS_STATUS_SUCCESS) {
      handle_ = nullptr;
      return absl::UnavailableError("cublasCreate failed");
    }
    WS_RETURN_IF_ERROR(CublasStatus(
        cublasSetStream(handle_, static_cast<cudaStream_t>(device_->native_stream(Stream::kCompute))),
        "cublasSetStream"));
    // Exact fp32 products, not TF32.
    WS_RETURN_IF_ERROR(
        CublasStatus(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode"));
    WS_ASSIGN_OR_RETURN(buffer_, DeviceBuffer::Allocate(device_, std::max<uint64_t>(bytes, 256)));
    WS_ASSIGN_OR_RETURN(DeviceBuffer staging, DeviceBuffer::Allocate(device_, 2 * largest));
    uint64_t offset = 0;
    for (const Bf16Tensor* t : tensors) {
      float* dst = reinterpret_cast<float*>(static_cast<std::byte*>(buffer_.data()) + offset);
      WS_RETURN_IF_ERROR(
          device_->CopyToDevice(staging.data(), t->data, 2 * t->numel(), Stream::kCompute));
      WS_RETURN_IF_ERROR(kernels::cuda::Bf16ToFloat(static_cast<const uint16_t*>(staging.data()),
                                                     dst, t->numel(),
                                                     device_->native_stream(Stream::kCompute)));
      // The staging buffer is reused: one tensor at a time.
      WS_RETURN_IF_ERROR(device_->Synchronize(Stream::kCompute));
      weights_[t->data] = dst;
      offset += 4 * static_cast<uint64_t>(t->numel());
    }
    if (split_bytes > 0) {
      WS_ASSIGN_OR_RETURN(split_buffer_, DeviceBuffer::Allocate(device_, split_bytes));
      WS_RETURN_IF_ERROR(device_->CopyToDevice(split_buffer_.data(), lm_head->data, split_bytes,
                                               Stream::kCompute));
      WS_RETURN_IF_ERROR(device_->Synchronize(Stream::kCompute));
      split_weights_[lm_head->data] = static_cast<const uint16_t*>(split_buffer_.data());
    }
    bytes_ = bytes + split_bytes;
    WS_LOG(INFO) << "GPU matrix products: " << tensors.size() << " weights widened to fp32, "
                 << bytes << " bytes of VRAM (cuBLAS SGEMM); lm_head in bf16, " << split_bytes
                 << " bytes (three bf16 products a call)";
    return absl::OkStatus();
  }

  absl::Status Linear(const float* x, int64_t tokens, const kernels::model::LinearWeight& w,
                      float* y) override {
    if (tokens == 0) return absl::OkStatus();
    return Product(x, 4 * static_cast<uint64_t>(tokens * w.in_features), y,
                   4 * static_cast<uint64_t>(tokens * w.out_features), "Linear",
                   [&](const float* dx, float* dy) { return QueueProduct(w, dx, tokens, dy); });
  }

  absl::Status LinearRowStats(const float* x, int64_t tokens, const kernels::model::LinearWeight& w,
                              LogitRowStats* stats) override {
    if (tokens == 0) return absl::OkStatus();
    // The product in y_, where Linear would put it before its copy back; only the stats travel.
    const uint64_t x_bytes = 4 * static_cast<uint64_t>(tokens * w.in_features);
    const uint64_t stats_bytes = sizeof(LogitRowStats) * static_cast<uint64_t>(tokens);
    WS_RETURN_IF_ERROR(Grow(&x_, x_bytes));
    WS_RETURN_IF_ERROR(Grow(&y_, 4 * static_cast<uint64_t>(tokens * w.out_features)));
    WS_RETURN_IF_ERROR(Grow(&stats_, stats_bytes));
    WS_RETURN_IF_ERROR(device_->CopyToDevice(x_.data(), x, x_bytes, Stream::kCompute));
    auto* rows = static_cast<float*>(y_.data());
    WS_RETURN_IF_ERROR(QueueProduct(w, static_cast<const float*>(x_.data()), tokens, rows));
    WS_RETURN_IF_ERROR(kernels::cuda::LogitRowStatsOnDevice(
        rows, tokens, w.out_features, static_cast<LogitRowStats*>(stats_.data()),
        device_->native_stream(Stream::kCompute)));
    return CopyBackAndWait(stats, stats_.data(), stats_bytes);
  }

  absl::Status SwiGlu(const float* x, int64_t tokens, const kernels::model::LinearWeight& gate,
                      const kernels::model::LinearWeight& up,
                      const kernels::model::LinearWeight& down, float* y) override {
    WS_RETURN_IF_ERROR(kernels::model::ValidateSwiGluShapes(gate, up, down));
    if (tokens == 0) return absl::OkStatus();
    WS_ASSIGN_OR_RETURN(const float* w_gate, DeviceWeight(gate));
    WS_ASSIGN_OR_RETURN(const float* w_up, DeviceWeight(up));
    WS_ASSIGN_OR_RETURN(const float* w_down, DeviceWeight(down));
    const uint64_t mid_bytes = 4 * static_cast<uint64_t>(tokens * gate.out_features);
    WS_RETURN_IF_ERROR(Grow(&gate_, mid_bytes));
    WS_RETURN_IF_ERROR(Grow(&up_, mid_bytes));
    auto* g = static_cast<float*>(gate_.data());
    auto* u = static_cast<float*>(up_.data());
    return Product(x, 4 * static_cast<uint64_t>(tokens * gate.in_features), y,
                   4 * static_cast<uint64_t>(tokens * down.out_features), "SwiGlu",
                   [&](const float* dx, float* dy) -> absl::Status {
                     WS_RETURN_IF_ERROR(Sgemm(w_gate, gate, dx, tokens, g));
                     WS_RETURN_IF_ERROR(Sgemm(w_up, up, dx, tokens, u));
                     WS_RETURN_IF_ERROR(kernels::cuda::SiluMulInPlace(
                         g, u, tokens * gate.out_features,
                         device_->native_stream(Stream::kCompute)));
                     return Sgemm(w_down, down, g, tokens, dy);
                   });
  }

  // Head h of MlaAbsorbQuery: out[t, h, :rank] = q[t, h, :nope] W_h, with W_h the head's
  // first `nope` rows of kv_b ([nope, rank] row-major = column-major [rank, nope]); the rope
  // part is copied on the host. Column-major: C_h[rank, T] = W_h[rank, nope] Q_h[nope, T].
  absl::Status MlaAbsorb(const kernels::model::MlaDims& d, const float* q, int64_t tokens,
                         const kernels::model::LinearWeight& kv_b, float* q_absorbed) override {
    if (tokens == 0) return absl::OkStatus();
    WS_ASSIGN_OR_RETURN(const float* w, DeviceWeight(kv_b));
    const int64_t qd = d.q_head_dim(), latent = d.latent_dim(), heads = d.num_heads;
    const int64_t head_rows = d.kv_b_rows_per_head() * d.kv_lora_rank;
    WS_RETURN_IF_ERROR(Product(
        q, 4 * static_cast<uint64_t>(tokens * heads * qd), q_absorbed,
        4 * static_cast<uint64_t>(tokens * heads * latent), "cublasSgemmStridedBatched (MLA absorb)",
        [&](const float* dx, float* dy) {
          const float alpha = 1.0f, beta = 0.0f;
          return cublasSgemmStridedBatched(
              handle_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(d.kv_lora_rank),
              static_cast<int>(tokens), static_cast<int>(d.qk_nope), &alpha, w,
              static_cast<int>(d.kv_lora_rank), head_rows, dx, static_cast<int>(heads * qd), qd,
              &beta, dy, static_cast<int>(heads * latent), latent, static_cast<int>(heads));
        }));
    for (int64_t r = 0; r < tokens * heads; ++r) {
      std::copy_n(q + r * qd + d.qk_nope, d.qk_rope, q_absorbed + r * latent + d.kv_lora_rank);
    }
    return absl::OkStatus();
  }

  // Head h of MlaApplyUv: out[t, h, :] = o[t, h, :] V_h^T, with V_h the head's `v_dim` rows
  // of kv_b after its `nope` rows ([v_dim, rank] row-major = column-major [rank, v_dim]).
  // Column-major: C_h[v_dim, T] = V_h^T[v_dim, rank] O_h[rank, T].
  absl::Status MlaUv(const kernels::model::MlaDims& d, const float* o_latent, int64_t tokens,
                     const kernels::model::LinearWeight& kv_b, float* out) override {
    if (tokens == 0) return absl::OkStatus();
    WS_ASSIGN_OR_RETURN(const float* w, DeviceWeight(kv_b));
    const int64_t heads = d.num_heads, rank = d.kv_lora_rank;
    const int64_t head_rows = d.kv_b_rows_per_head() * rank;
    return Product(
        o_latent, 4 * static_cast<uint64_t>(tokens * heads * rank), out,
        4 * static_cast<uint64_t>(tokens * heads * d.v_dim), "cublasSgemmStridedBatched (MLA uv)",
        [&](const float* dx, float* dy) {
          const float alpha = 1.0f, beta = 0.0f;
          return cublasSgemmStridedBatched(
              handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(d.v_dim),
              static_cast<int>(tokens), static_cast<int>(rank), &alpha, w + d.qk_nope * rank,
              static_cast<int>(rank), head_rows, dx, static_cast<int>(heads * rank), rank, &beta,
              dy, static_cast<int>(heads * d.v_dim), d.v_dim, static_cast<int>(heads));
        });
  }

  uint64_t weight_bytes() const override { return bytes_; }

 private:
  // Queues dy[tokens, out] = dx[tokens, in] W^T on the compute stream (device pointers).
  // Row-major y[T, out] = x[T, in] W^T is column-major Y[out, T] = W^T[out, in] X[in, T]
  // with W row-major [out, in] = column-major [in, out].
  absl::Status Sgemm(const float* device_w, const kernels::model::LinearWeight& w,
                     const float* dx, int64_t tokens, float* dy) {
    const float alpha = 1.0f, beta = 0.0f;
    return CublasStatus(
        cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.out_features),
                    static_cast<int>(tokens), static_cast<int>(w.in_features), &alpha, device_w,
                    static_cast<int>(w.in_features), dx, static_cast<int>(w.in_features), &beta,
                    dy, static_cast<int>(w.out_features)),
        "cublasSgemm");
  }

  // Queues dy[tokens, out] = dx[tokens, in] W^T on the compute stream (device pointers): an
  // SGEMM on W's fp32 copy, or for a weight kept in bf16 the split product (SplitProduct).
  absl::Status QueueProduct(const kernels::model::LinearWeight& w, const float* dx, int64_t tokens,
                            float* dy) {
    if (auto it = split_weights_.find(w.data); it != split_weights_.end() && it->second != nullptr) {
      return SplitProduct(it->second, w, dx, tokens, dy);
    }
    WS_ASSIGN_OR_RETURN(const float* device_w, DeviceWeight(w));
    return Sgemm(device_w, w, dx, tokens, dy);
  }

  // y = x W^T for W in bf16 (exact: the model's weights are bf16) with fp32's result up to the
  // summation order: x split three ways into bf16 (hi + mid + lo == x, SplitToBf16x3), one
  // bf16 product of the 3 * tokens rows on the tensor cores with fp32 accumulation (the
  // products of two bf16 values are exact in fp32), and the three results added. It reads
  // W's bf16 bytes once: 0.11 ms for DeepSeek's lm_head at 96 rows against the SGEMM's 0.94
  // at 32 (PyTorch on the H200, run 181).
  absl::Status SplitProduct(const uint16_t* device_w, const kernels::model::LinearWeight& w,
                            const float* dx, int64_t tokens, float* dy) {
    const int64_t in = w.in_features, out = w.out_features;
    WS_RETURN_IF_ERROR(Grow(&split_x_, 2 * 3 * static_cast<uint64_t>(tokens * in)));
    WS_RETURN_IF_ERROR(Grow(&split_y_, 4 * 3 * static_cast<uint64_t>(tokens * out)));
    void* stream = device_->native_stream(Stream::kCompute);
    auto* parts = static_cast<uint16_t*>(split_x_.data());
    auto* products = static_cast<float*>(split_y_.data());
    WS_RETURN_IF_ERROR(kernels::cuda::SplitToBf16x3(dx, tokens * in, parts, stream));
    // Column-major: Y[out, 3T] = W^T[out, in] X[in, 3T]; bf16 inputs with CUBLAS_COMPUTE_32F
    // run on the tensor cores with fp32 accumulation (no TF32: the inputs are bf16 already).
    // The handle's pedantic mode is for the SGEMMs; it is lifted for this call.
    WS_RETURN_IF_ERROR(
        CublasStatus(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t status = cublasGemmEx(
        handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(3 * tokens),
        static_cast<int>(in), &alpha, device_w, CUDA_R_16BF, static_cast<int>(in), parts,
        CUDA_R_16BF, static_cast<int>(in), &beta, products, CUDA_R_32F, static_cast<int>(out),
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    WS_RETURN_IF_ERROR(
        CublasStatus(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode"));
    WS_RETURN_IF_ERROR(CublasStatus(status, "cublasGemmEx (bf16 split)"));
    return kernels::cuda::SumThreeParts(products, tokens * out, dy, stream);
  }

  // One product on the compute stream: x (x_bytes, host) in, `gemm`(device x, device y)
  // queued (a cuBLAS status, or an absl::Status for a chain), y (y_bytes) back to the host,
  // synchronized.
  template <typename Gemm>
  absl::Status Product(const float* x, uint64_t x_bytes, float* y, uint64_t y_bytes,
                       const char* what, Gemm gemm) {
    WS_RETURN_IF_ERROR(Grow(&x_, x_bytes));
    WS_RETURN_IF_ERROR(Grow(&y_, y_bytes));
    WS_RETURN_IF_ERROR(device_->CopyToDevice(x_.data(), x, x_bytes, Stream::kCompute));
    WS_RETURN_IF_ERROR(
        AsStatus(gemm(static_cast<const float*>(x_.data()), static_cast<float*>(y_.data())), what));
    return CopyBackAndWait(y, y_.data(), y_bytes);
  }

  // Queues the copy of `bytes` at `device_src` to `host_dst` on the compute stream and waits
  // for the stream. A pageable destination (a caller's std::vector: the router's logits,
  // GQA's k and v, the shared experts' sum) is reached through the pinned `bounce_` and a
  // memcpy: a device-to-host copy into pageable memory took 23-42 us for 8-64 KB and 103 us
  // for 256 KB on the H200 under a decode step's DMA, against 4-7 us into pinned memory
  // (session 34, run 186).
  absl::Status CopyBackAndWait(void* host_dst, const void* device_src, uint64_t bytes) {
    if (bytes == 0) return device_->Synchronize(Stream::kCompute);
    if (IsPinnedHost(host_dst)) {
      WS_RETURN_IF_ERROR(device_->CopyToHost(host_dst, device_src, bytes, Stream::kCompute));
      return device_->Synchronize(Stream::kCompute);
    }
    bounce_.Resize(static_cast<int64_t>(bytes));
    WS_RETURN_IF_ERROR(device_->CopyToHost(bounce_.data(), device_src, bytes, Stream::kCompute));
    WS_RETURN_IF_ERROR(device_->Synchronize(Stream::kCompute));
    std::memcpy(host_dst, bounce_.data(), bytes);
    return absl::OkStatus();
  }

  absl::StatusOr<const float*> DeviceWeight(const kernels::model::LinearWeight& w) const {
    auto it = weights_.find(w.data);
    if (it == weights_.end() || it->second == nullptr) {
      return absl::InternalError(absl::StrCat("no device copy of a [", w.out_features, ", ",
                                              w.in_features, "] weight"));
    }
    return it->second;
  }

  absl::Status Grow(DeviceBuffer* buffer, uint64_t bytes) {
    if (buffer->size() >= bytes) return absl::OkStatus();
    *buffer = DeviceBuffer();
    WS_ASSIGN_OR_RETURN(*buffer, DeviceBuffer::Allocate(device_, std::max<uint64_t>(bytes, 1 << 20)));
    return absl::OkStatus();
  }

  Device* device_;
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer buffer_;
  DeviceBuffer x_, y_;
  DeviceBuffer gate_, up_;  // SwiGlu's intermediate products [tokens, intermediate]
  DeviceBuffer stats_;      // LinearRowStats' [tokens] stats
  absl::flat_hash_map<const uint16_t*, const float*> weights_;  // host bf16 -> device fp32
  DeviceBuffer split_buffer_;  // the weights kept in bf16 (lm_head)
  absl::flat_hash_map<const uint16_t*, const uint16_t*> split_weights_;  // host -> device bf16
  DeviceBuffer split_x_, split_y_;  // SplitProduct's [3 tokens, in] parts, [3 tokens, out]
  PinnedArray<std::byte> bounce_;   // CopyBackAndWait's way to a pageable destination
  uint64_t bytes_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceLinear>> CreateCudaDeviceLinear(Device* device,
                                                                     const ModelWeights& weights,
                                                                     uint64_t vram_bytes_available) {
  auto linear = std::make_unique<CudaLinear>(device);
  WS_RETURN_IF_ERROR(linear->Init(weights, vram_bytes_available));
  return std::unique_ptr<DeviceLinear>(std::move(linear));
}

}  // namespace writescope::gpu
