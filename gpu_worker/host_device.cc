// The host implementation of the device contract: device memory is host memory.
#include <cstdlib>
#include <cstring>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process.h"
#include "gpu_worker/device.h"

namespace writescope::gpu {
namespace {

class HostDevice final : public Device {
 public:
  std::string name() const override { return "host"; }
  bool is_cuda() const override { return false; }
  absl::StatusOr<std::pair<uint64_t, uint64_t>> MemoryInfo() const override {
    return std::pair<uint64_t, uint64_t>{0, 0};
  }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("Allocate(0)");
    // 256-byte alignment matches what cudaMalloc guarantees.
    void* ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (ptr == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("host device: cannot allocate ", bytes, " bytes"));
    }
    return ptr;
  }
  absl::Status Free(void* device_ptr) override {
    std::free(device_ptr);
    return absl::OkStatus();
  }
  absl::Status RegisterHost(void*, size_t) override { return absl::OkStatus(); }
  absl::Status UnregisterHost(void*) override { return absl::OkStatus(); }

  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, Stream) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes, Stream) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes, Stream) override {
    if (bytes > 0) std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Fill(void* dst, uint8_t value, size_t bytes, Stream) override {
    if (bytes > 0) std::memset(dst, value, bytes);
    return absl::OkStatus();
  }
  absl::Status StreamWait(Stream, Stream) override { return absl::OkStatus(); }
  absl::Status Synchronize(Stream) override { return absl::OkStatus(); }
  void* native_stream(Stream) const override { return nullptr; }

  absl::Status ResetMarkers() override {
    markers_.clear();
    return absl::OkStatus();
  }
  absl::StatusOr<int> RecordMarker(Stream) override {
    markers_.push_back(MonotonicNanos());
    return static_cast<int>(markers_.size()) - 1;
  }
  absl::StatusOr<uint64_t> MarkerNanos(int marker) override {
    if (marker < 0 || marker >= static_cast<int>(markers_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no marker ", marker));
    }
    return markers_[marker];
  }

 private:
  std::vector<uint64_t> markers_;
};

}  // namespace

std::unique_ptr<Device> CreateHostDevice() { return std::make_unique<HostDevice>(); }

}  // namespace writescope::gpu
