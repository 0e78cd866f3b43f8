// DeviceLinear on the CUDA device: bf16 tensor-core products (cuBLAS) over the weights'
// bf16 copies in DeviceWeights, with x split three ways into bf16; SwiGLU MLPs as one chain
// on the device.
#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
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

class CudaLinear final : public DeviceLinear {
 public:
  CudaLinear(Device* device, const DeviceLinearOptions& options)
      : device_(device), options_(options), bounce_(device) {}
  ~CudaLinear() override {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }

  // Every 2-D attention-side tensor is a product's weight where DeviceWeights holds it: no
  // copy of its own (until session 36 every one but lm_head was widened to a second, fp32
  // copy: twice its bf16 bytes of VRAM more, which now go to hot experts).
  absl::Status Init(const ModelWeights& weights, const DeviceWeights& device_weights) {
    for (const TensorSpec& spec : weights.specs()) {
      if (spec.shape.size() != 2 || spec.side != WorkerSide::kGpu) continue;
      const Bf16Tensor* tensor = weights.Find(spec.name);
      if (tensor == nullptr) continue;
      const uint16_t* device_copy = device_weights.Find(spec.name);
      if (device_copy == nullptr) {
        return absl::InternalError(absl::StrCat(spec.name, " has no copy in device memory"));
      }
      weights_[tensor->data] = device_copy;
      // The logits' product (lm_head, or a tied embedding table) goes unsliced.
      if (spec.name == "lm_head.weight" || spec.name == "model.embed_tokens.weight") {
        logits_weights_.insert(tensor->data);
      }
    }
    if (cublasCreate(&handle_) != CUBLAS_STATUS_SUCCESS) {
      handle_ = nullptr;
      return absl::UnavailableError("cublasCreate failed");
    }
    WS_RETURN_IF_ERROR(CublasStatus(
        cublasSetStream(handle_, static_cast<cudaStream_t>(device_->native_stream(Stream::kCompute))),
        "cublasSetStream"));
    WS_LOG(INFO) << "GPU matrix products: " << weights_.size()
                 << " bf16 weights in device memory, x split three ways into bf16, the inner "
                 << "dimension in slices of " << options_.k_slice << ", at most "
                 << options_.split_scratch_bytes << " bytes of split scratch a call";
    return absl::OkStatus();
  }

