// InplaceKVCache placement metadata: which block of which sequence lives in which
// host region slot. The coordinator owns it and never touches tensor bytes; the
// plans it returns (block refs, window slots, token counts) go to the gpu_worker,
// which resolves them to addresses (gpu_worker/kv_cache.h).
//
// A sequence of n tokens is: blocks[0..k) covering tokens [0, k*block_tokens) in
// order, then the D-window holding the last n - k*block_tokens (< W + 1) tokens. Every
// token therefore lives in exactly one place. Under writescope and the other policies,
// placed blocks never move: the CPU share is steered only through where NEW blocks land
// (the RegionChooser of a prefill or a flush). Only the monolithic baseline moves them
// (Relocate, through coordinator/resplit.h).
//
// Errors leave the state unchanged: a region too full for a request is
// RESOURCE_EXHAUSTED with the numbers, and nothing of the request is allocated.
// Not thread-safe: every caller (the engine's thread, the self test and server info on
// gRPC threads, the metrics thread) holds the coordinator's placement mutex.
#ifndef WRITESCOPE_COORDINATOR_PLACEMENT_H_
#define WRITESCOPE_COORDINATOR_PLACEMENT_H_

#include <array>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kv_config.h"

namespace writescope::coordinator {

using SequenceId = uint64_t;

// Block slots of one region. Allocation takes the lowest free slots, so the blocks
// of a prefill or of consecutive flushes form runs of consecutive slots that the
// transfer plan coalesces into one copy each.
class BlockAllocator {
 public:
  explicit BlockAllocator(uint32_t num_slots);

  uint32_t num_slots() const { return num_slots_; }
  uint32_t num_free() const { return static_cast<uint32_t>(free_.size()); }
  uint32_t num_used() const { return num_slots_ - num_free(); }
  bool IsFree(uint32_t slot) const { return free_.contains(slot); }

  // The `count` lowest free slots, ascending. RESOURCE_EXHAUSTED (nothing taken)
  // when fewer are free.
  absl::StatusOr<std::vector<uint32_t>> Allocate(uint32_t count);
  // Returns a used slot; freeing a free or out-of-range slot is a programmer error.
  void Free(uint32_t slot);
  // Takes one given free slot. FAILED_PRECONDITION (nothing taken) when it is used or out of
  // range.
  absl::Status Take(uint32_t slot);

 private:
  uint32_t num_slots_;
  std::set<uint32_t> free_;
};

// A placed block: tokens [first_token, first_token + block_tokens) of its sequence.
struct PlacedBlock {
  KvBlockRef ref;
  uint64_t first_token = 0;
};

struct SequencePlacement {
  SequenceId id = 0;
  uint32_t window_slot = 0;         // the sequence's D-window on the gpu_worker
  std::vector<PlacedBlock> blocks;  // in token order
  uint32_t window_tokens = 0;       // tokens in the D-window, <= W
  uint32_t block_tokens = 0;

  uint64_t num_tokens() const { return blocks.size() * uint64_t{block_tokens} + window_tokens; }
  // Token index of the D-window's first token.
  uint64_t window_first_token() const { return blocks.size() * uint64_t{block_tokens}; }
};

// What a RegionChooser sees for one new block.
struct PlacementRequest {
  SequenceId sequence = 0;
  uint64_t block_index = 0;  // index in the sequence's block list
  uint64_t first_token = 0;
  bool is_flush = false;  // a D-window flush (else prefill)
  // Free slots per region (KvRegionIndex), net of the blocks this request already
  // chose, so a chooser can avoid a full region.
  std::array<uint32_t, kNumKvRegions> free_slots{};
};

// One block's move between the regions (KvPlacement::Relocate): its old ref and its new one.
struct Relocation {
  KvBlockRef from;
  KvBlockRef to;
};

// Picks the region of one new block. The scheduler steers the CPU share through it.
using RegionChooser = absl::FunctionRef<KvRegion(const PlacementRequest&)>;

// The gpu_worker's part of a prefill: write prompt block i into blocks[i].ref and the
// last `window_tokens` tokens into D-window `window_slot`.
struct PrefillPlan {
  SequenceId sequence = 0;
  uint32_t window_slot = 0;
  std::vector<PlacedBlock> blocks;
  uint32_t window_tokens = 0;
};

// The gpu_worker's part of a flush: the whole window of `window_slot` (W tokens) goes
// into blocks (window sub-block j into blocks[j].ref); then the window is empty.
struct FlushPlan {
  SequenceId sequence = 0;
  uint32_t window_slot = 0;
  std::vector<PlacedBlock> blocks;
};

struct RegionUsage {
  uint32_t used_blocks = 0;
  uint32_t total_blocks = 0;
};

class KvPlacement {
 public:
  // `config` is resolved and validated here.
  static absl::StatusOr<std::unique_ptr<KvPlacement>> Create(const KvCacheConfig& config);

