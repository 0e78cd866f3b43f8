// The gpu_worker's device interface: memory, host pinning, copies and streams.
//
// Two implementations of one contract: CudaDevice (gpu_worker/cuda/, built when nvcc
// is found) and HostDevice (plain host memory and memcpy, so the whole trio runs and
// is tested on machines without a GPU). Nothing outside gpu_worker/cuda and
// kernels/cuda includes a CUDA header.
#ifndef WRITESCOPE_GPU_WORKER_DEVICE_H_
#define WRITESCOPE_GPU_WORKER_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace writescope::gpu {

// Work queues of the device. Copies into the ping-pong buffers run on kCopyIn so they
// overlap attention on kCompute; D-window flushes (device to host) run on kCopyOut; the
// routed experts' weights stream on kWeightsIn (DeviceExperts), so that a layer's weights
// never queue behind, or hold up, the KV rounds.
enum class Stream { kCompute = 0, kCopyIn = 1, kCopyOut = 2, kWeightsIn = 3 };
inline constexpr int kNumStreams = 4;

// One piece of a batched device-to-device copy (Device::CopyPiecesOnDevice).
struct CopyPiece {
  void* dst;
  const void* src;
  uint64_t bytes;
};

class Device {
 public:
  virtual ~Device() = default;

  // "host" or the GPU's name, e.g. "NVIDIA H200".
  virtual std::string name() const = 0;
  virtual bool is_cuda() const = 0;
  // Device memory in bytes (total, free) as the device reports it.
  virtual absl::StatusOr<std::pair<uint64_t, uint64_t>> MemoryInfo() const = 0;

  // Device memory. Allocate never returns null for bytes > 0.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual absl::Status Free(void* device_ptr) = 0;

  // Pins host memory (e.g. the arena's GPU-transfer region) for fast DMA.
  virtual absl::Status RegisterHost(void* host_ptr, size_t bytes) = 0;
  virtual absl::Status UnregisterHost(void* host_ptr) = 0;

  // Asynchronous copies on `stream`; the source must stay valid until the stream
  // is synchronized.
  virtual absl::Status CopyToDevice(void* device_dst, const void* host_src, size_t bytes,
                                    Stream stream) = 0;
  virtual absl::Status CopyToHost(void* host_dst, const void* device_src, size_t bytes,
                                  Stream stream) = 0;
  virtual absl::Status CopyOnDevice(void* device_dst, const void* device_src, size_t bytes,
                                    Stream stream) = 0;
  virtual absl::Status Fill(void* device_dst, uint8_t value, size_t bytes, Stream stream) = 0;
  // Every piece copied on the device, in no particular order among them (they must not
  // overlap); `pieces` may be reused on return. The default is one CopyOnDevice per piece;
  // the CUDA device does them all in one kernel.
  virtual absl::Status CopyPiecesOnDevice(absl::Span<const CopyPiece> pieces, Stream stream);
  // A fence: the point `stream` has reached in its queue now. WaitFence makes `waiter`'s
  // later work wait for what was queued on that stream before the fence (StreamWait is
  // "before now"). Fence ids are reused after a while: wait on a fence soon after recording
  // it (within 64 fences on the CUDA device). The default waits for the whole stream at the
  // time of WaitFence, which is correct but waits longer.
  virtual absl::StatusOr<int> RecordFence(Stream stream) { return static_cast<int>(stream); }
  virtual absl::Status WaitFence(Stream waiter, int fence) {
    return StreamWait(waiter, static_cast<Stream>(fence));
  }
  // Whether a small CopyToDevice on kCompute waits for the host-to-device copies queued
  // before it on other streams (one copy engine, in queue order). The CUDA device moves
  // small uploads through the SMs instead (unless WS_SM_COPIES=0); the host device copies
  // at once.
  virtual bool small_uploads_wait_for_transfers() const { return false; }

  // Orders `waiter` after all work queued so far on `signaller`.
  virtual absl::Status StreamWait(Stream waiter, Stream signaller) = 0;
  virtual absl::Status Synchronize(Stream stream) = 0;
  absl::Status SynchronizeAll();

  // The native stream handle (cudaStream_t for CUDA, nullptr for host) for kernel
  // launchers in kernels/cuda.
  virtual void* native_stream(Stream stream) const = 0;

  // Timing of queued work on the CLOCK_MONOTONIC timeline (the profile's clock). A marker
  // recorded on `stream` is passed once the work queued on it before the marker has run;
  // MarkerNanos waits for that and returns when it happened (host device: when it was
  // recorded, copies being synchronous; CUDA: the event's time since an anchor event that
  // ResetMarkers synchronized with the host clock, to within the synchronization latency,
  // microseconds). ResetMarkers forgets all markers (call it when none is still to be read);
  // its anchor is taken on the compute stream, which it waits for.
  virtual absl::Status ResetMarkers() = 0;
  virtual absl::StatusOr<int> RecordMarker(Stream stream) = 0;
  virtual absl::StatusOr<uint64_t> MarkerNanos(int marker) = 0;
};

// Plain host memory; copies are memcpy and complete immediately.
std::unique_ptr<Device> CreateHostDevice();

// The CUDA device `ordinal`. UNAVAILABLE when the build has no CUDA or the machine
// has no usable GPU (no driver, no device).
absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int ordinal);

// Whether this build contains the CUDA device.
bool BuiltWithCuda();

// --device=auto|cuda|host: auto takes CUDA when it works, else host.
absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const std::string& kind);

// Device memory owned for the lifetime of the object.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Allocate(Device* device, size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_DEVICE_H_
