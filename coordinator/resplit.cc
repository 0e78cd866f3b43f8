#include "coordinator/resplit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/kv_layout.h"
#include "common/log.h"
#include "common/status.h"

namespace writescope::coordinator {

std::vector<BlockMove> PlanResplit(const KvPlacement& placement,
                                   std::vector<SequenceId> sequences, double target) {
  std::vector<BlockMove> moves;
  if (std::isnan(target)) return moves;
  target = std::clamp(target, 0.0, 1.0);
  std::sort(sequences.begin(), sequences.end());
  sequences.erase(std::unique(sequences.begin(), sequences.end()), sequences.end());
  uint64_t blocks_so_far = 0;  // the blocks of the sequences so far
  uint64_t given = 0;          // CPU blocks handed out so far
  for (const SequenceId id : sequences) {
    const SequencePlacement* found = placement.Find(id);
    if (found == nullptr) continue;
    const SequencePlacement& seq = *found;
    blocks_so_far += seq.blocks.size();
    // From the whole count each time (a running sum of target x each sequence's blocks
    // gathers rounding: 0.7 x 2 + 0.7 x 3 is 3.4999999999999996, not 0.7 x 5's 3.5).
    const uint64_t upto =
        static_cast<uint64_t>(std::llround(target * static_cast<double>(blocks_so_far)));
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
  std::vector<BlockMove> pending(moves.begin(), moves.end());
  bool progress = true;
  while (!pending.empty() && progress) {
    progress = false;
    std::vector<BlockMove> waiting;  // found their region full in this pass
    for (const KvRegion to : {KvRegion::kGpuTransfer, KvRegion::kCpuCompute}) {
      std::vector<std::pair<BlockMove, Relocation>> group;
      // The group's moves so far undone, newest first: the slots they freed are still free
      // (the group allocates in `to` only).
      const auto undo = [&](absl::Status error) {
        for (auto it = group.rbegin(); it != group.rend(); ++it) {
          const absl::Status undone =
              placement.UndoRelocate(it->first.sequence, it->first.index, it->second);
          WS_CHECK(undone.ok()) << undone;
        }
        return error;
      };
      for (const BlockMove& move : pending) {
        if (move.to != to) continue;
        absl::StatusOr<Relocation> moved = placement.Relocate(move.sequence, move.index, to);
        if (absl::IsResourceExhausted(moved.status())) {
          waiting.push_back(move);
          continue;
        }
        if (!moved.ok()) return undo(moved.status());
        group.emplace_back(move, *moved);
      }
      if (group.empty()) continue;
      std::vector<BlockCopy> copies;
      copies.reserve(group.size());
      for (const auto& [move, moved] : group) copies.push_back({moved.from, moved.to});
      if (absl::Status copied = copy(copies); !copied.ok()) return undo(copied);
      stats.blocks += copies.size();
      stats.bytes += copies.size() * block_bytes;
      progress = true;
    }
    pending = std::move(waiting);
  }
  stats.skipped = pending.size();
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
