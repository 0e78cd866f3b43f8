#include "coordinator/placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"

namespace writescope::coordinator {

BlockAllocator::BlockAllocator(uint32_t num_slots) : num_slots_(num_slots) {
  // Ascending inserts with a hint are amortised O(1).
  for (uint32_t slot = 0; slot < num_slots; ++slot) free_.insert(free_.end(), slot);
}

absl::StatusOr<std::vector<uint32_t>> BlockAllocator::Allocate(uint32_t count) {
  if (count > free_.size()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("need ", count, " blocks, ", free_.size(), " of ", num_slots_, " free"));
  }
  std::vector<uint32_t> slots;
  slots.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    slots.push_back(*free_.begin());
    free_.erase(free_.begin());
  }
  return slots;
}

absl::Status BlockAllocator::Take(uint32_t slot) {
  if (free_.erase(slot) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("slot ", slot, " of ", num_slots_, " is not free"));
  }
  return absl::OkStatus();
}

void BlockAllocator::Free(uint32_t slot) {
  WS_CHECK(slot < num_slots_) << "slot " << slot << " of " << num_slots_;
  const bool inserted = free_.insert(slot).second;
  WS_CHECK(inserted) << "double free of slot " << slot;
}

KvPlacement::KvPlacement(const KvCacheConfig& config)
    : config_(config),
      allocators_{BlockAllocator(config.region_slots(KvRegion::kCpuCompute)),
                  BlockAllocator(config.region_slots(KvRegion::kGpuTransfer))},
      window_slots_(config.max_sequences) {}

absl::StatusOr<std::unique_ptr<KvPlacement>> KvPlacement::Create(const KvCacheConfig& config) {
  WS_ASSIGN_OR_RETURN(KvCacheConfig resolved, ResolveKvCacheConfig(config));
  return std::unique_ptr<KvPlacement>(new KvPlacement(resolved));
}

absl::StatusOr<SequencePlacement*> KvPlacement::Live(SequenceId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("sequence ", id, " is not live"));
  }
  return &it->second;
}

const SequencePlacement* KvPlacement::Find(SequenceId id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : &it->second;
}

std::vector<SequenceId> KvPlacement::LiveSequences() const {
  std::vector<SequenceId> ids;
  ids.reserve(sequences_.size());
  for (const auto& [id, seq] : sequences_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

absl::Status KvPlacement::Admit(SequenceId id) {
  if (sequences_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " is already live"));
  }
  absl::StatusOr<std::vector<uint32_t>> slot = window_slots_.Allocate(1);
  if (!slot.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot admit sequence ", id, ": all ",
                                                     config_.max_sequences,
                                                     " D-window slots are in use"));
  }
  SequencePlacement& seq = sequences_[id];
  seq.id = id;
  seq.window_slot = (*slot)[0];
  seq.block_tokens = config_.block_tokens();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PlacedBlock>> KvPlacement::AllocateBlocks(const SequencePlacement& seq,
                                                                     uint64_t count, bool is_flush,
                                                                     RegionChooser choose) {
  // Choose every block first against tentative free counts, check, then allocate, so a
  // failure leaves nothing allocated.
  std::vector<KvRegion> regions;
  regions.reserve(count);
  std::array<uint64_t, kNumKvRegions> wanted{};
  PlacementRequest request;
  request.sequence = seq.id;
  request.is_flush = is_flush;
  for (uint64_t i = 0; i < count; ++i) {
    for (int r = 0; r < kNumKvRegions; ++r) {
      const uint64_t free = allocators_[r].num_free();
      request.free_slots[r] = static_cast<uint32_t>(free > wanted[r] ? free - wanted[r] : 0);
    }
    request.block_index = seq.blocks.size() + i;
    request.first_token = request.block_index * config_.block_tokens();
    const KvRegion region = choose(request);
    WS_CHECK(KvRegionIndex(region) >= 0 && KvRegionIndex(region) < kNumKvRegions);
    regions.push_back(region);
    ++wanted[KvRegionIndex(region)];
  }
  for (int r = 0; r < kNumKvRegions; ++r) {
    if (wanted[r] > allocators_[r].num_free()) {
      const KvRegion region = static_cast<KvRegion>(r);
      const KvRegion other = static_cast<KvRegion>(1 - r);
      return absl::ResourceExhaustedError(absl::StrCat(
          is_flush ? "flush" : "prefill", " of sequence ", seq.id, " needs ", wanted[r], " ",
          KvRegionName(region), " blocks but only ", allocators_[r].num_free(), " of ",
          allocators_[r].num_slots(), " are free (", KvRegionName(other), ": ", wanted[1 - r],
          " needed, ", allocators_[1 - r].num_free(), " of ", allocators_[1 - r].num_slots(),
          " free); nothing was allocated"));
    }
  }
  std::array<std::vector<uint32_t>, kNumKvRegions> slots;
  for (int r = 0; r < kNumKvRegions; ++r) {
    absl::StatusOr<std::vector<uint32_t>> got =
        allocators_[r].Allocate(static_cast<uint32_t>(wanted[r]));
    WS_CHECK(got.ok()) << got.status();  // checked above
    slots[r] = *std::move(got);
  }
  std::vector<PlacedBlock> blocks;
  blocks.reserve(count);
  std::array<size_t, kNumKvRegions> next{};
  for (uint64_t i = 0; i < count; ++i) {
    const int r = KvRegionIndex(regions[i]);
    blocks.push_back(PlacedBlock{.ref = {regions[i], slots[r][next[r]++]},
                                 .first_token = (seq.blocks.size() + i) * config_.block_tokens()});
  }
  return blocks;
}

