#include "common/step_layout.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace writescope {

uint64_t StepDims::max_bytes_per_token() const {
  return std::max({attention_bytes(1), attention_result_bytes(1), experts_bytes(1),
                   experts_result_bytes(1)});
}

StepDims StepDimsFor(const ModelConfig& config) {
  StepDims d;
  d.num_heads = config.num_heads;
  d.hidden = config.hidden_size;
  d.top_k = config.num_experts_per_tok;
  if (config.is_mla()) {
    d.q_dim = config.kv_lora_rank + config.qk_rope_head_dim;
    d.o_dim = config.kv_lora_rank;
  } else {
    d.q_dim = config.head_dim;
    d.o_dim = config.head_dim;
  }
  return d;
}

absl::StatusOr<StepLayout> MakeStepLayout(const internal::StepPlan& plan,
                                          const KvCacheConfig& config) {
  const uint32_t bt = config.geometry.block_tokens;
  StepLayout layout;
  layout.step_id = plan.step_id();
  absl::flat_hash_set<uint64_t> seen;
  absl::flat_hash_set<uint32_t> windows;
  // Every (region, slot) the step reads, and those it writes: a slot is one block.
  absl::flat_hash_set<uint64_t> read_slots, written_slots;
  auto key = [](KvBlockRef ref) {
    return (static_cast<uint64_t>(KvRegionIndex(ref.region)) << 32) | ref.slot;
  };
  auto to_ref = [&](const internal::BlockRun& run, uint32_t id) -> absl::StatusOr<KvBlockRef> {
    KvBlockRef ref;
    if (run.region() == internal::REGION_CPU_COMPUTE) {
      ref.region = KvRegion::kCpuCompute;
    } else if (run.region() == internal::REGION_GPU_TRANSFER) {
      ref.region = KvRegion::kGpuTransfer;
    } else {
      return absl::InvalidArgumentError("a block run without a region");
    }
    if (id >= config.region_slots(ref.region)) {
      return absl::InvalidArgumentError(absl::StrCat("block slot ", id, " is outside region ",
                                                     KvRegionName(ref.region), " of ",
                                                     config.region_slots(ref.region), " slots"));
    }
    ref.slot = id;
    return ref;
  };
  for (const internal::SequenceStep& step : plan.sequences()) {
    StepSequenceLayout s;
    s.seq_id = step.seq_id();
    const std::string who = absl::StrCat("sequence ", s.seq_id, ": ");
    if (!seen.insert(s.seq_id).second) {
      return absl::InvalidArgumentError(absl::StrCat(who, "appears twice in step ", plan.step_id()));
    }
    s.prefill = step.prefill();
    s.window_slot = step.window_slot();
    s.position = step.position();
    s.num_tokens = step.num_tokens();
    s.dwindow_tokens = step.dwindow_tokens();
    s.gpu_reads_cpu_blocks = step.gpu_reads_cpu_blocks();
    if (s.window_slot >= config.max_sequences || !windows.insert(s.window_slot).second) {
      return absl::InvalidArgumentError(absl::StrCat(who, "window slot ", s.window_slot,
                                                     " is out of range or shared (max_sequences ",
                                                     config.max_sequences, ")"));
    }
    if (s.num_tokens == 0 || static_cast<uint32_t>(step.token_ids_size()) != s.num_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(who, step.token_ids_size(),
                                                     " token ids for num_tokens ", s.num_tokens));
    }
    uint64_t next_token = 0;
    for (const internal::BlockRun& run : step.blocks()) {
      for (uint32_t id : run.block_ids()) {
        auto ref = to_ref(run, id);
        if (!ref.ok()) return absl::InvalidArgumentError(absl::StrCat(who, ref.status().message()));
        if (!read_slots.insert(key(*ref)).second) {
          return absl::InvalidArgumentError(absl::StrCat(who, "block slot ", ref->slot, " of ",
                                                         KvRegionName(ref->region),
                                                         " appears twice in the step"));
        }
        const PlacedSlot placed{ref->slot, next_token};
        (ref->region == KvRegion::kCpuCompute && !s.gpu_reads_cpu_blocks ? s.cpu_blocks
                                                                          : s.transfer_blocks)
            .push_back(placed);
        s.blocks.push_back(*ref);
        next_token += bt;
      }
    }
    for (const internal::BlockRun& run : step.new_blocks()) {
      for (uint32_t id : run.block_ids()) {
        auto ref = to_ref(run, id);
        if (!ref.ok()) return absl::InvalidArgumentError(absl::StrCat(who, ref.status().message()));
        if (!written_slots.insert(key(*ref)).second) {
          return absl::InvalidArgumentError(absl::StrCat(who, "new block slot ", ref->slot,
                                                         " is written twice in the step"));
        }
        s.new_blocks.push_back(*ref);
      }
    }
    if (s.prefill) {
      if (s.position % bt != 0 || next_token != s.position || s.dwindow_tokens != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, "a prefill chunk at position ", s.position, " must start on a block boundary "
            "right after its ", s.blocks.size(), " blocks with an empty D-window"));
      }
      if (s.new_blocks.size() != s.num_tokens / bt) {
        return absl::InvalidArgumentError(absl::StrCat(who, s.new_blocks.size(),
                                                       " new blocks for a chunk of ", s.num_tokens,
                                                       " tokens"));
      }
      if (s.num_tokens % bt >= config.window_tokens) {
        return absl::InvalidArgumentError(absl::StrCat(who, "prefill tail exceeds the D-window"));
      }
    } else {
      const uint64_t flushed = s.new_blocks.size() * uint64_t{bt};
      if (s.num_tokens != 1) {
        return absl::InvalidArgumentError(absl::StrCat(who, "a decode step computes one token, not ",
                                                       s.num_tokens));
      }
      if (!s.new_blocks.empty() && flushed != config.window_tokens) {
        return absl::InvalidArgumentError(absl::StrCat(who, "a flush moves a whole D-window"));
      }
      // The flushed blocks are the last of `blocks`: they precede the window.
      if (next_token + s.dwindow_tokens != s.position || s.dwindow_tokens >= config.window_tokens ||
          (flushed > 0 && (s.dwindow_tokens != 0 || s.blocks.size() < s.new_blocks.size() ||
                           !std::equal(s.new_blocks.begin(), s.new_blocks.end(),
                                       s.blocks.end() - s.new_blocks.size())))) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, "decode at position ", s.position, " does not follow its ", s.blocks.size(),
            " blocks and ", s.dwindow_tokens, " D-window tokens (window ", config.window_tokens, ")"));
      }
    }
    s.token_offset = layout.total_tokens;
    layout.total_tokens += s.num_tokens;
    if (!s.cpu_blocks.empty()) {
      s.cpu_offset = layout.cpu_tokens;
      layout.cpu_tokens += s.num_tokens;
    }
    layout.cpu_host_tokens += s.cpu_blocks.size() * uint64_t{bt};
    layout.transfer_host_tokens += s.transfer_blocks.size() * uint64_t{bt};
    layout.sequences.push_back(std::move(s));
  }
  for (const StepSequenceLayout& s : layout.sequences) {
    if (!s.prefill) continue;  // a decode flush writes the blocks it then reads, by design
    for (const KvBlockRef& ref : s.new_blocks) {
      if (read_slots.contains(key(ref))) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, ": prefill writes "
                                                       "block slot ", ref.slot,
                                                       " that the step also reads"));
      }
    }
  }
  return layout;
}

