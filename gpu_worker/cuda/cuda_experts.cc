// DeviceExperts on the CUDA device: the routed experts of one MoE layer at a time streamed
// from host memory into one of two device buffers on their own copy stream (kWeightsIn),
// cuBLAS bf16 GEMMs per expert (fp32 accumulation and output) over the rows grouped by
// expert on the compute stream.
//
// Layer buffer (bf16), per expert e of the layer, at e * 3 * I * H values:
//   [gate; up]  [2I, H]  (gate rows, then up rows: one GEMM gives both halves per row)
//   down        [H, I]
// Scratch (device), for `tokens` tokens and `rows` = tokens * top_k (token, k) pairs:
//   x [tokens, H] fp32, y [tokens, H] fp32, row_token [rows] int32, slot [rows] int32,
//   route_weights [rows] fp32, xs [rows, H] bf16, gate_up [rows, 2I] fp32, hs [rows, I] bf16,
//   ys [rows, H] fp32.
// Pair p (sorted by expert, stable) is row p of xs / gate_up / hs / ys; slot[t * top_k + k]
// names the row of pair (t, k), row_token[p] the token of row p.
#include "gpu_worker/cuda_experts.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/model_tensors.h"
#include "common/process.h"
#include "common/status.h"
#include "gpu_worker/cuda/pinned_host.h"
#include "gpu_worker/pinned_array.h"
#include "kernels/cuda/cuda_experts.h"

namespace writescope::gpu {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kPageBytes = 4096;
constexpr uint64_t kRegionAlign = 256;  // device scratch regions (cuBLAS likes 256-byte bases)

uint64_t AlignUp(uint64_t value, uint64_t align) { return (value + align - 1) / align * align; }

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // returned as a Status: not for the next launch to report
  return absl::InternalError(absl::StrCat("CudaExperts: ", what, ": ", cudaGetErrorName(error),
                                          " (", cudaGetErrorString(error), ")"));
}

absl::Status CublasStatus(cublasStatus_t status, absl::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("CudaExperts: ", what, ": cuBLAS status ", static_cast<int>(status)));
}

// Offsets of the device scratch regions for a token and row capacity.
struct ScratchLayout {
  int64_t tokens = 0;  // capacity in tokens (x, y)
  int64_t rows = 0;    // capacity in (token, k) pairs
  uint64_t x = 0, y = 0, row_token = 0, slot = 0, route_weights = 0;
  uint64_t xs = 0, gate_up = 0, hs = 0, ys = 0;
  uint64_t bytes = 0;

  static ScratchLayout For(int64_t tokens, int64_t rows, int64_t hidden, int64_t inter) {
    ScratchLayout l;
    l.tokens = tokens;
    l.rows = rows;
    const uint64_t t = tokens, r = rows, h = hidden, i = inter;
    uint64_t offset = 0;
    auto take = [&offset](uint64_t bytes) {
      const uint64_t at = offset;
      offset = AlignUp(offset + bytes, kRegionAlign);
      return at;
    };
    l.x = take(4 * t * h);
    l.y = take(4 * t * h);
    l.row_token = take(4 * r);
    l.slot = take(4 * r);
    l.route_weights = take(4 * r);
    l.xs = take(2 * r * h);
    l.gate_up = take(4 * r * 2 * i);
    l.hs = take(2 * r * i);
    l.ys = take(4 * r * h);
    l.bytes = std::max<uint64_t>(offset, kRegionAlign);
    return l;
  }
};

class CudaExperts final : public DeviceExperts {
 public:
  CudaExperts(Device* device, const ModelWeights& routed)
      : device_(device), routed_(routed), staging_(device) {}

  ~CudaExperts() override {
    // Nothing may still read the pinned weights or the buffers when they go.
    device_->Synchronize(Stream::kWeightsIn).IgnoreError();
    device_->Synchronize(Stream::kCompute).IgnoreError();
    if (pinned_weights_ != nullptr) device_->UnregisterHost(pinned_weights_).IgnoreError();
    for (void* ptr : pinned_ranges_) cudaHostUnregister(ptr);
    for (LayerBuffer& buffer : buffers_) {
      if (buffer.ready != nullptr) cudaEventDestroy(buffer.ready);
    }
    if (handle_ != nullptr) cublasDestroy(handle_);
  }

