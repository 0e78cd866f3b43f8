// The monolithic policy's re-split (coordinator/policy.h): a cache with ONE physical state
// for all spilled KV changes its CPU share only by moving data, so when the scheduler's
// target moves, the batch's host blocks are moved between the two regions until each
// sequence's placed CPU share is the target again. The engine runs it between steps and the
// step pays for the copies (StepRecord::resplit_ms). WriteScope never calls it: nothing it
// placed moves.
#ifndef WRITESCOPE_COORDINATOR_RESPLIT_H_
#define WRITESCOPE_COORDINATOR_RESPLIT_H_

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kv_config.h"
#include "common/shm_arena.h"
#include "coordinator/placement.h"

namespace writescope::coordinator {

// One block to move: block `index` of `sequence` into region `to`.
struct BlockMove {
  SequenceId sequence = 0;
  size_t index = 0;
  KvRegion to = KvRegion::kCpuCompute;
  friend bool operator==(const BlockMove&, const BlockMove&) = default;
};

// The moves that bring the placed CPU share of `sequences` to `target` (clamped to [0, 1];
// NaN: none). `sequences` are the engine's own: a sequence placed beside them, such as the
// self test's, never moves; ids not placed are passed over. Each sequence (in id order)
// gets the CPU blocks that a running sum of target x its blocks rounds to, so the batch's
// CPU blocks are round(target x all its blocks) and every sequence is within a block of the
// target. A sequence with too many CPU blocks moves its last ones to the transfer region,
// one with too few its last transfer blocks to the CPU region (the newest tokens: the moves
// follow the flushes). Placed blocks that already match stay where they are.
std::vector<BlockMove> PlanResplit(const KvPlacement& placement,
                                   std::vector<SequenceId> sequences, double target);

// One block's copy: its bytes, every layer, from one slot to another.
struct BlockCopy {
  KvBlockRef from;
  KvBlockRef to;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};
// Makes a batch of copies (none of whose slots another of the batch writes).
using BlockCopier = std::function<absl::Status(absl::Span<const BlockCopy> copies)>;

struct ResplitStats {
  uint64_t blocks = 0;  // moved
  uint64_t bytes = 0;   // copied (blocks x the block's bytes over all layers)
  // Moves left undone because their region had no free slot (RESOURCE_EXHAUSTED).
  uint64_t skipped = 0;
};

// Runs `moves`: those into the transfer region first, then those into the CPU region. Each
// group is moved in the metadata (KvPlacement::Relocate) and then copied in one `copy`
// call, before the next group can allocate the slots this one freed. A move into a region
// full at its turn waits for another pass, after the other group has freed slots there; the
// passes go on while one moves anything, and what still finds no slot is skipped (counted).
// Any other error (Relocate's, the copier's) stops the re-split and is returned: the groups
// before it are done and copied, the failing group is undone in the metadata
// (KvPlacement::UndoRelocate: its blocks are in their old slots, which the copies only read),
// so the placement still says where each block's bytes are.
absl::StatusOr<ResplitStats> ApplyResplit(KvPlacement& placement, absl::Span<const BlockMove> moves,
                                          const BlockCopier& copy);

// Copies blocks within the arena's two KV regions (named KvRegionName), layer by layer
// (RegionBlockOffset, with each region's slots from its size, as the workers read it), on
// `threads` threads (at least 1) that share the (block, layer) pieces. Every copy is
// checked before any is made: INVALID_ARGUMENT for a slot outside its region or from == to;
// the arena's error for a missing region.
absl::Status CopyKvBlocks(const ShmArena& arena, const KvCacheConfig& config,
                          absl::Span<const BlockCopy> copies, int threads);

// The threads a re-split copies with: half the cores, 1 to 8 (the cpu_worker's threads are
// idle between steps, when the engine re-splits).
int ResplitCopyThreads();

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_RESPLIT_H_
