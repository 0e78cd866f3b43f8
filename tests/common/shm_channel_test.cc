#include "common/shm_channel.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/common/test_util.h"

namespace writescope {
namespace {

// Anonymous shared memory survives fork, which is all a channel needs.
class SharedBuffer {
 public:
  explicit SharedBuffer(size_t bytes) : bytes_(bytes) {
    data_ = static_cast<std::byte*>(
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  }
  ~SharedBuffer() { munmap(data_, bytes_); }
  absl::Span<std::byte> span() { return {data_, bytes_}; }

 private:
  size_t bytes_;
  std::byte* data_;
};

std::vector<std::byte> Pattern(size_t bytes, uint32_t seed) {
  std::vector<std::byte> out(bytes);
  std::mt19937 rng(seed);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

TEST(ShmChannelTest, SendThenReceiveInOrderIncludingEmptyMessages) {
  SharedBuffer buffer(64 << 10);
  auto channel = ShmChannel::Create(buffer.span());
  WS_ASSERT_OK(channel.status());
  for (size_t size : {0ul, 1ul, 7ul, 8ul, 9ul, 1000ul}) {
    WS_ASSERT_OK(channel->Send(Pattern(size, size), absl::Seconds(1)));
  }
  for (size_t size : {0ul, 1ul, 7ul, 8ul, 9ul, 1000ul}) {
    std::vector<std::byte> out(2000);
    auto received = channel->Receive(absl::MakeSpan(out), absl::Seconds(1));
    WS_ASSERT_OK(received.status());
    ASSERT_EQ(*received, size);
    out.resize(size);
    EXPECT_EQ(out, Pattern(size, size));
  }
}

// Pending says whether Peek would return at once: not before a message is committed, not
// after the last one is released; a peeked message still counts until its release.
TEST(ShmChannelTest, PendingWhileAMessageWaits) {
  SharedBuffer buffer(4096);
  auto channel = ShmChannel::Create(buffer.span());
  WS_ASSERT_OK(channel.status());
  EXPECT_FALSE(ShmChannel().Pending());  // not attached
  EXPECT_FALSE(channel->Pending());
  auto reserved = channel->Reserve(16, absl::Seconds(1));
  WS_ASSERT_OK(reserved.status());
  EXPECT_FALSE(channel->Pending());  // reserved, not committed
  channel->Commit();
  EXPECT_TRUE(channel->Pending());
  WS_ASSERT_OK(channel->Send(Pattern(3, 3), absl::Seconds(1)));
  WS_ASSERT_OK(channel->Peek(absl::Seconds(1)).status());
  EXPECT_TRUE(channel->Pending());
  channel->Release();
  EXPECT_TRUE(channel->Pending());  // the second message
  std::vector<std::byte> out(16);
  WS_ASSERT_OK(channel->Receive(absl::MakeSpan(out), absl::Seconds(1)).status());
  EXPECT_FALSE(channel->Pending());
}

TEST(ShmChannelTest, EmptyChannelTimesOut) {
  SharedBuffer buffer(4096);
  auto channel = ShmChannel::Create(buffer.span());
  WS_ASSERT_OK(channel.status());
  auto peeked = channel->Peek(absl::Milliseconds(20));
  EXPECT_EQ(peeked.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(ShmChannelTest, FullChannelTimesOutAndOversizeIsRefused) {
  SharedBuffer buffer(4096);
  auto channel = ShmChannel::Create(buffer.span());
  WS_ASSERT_OK(channel.status());
  EXPECT_EQ(channel->Send(Pattern(channel->max_message_bytes() + 1, 1), absl::Seconds(1)).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status status;
  int sent = 0;
  while ((status = channel->Send(Pattern(256, 2), absl::Milliseconds(20))).ok()) ++sent;
  EXPECT_GT(sent, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(ShmChannelTest, ReceiveIntoSmallBufferKeepsTheMessage) {
  SharedBuffer buffer(4096);
  auto channel = ShmChannel::Create(buffer.span());
  WS_ASSERT_OK(channel.status());
  WS_ASSERT_OK(channel->Send(Pattern(100, 3), absl::Seconds(1)));
  std::vector<std::byte> small(10), big(100);
  EXPECT_EQ(channel->Receive(absl::MakeSpan(small), absl::Seconds(1)).status().code(),
            absl::StatusCode::kResourceExhausted);
  auto received = channel->Receive(absl::MakeSpan(big), absl::Seconds(1));
  WS_ASSERT_OK(received.status());
  EXPECT_EQ(big, Pattern(100, 3));
}

TEST(ShmChannelTest, CloseWakesAWaitingConsumer) {
  SharedBuffer buffer(4096);
  auto channel = ShmChannel::Create(buffer.span());
  WS_ASSERT_OK(channel.status());
  auto peer = ShmChannel::Attach(buffer.span());
  WS_ASSERT_OK(peer.status());
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    peer->Close();
  });
  auto peeked = channel->Peek(absl::Seconds(10));
  closer.join();
  EXPECT_EQ(peeked.status().code(), absl::StatusCode::kCancelled);
}

TEST(ShmChannelTest, AttachRefusesUnformattedMemory) {
  SharedBuffer buffer(4096);
  EXPECT_EQ(ShmChannel::Attach(buffer.span()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A producer sleeping on a full ring wakes when the consumer releases (not at its timeout).
TEST(ShmChannelTest, AProducerOnAFullRingWakesAtARelease) {
  SharedBuffer buffer(4096);
  auto channel = ShmChannel::Create(buffer.span());
  WS_ASSERT_OK(channel.status());
  auto consumer = ShmChannel::Attach(buffer.span());
  WS_ASSERT_OK(consumer.status());
  while (channel->Send(Pattern(256, 2), absl::Milliseconds(5)).ok()) {
  }
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::vector<std::byte> out(256);
    EXPECT_TRUE(consumer->Receive(absl::MakeSpan(out), absl::Seconds(1)).ok());
  });
  const absl::Time start = absl::Now();
  WS_EXPECT_OK(channel->Send(Pattern(256, 4), absl::Seconds(20)));
  const absl::Duration waited = absl::Now() - start;
  releaser.join();
  EXPECT_GE(waited, absl::Milliseconds(40));
  EXPECT_LT(waited, absl::Seconds(10));
}

// Attach on a live channel (the coordinator attaches to close the channels while the workers
// run): a head and a tail that moved between its two reads are no corruption. A producer and
// a consumer pump small messages through a small ring while a third thread attaches in a
// loop; every attach succeeds.
TEST(ShmChannelTest, AttachToALiveChannelNeverCallsItCorrupt) {
  SharedBuffer buffer(4096);
  auto producer = ShmChannel::Create(buffer.span());
  WS_ASSERT_OK(producer.status());
  auto consumer = ShmChannel::Attach(buffer.span());
  WS_ASSERT_OK(consumer.status());
  constexpr int kMessages = 200000;
  std::atomic<bool> done{false};
  std::thread produce([&] {
    for (int i = 0; i < kMessages; ++i) {
      if (!producer->Send(Pattern(8 + i % 24, i), absl::Seconds(10)).ok()) break;
    }
  });
  std::thread consume([&] {
    std::vector<std::byte> out(64);
    for (int i = 0; i < kMessages; ++i) {
      if (!consumer->Receive(absl::MakeSpan(out), absl::Seconds(10)).ok()) break;
    }
    done.store(true);
  });
  int attaches = 0, refused = 0;
  std::string first_refusal;
  while (!done.load()) {
    absl::StatusOr<ShmChannel> attached = ShmChannel::Attach(buffer.span());
    ++attaches;
    if (!attached.ok() && refused++ == 0) first_refusal = attached.status().ToString();
  }
  produce.join();
  consume.join();
  EXPECT_GT(attaches, 100);
  EXPECT_EQ(refused, 0) << "of " << attaches << ", first: " << first_refusal;
}

// The header lives in memory another process writes: Create's layout (magic, capacity at
// byte 8; head at 64, tail at 128; the ring from byte 256).
void Poke(SharedBuffer& buffer, size_t offset, uint64_t value) {
  std::memcpy(buffer.span().data() + offset, &value, sizeof(value));
}
constexpr size_t kCapacityAt = 8, kHeadAt = 64, kTailAt = 128, kRingAt = 256;

TEST(ShmChannelTest, AttachRefusesACorruptHeader) {
  for (const auto& [at, value] : std::vector<std::pair<size_t, uint64_t>>{
           {kCapacityAt, 0},         // a division by zero
           {kCapacityAt, 64},        // below 128: the message limit wrapped
           {kCapacityAt, 200},       // not a multiple of 64
           {kHeadAt, 12},            // not 8-aligned
           {kHeadAt, 4096 * 2}}) {   // more committed than the ring holds
    SharedBuffer buffer(4096);
    WS_ASSERT_OK(ShmChannel::Create(buffer.span()).status());
    Poke(buffer, at, value);
    EXPECT_EQ(ShmChannel::Attach(buffer.span()).status().code(),
              absl::StatusCode::kFailedPrecondition)
        << "byte " << at << " = " << value;
  }
}

TEST(ShmChannelTest, PeekRefusesALengthBeyondTheCommittedBytesOrTheRing) {
  {
    // 16 bytes committed; the length says 1000.
    SharedBuffer buffer(4096);
    WS_ASSERT_OK(ShmChannel::Create(buffer.span()).status());
    Poke(buffer, kRingAt, 1000);
    Poke(buffer, kHeadAt, 16);
    auto channel = ShmChannel::Attach(buffer.span());
    WS_ASSERT_OK(channel.status());
    EXPECT_EQ(channel->Peek(absl::Seconds(1)).status().code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(channel->Pending());  // nothing released
  }
  {
    // A length in the ring's last slot that runs past its end (with enough committed).
    SharedBuffer buffer(4096);
    auto channel = ShmChannel::Create(buffer.span());
    WS_ASSERT_OK(channel.status());
    const uint64_t capacity = (4096 - ShmChannel::kHeaderBytes) & ~uint64_t{63};
    const uint64_t last = capacity - 8;
    Poke(buffer, kRingAt + last, 1000);
    Poke(buffer, kTailAt, last);
    Poke(buffer, kHeadAt, last + 8 + 1000);
    EXPECT_EQ(channel->Peek(absl::Seconds(1)).status().code(), absl::StatusCode::kDataLoss);
  }
  {
    // A wrap marker at the ring's start (the skip would read the same word again).
    SharedBuffer buffer(4096);
    auto channel = ShmChannel::Create(buffer.span());
    WS_ASSERT_OK(channel.status());
    Poke(buffer, kRingAt, ~uint64_t{0});
    Poke(buffer, kHeadAt, 64);
    EXPECT_EQ(channel->Peek(absl::Seconds(1)).status().code(), absl::StatusCode::kDataLoss);
  }
}

// Two processes stream many messages of random sizes (wrapping the ring many times)
// through a small channel and echo them back; every byte is checked on both sides.
TEST(ShmChannelTest, CrossProcessEchoOfRandomSizesThroughAWrappingRing) {
  SharedBuffer forward_memory(16 << 10), backward_memory(16 << 10);
  auto forward = ShmChannel::Create(forward_memory.span());
  auto backward = ShmChannel::Create(backward_memory.span());
  WS_ASSERT_OK(forward.status());
  WS_ASSERT_OK(backward.status());
  constexpr int kMessages = 3000;

  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto in = ShmChannel::Attach(forward_memory.span());
    auto out = ShmChannel::Attach(backward_memory.span());
    if (!in.ok() || !out.ok()) _exit(1);
    for (int i = 0; i < kMessages; ++i) {
      auto message = in->Peek(absl::Seconds(10));
      if (!message.ok()) _exit(2);
      if (!out->Send(*message, absl::Seconds(10)).ok()) _exit(3);
      in->Release();
    }
    _exit(0);
  }
  std::mt19937 rng(42);
  std::vector<std::byte> received(forward->max_message_bytes());
  int in_flight = 0, next_check = 0;
  std::vector<size_t> sizes;
  for (int i = 0; i < kMessages; ++i) sizes.push_back(rng() % 3000);
  for (int sent = 0; sent < kMessages || next_check < kMessages;) {
    // Keep a few messages in flight so both rings hold several messages at once.
    if (sent < kMessages && in_flight < 3) {
      WS_ASSERT_OK(forward->Send(Pattern(sizes[sent], sent), absl::Seconds(10)));
      ++sent;
      ++in_flight;
      continue;
    }
    auto n = backward->Receive(absl::MakeSpan(received), absl::Seconds(10));
    WS_ASSERT_OK(n.status());
    ASSERT_EQ(*n, sizes[next_check]);
    ASSERT_TRUE(std::equal(received.begin(), received.begin() + *n,
                           Pattern(sizes[next_check], next_check).begin()))
        << "message " << next_check;
    ++next_check;
    --in_flight;
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace writescope