  // A new, empty sequence with its own D-window slot. ALREADY_EXISTS for a live id;
  // RESOURCE_EXHAUSTED when max_sequences are live.
  absl::Status Admit(SequenceId id);

  // Places a prompt chunk of `num_tokens` after the sequence's blocks: floor(n /
  // block_tokens) new blocks in the regions `choose` picks, the rest in the D-window.
  // Chunked prefill: every chunk but the last is a whole number of blocks.
  // FAILED_PRECONDITION if the D-window holds tokens (the chunk would not start on a
  // block boundary).
  absl::StatusOr<PrefillPlan> PlanPrefill(SequenceId id, uint64_t num_tokens, RegionChooser choose);

  // Appends `count` decoded tokens to the D-window; returns the window position of the
  // first. FAILED_PRECONDITION when they do not fit: flush first (NeedsFlush).
  absl::StatusOr<uint32_t> AppendDecode(SequenceId id, uint32_t count = 1);
  // Whether the D-window is full (the next AppendDecode needs a Flush first).
  bool NeedsFlush(SequenceId id) const;

  // Moves a full D-window into W / block_tokens new blocks in the regions `choose`
  // picks now. FAILED_PRECONDITION unless the window is full.
  absl::StatusOr<FlushPlan> Flush(SequenceId id, RegionChooser choose);

  // Finish or abort: returns the blocks and the window slot. NOT_FOUND if not live.
  absl::Status Free(SequenceId id);

  // Moves block `index` of sequence `id` to a free slot of region `to` and returns its old
  // and new refs; the old slot is free again. The metadata only: the caller copies the block's bytes
  // (every layer) from the old ref to the new one before anything allocates again or any
  // worker reads it (the monolithic policy's re-split, coordinator/resplit.h). NOT_FOUND
  // for an id not live, OUT_OF_RANGE for an index past its blocks, FAILED_PRECONDITION for a
  // block in `to` already, RESOURCE_EXHAUSTED when `to` has no free slot; nothing changes
  // then.
  absl::StatusOr<Relocation> Relocate(SequenceId id, size_t index, KvRegion to);
  // Undoes Relocate's `moved` of block `index` of sequence `id` (its copy failed): the block
  // is at moved.from again and moved.to is free. FAILED_PRECONDITION when the block is not at
  // moved.to or moved.from's slot was taken since; NOT_FOUND, OUT_OF_RANGE as Relocate;
  // nothing changes then.
  absl::Status UndoRelocate(SequenceId id, size_t index, const Relocation& moved);

  // nullptr if not live.
  const SequencePlacement* Find(SequenceId id) const;
  std::vector<SequenceId> LiveSequences() const;
  size_t num_live() const { return sequences_.size(); }

  RegionUsage Usage(KvRegion region) const;
  // Share of the placed (block) tokens that live in the CPU-compute region; 0 when no
  // block is placed. The D-window is GPU-resident and not counted.
  double PlacedCpuShare() const;

  const KvCacheConfig& config() const { return config_; }
  // For tests: the allocator of a region.
  const BlockAllocator& allocator(KvRegion region) const {
    return allocators_[KvRegionIndex(region)];
  }

 private:
  explicit KvPlacement(const KvCacheConfig& config);
  absl::StatusOr<SequencePlacement*> Live(SequenceId id);
  // Chooses and allocates `count` blocks starting at block index `first_block`;
  // all or nothing.
  absl::StatusOr<std::vector<PlacedBlock>> AllocateBlocks(const SequencePlacement& seq,
                                                          uint64_t count, bool is_flush,
                                                          RegionChooser choose);

  KvCacheConfig config_;
  std::array<BlockAllocator, kNumKvRegions> allocators_;
  BlockAllocator window_slots_;
  absl::flat_hash_map<SequenceId, SequencePlacement> sequences_;
};

// Choosers for policies and tests.
// Every block in `region`.
KvRegion ChooseCpuCompute(const PlacementRequest&);
KvRegion ChooseGpuTransfer(const PlacementRequest&);

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_PLACEMENT_H_
