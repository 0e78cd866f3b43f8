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
