#include "cpu_worker/kv_view.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/data_plane.h"
#include "common/log.h"
#include "common/status.h"

namespace writescope::cpu {

absl::StatusOr<KvRegionView> KvRegionView::Create(const KvGeometry& geometry,
                                                  absl::Span<const std::byte> region) {
  if (geometry.num_layers == 0 || geometry.layer_block_bytes() == 0) {
    return absl::InvalidArgumentError("KV view: empty geometry");
  }
  const uint64_t slots = RegionSlots(geometry, region.size());
  if (slots > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("KV view: ", slots, " slots"));
  }
  return KvRegionView(geometry, region, static_cast<uint32_t>(slots));
}

absl::StatusOr<KvRegionView> KvRegionView::Open(const ShmArena& arena, const KvGeometry& geometry) {
  WS_ASSIGN_OR_RETURN(absl::Span<std::byte> region, arena.Region(kCpuComputeRegion));
  return Create(geometry, region);
}

absl::Status KvRegionView::Check(uint32_t slot, uint32_t layer) const {
  if (slot >= num_slots_ || layer >= geometry_.num_layers) {
    return absl::OutOfRangeError(absl::StrCat("CPU KV block (slot ", slot, ", layer ", layer,
                                              ") outside ", num_slots_, " slots x ",
                                              geometry_.num_layers, " layers"));
  }
  return absl::OkStatus();
}

const std::byte* KvRegionView::Address(uint32_t slot, uint32_t layer) const {
  WS_CHECK(slot < num_slots_ && layer < geometry_.num_layers)
      << "slot " << slot << " layer " << layer;
  return region_.data() + RegionBlockOffset(geometry_, num_slots_, slot, layer);
}

absl::Span<const std::byte> KvRegionView::LayerBlock(uint32_t slot, uint32_t layer) const {
  return {Address(slot, layer), geometry_.layer_block_bytes()};
}

const uint16_t* KvRegionView::Keys(uint32_t slot, uint32_t layer, uint32_t head) const {
  WS_CHECK(geometry_.kind == AttentionKind::kGqa && head < geometry_.num_kv_heads);
  return reinterpret_cast<const uint16_t*>(Address(slot, layer)) + geometry_.k_offset(head, 0);
}

const uint16_t* KvRegionView::Values(uint32_t slot, uint32_t layer, uint32_t head) const {
  WS_CHECK(geometry_.kind == AttentionKind::kGqa && head < geometry_.num_kv_heads);
  return reinterpret_cast<const uint16_t*>(Address(slot, layer)) + geometry_.v_offset(head, 0);
}

const uint16_t* KvRegionView::Latents(uint32_t slot, uint32_t layer) const {
  WS_CHECK(geometry_.kind == AttentionKind::kMla);
  return reinterpret_cast<const uint16_t*>(Address(slot, layer));
}

}  // namespace writescope::cpu
