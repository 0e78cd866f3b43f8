#include "gpu_worker/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"

namespace writescope::gpu {
namespace {

constexpr uint64_t kBf16Bytes = 2;

// Byte ranges of one token row inside a layer-block: (row offset, block offset, bytes).
template <typename Fn>
void ForEachTokenPiece(const KvGeometry& g, uint32_t token, Fn&& fn) {
  if (g.kind == AttentionKind::kMla) {
    fn(uint64_t{0}, g.latent_offset(token) * kBf16Bytes, g.bytes_per_token_layer());
    return;
  }
  const uint64_t head_bytes = uint64_t{g.head_dim} * kBf16Bytes;
  const uint64_t v_row = uint64_t{g.num_kv_heads} * head_bytes;
  for (uint32_t h = 0; h < g.num_kv_heads; ++h) {
    fn(h * head_bytes, g.k_offset(h, token) * kBf16Bytes, head_bytes);
    fn(v_row + h * head_bytes, g.v_offset(h, token) * kBf16Bytes, head_bytes);
  }
}

}  // namespace

void ScatterTokenRow(const KvGeometry& g, const std::byte* token_row, uint32_t token,
                     std::byte* layer_block) {
  ForEachTokenPiece(g, token, [&](uint64_t row, uint64_t block, uint64_t bytes) {
    std::memcpy(layer_block + block, token_row + row, bytes);
  });
}

void GatherTokenRow(const KvGeometry& g, const std::byte* layer_block, uint32_t token,
                    std::byte* token_row) {
  ForEachTokenPiece(g, token, [&](uint64_t row, uint64_t block, uint64_t bytes) {
    std::memcpy(token_row + row, layer_block + block, bytes);
  });
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheConfig& config,
                                                         const ShmArena& arena, Device* device) {
  WS_ASSIGN_OR_RETURN(KvCacheConfig resolved, ResolveKvCacheConfig(config));
  std::unique_ptr<KvCache> cache(new KvCache(resolved, device));
  for (KvRegion region : {KvRegion::kCpuCompute, KvRegion::kGpuTransfer}) {
    WS_ASSIGN_OR_RETURN(absl::Span<std::byte> bytes, arena.Region(KvRegionName(region)));
    const uint64_t slots = RegionSlots(resolved.geometry, bytes.size());
    if (slots != resolved.region_slots(region)) {
      return absl::FailedPreconditionError(
          absl::StrCat("arena region ", KvRegionName(region), " has ", bytes.size(), " B = ", slots,
                       " blocks of ", resolved.geometry.block_bytes(), " B, the KV config expects ",
                       resolved.region_slots(region)));
    }
    cache->region_base_[KvRegionIndex(region)] = bytes.data();
    cache->region_slots_[KvRegionIndex(region)] = static_cast<uint32_t>(slots);
  }
  const uint64_t transfer_bytes = resolved.region_used_bytes(KvRegion::kGpuTransfer);
  if (transfer_bytes > 0) {
    std::byte* base = cache->region_base_[KvRegionIndex(KvRegion::kGpuTransfer)];
    WS_RETURN_IF_ERROR(device->RegisterHost(base, transfer_bytes));
    cache->pinned_ = base;
  }
  // The GPU reads the CPU-compute region for the sequences whose step says so
  // (SequenceStep.gpu_reads_cpu_blocks: prefill chunks it attends whole, and decode steps
  // where the scheduler hands the CPU's blocks to the GPU). Pinned, those reads run at the
  // DMA rate; if the device refuses (memory limits), they are pageable copies: correct,
  // slower.
  const uint64_t cpu_bytes = resolved.region_used_bytes(KvRegion::kCpuCompute);
  if (cpu_bytes > 0 && device->is_cuda()) {
    std::byte* base = cache->region_base_[KvRegionIndex(KvRegion::kCpuCompute)];
    absl::Status pinned = device->RegisterHost(base, cpu_bytes);
    if (pinned.ok()) {
      cache->pinned_cpu_ = base;
    } else {
      WS_LOG(WARNING) << "the CPU-compute region stays pageable (" << pinned
                      << "): the GPU's reads of it are slower";
    }
  }
  WS_ASSIGN_OR_RETURN(cache->window_, DeviceBuffer::Allocate(device, resolved.window_bytes()));
  for (int i = 0; i < 2; ++i) {
    WS_ASSIGN_OR_RETURN(cache->pingpong_buffers_[i],
                        DeviceBuffer::Allocate(device, resolved.pingpong_buffer_bytes()));
    cache->pingpong_[i] = static_cast<std::byte*>(cache->pingpong_buffers_[i].data());
  }
  cache->flush_pending_.assign(resolved.max_sequences, false);
  WS_LOG(INFO) << "KV cache on " << device->name() << ": " << resolved.DebugString();
  return cache;
}

KvCache::~KvCache() {
  if (pinned_ == nullptr && pinned_cpu_ == nullptr) return;
  // Unpinned only once no copy can be in flight; each region on its own (one failing does
  // not leave the other pinned).
  const absl::Status synced = device_->SynchronizeAll();
  if (!synced.ok()) {
    WS_LOG(WARNING) << "KV cache shutdown: " << synced << "; the regions stay pinned";
    return;
  }
  for (std::byte* base : {pinned_, pinned_cpu_}) {
    if (base == nullptr) continue;
    if (absl::Status status = device_->UnregisterHost(base); !status.ok()) {
      WS_LOG(WARNING) << "KV cache shutdown: " << status;
    }
  }
}

std::byte* KvCache::BlockAddress(KvBlockRef block, uint32_t layer) const {
  const int r = KvRegionIndex(block.region);
  return region_base_[r] + RegionBlockOffset(config_.geometry, region_slots_[r], block.slot, layer);
}

std::byte* KvCache::WindowAddress(uint32_t window_slot, uint32_t layer) const {
  return static_cast<std::byte*>(window_.data()) +
         (uint64_t{layer} * config_.max_sequences + window_slot) * config_.window_tokens *
             config_.geometry.bytes_per_token_layer();
}

absl::Status KvCache::ValidateBlock(KvBlockRef block, uint32_t layer) const {
  const int r = KvRegionIndex(block.region);
  if (r < 0 || r >= kNumKvRegions || block.slot >= region_slots_[r] ||
      layer >= config_.geometry.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block (region ", r, ", slot ", block.slot, ", layer ", layer,
                     ") is outside the cache (", r >= 0 && r < kNumKvRegions ? region_slots_[r] : 0,
                     " slots, ", config_.geometry.num_layers, " layers)"));
  }
  return absl::OkStatus();
}