absl::StatusOr<std::vector<uint64_t>> PathProbeBlocks(const internal::PathProbeRequest& request,
                                                      uint32_t block_tokens,
                                                      uint32_t max_sequences, uint64_t max_blocks,
                                                      absl::string_view limit) {
  if (request.tokens().empty()) return absl::InvalidArgumentError("probe: no sizes");
  if (request.sequences() < 1 || request.sequences() > max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("probe: sequences = ", request.sequences(),
                                                   " must be in [1, ", max_sequences, "]"));
  }
  if (request.repeats() < 1 || request.repeats() > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("probe: repeats = ", request.repeats(), " must be in [1, 100]"));
  }
  std::vector<uint64_t> point_blocks;
  for (int i = 0; i < request.tokens_size(); ++i) {
    const uint64_t tokens = request.tokens(i);
    const uint64_t blocks = tokens / block_tokens + (tokens % block_tokens != 0 ? 1 : 0);
    if (blocks == 0 || blocks > max_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("probe point ", i, ": ", tokens,
                                                     " tokens make ", blocks,
                                                     " blocks; it needs 1 to ", limit));
    }
    point_blocks.push_back(blocks);
  }
  return point_blocks;
}

StepLayout PathProbeLayout(uint64_t blocks, uint32_t sequences, uint32_t block_tokens,
                           KvRegion region, uint64_t first_slot, uint64_t region_slots) {
  const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(sequences, blocks));
  const bool cpu = region == KvRegion::kCpuCompute;
  StepLayout layout;
  layout.total_tokens = n;
  (cpu ? layout.cpu_host_tokens : layout.transfer_host_tokens) = blocks * block_tokens;
  if (cpu) layout.cpu_tokens = n;
  uint64_t next = first_slot;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t count = blocks / n + (i < blocks % n ? 1 : 0);
    StepSequenceLayout s;
    s.seq_id = i;
    s.window_slot = i;
    s.position = count * block_tokens;
    s.num_tokens = 1;
    s.token_offset = i;
    if (cpu) s.cpu_offset = i;
    for (uint64_t j = 0; j < count; ++j, ++next) {
      const auto slot = static_cast<uint32_t>(region_slots > 0 ? next % region_slots : next);
      (cpu ? s.cpu_blocks : s.transfer_blocks).push_back({slot, j * block_tokens});
      s.blocks.push_back({region, slot});
    }
    layout.sequences.push_back(std::move(s));
  }
  return layout;
}

}  // namespace writescope