  absl::Status Linear(const float* x, int64_t tokens, const kernels::model::LinearWeight& w,
                      float* y) override {
    if (tokens == 0) return absl::OkStatus();
    return Product(x, 4 * static_cast<uint64_t>(tokens * w.in_features), y,
                   4 * static_cast<uint64_t>(tokens * w.out_features),
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
    const uint64_t mid_bytes = 4 * static_cast<uint64_t>(tokens * gate.out_features);
    WS_RETURN_IF_ERROR(Grow(&gate_, mid_bytes));
    WS_RETURN_IF_ERROR(Grow(&up_, mid_bytes));
    auto* g = static_cast<float*>(gate_.data());
    auto* u = static_cast<float*>(up_.data());
    return Product(x, 4 * static_cast<uint64_t>(tokens * gate.in_features), y,
                   4 * static_cast<uint64_t>(tokens * down.out_features),
                   [&](const float* dx, float* dy) -> absl::Status {
                     WS_RETURN_IF_ERROR(QueueProduct(gate, dx, tokens, g));
                     WS_RETURN_IF_ERROR(QueueProduct(up, dx, tokens, u));
                     WS_RETURN_IF_ERROR(kernels::cuda::SiluMulInPlace(
                         g, u, tokens * gate.out_features,
                         device_->native_stream(Stream::kCompute)));
                     return QueueProduct(down, g, tokens, dy);
                   });
  }

  // Head h of MlaAbsorbQuery: out[t, h, :rank] = q[t, h, :nope] W_h, with W_h the head's
  // first `nope` rows of kv_b ([nope, rank] row-major = column-major [rank, nope]); the rope
  // part is copied on the host. Column-major: C_h[rank, T] = W_h[rank, nope] Q_h[nope, T].
  absl::Status MlaAbsorb(const kernels::model::MlaDims& d, const float* q, int64_t tokens,
                         const kernels::model::LinearWeight& kv_b, float* q_absorbed) override {
    if (tokens == 0) return absl::OkStatus();
    WS_ASSIGN_OR_RETURN(const uint16_t* w, DeviceWeight(kv_b));
    const int64_t qd = d.q_head_dim(), latent = d.latent_dim(), heads = d.num_heads;
    const HeadProducts products = {.op_w = CUBLAS_OP_N,
                                   .m = d.kv_lora_rank,
                                   .k = d.qk_nope,
                                   .w = w,
                                   .ldw = d.kv_lora_rank,
                                   .w_head_stride = d.kv_b_rows_per_head() * d.kv_lora_rank,
                                   .x_row = heads * qd,
                                   .x_head_stride = qd,
                                   .y_row = heads * latent,
                                   .y_head_stride = latent,
                                   .heads = heads};
    WS_RETURN_IF_ERROR(Product(q, 4 * static_cast<uint64_t>(tokens * heads * qd), q_absorbed,
                               4 * static_cast<uint64_t>(tokens * heads * latent),
                               [&](const float* dx, float* dy) {
                                 return QueueHeadProducts(products, dx, tokens, dy);
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
    WS_ASSIGN_OR_RETURN(const uint16_t* w, DeviceWeight(kv_b));
    const int64_t heads = d.num_heads, rank = d.kv_lora_rank;
    const HeadProducts products = {.op_w = CUBLAS_OP_T,
                                   .m = d.v_dim,
                                   .k = rank,
                                   .w = w + d.qk_nope * rank,
                                   .ldw = rank,
                                   .w_head_stride = d.kv_b_rows_per_head() * rank,
                                   .x_row = heads * rank,
                                   .x_head_stride = rank,
                                   .y_row = heads * d.v_dim,
                                   .y_head_stride = d.v_dim,
                                   .heads = heads};
    return Product(o_latent, 4 * static_cast<uint64_t>(tokens * heads * rank), out,
                   4 * static_cast<uint64_t>(tokens * heads * d.v_dim),
                   [&](const float* dx, float* dy) {
                     return QueueHeadProducts(products, dx, tokens, dy);
                   });
  }

  uint64_t scratch_bytes() const override { return scratch_bytes_.load(); }

 private:
  // One strided-batched product per head (column-major, cuBLAS's terms): for h < heads,
  // Y_h[m, T] = op(W_h)[m, k] X_h[k, T], W_h at w + h w_head_stride (leading dimension ldw),
  // X_h the k values at x + t x_row + h x_head_stride, Y_h the m values at
  // y + t y_row + h y_head_stride. A plain product is the one-head case.
  struct HeadProducts {
    cublasOperation_t op_w;
    int64_t m, k;
    const uint16_t* w;
    int64_t ldw, w_head_stride;
    int64_t x_row, x_head_stride;
    int64_t y_row, y_head_stride;
    int64_t heads;
    int64_t k_slice = 0;  // > 0 and < k: the inner dimension in slices (heads == 1 only)
  };

  // Queues dy[tokens, out] = dx[tokens, in] W^T on the compute stream (device pointers).
  // Row-major y[T, out] = x[T, in] W^T is column-major Y[out, T] = W^T[out, in] X[in, T]
  // with W row-major [out, in] = column-major [in, out]. The inner dimension goes in slices
  // (DeviceLinearOptions::k_slice) but for the logits, whose error feeds no later layer and
  // whose sliced products would outweigh their weight's bytes.
  absl::Status QueueProduct(const kernels::model::LinearWeight& w, const float* dx, int64_t tokens,
                            float* dy) {
    WS_ASSIGN_OR_RETURN(const uint16_t* device_w, DeviceWeight(w));
    const bool sliced = !logits_weights_.contains(w.data);
    return QueueHeadProducts({.op_w = CUBLAS_OP_T,
                              .m = w.out_features,
                              .k = w.in_features,
                              .w = device_w,
                              .ldw = w.in_features,
                              .w_head_stride = 0,
                              .x_row = w.in_features,
                              .x_head_stride = 0,
                              .y_row = w.out_features,
                              .y_head_stride = 0,
                              .heads = 1,
                              .k_slice = sliced ? options_.k_slice : 0},
                             dx, tokens, dy);
  }

  // The products with W in bf16 (exact: the model's weights are bf16) and fp32's result up
  // to the summation order: x split three ways into bf16 (hi + mid + lo == x, SplitToBf16x3),
  // one bf16 product of the 3 T columns on the tensor cores with fp32 accumulation (the
  // products of two bf16 values are exact in fp32), and the three results added. It reads
  // W's bf16 bytes once: 0.11 ms for DeepSeek's lm_head at 96 rows against an fp32 SGEMM's
  // 0.94 at 32 (PyTorch on the H200, run 181).
  //
  // The tensor cores' fp32 accumulation is coarser than an FMA chain's over a long inner
  // dimension: at 4096, an rms error of 3.3e-8 of sum |x w| against the host fp32's 1.41e-8
  // (device_linear_test on the H200, run 194). With k_slice, each slice of the inner
  // dimension is its own product (one strided-batched call over the slices, and one for a
  // shorter last slice) and SumSplitProducts adds the slices' results in fp32: 1.14e-8 with
  // slices of 512.
  //
  // The tokens go in chunks whose parts and products fit the split scratch (a prefill's
  // lm_head would need gigabytes at once). The three parts of a chunk of n tokens lie one
  // after the other, so part p of token t is token p n + t of a 3 n-token x with the same
  // row and head strides.
  absl::Status QueueHeadProducts(const HeadProducts& p, const float* dx, int64_t tokens,
                                 float* dy) {
    const int64_t slice = p.k_slice > 0 && p.k_slice < p.k ? p.k_slice : p.k;
    const int64_t full_slices = p.k / slice, rest = p.k % slice;
    const int64_t groups = full_slices + (rest > 0 ? 1 : 0);
    if (groups > 1 && p.heads > 1) {
      return absl::InternalError("a product batched over heads is not sliced");
    }
    const uint64_t row_bytes =
        3 * (2 * static_cast<uint64_t>(p.x_row) + 4 * static_cast<uint64_t>(p.y_row * groups));
    const int64_t chunk = std::clamp<int64_t>(
        static_cast<int64_t>(options_.split_scratch_bytes / std::max<uint64_t>(row_bytes, 1)), 1,
        tokens);
    WS_RETURN_IF_ERROR(Grow(&split_x_, 2 * 3 * static_cast<uint64_t>(chunk * p.x_row)));
    WS_RETURN_IF_ERROR(Grow(&split_y_, 4 * 3 * static_cast<uint64_t>(chunk * p.y_row * groups)));
    void* stream = device_->native_stream(Stream::kCompute);
    auto* parts = static_cast<uint16_t*>(split_x_.data());
    auto* products = static_cast<float*>(split_y_.data());
    for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
      const int64_t n = std::min(chunk, tokens - t0);
      WS_RETURN_IF_ERROR(kernels::cuda::SplitToBf16x3(dx + t0 * p.x_row, n * p.x_row, parts, stream));
      const int64_t group_floats = 3 * n * p.y_row;
      if (groups == 1) {
        WS_RETURN_IF_ERROR(Gemm(p, n, p.k, p.w, p.w_head_stride, parts, p.x_head_stride, products,
                                p.y_head_stride, p.heads));
      } else {
        // Slice s: W's rows' entries [s slice, (s + 1) slice) (op T: W^T's columns are its
        // rows, contiguous in k) against the same entries of each part's rows.
        WS_RETURN_IF_ERROR(Gemm(p, n, slice, p.w, slice, parts, slice, products, group_floats,
                                full_slices));
        if (rest > 0) {
          const int64_t k0 = full_slices * slice;
          WS_RETURN_IF_ERROR(Gemm(p, n, rest, p.w + k0, 0, parts + k0, 0,
                                  products + full_slices * group_floats, 0, 1));
        }
      }
      WS_RETURN_IF_ERROR(kernels::cuda::SumSplitProducts(products, n * p.y_row, groups,
                                                         dy + t0 * p.y_row, stream));
    }
    return absl::OkStatus();
  }

  // One strided-batched bf16 product of `batch` (column-major, cuBLAS's terms):
  // C_b[m, 3 n] = op(W_b)[m, k] X_b[k, 3 n] for W_b at w + b w_stride, X_b at x + b x_stride,
  // C_b at c + b c_stride, with p's leading dimensions. bf16 inputs with CUBLAS_COMPUTE_32F
  // run on the tensor cores with fp32 accumulation (no TF32: the inputs are bf16 already).
  absl::Status Gemm(const HeadProducts& p, int64_t n, int64_t k, const uint16_t* w,
                    int64_t w_stride, const uint16_t* x, int64_t x_stride, float* c,
                    int64_t c_stride, int64_t batch) {
    const float alpha = 1.0f, beta = 0.0f;
    return CublasStatus(
        cublasGemmStridedBatchedEx(
            handle_, p.op_w, CUBLAS_OP_N, static_cast<int>(p.m), static_cast<int>(3 * n),
            static_cast<int>(k), &alpha, w, CUDA_R_16BF, static_cast<int>(p.ldw), w_stride, x,
            CUDA_R_16BF, static_cast<int>(p.x_row), x_stride, &beta, c, CUDA_R_32F,
            static_cast<int>(p.y_row), c_stride, static_cast<int>(batch), CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx (bf16 split)");
  }

  // One product on the compute stream: x (x_bytes, host) in, `gemm`(device x, device y)
  // queued, y (y_bytes) back to the host, synchronized.
  template <typename Gemm>
  absl::Status Product(const float* x, uint64_t x_bytes, float* y, uint64_t y_bytes, Gemm gemm) {
    WS_RETURN_IF_ERROR(Grow(&x_, x_bytes));
    WS_RETURN_IF_ERROR(Grow(&y_, y_bytes));
    WS_RETURN_IF_ERROR(device_->CopyToDevice(x_.data(), x, x_bytes, Stream::kCompute));
    WS_RETURN_IF_ERROR(gemm(static_cast<const float*>(x_.data()), static_cast<float*>(y_.data())));
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

  absl::StatusOr<const uint16_t*> DeviceWeight(const kernels::model::LinearWeight& w) const {
    auto it = weights_.find(w.data);
    if (it == weights_.end()) {
      return absl::InternalError(absl::StrCat("no device copy of a [", w.out_features, ", ",
                                              w.in_features, "] weight"));
    }
    return it->second;
  }

  absl::Status Grow(DeviceBuffer* buffer, uint64_t bytes) {
    if (buffer->size() >= bytes) return absl::OkStatus();
    scratch_bytes_.fetch_sub(buffer->size());
    *buffer = DeviceBuffer();
    WS_ASSIGN_OR_RETURN(*buffer, DeviceBuffer::Allocate(device_, std::max<uint64_t>(bytes, 1 << 20)));
    scratch_bytes_.fetch_add(buffer->size());
    return absl::OkStatus();
  }

  Device* device_;
  const DeviceLinearOptions options_;
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer x_, y_;
  DeviceBuffer gate_, up_;  // SwiGlu's intermediate products [tokens, intermediate]
  DeviceBuffer stats_;      // LinearRowStats' [tokens] stats
  absl::flat_hash_map<const uint16_t*, const uint16_t*> weights_;  // host bf16 -> device bf16
  absl::flat_hash_set<const uint16_t*> logits_weights_;  // host bf16 of the unsliced products
  DeviceBuffer split_x_, split_y_;  // a chunk's [3 n, x_row] bf16 parts, [3 n, y_row] products
  PinnedArray<std::byte> bounce_;   // CopyBackAndWait's way to a pageable destination
  std::atomic<uint64_t> scratch_bytes_{0};  // the buffers' sizes, for Stats() between steps
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceLinear>> CreateCudaDeviceLinear(
    Device* device, const ModelWeights& weights, const DeviceWeights& device_weights,
    const DeviceLinearOptions& options) {
  auto linear = std::make_unique<CudaLinear>(device, options);
  WS_RETURN_IF_ERROR(linear->Init(weights, device_weights));
  return std::unique_ptr<DeviceLinear>(std::move(linear));
}

}  // namespace writescope::gpu
