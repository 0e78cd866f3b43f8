// How one step's tensors are laid out on the data plane between the workers.
//
// Both workers receive the same StepPlan (over gRPC) and derive the same StepLayout from
// it, so the per-layer messages carry raw tensors and only a DataPlaneHeader says what they
// are (common/data_plane_messages.h). Per layer of a step:
//
//   gpu -> cpu  kAttention        q of the CPU-attended tokens, bf16
//                                 [cpu_tokens][num_heads][q_dim]
//   cpu -> gpu  kAttentionResult  their partial states over the CPU-compute region:
//                                 o fp32 [cpu_tokens][num_heads][o_dim], then
//                                 lse fp32 [cpu_tokens][num_heads]
//   gpu -> cpu  kExperts          (MoE layers) h fp32 [tokens][hidden], expert ids int32
//                                 [tokens][top_k], route weights fp32 [tokens][top_k]
//   cpu -> gpu  kExpertsResult    y fp32 [tokens][hidden] (the weighted routed-expert sum)
// and once at the end gpu -> cpu kStepEnd (so the cpu_worker's RunStep returns), or
// cpu -> gpu kError (payload: the status code and message) when the CPU side fails.
//
// GQA: q_dim = o_dim = head_dim. MLA (absorbed): q_dim = kv_lora_rank + rope_dim,
// o_dim = kv_lora_rank (latent-space output; the gpu_worker applies W_UV after the merge).
// "CPU-attended tokens": the tokens, in step order, of the sequences that have blocks in
// the CPU-compute region; the others are not sent.
#ifndef WRITESCOPE_COMMON_STEP_LAYOUT_H_
#define WRITESCOPE_COMMON_STEP_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/kv_config.h"
#include "common/model_config.h"
#include "writescope/internal/worker.pb.h"

namespace writescope {

// Per-token widths of the step messages for one model.
struct StepDims {
  int64_t num_heads = 0;
  int64_t q_dim = 0;
  int64_t o_dim = 0;
  int64_t hidden = 0;
  int64_t top_k = 0;

  uint64_t attention_bytes(uint64_t tokens) const { return tokens * num_heads * q_dim * 2; }
  uint64_t attention_result_bytes(uint64_t tokens) const {
    return tokens * num_heads * (o_dim + 1) * 4;
  }
  uint64_t experts_bytes(uint64_t tokens) const { return tokens * (hidden * 4 + top_k * 8); }
  uint64_t experts_result_bytes(uint64_t tokens) const { return tokens * hidden * 4; }
  // The largest per-token payload of any message: a step of T tokens fits a channel
  // whose max message is >= header + T * this.
  uint64_t max_bytes_per_token() const;
};
StepDims StepDimsFor(const ModelConfig& config);

// One host-resident block a sequence attends: its slot and the position of its token 0.
struct PlacedSlot {
  uint32_t slot = 0;
  uint64_t first_token = 0;
};

struct StepSequenceLayout {
  uint64_t seq_id = 0;
  bool prefill = false;
  uint32_t window_slot = 0;
  uint64_t position = 0;      // of the first token computed this step
  uint32_t num_tokens = 0;
  uint32_t dwindow_tokens = 0;
  uint64_t token_offset = 0;  // of its first token in the step's token list
  // Host blocks it attends (all before `position`), by who attends them, in token order:
  // the cpu_worker its CPU-compute blocks in place, the GPU the transfer region's — and the
  // CPU-compute ones too when gpu_reads_cpu_blocks (cpu_blocks is then empty).
  std::vector<PlacedSlot> cpu_blocks;
  std::vector<PlacedSlot> transfer_blocks;
  bool gpu_reads_cpu_blocks = false;  // SequenceStep.gpu_reads_cpu_blocks
  // Every attended block in token order, both regions (the transfer plan's input).
  std::vector<KvBlockRef> blocks;
  // Blocks written this step (prefill: the chunk's full blocks; decode: the flush).
  std::vector<KvBlockRef> new_blocks;
  // Offset of its rows in the kAttention message, in tokens; only with cpu_blocks.
  uint64_t cpu_offset = 0;
};

struct StepLayout {
  uint64_t step_id = 0;
  uint64_t total_tokens = 0;
  uint64_t cpu_tokens = 0;  // rows of the kAttention message
  std::vector<StepSequenceLayout> sequences;
  // Host tokens attended per layer, by region.
  uint64_t cpu_host_tokens = 0;
  uint64_t transfer_host_tokens = 0;
};

// Validates `plan` against `config` and lays it out: INVALID_ARGUMENT naming the sequence
// for a slot outside its region, a window slot >= max_sequences, blocks that do not
// cover [0, position) exactly in order, token_ids that do not match num_tokens, a decode
// step of more than one token or one that overflows the D-window, a prefill chunk that does
// not start on a block boundary or whose new blocks do not match its full blocks, a
// sequence id twice.
absl::StatusOr<StepLayout> MakeStepLayout(const internal::StepPlan& plan,
                                          const KvCacheConfig& config);

// The path probes (worker.proto's ProbeGpuPath, ProbeCpuPath): each point's tokens in whole
// blocks of `block_tokens`. INVALID_ARGUMENT for no sizes, a point of 0 blocks or of more
// than `max_blocks` (`limit` names that bound in the message), sequences outside
// [1, max_sequences], repeats outside [1, 100].
absl::StatusOr<std::vector<uint64_t>> PathProbeBlocks(const internal::PathProbeRequest& request,
                                                      uint32_t block_tokens,
                                                      uint32_t max_sequences, uint64_t max_blocks,
                                                      absl::string_view limit);
// A probe point's decode step: `blocks` slots of `region` from `first_slot` on, in slot order
// (wrapping around at `region_slots`, 0: no wrap; blocks <= region_slots), over
// min(sequences, blocks) sequences of one decode token each (the first blocks % that count
// hold one block more). CPU-compute blocks are the CPU's (cpu_blocks, each sequence one
// attention row), GPU-transfer ones the GPU's (transfer_blocks); `blocks` lists both.
StepLayout PathProbeLayout(uint64_t blocks, uint32_t sequences, uint32_t block_tokens,
                           KvRegion region, uint64_t first_slot = 0, uint64_t region_slots = 0);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_STEP_LAYOUT_H_