absl::StatusOr<PrefillPlan> KvPlacement::PlanPrefill(SequenceId id, uint64_t num_tokens,
                                                     RegionChooser choose) {
  WS_ASSIGN_OR_RETURN(SequencePlacement * seq, Live(id));
  if (seq->window_tokens != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "prefill chunk of sequence ", id, ": it already holds ", seq->num_tokens(),
        " tokens, ", seq->window_tokens, " of them in the D-window (a chunk must start on a "
        "block boundary)"));
  }
  const uint64_t num_blocks = num_tokens / config_.block_tokens();
  WS_ASSIGN_OR_RETURN(std::vector<PlacedBlock> blocks,
                      AllocateBlocks(*seq, num_blocks, /*is_flush=*/false, choose));
  seq->blocks.insert(seq->blocks.end(), blocks.begin(), blocks.end());
  seq->window_tokens = static_cast<uint32_t>(num_tokens % config_.block_tokens());
  return PrefillPlan{.sequence = id,
                     .window_slot = seq->window_slot,
                     .blocks = std::move(blocks),
                     .window_tokens = seq->window_tokens};
}

absl::StatusOr<uint32_t> KvPlacement::AppendDecode(SequenceId id, uint32_t count) {
  WS_ASSIGN_OR_RETURN(SequencePlacement * seq, Live(id));
  if (uint64_t{seq->window_tokens} + count > config_.window_tokens) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, ": D-window holds ", seq->window_tokens, " of ",
                     config_.window_tokens, " tokens, cannot append ", count, "; flush first"));
  }
  const uint32_t position = seq->window_tokens;
  seq->window_tokens += count;
  return position;
}

bool KvPlacement::NeedsFlush(SequenceId id) const {
  const SequencePlacement* seq = Find(id);
  return seq != nullptr && seq->window_tokens == config_.window_tokens;
}

