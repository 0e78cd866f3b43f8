// A single-producer/single-consumer message channel in shared memory between two
// processes: the per-layer data plane between gpu_worker and cpu_worker.
//
// Messages are variable-length byte strings in a ring. The producer reserves space,
// writes in place and commits; the consumer peeks at the oldest message in place and
// releases it, so large tensors are written once and read once. An idle side spins
// briefly (a few microseconds, for latency) and then sleeps on a futex doorbell in
// the shared memory, so an idle channel burns no core.
#ifndef WRITESCOPE_COMMON_SHM_CHANNEL_H_
#define WRITESCOPE_COMMON_SHM_CHANNEL_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace writescope {

struct ShmChannelHeader;

class ShmChannel {
 public:
  // Bytes of `memory` used by the channel's own bookkeeping.
  static constexpr size_t kHeaderBytes = 256;

  // Formats `memory` as an empty channel (call once, in one process). The ring
  // capacity is memory.size() - kHeaderBytes rounded down to 64 bytes.
  static absl::StatusOr<ShmChannel> Create(absl::Span<std::byte> memory);
  // Attaches to a channel that Create formatted, possibly in another process.
  static absl::StatusOr<ShmChannel> Attach(absl::Span<std::byte> memory);

  ShmChannel() = default;

  // The largest message that Send and Reserve accept.
  size_t max_message_bytes() const;

  // Producer side. Reserve waits up to `timeout` for `bytes` of space and returns the
  // space to write; Commit publishes it. One reservation at a time.
  absl::StatusOr<absl::Span<std::byte>> Reserve(size_t bytes, absl::Duration timeout);
  void Commit();
  // Reserve + copy + Commit.
  absl::Status Send(absl::Span<const std::byte> message, absl::Duration timeout);

  // Consumer side. Peek waits up to `timeout` for a message and returns it in place;
  // Release frees it. Receive copies it out and releases it.
  absl::StatusOr<absl::Span<const std::byte>> Peek(absl::Duration timeout);
  // Whether a message waits, so that Peek returns at once (consumer side; never blocks).
  bool Pending() const;
  void Release();
  absl::StatusOr<size_t> Receive(absl::Span<std::byte> out, absl::Duration timeout);

  // Marks the channel closed: waiting peers wake up with CANCELLED.
  void Close();
  bool closed() const;

 private:
  explicit ShmChannel(ShmChannelHeader* header, std::byte* ring)
      : header_(header), ring_(ring) {}

  ShmChannelHeader* header_ = nullptr;
  std::byte* ring_ = nullptr;
  // Producer-local reservation and consumer-local peek state.
  uint64_t reserved_bytes_ = 0;
  uint64_t peeked_bytes_ = 0;
};

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_SHM_CHANNEL_H_
