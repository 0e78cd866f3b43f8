// The CUDA implementation of the device contract. Compiled as plain C++ against the
// CUDA runtime (static cudart); no kernels live here.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/process.h"
#include "common/status.h"
#include "gpu_worker/device.h"
#include "kernels/cuda/cuda_convert.h"

namespace writescope::gpu {
namespace {

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  // The error is returned here; clear CUDA's last-error slot so that a caller that goes on
  // (a pinning refused: copies stay pageable) does not see it again at its next kernel
  // launch's cudaGetLastError(). Sticky errors (a faulted context) stay sticky anyway.
  cudaGetLastError();
  const absl::StatusCode code =
      (error == cudaErrorMemoryAllocation)      ? absl::StatusCode::kResourceExhausted
      : (error == cudaErrorInsufficientDriver ||
         error == cudaErrorNoDevice)            ? absl::StatusCode::kUnavailable
                                                : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, ": ", cudaGetErrorName(error), " (",
                                         cudaGetErrorString(error), ")"));
}

#define WS_CUDA_RETURN_IF_ERROR(call) \
  do {                                \
    absl::Status s_ = CudaStatus((call), #call); \
    if (!s_.ok()) return s_;          \
  } while (0)

class CudaDevice final : public Device {
 public:
  static absl::StatusOr<std::unique_ptr<Device>> Create(int ordinal) {
    int count = 0;
    // No driver, or no device: UNAVAILABLE (the service and the tests then run without it);
    // a device that is there but fails below is another error.
    if (const cudaError_t error = cudaGetDeviceCount(&count); error != cudaSuccess) {
      cudaGetLastError();  // not sticky: cleared
      return absl::UnavailableError(
          absl::StrCat("no usable CUDA device: ", cudaGetErrorString(error)));
    }
    if (ordinal < 0 || ordinal >= count) {
      return absl::UnavailableError(absl::StrCat("no CUDA device ", ordinal, " (", count, " found)"));
    }
    WS_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
    cudaDeviceProp prop;
    WS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal));
    // The kernels are built for sm_90 (SASS, and PTX that later GPUs compile): an older GPU
    // would fail at its first launch ("no kernel image") in the middle of loading.
    if (prop.major < 9) {
      return absl::FailedPreconditionError(absl::StrCat(
          "CUDA device ", ordinal, " (", prop.name, ") is compute capability ", prop.major, ".",
          prop.minor, "; this build's kernels need 9.0 (Hopper) or later: use --device=host"));
    }
    auto device = std::unique_ptr<CudaDevice>(new CudaDevice(ordinal, prop.name));
    for (cudaStream_t& stream : device->streams_) {
      WS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    }
    for (cudaEvent_t& event : device->events_) {
      WS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    }
    const char* sm_copies = std::getenv("WS_SM_COPIES");
    device->sm_copies_ = sm_copies == nullptr || std::strcmp(sm_copies, "0") != 0;
    return std::unique_ptr<Device>(std::move(device));
  }

  ~CudaDevice() override {
    // Nothing queued may still read the staging slots or wait on the events freed below.
    for (cudaStream_t stream : streams_) {
      if (stream != nullptr) cudaStreamSynchronize(stream);
    }
    for (cudaEvent_t event : fences_) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    for (Staging& staging : staging_) {
      for (StagingSlot& slot : staging.slots) {
        if (slot.event != nullptr) cudaEventDestroy(slot.event);
      }
      if (staging.host != nullptr) cudaFreeHost(staging.host);
    }
    for (cudaEvent_t event : markers_) cudaEventDestroy(event);
    if (anchor_ != nullptr) cudaEventDestroy(anchor_);
    for (cudaEvent_t event : events_) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    for (cudaStream_t stream : streams_) {
      if (stream != nullptr) cudaStreamDestroy(stream);
    }
  }

  std::string name() const override { return name_; }
  bool is_cuda() const override { return true; }
  absl::StatusOr<std::pair<uint64_t, uint64_t>> MemoryInfo() const override {
    size_t free_bytes = 0, total_bytes = 0;
    WS_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    return std::pair<uint64_t, uint64_t>{total_bytes, free_bytes};
  }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("Allocate(0)");
    void* ptr = nullptr;
    absl::Status status = CudaStatus(cudaMalloc(&ptr, bytes), absl::StrCat("cudaMalloc(", bytes, ")"));
    if (!status.ok()) return status;
    return ptr;
  }
  absl::Status Free(void* ptr) override { return CudaStatus(cudaFree(ptr), "cudaFree"); }

  absl::Status RegisterHost(void* ptr, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    return CudaStatus(cudaHostRegister(ptr, bytes, cudaHostRegisterDefault),
                      absl::StrCat("cudaHostRegister(", bytes, " bytes)"));
  }
  absl::Status UnregisterHost(void* ptr) override {
    return CudaStatus(cudaHostUnregister(ptr), "cudaHostUnregister");
  }

  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, Stream stream) override {
    if (bytes == 0) return absl::OkStatus();
    // Small uploads on the compute and write-back streams go through the SMs: the copy
    // engine runs host-to-device copies in the order they were queued whatever their stream,
    // so a query or a KV row would otherwise wait behind a whole ping-pong round (~15 ms).
    if (sm_copies_ && bytes <= kSmCopyMaxBytes &&
        (stream == Stream::kCompute || stream == Stream::kCopyOut)) {
      return SmCopyToDevice(dst, src, bytes, stream);
    }
    return CopyEngineToDevice(dst, src, bytes, stream);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes, Stream stream) override {
    if (bytes == 0) return absl::OkStatus();
    return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(stream)),
                      "cudaMemcpyAsync(D2H)");
  }
  absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes, Stream stream) override {
    if (bytes == 0) return absl::OkStatus();
    return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(stream)),
                      "cudaMemcpyAsync(D2D)");
  }
  bool small_uploads_wait_for_transfers() const override { return !sm_copies_; }

  // A fence id is slot + kFences * generation (mod 2^30), so that waiting on a fence whose
  // slot was recorded again since is refused instead of waiting for the wrong point.
  absl::StatusOr<int> RecordFence(Stream stream) override {
    std::lock_guard<std::mutex> lock(fence_mu_);
    const int slot = static_cast<int>(fence_count_ % kFences);
    if (fences_[slot] == nullptr) {
      WS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&fences_[slot], cudaEventDisableTiming));
    }
    WS_CUDA_RETURN_IF_ERROR(cudaEventRecord(fences_[slot], stream_of(stream)));
    const int id = static_cast<int>(fence_count_ % (uint64_t{1} << 30));
    ++fence_count_;
    return id;
  }
  absl::Status WaitFence(Stream waiter, int fence) override {
    std::lock_guard<std::mutex> lock(fence_mu_);
    const uint64_t latest = fence_count_ == 0 ? 0 : (fence_count_ - 1) % (uint64_t{1} << 30);
    const uint64_t age = (latest - static_cast<uint64_t>(fence) + (uint64_t{1} << 30)) % (uint64_t{1} << 30);
    if (fence < 0 || fence_count_ == 0 || age >= kFences) {
      return absl::InvalidArgumentError(absl::StrCat("fence ", fence, " is unknown or was reused"));
    }
    return CudaStatus(cudaStreamWaitEvent(stream_of(waiter), fences_[fence % kFences], 0),
                      "cudaStreamWaitEvent(fence)");
  }

  // The table of pieces goes through a mapped staging slot, which the kernel reads.
  absl::Status CopyPiecesOnDevice(absl::Span<const CopyPiece> pieces, Stream stream) override {
    static_assert(sizeof(CopyPiece) == sizeof(kernels::cuda::DevicePiece));
    const size_t bytes = pieces.size() * sizeof(CopyPiece);
    if (pieces.empty()) return absl::OkStatus();
    if (!sm_copies_ || bytes > kStagingSlotBytes) return Device::CopyPiecesOnDevice(pieces, stream);
    WS_ASSIGN_OR_RETURN(const bool staged,
                        ThroughStagingSlot(stream, pieces.data(), bytes,
                                           [&](const unsigned char* table) {
                                             return kernels::cuda::CopyDevicePieces(
                                                 reinterpret_cast<const kernels::cuda::DevicePiece*>(table),
                                                 static_cast<int>(pieces.size()), stream_of(stream));
                                           }));
    return staged ? absl::OkStatus() : Device::CopyPiecesOnDevice(pieces, stream);
  }
  absl::Status Fill(void* dst, uint8_t value, size_t bytes, Stream stream) override {
    if (bytes == 0) return absl::OkStatus();
    return CudaStatus(cudaMemsetAsync(dst, value, bytes, stream_of(stream)), "cudaMemsetAsync");
  }
  absl::Status StreamWait(Stream waiter, Stream signaller) override {
    cudaEvent_t event = events_[static_cast<int>(signaller)];
    WS_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, stream_of(signaller)));
    return CudaStatus(cudaStreamWaitEvent(stream_of(waiter), event, 0), "cudaStreamWaitEvent");
  }
  absl::Status Synchronize(Stream stream) override {
    return CudaStatus(cudaStreamSynchronize(stream_of(stream)), "cudaStreamSynchronize");
  }
  void* native_stream(Stream stream) const override { return stream_of(stream); }

  absl::Status ResetMarkers() override {
    if (anchor_ == nullptr) WS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&anchor_));
    WS_CUDA_RETURN_IF_ERROR(cudaEventRecord(anchor_, stream_of(Stream::kCompute)));
    WS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(anchor_));
    anchor_nanos_ = MonotonicNanos();
    used_markers_ = 0;
    return absl::OkStatus();
  }
  absl::StatusOr<int> RecordMarker(Stream stream) override {
    if (anchor_ == nullptr) return absl::FailedPreconditionError("RecordMarker before ResetMarkers");
    if (used_markers_ == markers_.size()) {
      cudaEvent_t event = nullptr;
      WS_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
      markers_.push_back(event);
    }
    WS_CUDA_RETURN_IF_ERROR(cudaEventRecord(markers_[used_markers_], stream_of(stream)));
    return static_cast<int>(used_markers_++);
  }
  absl::StatusOr<uint64_t> MarkerNanos(int marker) override {
    if (marker < 0 || static_cast<size_t>(marker) >= used_markers_) {
      return absl::InvalidArgumentError(absl::StrCat("no marker ", marker));
    }
    WS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(markers_[marker]));
    float ms = 0;
    WS_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, anchor_, markers_[marker]));
    return anchor_nanos_ + static_cast<uint64_t>(std::max(0.0f, ms) * 1e6);
  }

 private:
  // Host-to-device copies by a kernel (CopyBytes) that reads the source through the bus:
  // up to kSmCopyMaxBytes from pinned memory, kStagingSlotBytes from pageable memory.
  // Registered (pinned) sources are read where they lie, like an asynchronous copy from
  // pinned memory; pageable ones are first copied into a mapped staging slot (one of kStagingSlots per stream, reused once the stream has passed the
  // kernel that read it), so the caller may reuse them at once, like cudaMemcpyAsync's.
  static constexpr size_t kStagingSlotBytes = size_t{1} << 20;
  // Pinned sources are read where they lie, up to this size (a decode step's queries and
  // activations up to batch ~128 at DeepSeek-V2-Lite; a prefill chunk's uploads, 16 MB and
  // more, keep the copy engine's bandwidth).
  static constexpr size_t kSmCopyMaxBytes = size_t{4} << 20;
  static constexpr int kStagingSlots = 16;
  struct StagingSlot {
    cudaEvent_t event = nullptr;
    bool pending = false;
  };
  struct Staging {
    std::mutex mu;
    unsigned char* host = nullptr;
    unsigned char* device = nullptr;
    std::array<StagingSlot, kStagingSlots> slots;
    int next = 0;
  };

  absl::Status SmCopyToDevice(void* dst, const void* src, size_t bytes, Stream stream) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, src) != cudaSuccess) cudaGetLastError();
    if (attributes.type == cudaMemoryTypeHost && attributes.devicePointer != nullptr) {
      return kernels::cuda::CopyBytes(dst, attributes.devicePointer, bytes, stream_of(stream));
    }
    if (bytes > kStagingSlotBytes) {  // pageable and larger than a slot: the copy engine
      return CopyEngineToDevice(dst, src, bytes, stream);
    }
    WS_ASSIGN_OR_RETURN(const bool staged,
                        ThroughStagingSlot(stream, src, bytes, [&](const unsigned char* copy) {
                          return kernels::cuda::CopyBytes(dst, copy, bytes, stream_of(stream));
                        }));
    return staged ? absl::OkStatus() : CopyEngineToDevice(dst, src, bytes, stream);
  }

  absl::Status CopyEngineToDevice(void* dst, const void* src, size_t bytes, Stream stream) {
    return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_of(stream)),
                      "cudaMemcpyAsync(H2D)");
  }

  // Copies `bytes` of `data` into the stream's next staging slot and queues `launch`(the
  // slot's device view), a kernel that reads it; the slot is reused once the stream has
  // passed that kernel. False, with nothing queued, when there is no mapped staging memory.
  template <typename Launch>
  absl::StatusOr<bool> ThroughStagingSlot(Stream stream, const void* data, size_t bytes,
                                          Launch launch) {
    Staging& staging = staging_[static_cast<int>(stream)];
    std::lock_guard<std::mutex> lock(staging.mu);
    WS_ASSIGN_OR_RETURN(const int index, NextSlot(staging));
    if (index < 0) return false;
    std::memcpy(staging.host + index * kStagingSlotBytes, data, bytes);
    WS_RETURN_IF_ERROR(launch(staging.device + index * kStagingSlotBytes));
    WS_RETURN_IF_ERROR(MarkSlotRead(staging, index, stream));
    return true;
  }

  // After the kernel that reads slot `index` is queued: the slot is free again once the
  // stream passes this point. If that point cannot be recorded, wait for the stream now, so
  // that the slot is never reused under a kernel still reading it.
  absl::Status MarkSlotRead(Staging& staging, int index, Stream stream) {
    absl::Status status = CudaStatus(cudaEventRecord(staging.slots[index].event, stream_of(stream)),
                                     "cudaEventRecord(staging slot)");
    if (!status.ok()) {
      cudaStreamSynchronize(stream_of(stream));
      staging.slots[index].pending = false;
      return status;
    }
    staging.slots[index].pending = true;
    return absl::OkStatus();
  }

  // The next staging slot of `staging` (its lock held), once the kernel that last read it
  // has run; -1 when there is no mapped staging memory (then the copy engine does it).
  absl::StatusOr<int> NextSlot(Staging& staging) {
    if (staging.host == nullptr) {
      void* host = nullptr;
      void* device = nullptr;
      if (cudaHostAlloc(&host, kStagingSlotBytes * kStagingSlots, cudaHostAllocMapped) !=
              cudaSuccess ||
          cudaHostGetDevicePointer(&device, host, 0) != cudaSuccess) {
        cudaGetLastError();
        if (host != nullptr) cudaFreeHost(host);
        WS_LOG(WARNING) << "no mapped staging memory: small uploads go through the copy engine";
        sm_copies_ = false;
        return -1;
      }
      for (StagingSlot& slot : staging.slots) {
        if (cudaEventCreateWithFlags(&slot.event, cudaEventDisableTiming) == cudaSuccess) continue;
        cudaGetLastError();
        for (StagingSlot& created : staging.slots) {
          if (created.event != nullptr) cudaEventDestroy(created.event);
          created.event = nullptr;
        }
        cudaFreeHost(host);
        WS_LOG(WARNING) << "no events for the staging slots: small uploads go through the copy "
                           "engine";
        sm_copies_ = false;
        return -1;
      }
      // Published last: a staging with a host buffer has all its events.
      staging.device = static_cast<unsigned char*>(device);
      staging.host = static_cast<unsigned char*>(host);
    }
    const int index = staging.next;
    staging.next = (staging.next + 1) % kStagingSlots;
    StagingSlot& slot = staging.slots[index];
    if (slot.pending) WS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(slot.event));
    slot.pending = false;
    return index;
  }

  CudaDevice(int ordinal, std::string name) : ordinal_(ordinal), name_(std::move(name)) {}
  cudaStream_t stream_of(Stream stream) const { return streams_[static_cast<int>(stream)]; }

  int ordinal_;
  std::string name_;
  std::array<cudaStream_t, kNumStreams> streams_{};
  std::array<cudaEvent_t, kNumStreams> events_{};
  // Timing markers (ResetMarkers / RecordMarker / MarkerNanos).
  cudaEvent_t anchor_ = nullptr;
  uint64_t anchor_nanos_ = 0;
  std::vector<cudaEvent_t> markers_;
  size_t used_markers_ = 0;
  // Fences (RecordFence / WaitFence): a ring of events.
  static constexpr int kFences = 64;
  std::mutex fence_mu_;
  std::array<cudaEvent_t, kFences> fences_{};
  uint64_t fence_count_ = 0;  // fences recorded so far
  // Small uploads by the SMs (SmCopyToDevice); WS_SM_COPIES=0 turns them off.
  std::atomic<bool> sm_copies_{true};
  std::array<Staging, kNumStreams> staging_;
};

}  // namespace

bool BuiltWithCuda() { return true; }

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int ordinal) {
  return CudaDevice::Create(ordinal);
}

}  // namespace writescope::gpu
