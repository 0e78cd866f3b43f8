#include "common/data_plane.h"

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

absl::StatusOr<DataPlane> CreateDataPlane(const ShmArena& arena) {
  WS_ASSIGN_OR_RETURN(ChannelSpans spans, SplitChannels(arena));
  DataPlane plane;
  WS_ASSIGN_OR_RETURN(plane.to_cpu, ShmChannel::Create(spans.to_cpu));
  WS_ASSIGN_OR_RETURN(plane.to_gpu, ShmChannel::Create(spans.to_gpu));
  return plane;
}

absl::StatusOr<DataPlane> AttachDataPlane(const ShmArena& arena) {
  WS_ASSIGN_OR_RETURN(ChannelSpans spans, SplitChannels(arena));
  DataPlane plane;
  WS_ASSIGN_OR_RETURN(plane.to_cpu, ShmChannel::Attach(spans.to_cpu));
  WS_ASSIGN_OR_RETURN(plane.to_gpu, ShmChannel::Attach(spans.to_gpu));
  return plane;
}

}  // namespace writescope
