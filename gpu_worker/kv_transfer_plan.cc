#include "gpu_worker/kv_transfer_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace writescope::gpu {

uint64_t TransferPlan::blocks_per_layer() const {
  uint64_t blocks = 0;
  for (const TransferChunk& chunk : chunks) blocks += chunk.num_blocks;
  return blocks;
}

uint64_t TransferPlan::copies_per_layer() const {
  uint64_t copies = 0;
  for (const TransferChunk& chunk : chunks) copies += chunk.runs.size();
  return copies;
}

std::vector<TransferRun> MissingRuns(absl::Span<const TransferRun> copied,
                                     absl::Span<const TransferRun> wanted) {
  // Copied runs by (region, first slot); they do not overlap, so their ends ascend too.
  std::vector<TransferRun> sorted(copied.begin(), copied.end());
  const auto key = [](const TransferRun& r) {
    return std::pair<int, uint64_t>(static_cast<int>(r.region), r.first_slot);
  };
  std::sort(sorted.begin(), sorted.end(),
            [&](const TransferRun& a, const TransferRun& b) { return key(a) < key(b); });
  std::vector<TransferRun> missing;
  const auto add = [&](const TransferRun& w, uint64_t begin, uint64_t end) {
    if (begin >= end) return;
    missing.push_back({.first_slot = static_cast<uint32_t>(begin),
                       .num_blocks = static_cast<uint32_t>(end - begin),
                       .pingpong_block = static_cast<uint32_t>(w.pingpong_block + (begin - w.first_slot)),
                       .region = w.region});
  };
  for (const TransferRun& w : wanted) {
    const uint64_t w_end = uint64_t{w.first_slot} + w.num_blocks;
    // The first copied run of this region that ends after w's first slot.
    auto it = std::partition_point(sorted.begin(), sorted.end(), [&](const TransferRun& c) {
      return static_cast<int>(c.region) < static_cast<int>(w.region) ||
             (c.region == w.region && uint64_t{c.first_slot} + c.num_blocks <= w.first_slot);
    });
    uint64_t at = w.first_slot;  // w's slots before `at` are accounted for
    for (; it != sorted.end() && it->region == w.region && it->first_slot < w_end; ++it) {
      // Covered only where the copied run puts the slots where w wants them.
      if (int64_t{it->pingpong_block} - it->first_slot != int64_t{w.pingpong_block} - w.first_slot) {
        continue;
      }
      const uint64_t begin = std::max<uint64_t>(it->first_slot, w.first_slot);
      const uint64_t end = std::min<uint64_t>(uint64_t{it->first_slot} + it->num_blocks, w_end);
      add(w, at, begin);
      at = std::max(at, end);
    }
    add(w, at, w_end);
  }
  return missing;
}

absl::StatusOr<TransferPlan> BuildTransferPlan(const KvCacheConfig& config,
                                               absl::Span<const StepSequence> batch) {
  struct Needed {
    int region;  // KvRegionIndex
    uint32_t slot;
    uint32_t sequence_index;
    uint32_t block_index;
  };
  std::vector<Needed> needed;
  // The sort rank of a region: the GPU-transfer region first (kv_transfer_plan.h).
  auto rank = [](int region) { return region == KvRegionIndex(KvRegion::kGpuTransfer) ? 0 : 1; };
  for (uint32_t s = 0; s < batch.size(); ++s) {
    const std::vector<KvBlockRef>& blocks = batch[s].blocks;
    for (uint32_t b = 0; b < blocks.size(); ++b) {
      const KvRegion region = blocks[b].region;
      if (region != KvRegion::kGpuTransfer &&
          !(region == KvRegion::kCpuCompute && batch[s].read_cpu_blocks)) {
        continue;
      }
      const uint32_t region_slots = config.region_slots(region);
      if (blocks[b].slot >= region_slots) {
        return absl::InvalidArgumentError(absl::StrCat(
            "transfer plan: sequence ", s, " block ", b, " names slot ", blocks[b].slot, " of ",
            KvRegionName(region), ", a region of ", region_slots, " slots"));
      }
      needed.push_back({KvRegionIndex(region), blocks[b].slot, s, b});
    }
  }
  std::sort(needed.begin(), needed.end(), [&rank](const Needed& a, const Needed& b) {
    return std::pair(rank(a.region), a.slot) < std::pair(rank(b.region), b.slot);
  });
  for (size_t i = 1; i < needed.size(); ++i) {
    if (needed[i].region == needed[i - 1].region && needed[i].slot == needed[i - 1].slot) {
      return absl::InvalidArgumentError(
          absl::StrCat("transfer plan: slot ", needed[i].slot, " is named twice (sequence ",
                       needed[i - 1].sequence_index, " and ", needed[i].sequence_index, ")"));
    }
  }

  TransferPlan plan;
  plan.num_layers = config.geometry.num_layers;
  plan.layer_block_bytes = config.geometry.layer_block_bytes();
  const uint32_t capacity = config.pingpong_blocks;
  if (capacity == 0 && !needed.empty()) {  // the chunks below would never end
    return absl::InvalidArgumentError("transfer plan: the ping-pong buffers hold no block");
  }
  for (size_t begin = 0; begin < needed.size(); begin += capacity) {
    const size_t end = std::min(needed.size(), begin + capacity);
    TransferChunk& chunk = plan.chunks.emplace_back();
    chunk.num_blocks = static_cast<uint32_t>(end - begin);
    for (size_t i = begin; i < end; ++i) {
      const uint32_t position = static_cast<uint32_t>(i - begin);
      const KvRegion region = static_cast<KvRegion>(needed[i].region);
      if (!chunk.runs.empty() && chunk.runs.back().region == region &&
          chunk.runs.back().first_slot + chunk.runs.back().num_blocks == needed[i].slot) {
        ++chunk.runs.back().num_blocks;
      } else {
        chunk.runs.push_back({needed[i].slot, 1, position, region});
      }
      chunk.entries.push_back({needed[i].sequence_index, needed[i].block_index, position});
    }
    std::sort(chunk.entries.begin(), chunk.entries.end(),
              [](const PingPongEntry& a, const PingPongEntry& b) {
                return std::tie(a.sequence_index, a.block_index) <
                       std::tie(b.sequence_index, b.block_index);
              });
  }
  return plan;
}

}  // namespace writescope::gpu