absl::Status KvCache::ValidateWindowSlot(uint32_t window_slot) const {
  if (window_slot >= config_.max_sequences) {
    return absl::InvalidArgumentError(
        absl::StrCat("D-window slot ", window_slot, " of ", config_.max_sequences));
  }
  return absl::OkStatus();
}

absl::Status KvCache::WaitForFlushOf(uint32_t window_slot) {
  if (!flush_pending_[window_slot]) return absl::OkStatus();
  // One wait covers every flush queued so far.
  WS_RETURN_IF_ERROR(device_->StreamWait(Stream::kCompute, Stream::kCopyOut));
  flush_pending_.assign(flush_pending_.size(), false);
  return absl::OkStatus();
}

void KvCache::NoteRegionWrite(absl::Span<const KvBlockRef> blocks) {
  if (!early_.valid) return;
  for (const KvBlockRef& block : blocks) {
    for (const EarlyRound& round : early_.rounds) {
      for (const TransferRun& run : round.runs) {
        if (run.region == block.region && block.slot >= run.first_slot &&
            block.slot - run.first_slot < run.num_blocks) {
          early_.valid = false;
          return;
        }
      }
    }
  }
}

absl::Status KvCache::CopyBlocksToRegions(uint32_t layer, absl::Span<const KvBlockRef> blocks,
                                          const std::byte* device_src, uint64_t* copies,
                                          uint64_t* bytes) {
  const uint64_t lbb = config_.geometry.layer_block_bytes();
  size_t begin = 0;
  while (begin < blocks.size()) {
    size_t end = begin + 1;
    while (end < blocks.size() && blocks[end].region == blocks[begin].region &&
           blocks[end].slot == blocks[begin].slot + (end - begin)) {
      ++end;
    }
    const uint64_t run_bytes = (end - begin) * lbb;
    WS_RETURN_IF_ERROR(device_->CopyToHost(BlockAddress(blocks[begin], layer),
                                           device_src + begin * lbb, run_bytes, Stream::kCopyOut));
    ++*copies;
    *bytes += run_bytes;
    begin = end;
  }
  return absl::OkStatus();
}

