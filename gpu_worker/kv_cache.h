// The gpu_worker's side of InplaceKVCache (docs: ../shared/design/ARCHITECTURE.md §2):
// resolves block refs from the coordinator's plans to arena addresses, writes prefill
// blocks straight into their final region, keeps the D-window in device memory,
// flushes full windows, and streams GPU-transfer blocks into the two ping-pong
// buffers. Everything goes through the Device interface, so the host device runs the
// same code in CI.
//
// Layouts (bf16 values; a "layer-block" is block_tokens tokens of one layer in the
// block layout of common/kv_layout.h: GQA K[heads][block_tokens][head_dim] then V,
// MLA latent[block_tokens][kv_lora_rank + rope_dim]):
//
//   host regions   (slot, layer) at (layer * region_slots + slot) * layer_block_bytes
//   D-window       device; (window_slot, layer) at
//                  (layer * max_sequences + window_slot) * W * bytes_per_token_layer,
//                  holding W / block_tokens consecutive layer-blocks, so a full window
//                  of one layer is byte-identical to that many region blocks and a
//                  flush is a plain copy. Window position p is token p % block_tokens
//                  of sub-block p / block_tokens.
//   ping-pong      two device buffers of pingpong_blocks layer-blocks each, allocated
//                  once at Create and never reallocated.
//   token row      one token of one layer as the projection produces it, the input of
//                  AppendToken: GQA K[heads][head_dim] then V[heads][head_dim]; MLA
//                  latent[kv_lora_rank + rope_dim].
//
// Streams: appends and the prefill tail copy run on kCompute; prefill block writes
// and flushes (device to host) on kCopyOut; ping-pong fills on kCopyIn. The ordering
// between them is made here (StreamWait); the caller only orders its own kernels on
// kCompute. Not thread-safe: one step thread drives it.
#ifndef WRITESCOPE_GPU_WORKER_KV_CACHE_H_
#define WRITESCOPE_GPU_WORKER_KV_CACHE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kv_config.h"
#include "common/shm_arena.h"
#include "gpu_worker/device.h"
#include "gpu_worker/kv_transfer_plan.h"

namespace writescope::gpu {

// Copies and bytes issued, by path (for benchmarks and tests).
struct KvCacheStats {
  uint64_t prefill_copies = 0;
  uint64_t prefill_bytes = 0;
  uint64_t flush_copies = 0;
  uint64_t flush_bytes = 0;
  uint64_t transfer_copies = 0;
  uint64_t transfer_bytes = 0;
  // QueueEarlyRounds' rounds: taken by the next BeginTransfer, or wasted. The wasted ones
  // by why: that plan's round differed (another layer, or none of the blocks it wants at
  // the positions it wants them), a region write went into their slots meanwhile, or no
  // BeginTransfer with rounds came before they were dropped (EndTransfer, QueueEarlyRounds
  // again, a plan without rounds).
  uint64_t early_rounds_taken = 0;
  uint64_t early_rounds_completed = 0;  // of the taken: the blocks they lacked copied after
  uint64_t early_rounds_wasted = 0;  // = the three below
  uint64_t early_rounds_differed = 0;
  uint64_t early_rounds_overwritten = 0;
  uint64_t early_rounds_unoffered = 0;
};

// What attention needs for one ping-pong round.
struct PingPongRound {
  uint32_t layer = 0;
  uint32_t chunk = 0;
  int buffer_index = 0;               // 0 or 1
  const std::byte* buffer = nullptr;  // device; [chunk->num_blocks] layer-blocks
  const TransferChunk* chunk_plan = nullptr;
};

class KvCache {
 public:
  // Maps the arena's cpu_compute and gpu_transfer regions (their slot counts must
  // match `config`), pins the transfer region (and the CPU-compute region when
  // the device allows: prefill chunks read it on the GPU), allocates the D-window and both
  // ping-pong buffers: config.gpu_bytes() <= the KV budget in all.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheConfig& config,
                                                         const ShmArena& arena, Device* device);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  ~KvCache();  // unpins what it pinned

  const KvCacheConfig& config() const { return config_; }
  const KvCacheStats& stats() const { return stats_; }
  // Of the early rounds queued for the latest BeginTransfer, those it could not use whole
  // (KvCacheStats: completed, differed or overwritten); 0 when none were queued.
  uint32_t transfer_missed_early_rounds() const { return transfer_missed_early_rounds_; }
  // Device bytes held: D-window + ping-pong.
  uint64_t device_bytes() const { return config_.gpu_bytes(); }

  // Host address of one layer-block in the arena. Unchecked; see ValidateBlock.
  std::byte* BlockAddress(KvBlockRef block, uint32_t layer) const;
  // Device address of the D-window of `window_slot` for `layer`: W / block_tokens
  // layer-blocks.
  std::byte* WindowAddress(uint32_t window_slot, uint32_t layer) const;
  std::byte* pingpong_buffer(int index) const { return pingpong_[index]; }

