// The per-layer transfer plan of a decode step: which GPU-transfer blocks the batch
// needs, where each lands in a ping-pong buffer, and the copies that bring them there.
//
// The needed blocks are sorted by (region, slot), the GPU-transfer region first, and given
// consecutive ping-pong positions, so a run of consecutive slots of one region is one
// contiguous source range (the region is layer-major, common/kv_layout.h) AND one contiguous
// destination: one copy per run. The slots are the same for every layer; only the source
// offset moves with the layer. Transfer blocks first: a step that also reads CPU-compute
// blocks (a writescope step that hands some to the GPU) keeps the first chunks of the step
// that does not, so the early rounds queued by the one (KvCache::QueueEarlyRounds) serve
// the other.
//
// When a layer's blocks exceed one ping-pong buffer they are cut into chunks of at
// most pingpong_blocks. The step is then a sequence of rounds, round = layer *
// num_chunks + chunk, alternating between the two buffers (round % 2); attention
// produces one partial + LSE per chunk and merges them. In the common case a layer is
// one round and "prefetch the next round" is "prefetch the next layer".
#ifndef WRITESCOPE_GPU_WORKER_KV_TRANSFER_PLAN_H_
#define WRITESCOPE_GPU_WORKER_KV_TRANSFER_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kv_config.h"

namespace writescope::gpu {

// One sequence of a step as the coordinator describes it.
struct StepSequence {
  uint32_t window_slot = 0;
  uint32_t window_tokens = 0;
  std::vector<KvBlockRef> blocks;  // in token order, both regions
  // Stream its CPU-compute blocks too (SequenceStep.gpu_reads_cpu_blocks: a prefill chunk
  // the GPU attends whole, or a decode step whose CPU blocks the scheduler hands to the
  // GPU); otherwise only the transfer region's.
  bool read_cpu_blocks = false;
};

// Copies layer-blocks [first_slot, first_slot + num_blocks) of `region` into ping-pong
// positions [pingpong_block, pingpong_block + num_blocks).
struct TransferRun {
  uint32_t first_slot = 0;
  uint32_t num_blocks = 0;
  uint32_t pingpong_block = 0;
  KvRegion region = KvRegion::kGpuTransfer;
  bool operator==(const TransferRun&) const = default;
};

// Block `block_index` (index in StepSequence::blocks) of batch sequence
// `sequence_index` sits at ping-pong position `pingpong_block` during its chunk.
struct PingPongEntry {
  uint32_t sequence_index = 0;
  uint32_t block_index = 0;
  uint32_t pingpong_block = 0;
};

struct TransferChunk {
  std::vector<TransferRun> runs;       // ascending slots
  std::vector<PingPongEntry> entries;  // by (sequence_index, block_index)
  uint32_t num_blocks = 0;
};

struct TransferPlan {
  std::vector<TransferChunk> chunks;  // the same for every layer
  uint32_t num_layers = 0;
  uint64_t layer_block_bytes = 0;

  uint32_t num_rounds() const { return num_layers * static_cast<uint32_t>(chunks.size()); }
  uint32_t layer_of_round(uint32_t round) const {
    return round / static_cast<uint32_t>(chunks.size());
  }
  uint32_t chunk_of_round(uint32_t round) const {
    return round % static_cast<uint32_t>(chunks.size());
  }
  uint64_t blocks_per_layer() const;
  uint64_t bytes_per_layer() const { return blocks_per_layer() * layer_block_bytes; }
  uint64_t copies_per_layer() const;
};

// The pieces of `wanted` that `copied` does not bring to the same ping-pong positions: a
// block of a wanted run is covered when a copied run of its region copies its slot to its
// position. One run per uncovered stretch, in the order of `wanted`; empty when all are
// covered.
// `copied` must not copy a slot twice (a plan's round never does).
std::vector<TransferRun> MissingRuns(absl::Span<const TransferRun> copied,
                                     absl::Span<const TransferRun> wanted);

// Builds the plan for `batch`. INVALID_ARGUMENT for a slot outside its region or one that
// appears twice (two blocks never share a slot).
absl::StatusOr<TransferPlan> BuildTransferPlan(const KvCacheConfig& config,
                                               absl::Span<const StepSequence> batch);

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_KV_TRANSFER_PLAN_H_
