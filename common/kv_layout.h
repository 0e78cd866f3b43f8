// Byte layout of KV blocks in the host regions and the GPU ping-pong buffers.
//
// A block holds `block_tokens` consecutive tokens of one sequence for EVERY layer, in
// exactly one region. Regions are laid out layer-major so that the blocks of one
// layer that a step needs are few large contiguous ranges (one DMA per run of
// consecutive slots):
//
//   region byte offset of (slot, layer) = (layer * num_slots + slot) * layer_block_bytes
//
// Within one (slot, layer), bf16 values:
//   GQA: K [kv_heads][block_tokens][head_dim], then V [kv_heads][block_tokens][head_dim]
//        (each head's keys are contiguous rows: SIMD-friendly for the CPU reader and
//        one contiguous tile for a GPU thread block)
//   MLA: latent [block_tokens][kv_lora_rank + rope_dim] (the compressed KV c_kv, then
//        the shared rope key k_pe; DeepSeek-V2-Lite: 512 + 64 = 576 values)
#ifndef WRITESCOPE_COMMON_KV_LAYOUT_H_
#define WRITESCOPE_COMMON_KV_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace writescope {

enum class AttentionKind { kGqa, kMla };

struct KvGeometry {
  AttentionKind kind = AttentionKind::kGqa;
  uint32_t num_layers = 0;
  uint32_t block_tokens = 256;
  // GQA
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  // MLA
  uint32_t kv_lora_rank = 0;
  uint32_t rope_dim = 0;

  // bf16 values of one token in one layer (K and V together for GQA).
  uint64_t values_per_token_layer() const {
    return kind == AttentionKind::kGqa ? uint64_t{2} * num_kv_heads * head_dim
                                       : uint64_t{kv_lora_rank} + rope_dim;
  }
  uint64_t bytes_per_token_layer() const { return 2 * values_per_token_layer(); }
  // KV bytes of one token over all layers.
  uint64_t bytes_per_token() const { return bytes_per_token_layer() * num_layers; }
  // Bytes of one block in one layer.
  uint64_t layer_block_bytes() const { return bytes_per_token_layer() * block_tokens; }
  // Bytes of one block over all layers.
  uint64_t block_bytes() const { return layer_block_bytes() * num_layers; }

  // GQA: offset in bf16 values, inside one (slot, layer), of K or V of
  // (head, token_in_block, 0).
  uint64_t k_offset(uint32_t head, uint32_t token) const {
    return (uint64_t{head} * block_tokens + token) * head_dim;
  }
  uint64_t v_offset(uint32_t head, uint32_t token) const {
    return uint64_t{num_kv_heads} * block_tokens * head_dim + k_offset(head, token);
  }
  // MLA: offset in bf16 values of the latent row of a token inside one (slot, layer).
  uint64_t latent_offset(uint32_t token) const {
    return uint64_t{token} * (uint64_t{kv_lora_rank} + rope_dim);  // the sum in 64 bits too
  }
};

// Byte offset of (slot, layer) in a region of `num_slots` block slots.
inline uint64_t RegionBlockOffset(const KvGeometry& g, uint64_t num_slots, uint32_t slot,
                                  uint32_t layer) {
  return (uint64_t{layer} * num_slots + slot) * g.layer_block_bytes();
}

// How many block slots a region of `region_bytes` holds.
inline uint64_t RegionSlots(const KvGeometry& g, uint64_t region_bytes) {
  return g.block_bytes() == 0 ? 0 : region_bytes / g.block_bytes();
}

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_KV_LAYOUT_H_
