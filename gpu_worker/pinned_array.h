// Host arrays the device copies at the DMA rate: registered with a CUDA device (pinned),
// reused across layers and steps. A long prefill chunk's activations cross PCIe several
// times per layer (into and out of the matrix products and attention), and pageable copies
// run at a sixth of the pinned rate on the GPU machine (TOOLCHAIN.md: 8.4 vs 55 GB/s).
//
//   PinnedArray<float> h(device);
//   h.Resize(tokens * hidden);          // contents unspecified: every user overwrites
//   ops->InputNorm(layer, x, tokens, h.data());
//
// On the host device, or when the device refuses to register (memory limits: logged at
// each growth), it is plain host memory and copies are memcpy / pageable. Not thread-safe.
#ifndef WRITESCOPE_GPU_WORKER_PINNED_ARRAY_H_
#define WRITESCOPE_GPU_WORKER_PINNED_ARRAY_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>

#include "absl/types/span.h"
#include "common/log.h"
#include "gpu_worker/device.h"

namespace writescope::gpu {

template <typename T>
class PinnedArray {
 public:
  explicit PinnedArray(Device* device = nullptr) : device_(device) {}
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  ~PinnedArray() { Release(); }

  // `n` elements; the contents are unspecified when the capacity grows (kept otherwise).
  void Resize(int64_t n) {
    const size_t want = static_cast<size_t>(n);
    if (want > capacity_) Grow(want + want / 2);
    size_ = want;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  absl::Span<T> span() { return absl::MakeSpan(data_, size_); }
  absl::Span<const T> span() const { return absl::MakeConstSpan(data_, size_); }
  bool pinned() const { return pinned_; }

  friend void swap(PinnedArray& a, PinnedArray& b) noexcept {
    std::swap(a.device_, b.device_);
    std::swap(a.data_, b.data_);
    std::swap(a.size_, b.size_);
    std::swap(a.capacity_, b.capacity_);
    std::swap(a.pinned_, b.pinned_);
  }

 private:
  static constexpr size_t kPage = 4096;

  void Grow(size_t capacity) {
    Release();
    const size_t bytes = (capacity * sizeof(T) + kPage - 1) / kPage * kPage;
    data_ = static_cast<T*>(std::aligned_alloc(kPage, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    capacity_ = bytes / sizeof(T);
    if (device_ != nullptr && device_->is_cuda()) {
      absl::Status status = device_->RegisterHost(data_, bytes);
      pinned_ = status.ok();
      if (!pinned_) {
        WS_LOG(WARNING) << "a " << bytes << "-byte step buffer stays pageable (" << status
                        << "): its copies are slower";
      }
    }
  }

  void Release() {
    if (data_ == nullptr) return;
    if (pinned_) {
      absl::Status status = device_->UnregisterHost(data_);
      if (!status.ok()) WS_LOG(WARNING) << "unpinning a step buffer: " << status;
    }
    std::free(data_);
    data_ = nullptr;
    size_ = capacity_ = 0;
    pinned_ = false;
  }

  Device* device_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
  bool pinned_ = false;
};

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_PINNED_ARRAY_H_
