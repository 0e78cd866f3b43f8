// What the engine's tests (engine_test, service_test) run an Engine over: a tiny Qwen3-shaped
// model without an end-of-sequence token (lengths are exact) and its KV regions.
#ifndef WRITESCOPE_TESTS_COORDINATOR_ENGINE_FIXTURE_H_
#define WRITESCOPE_TESTS_COORDINATOR_ENGINE_FIXTURE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/kv_config.h"
#include "common/model_config.h"
#include "tests/kernels/model/tiny_models.h"

namespace writescope::coordinator::testing {

inline ModelConfig TinyEngineModel() {
  ModelConfig model = kernels::model::testing::TinyConfig("qwen3_moe");
  model.max_position_embeddings = 4096;
  model.eos_token_ids = {};  // no early stop: lengths are exact
  return model;
}

// 16-token blocks, a 32-token D-window, `max_sequences` sequences, 40 blocks in each host
// region, 64 MiB of GPU KV; resolved.
inline absl::StatusOr<KvCacheConfig> TinyEngineKv(const ModelConfig& model,
                                                  uint32_t max_sequences) {
  KvCacheConfig kv;
  kv.geometry = model.kv_geometry(16);
  kv.window_tokens = 32;
  kv.max_sequences = max_sequences;
  kv.cpu_compute_bytes = 40 * kv.geometry.block_bytes();
  kv.gpu_transfer_bytes = 40 * kv.geometry.block_bytes();
  kv.gpu_kv_budget_bytes = uint64_t{64} << 20;
  return ResolveKvCacheConfig(kv);
}

}  // namespace writescope::coordinator::testing

#endif  // WRITESCOPE_TESTS_COORDINATOR_ENGINE_FIXTURE_H_
