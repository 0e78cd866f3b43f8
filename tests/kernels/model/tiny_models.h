// Tiny configs of the three architectures (hidden 64, 4 heads, 4 experts top-2,
// vocab 256), the real structure otherwise: DeepSeek keeps MLA without q LoRA,
// its dense first layer, shared experts and V2-Lite's YaRN; Qwen3 its q/k
// norms; Mixtral its GQA.
#ifndef WRITESCOPE_TESTS_KERNELS_MODEL_TINY_MODELS_H_
#define WRITESCOPE_TESTS_KERNELS_MODEL_TINY_MODELS_H_

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/model_config.h"

namespace writescope::kernels::model::testing {

inline ModelConfig TinyConfig(const std::string& arch, int64_t layers = 2) {
  ModelConfig c = *ModelConfig::ForSyntheticArch(arch, layers);
  c.hidden_size = 64;
  c.vocab_size = 256;
  c.num_heads = 4;
  c.n_routed_experts = 4;
  c.num_experts_per_tok = 2;
  c.intermediate_size = 64;
  c.moe_intermediate_size = arch == "mixtral" ? 64 : 32;
  if (arch == "deepseek_v2") {
    c.num_kv_heads = 4;
    c.kv_lora_rank = 32;
    c.qk_nope_head_dim = 16;
    c.qk_rope_head_dim = 8;
    c.v_head_dim = 16;
    c.head_dim = 24;
    c.n_shared_experts = 2;
    c.first_k_dense_replace = 1;
  } else {
    c.num_kv_heads = 2;
    c.head_dim = 16;
  }
  c.source = "tiny:" + arch;
  return c;
}

inline std::vector<int32_t> RandomTokens(int64_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = dist(rng);
  return tokens;
}

// max |a - b| over all of two equal-length vectors.
inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, double(std::fabs(a[i] - b[i])));
  return a.size() == b.size() ? m : INFINITY;
}

}  // namespace writescope::kernels::model::testing

#endif  // WRITESCOPE_TESTS_KERNELS_MODEL_TINY_MODELS_H_
