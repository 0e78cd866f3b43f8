#include "common/shm_channel.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/process.h"

namespace writescope {

// Counters are monotonically increasing byte positions; the ring index is
// position % capacity. Each message is an 8-byte length, then the payload padded to
// 8 bytes. A length of kWrapMarker tells the consumer to skip to the ring's start.
struct ShmChannelHeader {
  uint64_t magic;
  uint64_t capacity;
  alignas(64) std::atomic<uint64_t> head;  // producer: bytes committed
  alignas(64) std::atomic<uint64_t> tail;  // consumer: bytes released
  alignas(64) std::atomic<uint32_t> data_doorbell;   // bumped on every commit
  std::atomic<uint32_t> consumer_sleeping;
  std::atomic<uint32_t> space_doorbell;  // bumped on every release
  std::atomic<uint32_t> producer_sleeping;
  std::atomic<uint32_t> closed;
};
static_assert(sizeof(ShmChannelHeader) <= ShmChannel::kHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

namespace {

constexpr uint64_t kChannelMagic = 0x4c454e4e41484357ULL;  // "WCHANNEL"
constexpr uint64_t kWrapMarker = ~uint64_t{0};
constexpr uint64_t kLengthBytes = 8;
// How long a waiting side polls before it sleeps on the doorbell.
constexpr auto kSpinTime = std::chrono::microseconds(30);
// A PAUSE costs ~10-150 cycles depending on the CPU; looking at the ring only every 64
// of them added ~1.4 us to a round trip (1.75 -> 0.40 us for 64 B on the dev machine's
// EPYC). Look every few pauses; read the clock only every 16 looks.
constexpr int kPausesPerPoll = 4;
constexpr int kPollsPerClockRead = 16;

uint64_t Padded(uint64_t bytes) { return (bytes + 7) & ~uint64_t{7}; }

// Futexes on shared (not private) mappings, so they work across processes.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, absl::Duration timeout) {
  struct timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Waits until `ready()` holds, the channel closes, or the deadline passes. Spins
// for kSpinTime, then sleeps on `doorbell` with `sleeping` raised so the peer knows
// to ring it.
template <typename Ready>
absl::Status WaitFor(ShmChannelHeader* header, std::atomic<uint32_t>* doorbell,
                     std::atomic<uint32_t>* sleeping, absl::Duration timeout, Ready ready) {
  if (ready()) return absl::OkStatus();
  const auto start = std::chrono::steady_clock::now();
  const auto spin_until = start + std::min<std::chrono::nanoseconds>(kSpinTime, absl::ToChronoNanoseconds(timeout));
  while (std::chrono::steady_clock::now() < spin_until) {
    for (int poll = 0; poll < kPollsPerClockRead; ++poll) {
      for (int i = 0; i < kPausesPerPoll; ++i) CpuRelax();
      if (ready()) return absl::OkStatus();
    }
  }
  const absl::Time deadline = absl::Now() + timeout - absl::FromChrono(kSpinTime);  // spin counted
  while (true) {
    if (header->closed.load(std::memory_order_acquire)) {
      return absl::CancelledError("shared-memory channel closed");
    }
    const uint32_t seen = doorbell->load(std::memory_order_seq_cst);
    sleeping->store(1, std::memory_order_seq_cst);
    if (ready()) {
      sleeping->store(0, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      sleeping->store(0, std::memory_order_relaxed);
      return absl::DeadlineExceededError("timed out waiting on shared-memory channel");
    }
    // Sleep in slices so that a closed flag is noticed (a dead peer shows as the caller's
    // timeout, or as the coordinator closing the channels).
    FutexWait(doorbell, seen, std::min(left, absl::Milliseconds(100)));
    sleeping->store(0, std::memory_order_relaxed);
    if (ready()) return absl::OkStatus();
  }
}

void Ring(std::atomic<uint32_t>* doorbell, std::atomic<uint32_t>* sleeping) {
  doorbell->fetch_add(1, std::memory_order_seq_cst);
  if (sleeping->load(std::memory_order_seq_cst)) FutexWakeAll(doorbell);
}

}  // namespace

absl::StatusOr<ShmChannel> ShmChannel::Create(absl::Span<std::byte> memory) {
  if (reinterpret_cast<uintptr_t>(memory.data()) % 64 != 0) {
    return absl::InvalidArgumentError("channel memory must be 64-byte aligned");
  }
  if (memory.size() < kHeaderBytes + 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel memory of ", memory.size(), " bytes is too small"));
  }
  auto* header = new (memory.data()) ShmChannelHeader();
  header->capacity = (memory.size() - kHeaderBytes) & ~uint64_t{63};
  header->head.store(0);
  header->tail.store(0);
  header->data_doorbell.store(0);
  header->consumer_sleeping.store(0);
  header->space_doorbell.store(0);
  header->producer_sleeping.store(0);
  header->closed.store(0);
  // Published last: an Attach that reads the magic (acquire) sees the fields above.
  std::atomic_ref<uint64_t>(header->magic).store(kChannelMagic, std::memory_order_release);
  return ShmChannel(header, memory.data() + kHeaderBytes);
}

absl::StatusOr<ShmChannel> ShmChannel::Attach(absl::Span<std::byte> memory) {
  if (memory.size() < kHeaderBytes + 128 || reinterpret_cast<uintptr_t>(memory.data()) % 64 != 0) {
    return absl::InvalidArgumentError("channel memory is too small or misaligned");
  }
  auto* header = reinterpret_cast<ShmChannelHeader*>(memory.data());
  if (std::atomic_ref<uint64_t>(header->magic).load(std::memory_order_acquire) != kChannelMagic) {
    return absl::FailedPreconditionError("no channel has been created in this memory");
  }
  // The header is another process's: checked as Create makes it before anything is
  // divided by it or indexed with it.
  const uint64_t capacity = header->capacity;
  if (capacity > memory.size() - kHeaderBytes) {
    return absl::FailedPreconditionError("channel capacity exceeds its memory");
  }
  if (capacity < 128 || capacity % 64 != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("corrupt channel: capacity ", capacity, " (at least 128, a multiple of 64)"));
  }
  // The channel may be live (the coordinator attaches to close it while the workers run):
  // the tail is read first, so the head read after it is never behind it, and a ring that
  // moved between the two reads (the pair then spans more than its capacity) is read again.
  uint64_t head = 0, tail = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    tail = header->tail.load(std::memory_order_acquire);
    head = header->head.load(std::memory_order_acquire);
    if (tail <= head && head - tail <= capacity) break;
  }
  if (head % kLengthBytes != 0 || tail % kLengthBytes != 0 || tail > head ||
      head - tail > capacity) {
    return absl::FailedPreconditionError(absl::StrCat("corrupt channel: head ", head, ", tail ",
                                                      tail, ", capacity ", capacity));
  }
  return ShmChannel(header, memory.data() + kHeaderBytes);
}

size_t ShmChannel::max_message_bytes() const {
  // A message may need the wrap marker plus its own padded size; half the ring
  // always fits after at most one wrap.
  return header_ == nullptr ? 0 : header_->capacity / 2 - kLengthBytes;
}

absl::StatusOr<absl::Span<std::byte>> ShmChannel::Reserve(size_t bytes, absl::Duration timeout) {
  if (header_ == nullptr) return absl::FailedPreconditionError("channel not attached");
  if (bytes > max_message_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "message of ", bytes, " bytes exceeds the channel's limit of ", max_message_bytes()));
  }
  const uint64_t capacity = header_->capacity;
  const uint64_t head = header_->head.load(std::memory_order_relaxed);
  const uint64_t offset = head % capacity;
  const uint64_t needed = kLengthBytes + Padded(bytes);
  // If the message does not fit before the ring's end, it starts at the beginning
  // and the bytes up to the end are skipped.
  const uint64_t skip = (capacity - offset < needed) ? capacity - offset : 0;
  const uint64_t total = skip + needed;
  absl::Status status = WaitFor(header_, &header_->space_doorbell, &header_->producer_sleeping,
                                timeout, [&] {
                                  const uint64_t tail = header_->tail.load(std::memory_order_acquire);
                                  return capacity - (head - tail) >= total;
                                });
  if (!status.ok()) return status;
  if (skip > 0) {
    // At least 8 bytes remain (everything is 8-aligned), enough for the marker.
    std::memcpy(ring_ + offset, &kWrapMarker, kLengthBytes);
  }
  const uint64_t start = (head + skip) % capacity;
  const uint64_t length = bytes;
  std::memcpy(ring_ + start, &length, kLengthBytes);
  reserved_bytes_ = total;
  return absl::Span<std::byte>(ring_ + start + kLengthBytes, bytes);
}