  absl::Status Init(int64_t max_tokens, uint64_t vram_bytes_available) {
    if (!device_->is_cuda()) {
      return absl::FailedPreconditionError(
          absl::StrCat("CudaExperts: device ", device_->name(), " is not a CUDA device"));
    }
    const ModelConfig& config = routed_.config();
    hidden_ = config.hidden_size;
    inter_ = config.moe_intermediate_size;
    num_experts_ = config.n_routed_experts;
    config_top_k_ = std::max<int64_t>(config.num_experts_per_tok, 1);
    constexpr int64_t kIntMax = std::numeric_limits<int>::max();
    if (hidden_ <= 0 || inter_ <= 0 || num_experts_ <= 0 || 2 * inter_ > kIntMax ||
        hidden_ > kIntMax) {
      return absl::InvalidArgumentError(absl::StrCat("CudaExperts: ", config.source, ": hidden ",
                                                     hidden_, ", moe intermediate ", inter_, ", ",
                                                     num_experts_, " routed experts"));
    }
    if (max_tokens <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("CudaExperts: max_tokens ", max_tokens));
    }

    // The routed experts' host tensors, per MoE layer.
    moe_index_.assign(config.num_layers, -1);
    uintptr_t lowest = std::numeric_limits<uintptr_t>::max(), highest = 0;
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;  // page-rounded [begin, end)
    for (int64_t layer = 0; layer < config.num_layers; ++layer) {
      if (!config.IsMoeLayer(layer)) continue;
      moe_index_[layer] = static_cast<int64_t>(moe_layers_.size());
      moe_layers_.push_back(layer);
      std::vector<ExpertWeights>& experts = weights_.emplace_back(num_experts_);
      for (int64_t e = 0; e < num_experts_; ++e) {
        const MlpMatrix kinds[3] = {MlpMatrix::kGate, MlpMatrix::kUp, MlpMatrix::kDown};
        const uint16_t** ptrs[3] = {&experts[e].gate, &experts[e].up, &experts[e].down};
        for (int j = 0; j < 3; ++j) {
          const std::string name = RoutedExpertTensorName(config, layer, e, kinds[j]);
          WS_ASSIGN_OR_RETURN(const Bf16Tensor* tensor, routed_.Get(name));
          const std::vector<int64_t> want =
              j < 2 ? std::vector<int64_t>{inter_, hidden_} : std::vector<int64_t>{hidden_, inter_};
          if (tensor->shape != want) {
            return absl::InvalidArgumentError(absl::StrCat("CudaExperts: ", name, " is ",
                                                           ShapeString(tensor->shape),
                                                           ", expected ", ShapeString(want)));
          }
          *ptrs[j] = tensor->data;
          const uintptr_t begin = reinterpret_cast<uintptr_t>(tensor->data);
          lowest = std::min(lowest, begin);
          highest = std::max<uintptr_t>(highest, begin + tensor->bytes());
          ranges.emplace_back(begin / kPageBytes * kPageBytes,
                              AlignUp(begin + tensor->bytes(), kPageBytes));
        }
      }
    }
    if (moe_layers_.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("CudaExperts: ", config.source, " has no MoE layer"));
    }
    // No resident expert yet (SetResident): a row of nulls per MoE layer.
    resident_table_.assign(moe_layers_.size(), std::vector<const uint16_t*>(num_experts_, nullptr));

    // Budget: two layer buffers and the scratch for max_tokens at the config's top-k.
    layer_bytes_ = static_cast<uint64_t>(num_experts_) * ExpertValues() * 2;
    budget_ = vram_bytes_available;
    const ScratchLayout layout =
        ScratchLayout::For(max_tokens, max_tokens * config_top_k_, hidden_, inter_);
    const uint64_t buffer_bytes = AlignUp(layer_bytes_, kRegionAlign);
    if (2 * buffer_bytes + layout.bytes > budget_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("CudaExperts: two layer buffers of ", buffer_bytes, " bytes (", num_experts_,
                       " experts) and ", layout.bytes, " bytes of scratch for ", max_tokens,
                       " tokens x top-", config_top_k_, " need ", 2 * buffer_bytes + layout.bytes,
                       " bytes of VRAM, ", budget_, " are left in the budget"));
    }
    for (LayerBuffer& buffer : buffers_) {
      WS_ASSIGN_OR_RETURN(buffer.memory, DeviceBuffer::Allocate(device_, buffer_bytes));
      WS_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&buffer.ready, cudaEventDisableTiming),
                                    "cudaEventCreateWithFlags"));
    }
    WS_RETURN_IF_ERROR(AllocateScratch(layout));

    compute_ = static_cast<cudaStream_t>(device_->native_stream(Stream::kCompute));
    if (cublasCreate(&handle_) != CUBLAS_STATUS_SUCCESS) {
      handle_ = nullptr;
      return absl::UnavailableError("CudaExperts: cublasCreate failed");
    }
    WS_RETURN_IF_ERROR(CublasStatus(cublasSetStream(handle_, compute_), "cublasSetStream"));
    WS_RETURN_IF_ERROR(
        CublasStatus(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));

    // Pin the weights' host range so that the stream is DMA at full rate. Synthetic weights
    // are one anonymous mapping; a read-only file mapping or a range over several mappings
    // is refused by the driver.
    const uintptr_t base = lowest / kPageBytes * kPageBytes;
    const uint64_t span = AlignUp(highest, kPageBytes) - base;
    void* base_ptr = reinterpret_cast<void*>(base);
    const absl::Status pinned = device_->RegisterHost(base_ptr, span);
    if (pinned.ok()) {
      pinned_weights_ = base_ptr;
    } else {
      cudaGetLastError();  // not sticky: keep it from surfacing at the next kernel launch
      // A checkpoint: each shard is its own read-only file mapping, with gaps between
      // them. Pin the tensors' own pages, range by range, read-only (the device only
      // reads them; the pages are the page cache's, shared with the cpu_worker's mapping).
      std::sort(ranges.begin(), ranges.end());
      std::vector<std::pair<uintptr_t, uintptr_t>> merged;
      for (const auto& r : ranges) {
        if (!merged.empty() && r.first <= merged.back().second) {
          merged.back().second = std::max(merged.back().second, r.second);
        } else {
          merged.push_back(r);
        }
      }
      // Each range on its own: a copy from a pinned range runs at the DMA rate, one from
      // a range the driver refused is pageable (slower) but correct.
      uint64_t refused = 0;
      cudaError_t last_error = cudaSuccess;
      for (const auto& [begin, end] : merged) {
        void* ptr = reinterpret_cast<void*>(begin);
        const cudaError_t error = cudaHostRegister(ptr, end - begin, cudaHostRegisterReadOnly);
        if (error == cudaSuccess) {
          pinned_ranges_.push_back(ptr);
        } else {
          cudaGetLastError();
          refused += end - begin;
          last_error = error;
        }
      }
      if (refused > 0) {
        WS_LOG(WARNING) << "CudaExperts: " << refused << " of the " << span
                        << " bytes of routed-expert weights could not be pinned (" << pinned
                        << "; read-only, per range: " << cudaGetErrorString(last_error)
                        << "): their copies are pageable (slower)";
      }
    }

    // Calibration: one layer's copy, wall clock.
    const auto start = Clock::now();
    WS_RETURN_IF_ERROR(QueueCopy(0));
    WS_RETURN_IF_ERROR(device_->Synchronize(Stream::kWeightsIn));
    const double ms = MillisSince(start);
    bytes_per_ms_ = static_cast<double>(layer_bytes_) / std::max(ms, 1e-6);
    WS_RETURN_IF_ERROR(EndStep());
    WS_LOG(INFO) << "CudaExperts: " << moe_layers_.size() << " MoE layers of " << layer_bytes_
                 << " bytes, " << device_bytes() << " bytes of VRAM, weights "
                 << (pinned_weights_ != nullptr ? "pinned"
                     : !pinned_ranges_.empty()    ? "pinned read-only"
                                                  : "pageable")
                 << ", one layer in " << ms
                 << " ms (" << bytes_per_ms_ / 1e6 << " GB/s)";
    return absl::OkStatus();
  }

  absl::Status Prefetch(int64_t layer) override {
    WS_ASSIGN_OR_RETURN(const int64_t moe, MoeIndex(layer));
    return QueueCopy(moe);
  }

  absl::Status Forward(int64_t layer, const float* x, int64_t tokens, int64_t top_k,
                       const int32_t* ids, const float* weights, float* y) override {
    const auto start = Clock::now();
    stats_ = {};
    WS_ASSIGN_OR_RETURN(const int64_t moe, MoeIndex(layer));
    WS_RETURN_IF_ERROR(CheckCall(tokens, top_k, x, ids, weights, y));
    if (tokens == 0) {
      stats_.total_ms = MillisSince(start);
      return absl::OkStatus();
    }
    WS_RETURN_IF_ERROR(CheckIds(ids, tokens, top_k));

    // This layer's weights: queued (by Prefetch, or the previous Forward) or copied now.
    WS_RETURN_IF_ERROR(QueueCopy(moe));
    LayerBuffer& buffer = buffers_[moe % 2];
    const auto wait_start = Clock::now();
    WS_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(buffer.ready), "cudaEventSynchronize"));
    stats_.wait_ms = MillisSince(wait_start);
    WS_RETURN_IF_ERROR(
        CudaStatus(cudaStreamWaitEvent(compute_, buffer.ready, 0), "cudaStreamWaitEvent"));
    stats_.bytes_streamed = std::exchange(buffer.unreported_bytes, 0);
    // The next MoE layer goes into the other buffer (idle: the previous Forward synchronized)
    // and arrives while this one computes and the host works up to it.
    if (moe + 1 < static_cast<int64_t>(moe_layers_.size())) WS_RETURN_IF_ERROR(QueueCopy(moe + 1));

    absl::Status status = ComputeAll(BufferTable(buffer), x, tokens, top_k, ids, weights, y);
    if (!status.ok()) {
      // Leave nothing in flight on the scratch or the staging.
      device_->Synchronize(Stream::kCompute).IgnoreError();
      return status;
    }
    stats_.total_ms = MillisSince(start);
    return absl::OkStatus();
  }

  absl::Status EndStep() override {
    WS_RETURN_IF_ERROR(device_->Synchronize(Stream::kWeightsIn));
    for (LayerBuffer& buffer : buffers_) {
      buffer.moe_layer = -1;
      buffer.unreported_bytes = 0;
    }
    return absl::OkStatus();
  }

  int64_t resident_capacity() const override {
    const uint64_t used = buffers_[0].memory.size() + buffers_[1].memory.size() + scratch_.size();
    const uint64_t expert_bytes = AlignUp(2 * ExpertValues(), kRegionAlign);
    return budget_ > used ? static_cast<int64_t>((budget_ - used) / expert_bytes) : 0;
  }

  absl::Status SetResident(const std::vector<ExpertRef>& experts) override {
    WS_RETURN_IF_ERROR(CheckResidentSet(routed_.config(), experts, resident_capacity()));
    const uint64_t expert_bytes = AlignUp(2 * ExpertValues(), kRegionAlign);
    DeviceBuffer memory;
    if (!experts.empty()) {
      WS_ASSIGN_OR_RETURN(memory, DeviceBuffer::Allocate(device_, experts.size() * expert_bytes));
    }
    std::vector<std::vector<const uint16_t*>> table(
        moe_layers_.size(), std::vector<const uint16_t*>(num_experts_, nullptr));
    const uint64_t gate_bytes = 2 * static_cast<uint64_t>(inter_) * hidden_;
    std::byte* dst = static_cast<std::byte*>(memory.data());
    for (const ExpertRef& ref : experts) {
      const int64_t moe = moe_index_[ref.layer];
      const ExpertWeights& w = weights_[moe][ref.expert];
      // The streamed layers' block layout: [gate; up] then down.
      WS_RETURN_IF_ERROR(device_->CopyToDevice(dst, w.gate, gate_bytes, Stream::kWeightsIn));
      WS_RETURN_IF_ERROR(
          device_->CopyToDevice(dst + gate_bytes, w.up, gate_bytes, Stream::kWeightsIn));
      WS_RETURN_IF_ERROR(
          device_->CopyToDevice(dst + 2 * gate_bytes, w.down, gate_bytes, Stream::kWeightsIn));
      table[moe][ref.expert] = reinterpret_cast<const uint16_t*>(dst);
      dst += expert_bytes;
    }
    WS_RETURN_IF_ERROR(device_->Synchronize(Stream::kWeightsIn));
    // Nothing computes with the old set any more (ForwardResident is synchronous).
    resident_memory_ = std::move(memory);
    resident_table_ = std::move(table);
    num_resident_ = static_cast<int64_t>(experts.size());
    resident_bytes_.store(resident_memory_.size());
    device_bytes_.store(buffers_[0].memory.size() + buffers_[1].memory.size() + scratch_.size() +
                        resident_memory_.size());
    return absl::OkStatus();
  }

  bool IsResident(int64_t layer, int32_t expert) const override {
    if (layer < 0 || layer >= static_cast<int64_t>(moe_index_.size()) || moe_index_[layer] < 0 ||
        expert < 0 || expert >= num_experts_) {
      return false;
    }
    return resident_table_[moe_index_[layer]][expert] != nullptr;
  }
  int64_t num_resident() const override { return num_resident_; }

  absl::Status ForwardResident(int64_t layer, const float* x, int64_t tokens, int64_t top_k,
                               const int32_t* ids, const float* weights, float* y) override {
    const auto start = Clock::now();
    stats_ = {};
    WS_ASSIGN_OR_RETURN(const int64_t moe, MoeIndex(layer));
    WS_RETURN_IF_ERROR(CheckCall(tokens, top_k, x, ids, weights, y));
    if (tokens == 0) return absl::OkStatus();
    WS_RETURN_IF_ERROR(CheckResidentIds(
        ids, tokens, top_k, [&](int32_t e) { return IsResident(layer, e); }));
    absl::Status status = ComputeAll(resident_table_[moe], x, tokens, top_k, ids, weights, y);
    if (!status.ok()) {
      device_->Synchronize(Stream::kCompute).IgnoreError();
      return status;
    }
    stats_.total_ms = MillisSince(start);
    return absl::OkStatus();
  }

  const DeviceExpertsStats& last_stats() const override { return stats_; }
  // Readable from another thread (the worker's Stats) while a step grows the scratch.
  uint64_t device_bytes() const override { return device_bytes_.load(); }
  uint64_t resident_bytes() const override { return resident_bytes_.load(); }
  double calibrated_bytes_per_ms() const override { return bytes_per_ms_; }

 private:
  struct ExpertWeights {
    const uint16_t* gate = nullptr;  // [I, H]
    const uint16_t* up = nullptr;    // [I, H]
    const uint16_t* down = nullptr;  // [H, I]
  };
  struct LayerBuffer {
    DeviceBuffer memory;
    cudaEvent_t ready = nullptr;    // recorded on kWeightsIn after the layer's copies
    int64_t moe_layer = -1;         // MoE index whose weights are (or are being) copied here
    uint64_t unreported_bytes = 0;  // a copy no Forward has reported in its stats yet
  };

  // bf16 values of one expert in a layer buffer: [gate; up] [2I, H] and down [H, I].
  uint64_t ExpertValues() const { return 3 * static_cast<uint64_t>(inter_) * hidden_; }

  absl::StatusOr<int64_t> MoeIndex(int64_t layer) const {
    if (layer < 0 || layer >= static_cast<int64_t>(moe_index_.size()) || moe_index_[layer] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CudaExperts: layer ", layer, " of ", routed_.config().source, " has no routed experts"));
    }
    return moe_index_[layer];
  }

  // The shape of a Forward call (its pointers only when there are tokens).
  absl::Status CheckCall(int64_t tokens, int64_t top_k, const float* x, const int32_t* ids,
                         const float* weights, const float* y) const {
    if (tokens < 0 || top_k <= 0 || top_k > num_experts_) {
      return absl::InvalidArgumentError(absl::StrCat("CudaExperts: tokens ", tokens, ", top_k ",
                                                     top_k, " with ", num_experts_, " experts"));
    }
    if (tokens > 0 && (x == nullptr || ids == nullptr || weights == nullptr || y == nullptr)) {
      return absl::InvalidArgumentError("CudaExperts: null input or output");
    }
    return absl::OkStatus();
  }

  absl::Status CheckIds(const int32_t* ids, int64_t tokens, int64_t top_k) const {
    return CheckRouting("CudaExperts", ids, tokens, top_k, /*allow_skipped=*/false,
                        [this](int32_t id) {
                          return id >= 0 && id < num_experts_
                                     ? std::string()
                                     : absl::StrCat("outside [0, ", num_experts_, ")");
                        });
  }

  // Queues MoE layer `moe`'s weights into buffer moe % 2 on kWeightsIn, unless they are
  // there or on their way. The caller guarantees that no compute still reads that buffer.
  absl::Status QueueCopy(int64_t moe) {
    LayerBuffer& buffer = buffers_[moe % 2];
    if (buffer.moe_layer == moe) return absl::OkStatus();
    buffer.moe_layer = -1;  // until the copies are queued
    buffer.unreported_bytes = 0;
    uint16_t* dst = static_cast<uint16_t*>(buffer.memory.data());
    const uint64_t gate_bytes = 2 * static_cast<uint64_t>(inter_) * hidden_;
    for (const ExpertWeights& expert : weights_[moe]) {
      WS_RETURN_IF_ERROR(device_->CopyToDevice(dst, expert.gate, gate_bytes, Stream::kWeightsIn));
      WS_RETURN_IF_ERROR(
          device_->CopyToDevice(dst + gate_bytes / 2, expert.up, gate_bytes, Stream::kWeightsIn));
      WS_RETURN_IF_ERROR(
          device_->CopyToDevice(dst + gate_bytes, expert.down, gate_bytes, Stream::kWeightsIn));
      dst += ExpertValues();
    }
    WS_RETURN_IF_ERROR(CudaStatus(
        cudaEventRecord(buffer.ready,
                        static_cast<cudaStream_t>(device_->native_stream(Stream::kWeightsIn))),
        "cudaEventRecord"));
    buffer.moe_layer = moe;
    buffer.unreported_bytes = layer_bytes_;
    return absl::OkStatus();
  }

  // Host staging: x [tokens, H], y [tokens, H] fp32, row_token, slot [rows] int32,
  // route_weights [rows] fp32.
  struct StagingLayout {
    uint64_t x, y, row_token, slot, route_weights, bytes;
  };
  static StagingLayout StagingFor(const ScratchLayout& s, int64_t hidden) {
    StagingLayout l;
    const uint64_t t = s.tokens, r = s.rows, h = hidden;
    l.x = 0;
    l.y = AlignUp(l.x + 4 * t * h, 64);
    l.row_token = AlignUp(l.y + 4 * t * h, 64);
    l.slot = AlignUp(l.row_token + 4 * r, 64);
    l.route_weights = AlignUp(l.slot + 4 * r, 64);
    l.bytes = l.route_weights + 4 * r;
    return l;
  }

  absl::Status AllocateScratch(const ScratchLayout& layout) {
    // No capacity until both allocations succeed (a failed one leaves Forward refusing with
    // RESOURCE_EXHAUSTED, not writing through a stale layout).
    scratch_ = DeviceBuffer();
    layout_ = ScratchLayout();
    WS_ASSIGN_OR_RETURN(scratch_, DeviceBuffer::Allocate(device_, layout.bytes));
    const StagingLayout staging_layout = StagingFor(layout, hidden_);
    try {
      staging_.Resize(static_cast<int64_t>(staging_layout.bytes));
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat("CudaExperts: ", staging_layout.bytes, " bytes of host staging"));
    }
    layout_ = layout;
    device_bytes_.store(buffers_[0].memory.size() + buffers_[1].memory.size() + scratch_.size() +
                        resident_memory_.size());
    staging_layout_ = staging_layout;
    return absl::OkStatus();
  }

  // Grows the scratch to `tokens` tokens and `rows` pairs when the budget allows (else the
  // caller runs in chunks of what is there).
  absl::Status MaybeGrowScratch(int64_t tokens, int64_t rows) {
    if (tokens <= layout_.tokens && rows <= layout_.rows) return absl::OkStatus();
    const ScratchLayout grown = ScratchLayout::For(std::max(tokens, layout_.tokens),
                                                   std::max(rows, layout_.rows), hidden_, inter_);
    const uint64_t buffers =
        buffers_[0].memory.size() + buffers_[1].memory.size() + resident_memory_.size();
    if (buffers + grown.bytes > budget_) return absl::OkStatus();
    const ScratchLayout previous = layout_;
    const absl::Status status = AllocateScratch(grown);
    if (status.ok()) return status;
    WS_LOG(WARNING) << "CudaExperts: could not grow the scratch to " << grown.bytes
                    << " bytes, running in chunks: " << status;
    return AllocateScratch(previous);
  }

  // The per-expert weight blocks of a streamed layer buffer.
  const std::vector<const uint16_t*>& BufferTable(const LayerBuffer& buffer) {
    buffer_table_.resize(num_experts_);
    const uint16_t* layer = static_cast<const uint16_t*>(buffer.memory.data());
    for (int64_t e = 0; e < num_experts_; ++e) buffer_table_[e] = layer + e * ExpertValues();
    return buffer_table_;
  }

  // `table[e]`: expert e's [gate; up; down] block in device memory (null: no pair may name
  // e); ids of -1 are skipped.
  absl::Status ComputeAll(const std::vector<const uint16_t*>& table, const float* x,
                          int64_t tokens, int64_t top_k, const int32_t* ids, const float* weights,
                          float* y) {
    WS_RETURN_IF_ERROR(MaybeGrowScratch(tokens, tokens * top_k));
    const int64_t chunk = std::min({tokens, layout_.tokens, layout_.rows / top_k});
    if (chunk <= 0) {
      return absl::ResourceExhaustedError(absl::StrCat("CudaExperts: top_k ", top_k, " needs ",
                                                       top_k, " rows of scratch per token, ",
                                                       layout_.rows, " fit the VRAM budget"));
    }
    for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
      const int64_t n = std::min(chunk, tokens - t0);
      WS_RETURN_IF_ERROR(ComputeChunk(table, x + t0 * hidden_, n, top_k, ids + t0 * top_k,
                                      weights + t0 * top_k, y + t0 * hidden_));
    }
    return absl::OkStatus();
  }

  // One chunk of tokens through the experts of `table` (whose copies the compute stream
  // already waits for); synchronous.
  absl::Status ComputeChunk(const std::vector<const uint16_t*>& table, const float* x,
                            int64_t tokens, int64_t top_k, const int32_t* ids,
                            const float* weights, float* y) {
    const int64_t H = hidden_, I = inter_, E = num_experts_;
    const int64_t rows = tokens * top_k;
    std::byte* host = staging_.data();
    float* x_stage = reinterpret_cast<float*>(host + staging_layout_.x);
    float* y_stage = reinterpret_cast<float*>(host + staging_layout_.y);
    int32_t* row_token = reinterpret_cast<int32_t*>(host + staging_layout_.row_token);
    int32_t* slot = reinterpret_cast<int32_t*>(host + staging_layout_.slot);
    float* w_stage = reinterpret_cast<float*>(host + staging_layout_.route_weights);

    // Counting sort of the pairs by expert (stable: token order within an expert); skipped
    // pairs (id -1) go last, as "expert E", whose rows of ys are zero.
    offsets_.assign(E + 2, 0);
    auto bucket = [E](int32_t id) { return id < 0 ? E : static_cast<int64_t>(id); };
    for (int64_t i = 0; i < rows; ++i) ++offsets_[bucket(ids[i]) + 1];
    for (int64_t e = 0; e <= E; ++e) offsets_[e + 1] += offsets_[e];
    fill_.assign(offsets_.begin(), offsets_.end() - 1);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t p = fill_[bucket(ids[i])]++;
      row_token[p] = static_cast<int32_t>(i / top_k);
      slot[i] = static_cast<int32_t>(p);
    }
    // The gpu_worker's step buffers are pinned: DMA straight from and into them; other
    // callers' memory goes through the pinned staging.
    const bool x_pinned = IsPinnedHost(x), y_pinned = IsPinnedHost(y);
    if (!x_pinned) std::memcpy(x_stage, x, 4 * tokens * H);
    std::memcpy(w_stage, weights, 4 * rows);

    std::byte* dev = static_cast<std::byte*>(scratch_.data());
    float* x_dev = reinterpret_cast<float*>(dev + layout_.x);
    float* y_dev = reinterpret_cast<float*>(dev + layout_.y);
    int32_t* row_token_dev = reinterpret_cast<int32_t*>(dev + layout_.row_token);
    int32_t* slot_dev = reinterpret_cast<int32_t*>(dev + layout_.slot);
    float* w_dev = reinterpret_cast<float*>(dev + layout_.route_weights);
    uint16_t* xs = reinterpret_cast<uint16_t*>(dev + layout_.xs);
    float* gate_up = reinterpret_cast<float*>(dev + layout_.gate_up);
    uint16_t* hs = reinterpret_cast<uint16_t*>(dev + layout_.hs);
    float* ys = reinterpret_cast<float*>(dev + layout_.ys);
    void* stream = compute_;

    WS_RETURN_IF_ERROR(
        device_->CopyToDevice(x_dev, x_pinned ? x : x_stage, 4 * tokens * H, Stream::kCompute));
    WS_RETURN_IF_ERROR(device_->CopyToDevice(row_token_dev, row_token, 4 * rows, Stream::kCompute));
    WS_RETURN_IF_ERROR(device_->CopyToDevice(slot_dev, slot, 4 * rows, Stream::kCompute));
    WS_RETURN_IF_ERROR(device_->CopyToDevice(w_dev, w_stage, 4 * rows, Stream::kCompute));
    WS_RETURN_IF_ERROR(kernels::cuda::GatherRowsToBf16(x_dev, H, row_token_dev, rows, xs, stream));

    const float one = 1.0f, zero = 0.0f;
    // Row-major C[n_e, N] = A[n_e, K] W^T with W row-major [N, K] is column-major
    // C^T[N, n_e] = op_T(W as column-major [K, N]) * (A as column-major [K, n_e]).
    for (int64_t e = 0; e < E; ++e) {
      const int64_t first = offsets_[e], n_e = offsets_[e + 1] - first;
      if (n_e == 0) continue;
      const uint16_t* gate_up_w = table[e];
      WS_RETURN_IF_ERROR(CublasStatus(
          cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(2 * I),
                       static_cast<int>(n_e), static_cast<int>(H), &one, gate_up_w, CUDA_R_16BF,
                       static_cast<int>(H), xs + first * H, CUDA_R_16BF, static_cast<int>(H), &zero,
                       gate_up + first * 2 * I, CUDA_R_32F, static_cast<int>(2 * I),
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx (gate, up)"));
    }
    WS_RETURN_IF_ERROR(kernels::cuda::SwiGluToBf16(gate_up, rows, I, hs, stream));
    for (int64_t e = 0; e < E; ++e) {
      const int64_t first = offsets_[e], n_e = offsets_[e + 1] - first;
      if (n_e == 0) continue;
      const uint16_t* down_w = table[e] + 2 * I * H;
      WS_RETURN_IF_ERROR(
          CublasStatus(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(H),
                                    static_cast<int>(n_e), static_cast<int>(I), &one, down_w,
                                    CUDA_R_16BF, static_cast<int>(I), hs + first * I, CUDA_R_16BF,
                                    static_cast<int>(I), &zero, ys + first * H, CUDA_R_32F,
                                    static_cast<int>(H), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx (down)"));
    }
    if (const int64_t skipped = rows - offsets_[E]; skipped > 0) {
      WS_RETURN_IF_ERROR(CudaStatus(
          cudaMemsetAsync(ys + offsets_[E] * H, 0, 4 * skipped * H, compute_), "cudaMemsetAsync"));
    }
    WS_RETURN_IF_ERROR(
        kernels::cuda::CombineExpertRows(ys, H, slot_dev, w_dev, tokens, top_k, y_dev, stream));
    WS_RETURN_IF_ERROR(
        device_->CopyToHost(y_pinned ? y : y_stage, y_dev, 4 * tokens * H, Stream::kCompute));
    WS_RETURN_IF_ERROR(device_->Synchronize(Stream::kCompute));
    if (!y_pinned) std::memcpy(y, y_stage, 4 * tokens * H);
    return absl::OkStatus();
  }

  Device* device_;
  const ModelWeights& routed_;
  int64_t hidden_ = 0, inter_ = 0, num_experts_ = 0, config_top_k_ = 1;
  std::vector<int64_t> moe_index_;                   // [num_layers] -> MoE index, -1 dense
  std::vector<int64_t> moe_layers_;                  // [MoE index] -> layer
  std::vector<std::vector<ExpertWeights>> weights_;  // [MoE index][expert], host
  uint64_t layer_bytes_ = 0;
  uint64_t budget_ = 0;
  LayerBuffer buffers_[2];
  DeviceBuffer scratch_;
  ScratchLayout layout_;
  std::atomic<uint64_t> device_bytes_{0};
  PinnedArray<std::byte> staging_;  // pinned host side of x, y and the routing arrays
  StagingLayout staging_layout_{};
  void* pinned_weights_ = nullptr;  // base of the registered weight range
  std::vector<void*> pinned_ranges_;  // or these, read-only (a checkpoint's mappings)
  cudaStream_t compute_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  double bytes_per_ms_ = 0;
  DeviceExpertsStats stats_;
  std::vector<int64_t> offsets_;  // [E + 2] first row of each expert, then of the skipped
  std::vector<int64_t> fill_;     // [E + 1] next row of each during the sort
  std::vector<const uint16_t*> buffer_table_;  // [E] a streamed layer buffer's blocks
  // The resident (hot) experts: one allocation of blocks, [MoE index][expert] -> block
  // (null: not resident).
  DeviceBuffer resident_memory_;
  std::vector<std::vector<const uint16_t*>> resident_table_;
  int64_t num_resident_ = 0;
  std::atomic<uint64_t> resident_bytes_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceExperts>> CreateCudaExperts(Device* device,
                                                                 const ModelWeights& routed,
                                                                 int64_t max_tokens,
                                                                 uint64_t vram_bytes_available) {
  auto experts = std::make_unique<CudaExperts>(device, routed);
  WS_RETURN_IF_ERROR(experts->Init(max_tokens, vram_bytes_available));
  return std::unique_ptr<DeviceExperts>(std::move(experts));
}

}  // namespace writescope::gpu
