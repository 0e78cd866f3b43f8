// A test device that behaves like a GPU with independent streams: copies are queued
// per stream and run only when some stream is synchronized, in a random order that
// respects each stream's FIFO order and the StreamWait edges. Code that forgets a
// StreamWait reads stale or overwritten bytes here, where the host device (which
// copies at once) would hide it. Memory is host memory; Free is immediate, so callers
// synchronize before freeing buffers with queued work.
#ifndef WRITESCOPE_TESTS_GPU_WORKER_DEFERRED_DEVICE_H_
#define WRITESCOPE_TESTS_GPU_WORKER_DEFERRED_DEVICE_H_

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <vector>

#include "common/log.h"
#include "gpu_worker/device.h"

namespace writescope::testing {

class DeferredDevice final : public gpu::Device {
 public:
  explicit DeferredDevice(uint64_t seed) : rng_(seed) {}
  ~DeferredDevice() override { (void)SynchronizeAll(); }

  std::string name() const override { return "deferred-host"; }
  bool is_cuda() const override { return false; }
  absl::StatusOr<std::pair<uint64_t, uint64_t>> MemoryInfo() const override {
    return std::pair<uint64_t, uint64_t>{0, 0};
  }
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("Allocate(0)");
    return std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  }
  absl::Status Free(void* ptr) override {
    std::free(ptr);
    return absl::OkStatus();
  }
  absl::Status RegisterHost(void*, size_t) override { return absl::OkStatus(); }
  absl::Status UnregisterHost(void*) override { return absl::OkStatus(); }

  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, gpu::Stream stream) override {
    if (copies_to_device_left_ == 0) return absl::InternalError("deferred device: copy failed");
    if (copies_to_device_left_ > 0) --copies_to_device_left_;
    return Copy(dst, src, bytes, stream);
  }
  // Uploads (CopyToDevice) fail, queueing nothing, once `n` more have been queued; -1: never.
  void FailCopiesToDeviceAfter(int64_t n) { copies_to_device_left_ = n; }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes, gpu::Stream stream) override {
    return Copy(dst, src, bytes, stream);
  }
  absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes, gpu::Stream stream) override {
    return Copy(dst, src, bytes, stream);
  }
  absl::Status Fill(void* dst, uint8_t value, size_t bytes, gpu::Stream stream) override {
    Enqueue(stream, {.fn = [=] { std::memset(dst, value, bytes); }});
    return absl::OkStatus();
  }
  absl::Status StreamWait(gpu::Stream waiter, gpu::Stream signaller) override {
    const int s = static_cast<int>(signaller);
    Enqueue(waiter, {.fn = nullptr, .wait_stream = s, .wait_count = enqueued_[s]});
    return absl::OkStatus();
  }
  absl::StatusOr<int> RecordFence(gpu::Stream stream) override {
    const int s = static_cast<int>(stream);
    fences_.push_back({s, enqueued_[s]});
    return static_cast<int>(fences_.size() - 1);
  }
  absl::Status WaitFence(gpu::Stream waiter, int fence) override {
    if (fence < 0 || static_cast<size_t>(fence) >= fences_.size()) {
      return absl::InvalidArgumentError("no such fence");
    }
    Enqueue(waiter, {.fn = nullptr, .wait_stream = fences_[fence].first,
                     .wait_count = fences_[fence].second});
    return absl::OkStatus();
  }
  absl::Status Synchronize(gpu::Stream stream) override {
    const int target = static_cast<int>(stream);
    while (!queues_[target].empty()) RunOne();
    return absl::OkStatus();
  }
  void* native_stream(gpu::Stream) const override { return nullptr; }

  // Markers: passed when the queued work has run (here: at the next synchronization).
  absl::Status ResetMarkers() override {
    markers_ = 0;
    return absl::OkStatus();
  }
  absl::StatusOr<int> RecordMarker(gpu::Stream) override { return markers_++; }
  absl::StatusOr<uint64_t> MarkerNanos(int marker) override {
    if (marker < 0 || marker >= markers_) return absl::InvalidArgumentError("no such marker");
    if (absl::Status status = SynchronizeAll(); !status.ok()) return status;
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::steady_clock::now().time_since_epoch())
            .count());
  }

  // A host function run in stream order, standing in for a kernel (e.g. attention
  // reading a ping-pong buffer).
  void EnqueueHostFn(gpu::Stream stream, std::function<void()> fn) {
    Enqueue(stream, {.fn = std::move(fn)});
  }

 private:
  struct Op {
    std::function<void()> fn;  // empty for a wait
    int wait_stream = -1;
    uint64_t wait_count = 0;  // runnable once that many ops of wait_stream have run
  };

  absl::Status Copy(void* dst, const void* src, size_t bytes, gpu::Stream stream) {
    if (bytes > 0) Enqueue(stream, {.fn = [=] { std::memmove(dst, src, bytes); }});
    return absl::OkStatus();
  }
  void Enqueue(gpu::Stream stream, Op op) {
    const int s = static_cast<int>(stream);
    queues_[s].push_back(std::move(op));
    ++enqueued_[s];
  }
  bool Runnable(int s) const {
    if (queues_[s].empty()) return false;
    const Op& head = queues_[s].front();
    return head.wait_stream < 0 || executed_[head.wait_stream] >= head.wait_count;
  }
  // Runs the head of a random runnable stream.
  void RunOne() {
    std::vector<int> runnable;
    for (int s = 0; s < gpu::kNumStreams; ++s) {
      if (Runnable(s)) runnable.push_back(s);
    }
    WS_CHECK(!runnable.empty()) << "deferred device: streams wait on each other (deadlock)";
    const int s = runnable[rng_() % runnable.size()];
    Op op = std::move(queues_[s].front());
    queues_[s].pop_front();
    if (op.fn) op.fn();
    ++executed_[s];
  }

  std::mt19937_64 rng_;
  std::array<std::deque<Op>, gpu::kNumStreams> queues_;
  std::array<uint64_t, gpu::kNumStreams> enqueued_{};
  std::array<uint64_t, gpu::kNumStreams> executed_{};
  int markers_ = 0;
  int64_t copies_to_device_left_ = -1;
  std::vector<std::pair<int, uint64_t>> fences_;  // stream, ops queued on it before
};

}  // namespace writescope::testing

#endif  // WRITESCOPE_TESTS_GPU_WORKER_DEFERRED_DEVICE_H_
