#include "common/kv_config.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace writescope {
namespace {

std::string Bytes(uint64_t bytes) {
  return absl::StrFormat("%d B (%.2f GiB)", bytes, static_cast<double>(bytes) / (1 << 30));
}

// The largest block, per-token or D-window size a config may imply: far beyond any
// machine, and small enough that 2 x a layer-block or window + ping-pong cannot wrap.
// (The geometry fields are uint32 from the wire: unchecked, their products wrap uint64
// and a wrapped layer-block of 0 divided ResolveKvCacheConfig by zero.)
constexpr uint64_t kMaxKvSizeBytes = uint64_t{1} << 62;

// *out = a * b, false when that exceeds kMaxKvSizeBytes (or wraps).
bool MulWithinLimit(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out) && *out <= kMaxKvSizeBytes;
}

// kAutoWindowTokens' choice (kv_config.h). The geometry's block size may still be 0 (then
// it becomes W). Products that would pass kMaxKvSizeBytes count as not fitting; a shape
// whose sizes overflow is refused by ValidateShape afterwards.
uint32_t AutoWindowTokens(const KvCacheConfig& config) {
  const KvGeometry& g = config.geometry;
  const uint32_t block = g.block_tokens;
  const double room = kAutoWindowBudgetShare * static_cast<double>(config.gpu_kv_budget_bytes);
  uint32_t smallest = 0;
  for (uint32_t w = kDefaultWindowTokens; w >= 16; w /= 2) {
    if (block != 0 && w % block != 0) continue;
    smallest = w;
    uint64_t per_sequence = 0, window = 0;
    if (MulWithinLimit(g.bytes_per_token(), w, &per_sequence) &&
        MulWithinLimit(per_sequence, config.max_sequences, &window) &&
        static_cast<double>(window) <= room) {
      return w;
    }
  }
  // Nothing fits the share: the smallest candidate (the budget check reports whether it
  // fits at all), or one block when no candidate is a multiple of the block size.
  return smallest != 0 ? smallest : block;
}

}  // namespace

absl::string_view KvRegionName(KvRegion region) {
  return region == KvRegion::kCpuCompute ? kCpuComputeRegion : kGpuTransferRegion;
}

ArenaSizes KvCacheConfig::arena_sizes(uint64_t channel_bytes) const {
  return ArenaSizes{.channel_bytes = channel_bytes,
                    .cpu_compute_bytes = region_used_bytes(KvRegion::kCpuCompute),
                    .gpu_transfer_bytes = region_used_bytes(KvRegion::kGpuTransfer)};
}

std::string KvCacheConfig::DebugString() const {
  const KvGeometry& g = geometry;
  return absl::StrCat(
      g.kind == AttentionKind::kGqa ? "GQA" : "MLA", " layers=", g.num_layers,
      g.kind == AttentionKind::kGqa
          ? absl::StrCat(" kv_heads=", g.num_kv_heads, " head_dim=", g.head_dim)
          : absl::StrCat(" kv_lora_rank=", g.kv_lora_rank, " rope_dim=", g.rope_dim),
      " kv_bytes_per_token=", g.bytes_per_token(), " block_tokens=", g.block_tokens,
      " W=", window_tokens, " cpu_compute_slots=", region_slots(KvRegion::kCpuCompute),
      " gpu_transfer_slots=", region_slots(KvRegion::kGpuTransfer),
      " max_sequences=", max_sequences, " d_window=", Bytes(window_bytes()),
      absl::StrFormat(" (%.0f %% of the budget)",
                      gpu_kv_budget_bytes == 0 ? 0.0 : 100.0 * window_bytes() / gpu_kv_budget_bytes),
      " pingpong=2x",
      pingpong_blocks, " layer-blocks=", Bytes(2 * pingpong_buffer_bytes()),
      " budget=", Bytes(gpu_kv_budget_bytes));
}

