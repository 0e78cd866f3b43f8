// Helpers for the InplaceKVCache tests: small geometries, random token rows, and a
// reference-side gather of a sequence's KV out of the arena and the D-window.
#ifndef WRITESCOPE_TESTS_GPU_WORKER_KV_TEST_UTIL_H_
#define WRITESCOPE_TESTS_GPU_WORKER_KV_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/kv_config.h"
#include "common/kv_layout.h"

namespace writescope::testing {

// GQA with odd-ish sizes: 3 layers, 2 KV heads, head_dim 6 (48 B per token and layer).
inline KvGeometry SmallGqa(uint32_t block_tokens) {
  return KvGeometry{.kind = AttentionKind::kGqa,
                    .num_layers = 3,
                    .block_tokens = block_tokens,
                    .num_kv_heads = 2,
                    .head_dim = 6};
}

// MLA: 2 layers, latent 10 + rope 3 values (26 B per token and layer).
inline KvGeometry SmallMla(uint32_t block_tokens) {
  return KvGeometry{.kind = AttentionKind::kMla,
                    .num_layers = 2,
                    .block_tokens = block_tokens,
                    .kv_lora_rank = 10,
                    .rope_dim = 3};
}

// A token's KV over all layers: layer l's token row (gpu_worker/kv_cache.h) at
// l * bytes_per_token_layer.
using TokenKv = std::vector<std::byte>;

inline TokenKv RandomTokenKv(const KvGeometry& g, std::mt19937_64& rng) {
  TokenKv kv(g.bytes_per_token());
  for (std::byte& b : kv) b = static_cast<std::byte>(rng());
  return kv;
}

// Deterministic token content, for a reader in another process.
inline TokenKv PatternTokenKv(const KvGeometry& g, uint64_t sequence, uint64_t token) {
  std::mt19937_64 rng(sequence * 1000003 + token);
  return RandomTokenKv(g, rng);
}

}  // namespace writescope::testing

#endif  // WRITESCOPE_TESTS_GPU_WORKER_KV_TEST_UTIL_H_
