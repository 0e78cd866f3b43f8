#include "coordinator/resplit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/kv_layout.h"
#include "common/status.h"

namespace writescope::coordinator {

std::vector<BlockMove> PlanResplit(const KvPlacement& placement,
                                   std::vector<SequenceId> sequences, double target) {
  std::vector<BlockMove> moves;
  if (std::isnan(target)) return moves;
  target = std::clamp(target, 0.0, 1.0);
  std::sort(sequences.begin(), sequences.end());
  sequences.erase(std::unique(sequences.begin(), sequences.end()), sequences.end());
  double wanted_sum = 0.0;   // target x the blocks so far
  uint64_t given = 0;        // CPU blocks handed out so far
  for (const SequenceId id : sequences) {
    const SequencePlacement* found = placement.Find(id);
    if (found == nullptr) continue;
    const SequencePlacement& seq = *found;
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
  for (const KvRegion to : {KvRegion::kGpuTransfer, KvRegion::kCpuCompute}) {
    std::vector<BlockCopy> copies;
    for (const BlockMove& move : moves) {
      if (move.to != to) continue;
      absl::StatusOr<Relocation> moved = placement.Relocate(move.sequence, move.index, to);
      if (absl::IsResourceExhausted(moved.status())) {
        ++stats.skipped;
        continue;
      }
      WS_RETURN_IF_ERROR(moved.status());
      copies.push_back({moved->from, moved->to});
    }
    if (copies.empty()) continue;
    WS_RETURN_IF_ERROR(copy(copies));
    stats.blocks += copies.size();
    stats.bytes += copies.size() * block_bytes;
  }
  return stats;
}

absl::Status CopyKvBlocks(const ShmArena& arena, const KvCacheConfig& config,
                          absl::Span<const BlockCopy> copies, int threads) {
  const KvGeometry& g = config.geometry;
  struct Region {
    std::byte* base = nullptr;
    uint64_t slots = 0;
  };
  std::array<Region, kNumKvRegions> regions;
  for (const KvRegion region : {KvRegion::kCpuCompute, KvRegion::kGpuTransfer}) {
    WS_ASSIGN_OR_RETURN(absl::Span<std::byte> bytes, arena.Region(KvRegionName(region)));
    // The workers' view of the region (KvRegionView, KvCache): its slots from its size.
    regions[KvRegionIndex(region)] = {bytes.data(), RegionSlots(g, bytes.size())};
  }
  for (const BlockCopy& c : copies) {
    if (c.from == c.to) return absl::InvalidArgumentError("copying a KV block onto itself");
    for (const KvBlockRef ref : {c.from, c.to}) {
      const uint64_t slots = regions[KvRegionIndex(ref.region)].slots;
      if (ref.slot >= slots) {
        return absl::InvalidArgumentError(absl::StrCat("KV block slot ", ref.slot, " outside the ",
                                                       KvRegionName(ref.region), " region's ",
                                                       slots, " slots"));
      }
    }
  }
  const uint64_t bytes = g.layer_block_bytes();
  const uint64_t pieces = copies.size() * uint64_t{g.num_layers};
  const auto copy_pieces = [&](uint64_t first, uint64_t step) {
    for (uint64_t piece = first; piece < pieces; piece += step) {
      const BlockCopy& c = copies[piece / g.num_layers];
      const uint32_t layer = static_cast<uint32_t>(piece % g.num_layers);
      const Region& src = regions[KvRegionIndex(c.from.region)];
      const Region& dst = regions[KvRegionIndex(c.to.region)];
      std::memcpy(dst.base + RegionBlockOffset(g, dst.slots, c.to.slot, layer),
                  src.base + RegionBlockOffset(g, src.slots, c.from.slot, layer), bytes);
    }
  };
  const uint64_t workers = std::clamp<uint64_t>(static_cast<uint64_t>(std::max(threads, 1)), 1,
                                                std::max<uint64_t>(pieces, 1));
  std::vector<std::thread> helpers;
  for (uint64_t t = 1; t < workers; ++t) helpers.emplace_back(copy_pieces, t, workers);
  copy_pieces(0, workers);
  for (std::thread& helper : helpers) helper.join();
  return absl::OkStatus();
}

int ResplitCopyThreads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return std::clamp(static_cast<int>(cores / 2), 1, 8);
}

}  // namespace writescope::coordinator