absl::Status KvCache::WritePrefillLayer(uint32_t layer, absl::Span<const KvBlockRef> blocks,
                                        uint32_t window_slot, uint32_t window_tokens,
                                        const void* device_src) {
  WS_RETURN_IF_ERROR(ValidateWindowSlot(window_slot));
  if (window_tokens >= config_.block_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat("prefill tail of ", window_tokens,
                                                   " tokens must be < the block size ",
                                                   config_.block_tokens()));
  }
  for (const KvBlockRef& block : blocks) WS_RETURN_IF_ERROR(ValidateBlock(block, layer));
  const auto* src = static_cast<const std::byte*>(device_src);
  const uint64_t lbb = config_.geometry.layer_block_bytes();
  // The K/V were produced on kCompute.
  WS_RETURN_IF_ERROR(device_->StreamWait(Stream::kCopyOut, Stream::kCompute));
  NoteRegionWrite(blocks);
  WS_RETURN_IF_ERROR(
      CopyBlocksToRegions(layer, blocks, src, &stats_.prefill_copies, &stats_.prefill_bytes));
  if (window_tokens > 0) {
    WS_RETURN_IF_ERROR(WaitForFlushOf(window_slot));
    // The whole (partial) layer-block: its first window_tokens rows are the tail.
    WS_RETURN_IF_ERROR(device_->CopyOnDevice(WindowAddress(window_slot, layer),
                                             src + blocks.size() * lbb, lbb, Stream::kCompute));
  }
  return absl::OkStatus();
}

absl::Status KvCache::AppendToken(uint32_t window_slot, uint32_t position, uint32_t layer,
                                  const void* device_token_row) {
  const TokenAppend append{window_slot, position, device_token_row};
  return AppendTokens(layer, absl::MakeConstSpan(&append, 1));
}

absl::Status KvCache::AppendTokens(uint32_t layer, absl::Span<const TokenAppend> appends) {
  if (layer >= config_.geometry.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("append to layer ", layer, " of ", config_.geometry.num_layers));
  }
  for (const TokenAppend& append : appends) {
    WS_RETURN_IF_ERROR(ValidateWindowSlot(append.window_slot));
    if (append.position >= config_.window_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("append at window position ", append.position,
                                                     " of ", config_.window_tokens, ", layer ",
                                                     layer, " of ", config_.geometry.num_layers));
    }
  }
  const uint32_t bt = config_.block_tokens();
  pieces_.clear();
  for (const TokenAppend& append : appends) {
    WS_RETURN_IF_ERROR(WaitForFlushOf(append.window_slot));
    std::byte* block = WindowAddress(append.window_slot, layer) +
                       uint64_t{append.position / bt} * config_.geometry.layer_block_bytes();
    const auto* row = static_cast<const std::byte*>(append.device_token_row);
    ForEachTokenPiece(config_.geometry, append.position % bt,
                      [&](uint64_t row_offset, uint64_t block_offset, uint64_t bytes) {
                        pieces_.push_back({block + block_offset, row + row_offset, bytes});
                      });
  }
  return device_->CopyPiecesOnDevice(pieces_, Stream::kCompute);
}

