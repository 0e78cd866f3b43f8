#include "common/channel_measure.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/data_plane.h"
#include "common/shm_arena.h"
#include "common/status.h"

namespace writescope {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

enum class PeerRole {
  kEcho,  // copies every message on to_cpu back on to_gpu
  kSink,  // receives messages; answers an empty message with an empty one
};

// Exit codes of the peer, so the parent can say what went wrong.
constexpr int kPeerOk = 0;
constexpr int kPeerAttachFailed = 10;
constexpr int kPeerChannelFailed = 11;

// The forked peer. Attaches to the arena by name as a worker would, then serves until
// the parent closes the channel. Never returns; _exit skips the destructors that the
// parent's objects (copied by fork) would otherwise run here.
[[noreturn]] void RunPeer(const std::string& arena_name, PeerRole role, pid_t parent,
                          absl::Duration timeout) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(kPeerAttachFailed);  // the parent died before prctl
  absl::StatusOr<std::unique_ptr<ShmArena>> arena = ShmArena::Open(arena_name);
  if (!arena.ok()) _exit(kPeerAttachFailed);
  absl::StatusOr<DataPlane> plane = AttachDataPlane(**arena);
  if (!plane.ok()) _exit(kPeerAttachFailed);
  ShmChannel& in = plane->to_cpu;
  ShmChannel& out = plane->to_gpu;
  // Tells the parent the arena is mapped here, so it may unlink the name.
  if (!out.Send({}, timeout).ok()) _exit(kPeerChannelFailed);

  std::vector<std::byte> sink(role == PeerRole::kSink ? in.max_message_bytes() : 0);
  while (true) {
    absl::StatusOr<absl::Span<const std::byte>> message = in.Peek(timeout);
    if (!message.ok()) _exit(absl::IsCancelled(message.status()) ? kPeerOk : kPeerChannelFailed);
    if (role == PeerRole::kEcho) {
      absl::StatusOr<absl::Span<std::byte>> reply = out.Reserve(message->size(), timeout);
      if (!reply.ok()) _exit(kPeerChannelFailed);
      if (!message->empty()) std::memcpy(reply->data(), message->data(), message->size());
      out.Commit();
      in.Release();
    } else if (message->empty()) {
      in.Release();
      if (!out.Send({}, timeout).ok()) _exit(kPeerChannelFailed);
    } else {
      std::memcpy(sink.data(), message->data(), message->size());
      in.Release();
    }
  }
}

// The parent's side: the arena, the channels and the forked peer.
class Peer {
 public:
  static absl::StatusOr<std::unique_ptr<Peer>> Start(PeerRole role,
                                                     const ChannelMeasureOptions& options) {
    static std::atomic<int> counter{0};
    const std::string name = absl::StrCat("/ws-measure-", getpid(), "-", counter++);
    ArenaSizes sizes;
    sizes.channel_bytes = options.channel_bytes;
    WS_ASSIGN_OR_RETURN(std::unique_ptr<ShmArena> arena,
                        ShmArena::Create(name, ArenaRegions(sizes)));
    WS_ASSIGN_OR_RETURN(DataPlane plane, CreateDataPlane(*arena));
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return ErrnoToStatus(errno, "fork");
    if (pid == 0) RunPeer(name, role, parent, options.timeout);

    auto peer = std::unique_ptr<Peer>(new Peer(std::move(arena), plane, pid));
    WS_RETURN_IF_ERROR(peer->WaitReady(options.timeout));
    // Both sides have it mapped: nothing is left in /dev/shm even if we crash.
    WS_RETURN_IF_ERROR(peer->arena_->Unlink());
    return peer;
  }

  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer() { (void)Stop(); }

  ShmChannel& to_peer() { return plane_.to_cpu; }
  ShmChannel& from_peer() { return plane_.to_gpu; }

  // Waits for the peer's hello, noticing promptly when it exits instead.
  absl::Status WaitReady(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      absl::StatusOr<size_t> hello = from_peer().Receive({}, absl::Milliseconds(100));
      if (hello.ok()) return absl::OkStatus();
      if (!absl::IsDeadlineExceeded(hello.status())) return hello.status();
      int wstatus = 0;
      if (waitpid(pid_, &wstatus, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::UnavailableError(
            absl::StrCat("channel peer could not attach to the arena (wait status ", wstatus, ")"));
      }
      if (absl::Now() >= deadline) {
        return absl::UnavailableError("channel peer did not attach in time");
      }
    }
  }

  // Closes the channel and reaps the peer; an error if it did not exit cleanly.
  absl::Status Stop() {
    if (pid_ <= 0) return absl::OkStatus();
    to_peer().Close();
    from_peer().Close();
    int wstatus = 0;
    pid_t reaped = 0;
    for (int i = 0; i < 500 && reaped == 0; ++i) {  // up to 5 s
      reaped = waitpid(pid_, &wstatus, WNOHANG);
      if (reaped == 0) usleep(10000);
    }
    if (reaped == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &wstatus, 0);
    }
    pid_ = -1;
    if (reaped <= 0) return absl::DeadlineExceededError("channel peer did not exit; killed it");
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == kPeerOk) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("channel peer ended with wait status ", wstatus));
  }

 private:
  Peer(std::unique_ptr<ShmArena> arena, DataPlane plane, pid_t pid)
      : arena_(std::move(arena)), plane_(plane), pid_(pid) {}

  std::unique_ptr<ShmArena> arena_;
  DataPlane plane_;
  pid_t pid_;
};

