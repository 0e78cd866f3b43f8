#include "coordinator/resplit.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/kv_layout.h"
#include "common/status.h"

namespace writescope::coordinator {

std::vector<BlockMove> PlanResplit(const KvPlacement& placement, double target) {
  std::vector<BlockMove> moves;
  if (std::isnan(target)) return moves;
  target = std::clamp(target, 0.0, 1.0);
  std::vector<SequenceId> ids = placement.LiveSequences();
  std::sort(ids.begin(), ids.end());
  double wanted_sum = 0.0;   // target x the blocks so far
  uint64_t given = 0;        // CPU blocks handed out so far
  for (const SequenceId id : ids) {
    const SequencePlacement& seq = *placement.Find(id);
    wanted_sum += target * static_cast<double>(seq.blocks.size());
    const uint64_t upto = static_cast<uint64_t>(std::llround(wanted_sum));
    const uint64_t wanted = upto > given ? upto - given : 0;
    given += wanted;
    uint64_t cpu = 0;
    for (const PlacedBlock& block : seq.blocks) cpu += block.ref.region == KvRegion::kCpuCompute;
    if (cpu == wanted) continue;
    const KvRegion from = cpu > wanted ? KvRegion::kCpuCompute : KvRegion::kGpuTransfer;
    const KvRegion to = cpu > wanted ? KvRegion::kGpuTransfer : KvRegion::kCpuCompute;
    uint64_t count = cpu > wanted ? cpu - wanted : wanted - cpu;
    for (size_t i = seq.blocks.size(); i-- > 0 && count > 0;) {
      if (seq.blocks[i].ref.region != from) continue;
      moves.push_back({.sequence = id, .index = i, .to = to});
      --count;
    }
  }
  return moves;
}

absl::StatusOr<ResplitStats> ApplyResplit(KvPlacement& placement, absl::Span<const BlockMove> moves,
                                          const BlockCopier& copy) {
  ResplitStats stats;
  const uint64_t block_bytes = placement.config().geometry.block_bytes();
  for (const BlockMove& move : moves) {
    const SequencePlacement* seq = placement.Find(move.sequence);
    if (seq == nullptr || move.index >= seq->blocks.size()) {
      return absl::NotFoundError(absl::StrCat("re-split: no block ", move.index, " of sequence ",
                                              move.sequence));
    }
    const KvBlockRef from = seq->blocks[move.index].ref;
    absl::StatusOr<KvBlockRef> to = placement.Relocate(move.sequence, move.index, move.to);
    if (absl::IsResourceExhausted(to.status())) {
      ++stats.skipped;
      continue;
    }
    WS_RETURN_IF_ERROR(to.status());
    WS_RETURN_IF_ERROR(copy(from, *to));
    ++stats.blocks;
    stats.bytes += block_bytes;
  }
  return stats;
}

absl::Status CopyKvBlock(const ShmArena& arena, const KvCacheConfig& config, KvBlockRef from,
                         KvBlockRef to) {
  if (from == to) return absl::InvalidArgumentError("copying a KV block onto itself");
  const KvGeometry& g = config.geometry;
  struct Region {
    absl::Span<std::byte> bytes;
    uint64_t slots = 0;
  };
  const auto region = [&](KvBlockRef ref) -> absl::StatusOr<Region> {
    WS_ASSIGN_OR_RETURN(absl::Span<std::byte> bytes, arena.Region(KvRegionName(ref.region)));
    // The workers' view of the region (KvRegionView, KvCache): its slots from its size.
    const uint64_t slots = RegionSlots(g, bytes.size());
    if (ref.slot >= slots) {
      return absl::InvalidArgumentError(absl::StrCat("KV block slot ", ref.slot, " outside the ",
                                                     KvRegionName(ref.region), " region's ",
                                                     slots, " slots"));
    }
    return Region{bytes, slots};
  };
  WS_ASSIGN_OR_RETURN(const Region src, region(from));
  WS_ASSIGN_OR_RETURN(const Region dst, region(to));
  const uint64_t bytes = g.layer_block_bytes();
  for (uint32_t layer = 0; layer < g.num_layers; ++layer) {
    std::memcpy(dst.bytes.data() + RegionBlockOffset(g, dst.slots, to.slot, layer),
                src.bytes.data() + RegionBlockOffset(g, src.slots, from.slot, layer), bytes);
  }
  return absl::OkStatus();
}

}  // namespace writescope::coordinator