// Everything but the GPU budget.
static absl::Status ValidateShape(const KvCacheConfig& config) {
  const KvGeometry& g = config.geometry;
  if (g.num_layers == 0) return absl::InvalidArgumentError("KV config: num_layers must be > 0");
  if (g.kind == AttentionKind::kGqa && (g.num_kv_heads == 0 || g.head_dim == 0)) {
    return absl::InvalidArgumentError(absl::StrCat("KV config: GQA needs num_kv_heads > 0 and ",
                                                   "head_dim > 0, got ", g.num_kv_heads, " and ",
                                                   g.head_dim));
  }
  if (g.kind == AttentionKind::kMla && uint64_t{g.kv_lora_rank} + g.rope_dim == 0) {
    return absl::InvalidArgumentError("KV config: MLA needs kv_lora_rank + rope_dim > 0");
  }
  if (g.block_tokens == 0) return absl::InvalidArgumentError("KV config: block size must be > 0");
  if (config.window_tokens == 0) {
    return absl::InvalidArgumentError("KV config: D-window W must be > 0");
  }
  if (config.window_tokens % g.block_tokens != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV config: D-window W=", config.window_tokens, " must be a multiple of the block size ",
        g.block_tokens, " (a full window flushes into whole blocks)"));
  }
  if (config.max_sequences == 0) {
    return absl::InvalidArgumentError("KV config: max_sequences must be > 0");
  }
  // Every size derived from the geometry (kv_layout.h, KvCacheConfig), exactly.
  uint64_t values = 0, token_layer = 0, layer_block = 0, block = 0, token = 0, window_seq = 0,
           window = 0;
  const bool sizes_fit =
      (g.kind == AttentionKind::kGqa
           ? MulWithinLimit(uint64_t{2} * g.num_kv_heads, g.head_dim, &values)
           : MulWithinLimit(uint64_t{g.kv_lora_rank} + g.rope_dim, 1, &values)) &&
      MulWithinLimit(values, 2, &token_layer) &&
      MulWithinLimit(token_layer, g.block_tokens, &layer_block) &&
      MulWithinLimit(layer_block, g.num_layers, &block) &&
      MulWithinLimit(token_layer, g.num_layers, &token) &&
      MulWithinLimit(token, config.window_tokens, &window_seq) &&
      MulWithinLimit(window_seq, config.max_sequences, &window);
  if (!sizes_fit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV config: sizes overflow (limit ", kMaxKvSizeBytes, " B): layers=", g.num_layers,
        g.kind == AttentionKind::kGqa
            ? absl::StrCat(" kv_heads=", g.num_kv_heads, " head_dim=", g.head_dim)
            : absl::StrCat(" kv_lora_rank=", g.kv_lora_rank, " rope_dim=", g.rope_dim),
        " block_tokens=", g.block_tokens, " W=", config.window_tokens,
        " max_sequences=", config.max_sequences));
  }
  for (KvRegion region : {KvRegion::kCpuCompute, KvRegion::kGpuTransfer}) {
    const uint64_t slots = RegionSlots(g, config.region_bytes(region));
    if (slots > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat("KV config: region ", KvRegionName(region),
                                                     " would hold ", slots,
                                                     " blocks, more than 2^32-1"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateKvCacheConfig(const KvCacheConfig& config) {
  WS_RETURN_IF_ERROR(ValidateShape(config));
  const KvGeometry& g = config.geometry;
  if (config.pingpong_blocks == 0) {
    return absl::InvalidArgumentError("KV config: a ping-pong buffer must hold >= 1 block");
  }
  const uint64_t window = config.window_bytes();  // <= kMaxKvSizeBytes (ValidateShape)
  // pingpong_blocks comes from the wire too: 2 x blocks x layer-block may wrap.
  uint64_t pingpong_buffer = 0;
  const bool pingpong_fits = !__builtin_mul_overflow(uint64_t{config.pingpong_blocks},
                                                     g.layer_block_bytes(), &pingpong_buffer) &&
                             pingpong_buffer <= (std::numeric_limits<uint64_t>::max() - window) / 2;
  if (!pingpong_fits) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV config: two ping-pong buffers of ", config.pingpong_blocks,
                     " layer-blocks x ", g.layer_block_bytes(), " B exceed any GPU KV budget"));
  }
  const uint64_t pingpong = 2 * pingpong_buffer;
  if (window + pingpong > config.gpu_kv_budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV config: GPU KV budget ", Bytes(config.gpu_kv_budget_bytes),
        " is too small: D-window of ", config.max_sequences, " sequences x ", config.window_tokens,
        " tokens x ", g.bytes_per_token(), " B = ", Bytes(window),
        " plus two ping-pong buffers of ", config.pingpong_blocks, " layer-blocks x ",
        g.layer_block_bytes(), " B = ", Bytes(pingpong), " needs ", Bytes(window + pingpong)));
  }
  return absl::OkStatus();
}

absl::StatusOr<KvCacheConfig> ResolveKvCacheConfig(KvCacheConfig config) {
  KvGeometry& g = config.geometry;
  if (config.gpu_kv_budget_bytes == 0) {
    config.gpu_kv_budget_bytes =
        g.kind == AttentionKind::kMla ? kDefaultMlaKvBudgetBytes : kDefaultGqaKvBudgetBytes;
  }
  if (config.window_tokens == kAutoWindowTokens) config.window_tokens = AutoWindowTokens(config);
  if (g.block_tokens == 0) g.block_tokens = config.window_tokens;
  WS_RETURN_IF_ERROR(ValidateShape(config));
  if (config.pingpong_blocks == 0) {
    const uint64_t window = config.window_bytes();
    const uint64_t left =
        config.gpu_kv_budget_bytes > window ? config.gpu_kv_budget_bytes - window : 0;
    const uint64_t blocks = left / (2 * g.layer_block_bytes());
    if (blocks == 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("KV config: GPU KV budget ", Bytes(config.gpu_kv_budget_bytes),
                       " leaves no room for two ping-pong buffers of one layer-block (2 x ",
                       g.layer_block_bytes(), " B) after the D-window of ", config.max_sequences,
                       " sequences x ", config.window_tokens, " tokens x ", g.bytes_per_token(),
                       " B = ", Bytes(window)));
    }
    config.pingpong_blocks =
        static_cast<uint32_t>(std::min<uint64_t>(blocks, std::numeric_limits<uint32_t>::max()));
  }
  WS_RETURN_IF_ERROR(ValidateKvCacheConfig(config));
  return config;
}

}  // namespace writescope