void ShmChannel::Commit() {
  const uint64_t head = header_->head.load(std::memory_order_relaxed);
  header_->head.store(head + reserved_bytes_, std::memory_order_release);
  reserved_bytes_ = 0;
  Ring(&header_->data_doorbell, &header_->consumer_sleeping);
}

absl::Status ShmChannel::Send(absl::Span<const std::byte> message, absl::Duration timeout) {
  absl::StatusOr<absl::Span<std::byte>> space = Reserve(message.size(), timeout);
  if (!space.ok()) return space.status();
  if (!message.empty()) std::memcpy(space->data(), message.data(), message.size());
  Commit();
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const std::byte>> ShmChannel::Peek(absl::Duration timeout) {
  if (header_ == nullptr) return absl::FailedPreconditionError("channel not attached");
  const uint64_t capacity = header_->capacity;
  uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  absl::Status status = WaitFor(header_, &header_->data_doorbell, &header_->consumer_sleeping,
                                timeout, [&] {
                                  return header_->head.load(std::memory_order_acquire) != tail;
                                });
  if (!status.ok()) return status;
  // What the producer committed bounds what may be read: a length that points past it, or
  // past the ring's end, is a corrupt channel (DATA_LOSS, nothing released), not a read
  // beyond the mapping.
  const uint64_t committed = header_->head.load(std::memory_order_acquire) - tail;
  uint64_t offset = tail % capacity;
  uint64_t length;
  std::memcpy(&length, ring_ + offset, kLengthBytes);
  uint64_t consumed = 0;
  if (length == kWrapMarker && offset != 0) {
    consumed = capacity - offset;
    offset = 0;
    std::memcpy(&length, ring_, kLengthBytes);
  }
  if (length > max_message_bytes() ||
      offset + kLengthBytes + Padded(length) > capacity ||
      consumed + kLengthBytes + Padded(length) > committed) {
    return absl::DataLossError(absl::StrCat("corrupt channel message: length ", length,
                                            " at offset ", offset, " with ", committed,
                                            " bytes committed"));
  }
  peeked_bytes_ = consumed + kLengthBytes + Padded(length);
  return absl::Span<const std::byte>(ring_ + offset + kLengthBytes, length);
}

bool ShmChannel::Pending() const {
  return header_ != nullptr && header_->head.load(std::memory_order_acquire) !=
                                   header_->tail.load(std::memory_order_relaxed);
}

void ShmChannel::Release() {
  const uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  header_->tail.store(tail + peeked_bytes_, std::memory_order_release);
  peeked_bytes_ = 0;
  Ring(&header_->space_doorbell, &header_->producer_sleeping);
}

absl::StatusOr<size_t> ShmChannel::Receive(absl::Span<std::byte> out, absl::Duration timeout) {
  absl::StatusOr<absl::Span<const std::byte>> message = Peek(timeout);
  if (!message.ok()) return message.status();
  if (message->size() > out.size()) {
    // Leave the message in place: the caller can retry with a larger buffer.
    peeked_bytes_ = 0;
    return absl::ResourceExhaustedError(absl::StrCat(
        "message of ", message->size(), " bytes does not fit a buffer of ", out.size()));
  }
  if (!message->empty()) std::memcpy(out.data(), message->data(), message->size());
  const size_t size = message->size();
  Release();
  return size;
}

void ShmChannel::Close() {
  if (header_ == nullptr) return;
  header_->closed.store(1, std::memory_order_release);
  Ring(&header_->data_doorbell, &header_->consumer_sleeping);
  Ring(&header_->space_doorbell, &header_->producer_sleeping);
  FutexWakeAll(&header_->data_doorbell);
  FutexWakeAll(&header_->space_doorbell);
}

bool ShmChannel::closed() const {
  return header_ != nullptr && header_->closed.load(std::memory_order_acquire) != 0;
}

}  // namespace writescope
