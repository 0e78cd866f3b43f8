// The arena's fixed layout: which named regions exist and how the data-plane
// channels between gpu_worker and cpu_worker sit in the "channels" region.
#ifndef WRITESCOPE_COMMON_DATA_PLANE_H_
#define WRITESCOPE_COMMON_DATA_PLANE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/shm_arena.h"
#include "common/shm_channel.h"

namespace writescope {

inline constexpr absl::string_view kChannelsRegion = "channels";
inline constexpr absl::string_view kCpuComputeRegion = "cpu_compute";
inline constexpr absl::string_view kGpuTransferRegion = "gpu_transfer";

struct ArenaSizes {
  uint64_t channel_bytes = uint64_t{16} << 20;  // per direction
  uint64_t cpu_compute_bytes = 0;
  uint64_t gpu_transfer_bytes = 0;
};

// The region table for an arena of these sizes.
std::vector<ArenaRegionSpec> ArenaRegions(const ArenaSizes& sizes);

// The two channels between the workers. The gpu_worker produces on `to_cpu` and
// consumes `to_gpu`; the cpu_worker the other way round.
struct DataPlane {
  ShmChannel to_cpu;
  ShmChannel to_gpu;
};

// Formats both channels (the arena's creator does this once). Both functions map the
// channels' pages first: RESOURCE_EXHAUSTED where /dev/shm cannot back them.
absl::StatusOr<DataPlane> CreateDataPlane(const ShmArena& arena);
// Attaches to the channels a creator formatted.
absl::StatusOr<DataPlane> AttachDataPlane(const ShmArena& arena);

// A kError message's payload (common/data_plane_messages.h): the failure's status code as 4
// bytes, then its message. The bytes `status` takes (its message whole).
size_t ErrorPayloadBytes(const absl::Status& status);
// Writes `status` (not OK) into `out`, its message cut to fit; returns the bytes written
// (0 where `out` cannot hold the code).
size_t WriteErrorPayload(const absl::Status& status, absl::Span<std::byte> out);
// The status a kError payload carries, its message after `context`. A payload too short for
// the code, or with a code that is not a failure's, reads as INTERNAL with what it has.
absl::Status ReadErrorPayload(absl::Span<const std::byte> payload, absl::string_view context);
// What the gpu_worker makes of a kError payload: the cpu_worker going away (UNAVAILABLE,
// CANCELLED) keeps its code, so the client is told UNAVAILABLE; any other failure of the CPU
// side is the service's, not the request's (a layout the workers disagree on is no bad
// argument of the client's): INTERNAL, with the message.
absl::Status CpuSideFailure(absl::Span<const std::byte> payload, absl::string_view context);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_DATA_PLANE_H_