absl::StatusOr<FlushPlan> KvPlacement::Flush(SequenceId id, RegionChooser choose) {
  WS_ASSIGN_OR_RETURN(SequencePlacement * seq, Live(id));
  if (seq->window_tokens != config_.window_tokens) {
    return absl::FailedPreconditionError(absl::StrCat("flush of sequence ", id, ": D-window holds ",
                                                      seq->window_tokens, " of ",
                                                      config_.window_tokens, " tokens"));
  }
  WS_ASSIGN_OR_RETURN(std::vector<PlacedBlock> blocks,
                      AllocateBlocks(*seq, config_.blocks_per_window(), /*is_flush=*/true, choose));
  seq->blocks.insert(seq->blocks.end(), blocks.begin(), blocks.end());
  seq->window_tokens = 0;
  return FlushPlan{.sequence = id, .window_slot = seq->window_slot, .blocks = std::move(blocks)};
}

absl::Status KvPlacement::Free(SequenceId id) {
  WS_ASSIGN_OR_RETURN(SequencePlacement * seq, Live(id));
  for (const PlacedBlock& block : seq->blocks) {
    allocators_[KvRegionIndex(block.ref.region)].Free(block.ref.slot);
  }
  window_slots_.Free(seq->window_slot);
  sequences_.erase(id);
  return absl::OkStatus();
}

absl::StatusOr<Relocation> KvPlacement::Relocate(SequenceId id, size_t index, KvRegion to) {
  WS_ASSIGN_OR_RETURN(SequencePlacement * seq, Live(id));
  if (index >= seq->blocks.size()) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", id, " has ", seq->blocks.size(),
                                              " blocks; cannot move block ", index));
  }
  PlacedBlock& block = seq->blocks[index];
  if (block.ref.region == to) {
    return absl::FailedPreconditionError(absl::StrCat("block ", index, " of sequence ", id,
                                                      " is in ", KvRegionName(to), " already"));
  }
  BlockAllocator& target = allocators_[KvRegionIndex(to)];
  if (target.num_free() == 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no free ", KvRegionName(to), " slot to move block ", index,
                     " of sequence ", id, " into (", target.num_slots(), " slots)"));
  }
  absl::StatusOr<std::vector<uint32_t>> slot = target.Allocate(1);
  WS_CHECK(slot.ok()) << slot.status();  // checked above
  const KvBlockRef from = block.ref;
  allocators_[KvRegionIndex(from.region)].Free(from.slot);
  block.ref = KvBlockRef{to, slot->front()};
  return Relocation{.from = from, .to = block.ref};
}

absl::Status KvPlacement::UndoRelocate(SequenceId id, size_t index, const Relocation& moved) {
  WS_ASSIGN_OR_RETURN(SequencePlacement * seq, Live(id));
  if (index >= seq->blocks.size()) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", id, " has ", seq->blocks.size(),
                                              " blocks; cannot restore block ", index));
  }
  PlacedBlock& block = seq->blocks[index];
  if (!(block.ref == moved.to)) {
    return absl::FailedPreconditionError(
        absl::StrCat("block ", index, " of sequence ", id, " is not where it was moved to"));
  }
  WS_RETURN_IF_ERROR(allocators_[KvRegionIndex(moved.from.region)].Take(moved.from.slot));
  allocators_[KvRegionIndex(moved.to.region)].Free(moved.to.slot);
  block.ref = moved.from;
  return absl::OkStatus();
}

RegionUsage KvPlacement::Usage(KvRegion region) const {
  const BlockAllocator& a = allocators_[KvRegionIndex(region)];
  return RegionUsage{.used_blocks = a.num_used(), .total_blocks = a.num_slots()};
}

double KvPlacement::PlacedCpuShare() const {
  const uint64_t cpu = allocators_[KvRegionIndex(KvRegion::kCpuCompute)].num_used();
  const uint64_t transfer = allocators_[KvRegionIndex(KvRegion::kGpuTransfer)].num_used();
  return cpu + transfer == 0 ? 0.0 : static_cast<double>(cpu) / static_cast<double>(cpu + transfer);
}

KvRegion ChooseCpuCompute(const PlacementRequest&) { return KvRegion::kCpuCompute; }
KvRegion ChooseGpuTransfer(const PlacementRequest&) { return KvRegion::kGpuTransfer; }

}  // namespace writescope::coordinator
