#include "kernels/attention.h"

#include "absl/strings/str_cat.h"

namespace writescope::kernels {

absl::Status GqaShape::Validate() const {
  if (num_q_heads <= 0 || num_kv_heads <= 0 || head_dim <= 0 || block_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GQA shape must be positive: q_heads=", num_q_heads,
                     " kv_heads=", num_kv_heads, " head_dim=", head_dim,
                     " block_tokens=", block_tokens));
  }
  if (num_q_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("q_heads ", num_q_heads,
                                                   " is not a multiple of kv_heads ",
                                                   num_kv_heads));
  }
  if (head_dim > 512) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim ", head_dim, " > 512"));
  }
  if (!(softmax_scale > 0)) return absl::InvalidArgumentError("softmax_scale must be > 0");
  return absl::OkStatus();
}

absl::Status MlaShape::Validate() const {
  if (num_heads <= 0 || kv_lora_rank <= 0 || rope_dim < 0 || block_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MLA shape must be positive: heads=", num_heads, " kv_lora_rank=", kv_lora_rank,
        " rope_dim=", rope_dim, " block_tokens=", block_tokens));
  }
  if (!(softmax_scale > 0)) return absl::InvalidArgumentError("softmax_scale must be > 0");
  return absl::OkStatus();
}

absl::Status ValidateBlockList(const KvBlockList& list, int32_t block_tokens, bool positions) {
  if (list.num_blocks < 0) return absl::InvalidArgumentError("num_blocks < 0");
  if (list.num_blocks == 0) return absl::OkStatus();
  if (list.blocks == nullptr) return absl::InvalidArgumentError("blocks is null");
  if (list.last_block_tokens < 1 || list.last_block_tokens > block_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("last_block_tokens ", list.last_block_tokens,
                                                   " not in [1, ", block_tokens, "]"));
  }
  if (positions && list.block_positions == nullptr) {
    return absl::InvalidArgumentError("prefill needs block_positions");
  }
  return absl::OkStatus();
}

}  // namespace writescope::kernels