absl::Status KvCache::FlushWindow(uint32_t window_slot, absl::Span<const KvBlockRef> blocks) {
  WS_RETURN_IF_ERROR(ValidateWindowSlot(window_slot));
  if (blocks.size() != config_.blocks_per_window()) {
    return absl::InvalidArgumentError(
        absl::StrCat("flush needs ", config_.blocks_per_window(), " blocks, got ", blocks.size()));
  }
  for (const KvBlockRef& block : blocks) WS_RETURN_IF_ERROR(ValidateBlock(block, 0));
  // The window's last appends were queued on kCompute.
  WS_RETURN_IF_ERROR(device_->StreamWait(Stream::kCopyOut, Stream::kCompute));
  NoteRegionWrite(blocks);  // the slots are the same for every layer
  for (uint32_t layer = 0; layer < config_.geometry.num_layers; ++layer) {
    WS_RETURN_IF_ERROR(CopyBlocksToRegions(layer, blocks, WindowAddress(window_slot, layer),
                                           &stats_.flush_copies, &stats_.flush_bytes));
  }
  flush_pending_[window_slot] = true;
  return absl::OkStatus();
}

absl::Status KvCache::WaitForWrites() { return device_->Synchronize(Stream::kCopyOut); }

absl::StatusOr<int> KvCache::IssueRuns(absl::Span<const TransferRun> runs, uint32_t layer,
                                        int buffer_index, std::pair<int, int>* markers) {
  const uint64_t lbb = config_.geometry.layer_block_bytes();
  std::byte* buffer = pingpong_[buffer_index];
  *markers = {-1, -1};
  if (time_rounds_ && !runs.empty()) {
    WS_ASSIGN_OR_RETURN(markers->first, device_->RecordMarker(Stream::kCopyIn));
  }
  for (const TransferRun& run : runs) {
    const uint64_t bytes = uint64_t{run.num_blocks} * lbb;
    WS_RETURN_IF_ERROR(device_->CopyToDevice(
        buffer + uint64_t{run.pingpong_block} * lbb,
        BlockAddress({run.region, run.first_slot}, layer), bytes, Stream::kCopyIn));
    ++stats_.transfer_copies;
    stats_.transfer_bytes += bytes;
  }
  if (markers->first >= 0) {
    WS_ASSIGN_OR_RETURN(markers->second, device_->RecordMarker(Stream::kCopyIn));
  }
  return device_->RecordFence(Stream::kCopyIn);
}

absl::Status KvCache::IssueRound(uint32_t round) {
  if (round_markers_.size() <= round) round_markers_.resize(round + 1, {-1, -1});
  if (round_fences_.size() <= round) round_fences_.resize(round + 1, -1);
  WS_ASSIGN_OR_RETURN(round_fences_[round],
                      IssueRuns(plan_->chunks[plan_->chunk_of_round(round)].runs,
                                plan_->layer_of_round(round), static_cast<int>(round % 2),
                                &round_markers_[round]));
  issued_round_ = round;
  return absl::OkStatus();
}

absl::Status KvCache::QueueEarlyRounds(const TransferPlan& plan) {
  DropEarlyRounds();
  if (plan.num_rounds() == 0) return absl::OkStatus();
  if (plan.num_layers != config_.geometry.num_layers ||
      plan.layer_block_bytes != config_.geometry.layer_block_bytes()) {
    return absl::InvalidArgumentError("early rounds: the plan was built for another KV config");
  }
  // Region writes queued so far land first (only later ones are checked against their
  // runs), and both buffers' last readers are attentions queued already.
  WS_RETURN_IF_ERROR(device_->StreamWait(Stream::kCopyIn, Stream::kCopyOut));
  WS_RETURN_IF_ERROR(device_->StreamWait(Stream::kCopyIn, Stream::kCompute));
  const uint32_t count = std::min<uint32_t>(2, plan.num_rounds());
  for (uint32_t round = 0; round < count; ++round) {
    EarlyRound early;
    early.layer = plan.layer_of_round(round);
    early.runs = plan.chunks[plan.chunk_of_round(round)].runs;
    absl::StatusOr<int> fence =
        IssueRuns(early.runs, early.layer,
                  /*buffer_index=*/static_cast<int>(round % 2), &early.markers);
    if (!fence.ok()) {  // a round queued in part is of no use to anyone
      DropEarlyRounds();
      return fence.status();
    }
    early.fence = *fence;
    early_.rounds.push_back(std::move(early));
  }
  early_.valid = true;
  return absl::OkStatus();
}