  // Prefill, one layer: `device_src` holds ceil(n / block_tokens) layer-blocks of the
  // prompt's K/V (block i = prompt tokens [i*block_tokens, (i+1)*block_tokens), the
  // last possibly partial), produced on kCompute. Full block i goes to blocks[i] in its
  // region: one device-to-host copy per run of consecutive slots of one region, no
  // intermediate copy for transfer blocks (pinned: plain DMA) and at most the CUDA
  // driver's own staging for the pageable CPU region. The `window_tokens` tail
  // (< block_tokens) goes to the D-window. `device_src` must stay valid until
  // WaitForWrites.
  absl::Status WritePrefillLayer(uint32_t layer, absl::Span<const KvBlockRef> blocks,
                                 uint32_t window_slot, uint32_t window_tokens,
                                 const void* device_src);

  // Decode: writes one token row (layout above) of `layer` at window position
  // `position` on kCompute.
  absl::Status AppendToken(uint32_t window_slot, uint32_t position, uint32_t layer,
                           const void* device_token_row);
  // The same for many sequences of one step at once (one batched copy on the device).
  struct TokenAppend {
    uint32_t window_slot;
    uint32_t position;
    const void* device_token_row;
  };
  absl::Status AppendTokens(uint32_t layer, absl::Span<const TokenAppend> appends);

  // Flushes the full window of `window_slot` into `blocks` (W / block_tokens of them,
  // window sub-block j into blocks[j]) in one batch on kCopyOut: one copy per layer per
  // run of consecutive slots (the region is layer-major, so a block's layers are
  // apart). Later appends to this window wait for it on the device.
  absl::Status FlushWindow(uint32_t window_slot, absl::Span<const KvBlockRef> blocks);

  // Waits until every prefill write and flush issued so far is in the arena; then
  // the coordinator may tell the cpu_worker about new CPU-region blocks.
  absl::Status WaitForWrites();

  // Ping-pong streaming of one decode step. The protocol, per step:
  //   BeginTransfer(plan)                 // queues round 0 into buffer 0 on kCopyIn (or
  //                                       // takes early rounds, QueueEarlyRounds)
  //   for round in [0, plan.num_rounds()):
  //     r = ReadyRound(round)             // kCompute waits for this round's copies;
  //                                       // round+1 is queued into the other buffer,
  //                                       // after the attention queued so far
  //     enqueue attention over r.buffer on kCompute
  // `plan` must stay alive until the last ReadyRound. Rounds come in order.
  //
  // The gpu_worker also calls PrefetchAfterAttention() once a round's attention is queued,
  // so that the copies run up to two rounds ahead. On a device whose small uploads wait for
  // the copy engine (Device::small_uploads_wait_for_transfers) it calls
  // ReadyRound(round, /*prefetch_next=*/false) and queues round+1 itself with PrefetchNext()
  // after this round's attention, so that the attention's own uploads go first. A round that
  // nobody prefetched is queued by its ReadyRound, which waits for that round's copies only
  // (a fence), not for rounds queued after it.
  absl::Status BeginTransfer(const TransferPlan& plan);
  absl::StatusOr<PingPongRound> ReadyRound(uint32_t round, bool prefetch_next = true);
  // Queues the round after the last readied one (after the compute work queued so far);
  // nothing when it is queued already or there is none.
  absl::Status PrefetchNext();
  // Once the last readied round's attention is queued: queues every round up to two after
  // it (the next into the other buffer, the one after into this round's buffer, after its
  // attention), so that the copies run ahead as far as the two buffers allow, across layers
  // too (the next layer's first rounds stream during this layer's experts).
  absl::Status PrefetchAfterAttention();
  // The early rounds, between steps: queues rounds 0 and 1 of `plan` (the step just run,
  // whose last attention is queued) again, one into each ping-pong buffer, after every
  // region write and attention queued so far, so that the next step's first DMA runs
  // during the logits, the sampling and the coordinator's round trip instead of after
  // them. When no region write (prefill, flush) went into their slots since, the next
  // BeginTransfer takes the longest prefix of them whose rounds are of its rounds' layers
  // and copied some of the blocks its rounds want to the ping-pong positions it wants them
  // at (MissingRuns); the blocks they lack are copied behind them. The others are wasted
  // (stats) and their rounds are copied again behind them. A no-op for a plan without
  // rounds. `plan` may die after the call.
  absl::Status QueueEarlyRounds(const TransferPlan& plan);
  // Forgets the plan (which may not outlive this call): ReadyRound and the prefetches need a
  // BeginTransfer again. For a caller that stops before the plan's last round (the probe
  // of the GPU path); copies already queued are not waited for. Drops early rounds too.
  void EndTransfer() {
    plan_ = nullptr;
    next_round_ = 0;
    issued_round_ = -1;
    DropEarlyRounds();
  }

