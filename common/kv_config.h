// InplaceKVCache sizing: the geometry of a block (common/kv_layout.h), the host bytes
// of the two arena regions, the GPU KV budget (D-window + ping-pong) and the limits
// the coordinator and the gpu_worker must agree on.
//
// Budget model (device memory the gpu_worker allocates once, at start-up):
//
//   D-window  = max_sequences * window_tokens * bytes_per_token      (all layers)
//   ping-pong = 2 * pingpong_blocks * layer_block_bytes              (one layer each)
//   D-window + ping-pong <= gpu_kv_budget_bytes
//
// A ping-pong buffer holds `pingpong_blocks` layer-blocks: the GPU-transfer blocks of
// one layer of a decode batch, or a chunk of them when they do not fit (then one
// layer takes several ping-pong rounds; see gpu_worker/kv_transfer_plan.h).
#ifndef WRITESCOPE_COMMON_KV_CONFIG_H_
#define WRITESCOPE_COMMON_KV_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/data_plane.h"
#include "common/kv_layout.h"

namespace writescope {

// The two host regions a block can live in. Their arena region names are
// kCpuComputeRegion and kGpuTransferRegion (common/data_plane.h).
enum class KvRegion : uint8_t { kCpuCompute = 0, kGpuTransfer = 1 };
inline constexpr int kNumKvRegions = 2;

// The arena region name: "cpu_compute" or "gpu_transfer".
absl::string_view KvRegionName(KvRegion region);
inline int KvRegionIndex(KvRegion region) { return static_cast<int>(region); }

// One block slot of one host region. A block holds every layer of block_tokens
// tokens; its bytes for layer l are at RegionBlockOffset(g, region_slots, slot, l).
struct KvBlockRef {
  KvRegion region = KvRegion::kCpuCompute;
  uint32_t slot = 0;
  friend bool operator==(const KvBlockRef&, const KvBlockRef&) = default;
};

inline constexpr uint64_t kDefaultGqaKvBudgetBytes = uint64_t{2} << 30;         // 2 GiB
inline constexpr uint64_t kDefaultMlaKvBudgetBytes = (uint64_t{3} << 30) / 10;  // 0.3 GiB
inline constexpr uint32_t kDefaultWindowTokens = 256;
// window_tokens = kAutoWindowTokens asks ResolveKvCacheConfig to choose W: the largest of
// 256, 128, ..., 16 (a multiple of the block size when one is given) whose D-window of
// max_sequences takes at most kAutoWindowBudgetShare of the GPU KV budget, the rest going
// to the ping-pong buffers. Measured on the H200 (docs/measurements.md, Session 20): the
// full DeepSeek-V2-Lite (27 layers) at batch 32 x 32K, where W=256 fills 79 % of the MLA's
// 0.3 GiB, decoded 5.7 % faster with W=128 (40 %); W=64 was no faster than 256.
inline constexpr uint32_t kAutoWindowTokens = 0;
inline constexpr double kAutoWindowBudgetShare = 0.5;

struct KvCacheConfig {
  // geometry.block_tokens is the block size; 0 means "= window_tokens".
  KvGeometry geometry;
  // W: decoded tokens kept per sequence in the GPU D-window. A multiple of the block
  // size, so a full window flushes into window_tokens / block_tokens whole blocks.
  // kAutoWindowTokens (0): chosen from the budget by ResolveKvCacheConfig.
  uint32_t window_tokens = kDefaultWindowTokens;
  // Host bytes of each region; each holds floor(bytes / block_bytes) block slots.
  uint64_t cpu_compute_bytes = 0;
  uint64_t gpu_transfer_bytes = 0;
  // Device bytes for the D-window plus both ping-pong buffers. 0: 2 GiB for GQA,
  // 0.3 GiB for MLA.
  uint64_t gpu_kv_budget_bytes = 0;
  // Live sequences (each owns one D-window slot).
  uint32_t max_sequences = 16;
  // Layer-blocks per ping-pong buffer. 0: as many as the budget leaves after the
  // D-window.
  uint32_t pingpong_blocks = 0;

  // Derived sizes (valid after ResolveKvCacheConfig).
  uint32_t block_tokens() const { return geometry.block_tokens; }
  uint32_t blocks_per_window() const { return window_tokens / geometry.block_tokens; }
  uint64_t region_bytes(KvRegion region) const {
    return region == KvRegion::kCpuCompute ? cpu_compute_bytes : gpu_transfer_bytes;
  }
  // Block slots of a region.
  uint32_t region_slots(KvRegion region) const {
    return static_cast<uint32_t>(RegionSlots(geometry, region_bytes(region)));
  }
  // Exact arena region size: the slots, no tail.
  uint64_t region_used_bytes(KvRegion region) const {
    return uint64_t{region_slots(region)} * geometry.block_bytes();
  }
  // One sequence's D-window over all layers.
  uint64_t window_bytes_per_sequence() const {
    return uint64_t{window_tokens} * geometry.bytes_per_token();
  }
  uint64_t window_bytes() const { return window_bytes_per_sequence() * max_sequences; }
  uint64_t pingpong_buffer_bytes() const {
    return uint64_t{pingpong_blocks} * geometry.layer_block_bytes();
  }
  // Device bytes the gpu_worker allocates: the D-window and both ping-pong buffers.
  uint64_t gpu_bytes() const { return window_bytes() + 2 * pingpong_buffer_bytes(); }

  // The arena sizes holding exactly these regions.
  ArenaSizes arena_sizes(uint64_t channel_bytes = uint64_t{16} << 20) const;

  // One line for logs: geometry, slots per region, budget split.
  std::string DebugString() const;
};

// Fills the defaults (budget, W when kAutoWindowTokens, block size, ping-pong capacity)
// and validates:
// INVALID_ARGUMENT for an impossible geometry (zero sizes, W not a multiple of the
// block size, too many slots, sizes beyond 2^62 bytes that would wrap uint64),
// RESOURCE_EXHAUSTED when the GPU KV budget cannot hold the D-window of max_sequences
// plus two ping-pong buffers. Messages carry the numbers.
absl::StatusOr<KvCacheConfig> ResolveKvCacheConfig(KvCacheConfig config);

// Validates a resolved config (what ResolveKvCacheConfig checks, without defaults).
absl::Status ValidateKvCacheConfig(const KvCacheConfig& config);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_KV_CONFIG_H_