absl::Status KvCache::ResetRoundMarkers() {
  std::fill(round_markers_.begin(), round_markers_.end(), std::pair<int, int>{-1, -1});
  for (EarlyRound& early : early_.rounds) early.markers = {-1, -1};
  return device_->ResetMarkers();
}

void KvCache::DropEarlyRounds() {
  stats_.early_rounds_wasted += early_.rounds.size();
  stats_.early_rounds_unoffered += early_.rounds.size();
  early_.rounds.clear();
  early_.valid = false;
}

absl::Status KvCache::BeginTransfer(const TransferPlan& plan) {
  if (plan.num_layers != config_.geometry.num_layers ||
      plan.layer_block_bytes != config_.geometry.layer_block_bytes()) {
    return absl::InvalidArgumentError("transfer plan was built for another KV config");
  }
  for (const TransferChunk& chunk : plan.chunks) {
    if (chunk.num_blocks > config_.pingpong_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("transfer chunk of ", chunk.num_blocks,
                                                     " blocks exceeds the ping-pong buffer of ",
                                                     config_.pingpong_blocks));
    }
    for (const TransferRun& run : chunk.runs) {
      if (uint64_t{run.first_slot} + run.num_blocks > region_slots_[KvRegionIndex(run.region)]) {
        return absl::InvalidArgumentError(
            absl::StrCat("transfer run at slot ", run.first_slot, " leaves the region"));
      }
    }
  }
  absl::Status begun = QueueFirstRounds(plan);
  // A failed copy (a device error) leaves no plan to ready rounds of, and no early rounds:
  // one may have been completed in part.
  if (!begun.ok()) EndTransfer();
  return begun;
}

absl::Status KvCache::QueueFirstRounds(const TransferPlan& plan) {
  plan_ = &plan;
  next_round_ = 0;
  issued_round_ = -1;
  transfer_missed_early_rounds_ = 0;
  if (plan.num_rounds() == 0) {
    DropEarlyRounds();
    return absl::OkStatus();
  }
  // Blocks flushed or prefilled into the transfer region must land before they are
  // read back, and the previous step's attention must be done with buffer 0.
  WS_RETURN_IF_ERROR(device_->StreamWait(Stream::kCopyIn, Stream::kCopyOut));
  WS_RETURN_IF_ERROR(device_->StreamWait(Stream::kCopyIn, Stream::kCompute));
  round_markers_.assign(plan.num_rounds(), {-1, -1});
  round_fences_.assign(plan.num_rounds(), -1);
  // The early rounds are in flight already, queued before this step's region writes, none
  // of which went into their slots. This plan's first rounds take them (in order) where
  // they are of the same layer and copied some of the blocks the round wants to the
  // positions it wants them at; what they lack is copied behind them, into the same buffer
  // (a step that reads the CPU-compute blocks too after one that did not, or the reverse).
  uint32_t taken = 0;
  while (early_.valid && taken < early_.rounds.size() && taken < plan.num_rounds() &&
         early_.rounds[taken].layer == plan.layer_of_round(taken)) {
    const EarlyRound& early = early_.rounds[taken];
    const TransferChunk& chunk = plan.chunks[plan.chunk_of_round(taken)];
    std::vector<TransferRun> missing;
    if (early.runs != chunk.runs) {
      missing = MissingRuns(early.runs, chunk.runs);
      uint64_t missing_blocks = 0;
      for (const TransferRun& run : missing) missing_blocks += run.num_blocks;
      if (missing_blocks == chunk.num_blocks) break;  // none of its blocks is of use
    }
    round_fences_[taken] = early.fence;
    round_markers_[taken] = early.markers;
    if (!missing.empty()) {
      // The round's DMA span is then that of the copies this step added (the early round's
      // began at the last step's end, before the gap between the steps).
      WS_ASSIGN_OR_RETURN(round_fences_[taken],
                          IssueRuns(missing, early.layer, static_cast<int>(taken % 2),
                                    &round_markers_[taken]));
      ++stats_.early_rounds_completed;
      ++transfer_missed_early_rounds_;
    }
    ++taken;
  }
  transfer_missed_early_rounds_ += static_cast<uint32_t>(early_.rounds.size() - taken);
  stats_.early_rounds_taken += taken;
  stats_.early_rounds_wasted += early_.rounds.size() - taken;
  (early_.valid ? stats_.early_rounds_differed : stats_.early_rounds_overwritten) +=
      early_.rounds.size() - taken;
  early_.rounds.clear();
  early_.valid = false;
  if (taken > 0) {
    issued_round_ = taken - 1;
    return absl::OkStatus();
  }
  return IssueRound(0);
}

