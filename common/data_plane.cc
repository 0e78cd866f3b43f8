#include "common/data_plane.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"

namespace writescope {
namespace {

struct ChannelSpans {
  absl::Span<std::byte> to_cpu;
  absl::Span<std::byte> to_gpu;
};

absl::StatusOr<ChannelSpans> SplitChannels(const ShmArena& arena) {
  WS_ASSIGN_OR_RETURN(absl::Span<std::byte> region, arena.Region(kChannelsRegion));
  const size_t half = region.size() / 2 / 64 * 64;
  return ChannelSpans{region.subspan(0, half), region.subspan(half, half)};
}

}  // namespace

std::vector<ArenaRegionSpec> ArenaRegions(const ArenaSizes& sizes) {
  return {
      {std::string(kChannelsRegion), 2 * sizes.channel_bytes},
      {std::string(kCpuComputeRegion), sizes.cpu_compute_bytes},
      {std::string(kGpuTransferRegion), sizes.gpu_transfer_bytes},
  };
}

namespace {

// Maps every page of the channels into this process up front: a ring's first pass
// would otherwise take a page fault per 4 KiB in the middle of a step (1 MiB messages
// measured ~1.6 ms round trip instead of ~0.2 ms on the H200 host). RESOURCE_EXHAUSTED
// where /dev/shm cannot back them: the ring's first write there would be a SIGBUS in the
// middle of a step. Any other failure leaves the pages to fault when first used.
absl::Status PrefaultChannels(const ShmArena& arena) {
  WS_ASSIGN_OR_RETURN(absl::Span<std::byte> region, arena.Region(kChannelsRegion));
  absl::Status status = PrefaultPages(region, PrefaultAccess::kWrite);
  if (absl::IsResourceExhausted(status)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the data-plane channels of ", arena.name(), ": ", status.message()));
  }
  if (!status.ok()) {
    WS_LOG(WARNING) << "the data-plane channels stay unmapped until first used: " << status;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DataPlane> CreateDataPlane(const ShmArena& arena) {
  WS_RETURN_IF_ERROR(PrefaultChannels(arena));
  WS_ASSIGN_OR_RETURN(ChannelSpans spans, SplitChannels(arena));
  DataPlane plane;
  WS_ASSIGN_OR_RETURN(plane.to_cpu, ShmChannel::Create(spans.to_cpu));
  WS_ASSIGN_OR_RETURN(plane.to_gpu, ShmChannel::Create(spans.to_gpu));
  return plane;
}

absl::StatusOr<DataPlane> AttachDataPlane(const ShmArena& arena) {
  WS_RETURN_IF_ERROR(PrefaultChannels(arena));
  WS_ASSIGN_OR_RETURN(ChannelSpans spans, SplitChannels(arena));
  DataPlane plane;
  WS_ASSIGN_OR_RETURN(plane.to_cpu, ShmChannel::Attach(spans.to_cpu));
  WS_ASSIGN_OR_RETURN(plane.to_gpu, ShmChannel::Attach(spans.to_gpu));
  return plane;
}

size_t ErrorPayloadBytes(const absl::Status& status) {
  return sizeof(uint32_t) + status.message().size();
}

size_t WriteErrorPayload(const absl::Status& status, absl::Span<std::byte> out) {
  if (out.size() < sizeof(uint32_t)) return 0;
  const uint32_t code = static_cast<uint32_t>(status.code());
  std::memcpy(out.data(), &code, sizeof(code));
  const size_t n = std::min(status.message().size(), out.size() - sizeof(code));
  if (n > 0) std::memcpy(out.data() + sizeof(code), status.message().data(), n);
  return sizeof(code) + n;
}

absl::Status ReadErrorPayload(absl::Span<const std::byte> payload, absl::string_view context) {
  uint32_t code = static_cast<uint32_t>(absl::StatusCode::kInternal);
  absl::Span<const std::byte> text = payload;
  if (payload.size() >= sizeof(code)) {
    std::memcpy(&code, payload.data(), sizeof(code));
    text = payload.subspan(sizeof(code));
  }
  // Codes 1..16 are the failures absl knows; anything else is no code the sender wrote.
  if (code == 0 || code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    code = static_cast<uint32_t>(absl::StatusCode::kInternal);
  }
  return absl::Status(
      static_cast<absl::StatusCode>(code),
      absl::StrCat(context,
                   absl::string_view(reinterpret_cast<const char*>(text.data()), text.size())));
}

absl::Status CpuSideFailure(absl::Span<const std::byte> payload, absl::string_view context) {
  absl::Status status = ReadErrorPayload(payload, context);
  if (absl::IsUnavailable(status) || absl::IsCancelled(status)) return status;
  return absl::InternalError(status.message());
}

}  // namespace writescope