void FillPattern(std::vector<std::byte>& bytes, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (std::byte& b : bytes) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
}

absl::Status CheckFits(size_t bytes, const ShmChannel& channel) {
  if (bytes > channel.max_message_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("message of ", bytes, " bytes exceeds the channel's limit of ",
                     channel.max_message_bytes(), "; raise the channel size"));
  }
  return absl::OkStatus();
}

}  // namespace

double Percentile(std::vector<double>& samples, double fraction) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  // Nearest rank.
  const double rank = std::ceil(fraction * static_cast<double>(samples.size()));
  const size_t index = std::clamp<size_t>(static_cast<size_t>(rank), 1, samples.size()) - 1;
  return samples[index];
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (value == std::floor(value))
    return absl::StrCat(static_cast<uint64_t>(value), " ", kUnits[unit]);
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

absl::StatusOr<std::vector<RoundTripResult>> MeasureChannelRoundTrips(
    absl::Span<const size_t> message_bytes, const ChannelMeasureOptions& options) {
  if (options.round_trips < 1) return absl::InvalidArgumentError("round_trips must be >= 1");
  WS_ASSIGN_OR_RETURN(std::unique_ptr<Peer> peer, Peer::Start(PeerRole::kEcho, options));
  std::vector<RoundTripResult> results;
  for (size_t bytes : message_bytes) {
    WS_RETURN_IF_ERROR(CheckFits(bytes, peer->to_peer()));
    std::vector<std::byte> request(bytes), reply(bytes);
    FillPattern(request, static_cast<uint32_t>(bytes));
    std::vector<double> samples_us;
    samples_us.reserve(options.round_trips);
    const int total = options.warmup_round_trips + options.round_trips;
    for (int i = 0; i < total; ++i) {
      if (options.idle_before_round_trip > absl::ZeroDuration()) {
        absl::SleepFor(options.idle_before_round_trip);
      }
      const Clock::time_point start = Clock::now();
      WS_RETURN_IF_ERROR(peer->to_peer().Send(request, options.timeout));
      WS_ASSIGN_OR_RETURN(size_t received,
                          peer->from_peer().Receive(absl::MakeSpan(reply), options.timeout));
      const Clock::time_point end = Clock::now();
      if (received != bytes) {
        return absl::DataLossError(
            absl::StrCat("echo of ", bytes, " bytes came back as ", received));
      }
      if (i >= options.warmup_round_trips) samples_us.push_back(Seconds(end - start) * 1e6);
    }
    if (reply != request) {
      return absl::DataLossError(absl::StrCat("echo of ", bytes, " bytes came back altered"));
    }
    RoundTripResult result;
    result.message_bytes = bytes;
    result.samples = static_cast<int>(samples_us.size());
    result.median_us = Percentile(samples_us, 0.5);
    result.p99_us = Percentile(samples_us, 0.99);
    result.min_us = samples_us.front();
    result.max_us = samples_us.back();
    results.push_back(result);
  }
  WS_RETURN_IF_ERROR(peer->Stop());
  return results;
}

absl::StatusOr<std::vector<BandwidthResult>> MeasureChannelBandwidth(
    absl::Span<const size_t> message_bytes, const ChannelMeasureOptions& options) {
  if (options.bandwidth_repetitions < 1) {
    return absl::InvalidArgumentError("bandwidth_repetitions must be >= 1");
  }
  WS_ASSIGN_OR_RETURN(std::unique_ptr<Peer> peer, Peer::Start(PeerRole::kSink, options));
  std::vector<BandwidthResult> results;
  for (size_t bytes : message_bytes) {
    if (bytes == 0) return absl::InvalidArgumentError("bandwidth needs messages of >= 1 byte");
    WS_RETURN_IF_ERROR(CheckFits(bytes, peer->to_peer()));
    std::vector<std::byte> payload(bytes);
    FillPattern(payload, static_cast<uint32_t>(bytes));
    const uint64_t messages = std::max<uint64_t>(8, options.bandwidth_bytes / bytes);
    // One unrecorded pass faults in the peer's buffer and warms the ring.
    std::vector<double> gbps;
    for (int rep = -1; rep < options.bandwidth_repetitions; ++rep) {
      const Clock::time_point start = Clock::now();
      for (uint64_t m = 0; m < messages; ++m) {
        WS_RETURN_IF_ERROR(peer->to_peer().Send(payload, options.timeout));
      }
      WS_RETURN_IF_ERROR(peer->to_peer().Send({}, options.timeout));
      WS_ASSIGN_OR_RETURN(size_t ack, peer->from_peer().Receive({}, options.timeout));
      (void)ack;
      const double seconds = Seconds(Clock::now() - start);
      if (rep >= 0) gbps.push_back(static_cast<double>(messages * bytes) / seconds / 1e9);
    }
    BandwidthResult result;
    result.message_bytes = bytes;
    result.messages = messages;
    result.median_gbps = Percentile(gbps, 0.5);
    result.best_gbps = gbps.back();
    results.push_back(result);
  }
  WS_RETURN_IF_ERROR(peer->Stop());
  return results;
}

}  // namespace writescope