  // Forgets the pending early rounds (QueueEarlyRounds), counted as wasted: also when their
  // slots may have been written by another process since (StepPlan.kv_moved). The next
  // BeginTransfer copies every round anew, behind them on the same stream.
  void DropEarlyRounds();

  // With timing on, every round's copies are bracketed by device markers
  // (Device::RecordMarker): round_markers()[round] = {before, after}, -1 when the round
  // copied nothing (or was not timed). The caller resets the markers (ResetRoundMarkers)
  // between steps, before early rounds are queued (a taken early round keeps the markers it
  // was queued with).
  void set_time_rounds(bool on) { time_rounds_ = on; }
  // Device::ResetMarkers, once no marker is still to be read; the markers held here are
  // forgotten with it: the latest plan's rounds' and those of early rounds still pending
  // (queued before a step that failed before its transfer), which are taken untimed.
  absl::Status ResetRoundMarkers();
  const std::vector<std::pair<int, int>>& round_markers() const { return round_markers_; }

  // INVALID_ARGUMENT unless `block` names a slot of its region and layer < num_layers.
  absl::Status ValidateBlock(KvBlockRef block, uint32_t layer) const;

 private:
  KvCache(const KvCacheConfig& config, Device* device) : config_(config), device_(device) {}
  // BeginTransfer once `plan` is validated: takes the early rounds, queues what they lack.
  absl::Status QueueFirstRounds(const TransferPlan& plan);
  absl::Status IssueRound(uint32_t round);
  // Queues `runs` of `layer` into ping-pong buffer `buffer_index` on kCopyIn, timed when
  // time_rounds_; returns the fence after them.
  absl::StatusOr<int> IssueRuns(absl::Span<const TransferRun> runs, uint32_t layer,
                                int buffer_index, std::pair<int, int>* markers);
  absl::Status ValidateWindowSlot(uint32_t window_slot) const;
  // Orders kCompute after the flushes of `window_slot` before touching its window.
  absl::Status WaitForFlushOf(uint32_t window_slot);
  // Region writes (WritePrefillLayer, FlushWindow) call this before they copy: a write into
  // a slot that a pending early round copied makes the early rounds stale.
  void NoteRegionWrite(absl::Span<const KvBlockRef> blocks);
  // Copies blocks[j] <- src + j * layer_block_bytes for one layer, one copy per run.
  absl::Status CopyBlocksToRegions(uint32_t layer, absl::Span<const KvBlockRef> blocks,
                                   const std::byte* device_src, uint64_t* copies, uint64_t* bytes);

  KvCacheConfig config_;
  Device* device_;
  std::array<std::byte*, kNumKvRegions> region_base_{};
  std::array<uint32_t, kNumKvRegions> region_slots_{};
  std::byte* pinned_ = nullptr;      // the GPU-transfer region, registered
  std::byte* pinned_cpu_ = nullptr;  // the CPU-compute region, when the device allowed it
  DeviceBuffer window_;
  std::array<DeviceBuffer, 2> pingpong_buffers_;
  std::array<std::byte*, 2> pingpong_{};
  std::vector<bool> flush_pending_;  // per window slot
  std::vector<CopyPiece> pieces_;  // AppendTokens' batched copy
  const TransferPlan* plan_ = nullptr;
  uint32_t next_round_ = 0;
  int64_t issued_round_ = -1;  // the last round queued on kCopyIn
  KvCacheStats stats_;
  uint32_t transfer_missed_early_rounds_ = 0;
  bool time_rounds_ = false;
  std::vector<std::pair<int, int>> round_markers_;
  std::vector<int> round_fences_;  // per issued round: the fence after its copies
  struct EarlyRound {
    uint32_t layer = 0;
    std::vector<TransferRun> runs;
    int fence = -1;
    std::pair<int, int> markers{-1, -1};
  };
  struct EarlyRounds {
    std::vector<EarlyRound> rounds;  // rounds 0, 1, ... of the plan they came from
    bool valid = false;              // no region write into their slots since queued
  } early_;
};

// Block-layout helpers shared with tests and benchmarks: scatter one token row into a
// layer-block at `token` and gather it back (host memory; GQA/MLA per `g`).
void ScatterTokenRow(const KvGeometry& g, const std::byte* token_row, uint32_t token,
                     std::byte* layer_block);
void GatherTokenRow(const KvGeometry& g, const std::byte* layer_block, uint32_t token,
                    std::byte* token_row);

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_KV_CACHE_H_
