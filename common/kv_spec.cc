#include "common/kv_spec.h"

namespace writescope {

internal::KvSpec ToKvSpec(const KvCacheConfig& config) {
  internal::KvSpec spec;
  const KvGeometry& g = config.geometry;
  spec.set_mla(g.kind == AttentionKind::kMla);
  spec.set_num_layers(g.num_layers);
  spec.set_block_tokens(g.block_tokens);
  spec.set_num_kv_heads(g.num_kv_heads);
  spec.set_head_dim(g.head_dim);
  spec.set_kv_lora_rank(g.kv_lora_rank);
  spec.set_rope_dim(g.rope_dim);
  spec.set_window_tokens(config.window_tokens);
  spec.set_cpu_compute_bytes(config.cpu_compute_bytes);
  spec.set_gpu_transfer_bytes(config.gpu_transfer_bytes);
  spec.set_gpu_kv_budget_bytes(config.gpu_kv_budget_bytes);
  spec.set_max_sequences(config.max_sequences);
  spec.set_pingpong_blocks(config.pingpong_blocks);
  return spec;
}

absl::StatusOr<KvCacheConfig> FromKvSpec(const internal::KvSpec& spec) {
  // The wire carries a resolved config: a W of 0 (kAutoWindowTokens) would let a worker
  // choose its own window instead of the coordinator's.
  if (spec.window_tokens() == 0) {
    return absl::InvalidArgumentError("KV spec: D-window W must be > 0 (a resolved config)");
  }
  KvCacheConfig config;
  KvGeometry& g = config.geometry;
  g.kind = spec.mla() ? AttentionKind::kMla : AttentionKind::kGqa;
  g.num_layers = spec.num_layers();
  g.block_tokens = spec.block_tokens();
  g.num_kv_heads = spec.num_kv_heads();
  g.head_dim = spec.head_dim();
  g.kv_lora_rank = spec.kv_lora_rank();
  g.rope_dim = spec.rope_dim();
  config.window_tokens = spec.window_tokens();
  config.cpu_compute_bytes = spec.cpu_compute_bytes();
  config.gpu_transfer_bytes = spec.gpu_transfer_bytes();
  config.gpu_kv_budget_bytes = spec.gpu_kv_budget_bytes();
  config.max_sequences = spec.max_sequences();
  config.pingpong_blocks = spec.pingpong_blocks();
  return ResolveKvCacheConfig(config);
}

}  // namespace writescope