absl::StatusOr<PingPongRound> KvCache::ReadyRound(uint32_t round, bool prefetch_next) {
  if (plan_ == nullptr || round != next_round_ || round >= plan_->num_rounds()) {
    return absl::FailedPreconditionError(
        absl::StrCat("ReadyRound(", round, "): expected round ", next_round_, " of ",
                     plan_ == nullptr ? 0 : plan_->num_rounds(), " after BeginTransfer"));
  }
  if (issued_round_ < static_cast<int64_t>(round)) {
    // Nobody prefetched it: queue it now, after round - 1's attention (its buffer's reader).
    WS_RETURN_IF_ERROR(device_->StreamWait(Stream::kCopyIn, Stream::kCompute));
    WS_RETURN_IF_ERROR(IssueRound(round));
  }
  // This round's copies only: the next ones may be queued behind them already.
  WS_RETURN_IF_ERROR(device_->WaitFence(Stream::kCompute, round_fences_[round]));
  ++next_round_;
  if (prefetch_next) WS_RETURN_IF_ERROR(PrefetchNext());
  const uint32_t chunk = plan_->chunk_of_round(round);
  return PingPongRound{.layer = plan_->layer_of_round(round),
                       .chunk = chunk,
                       .buffer_index = static_cast<int>(round % 2),
                       .buffer = pingpong_[round % 2],
                       .chunk_plan = &plan_->chunks[chunk]};
}

absl::Status KvCache::PrefetchNext() {
  if (plan_ == nullptr || next_round_ >= plan_->num_rounds() ||
      issued_round_ >= static_cast<int64_t>(next_round_)) {
    return absl::OkStatus();
  }
  // The other buffer was read by the previous round's attention, queued before this call:
  // the copies wait for the compute work queued so far, then overlap what follows.
  WS_RETURN_IF_ERROR(device_->StreamWait(Stream::kCopyIn, Stream::kCompute));
  return IssueRound(next_round_);
}

absl::Status KvCache::PrefetchAfterAttention() {
  if (plan_ == nullptr || next_round_ == 0) return absl::OkStatus();
  const int64_t last = std::min<int64_t>(int64_t{next_round_} + 1, plan_->num_rounds() - 1);
  if (issued_round_ >= last) return absl::OkStatus();
  // Round next_round_ + 1 goes into the buffer of the last readied round, whose attention is
  // queued now; round next_round_ into the other one, read by an earlier round's attention.
  WS_RETURN_IF_ERROR(device_->StreamWait(Stream::kCopyIn, Stream::kCompute));
  for (int64_t round = issued_round_ + 1; round <= last; ++round) {
    WS_RETURN_IF_ERROR(IssueRound(static_cast<uint32_t>(round)));
  }
  return absl::OkStatus();
}

}  // namespace writescope::gpu
