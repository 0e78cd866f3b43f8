// A read-only, in-place view of the arena's CPU-compute region for the CPU attention
// kernels: no copy, no re-format. Layout (common/kv_layout.h): (slot, layer) at
// (layer * num_slots + slot) * layer_block_bytes; inside, GQA K[heads][block_tokens]
// [head_dim] then V, MLA latent[block_tokens][kv_lora_rank + rope_dim], bf16 (the
// pointers below are uint16_t bit patterns). Each head's keys are contiguous rows of
// head_dim values: the SIMD kernels stream them.
//
// The bytes of a block are valid once the coordinator has announced it (after the
// gpu_worker's KvCache::WaitForWrites); a freed slot may be overwritten.
#ifndef WRITESCOPE_CPU_WORKER_KV_VIEW_H_
#define WRITESCOPE_CPU_WORKER_KV_VIEW_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kv_layout.h"
#include "common/shm_arena.h"

namespace writescope::cpu {

class KvRegionView {
 public:
  KvRegionView() = default;
  // A view of `region` holding RegionSlots(geometry, region.size()) slots.
  static absl::StatusOr<KvRegionView> Create(const KvGeometry& geometry,
                                             absl::Span<const std::byte> region);
  // The cpu_compute region of a mapped arena. The arena must outlive the view.
  static absl::StatusOr<KvRegionView> Open(const ShmArena& arena, const KvGeometry& geometry);

  const KvGeometry& geometry() const { return geometry_; }
  uint32_t num_slots() const { return num_slots_; }

  // OUT_OF_RANGE unless slot < num_slots and layer < num_layers.
  absl::Status Check(uint32_t slot, uint32_t layer) const;

  // One layer-block (layer_block_bytes). Checked with WS_CHECK: validate slots that come
  // from a plan with Check first.
  absl::Span<const std::byte> LayerBlock(uint32_t slot, uint32_t layer) const;
  // GQA: K or V of one head, [block_tokens][head_dim].
  const uint16_t* Keys(uint32_t slot, uint32_t layer, uint32_t head) const;
  const uint16_t* Values(uint32_t slot, uint32_t layer, uint32_t head) const;
  // MLA: [block_tokens][kv_lora_rank + rope_dim].
  const uint16_t* Latents(uint32_t slot, uint32_t layer) const;

 private:
  KvRegionView(const KvGeometry& geometry, absl::Span<const std::byte> region, uint32_t slots)
      : geometry_(geometry), region_(region), num_slots_(slots) {}
  const std::byte* Address(uint32_t slot, uint32_t layer) const;

  KvGeometry geometry_;
  absl::Span<const std::byte> region_;
  uint32_t num_slots_ = 0;
};

}  // namespace writescope::cpu

#endif  // WRITESCOPE_CPU_WORKER_KV_VIEW_H_
