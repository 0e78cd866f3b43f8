// The normalized shape of one of the three MoE architectures WriteScope serves, read
// from a Hugging Face config.json (transformers 4.x or 5.x style) or from the embedded
// copy of a real model's config (`--synthetic ARCH`).
//
//   model_type      model                 attention              experts
//   deepseek_v2     DeepSeek-V2-Lite      MLA (kv_lora_rank+rope) 64 routed top-6 + 2 shared
//   qwen3_moe       Qwen3-30B-A3B         GQA 32/4, q/k RMSNorm   128 routed top-8
//   mixtral         Mixtral-8x7B          GQA 32/8                8 routed top-2
//
// Config styles accepted:
//   4.x: "rope_theta": 1e6, "rope_scaling": {"type"|"rope_type": "yarn", "factor": ...},
//        "torch_dtype": "bfloat16"
//   5.x: "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": ...}
//        (or keyed by layer type: {"full_attention": {...}}), "dtype": "bfloat16";
//        Qwen3-MoE's expert count as "num_local_experts" (4.x: "num_experts"; both may be
//        present if they agree)
// When both are present, 5.x fields win.
#ifndef WRITESCOPE_COMMON_MODEL_CONFIG_H_
#define WRITESCOPE_COMMON_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/kv_layout.h"

namespace writescope {

enum class ModelArch { kDeepseekV2, kQwen3Moe, kMixtral };

// "deepseek_v2", "qwen3_moe", "mixtral": the config.json model_type.
absl::string_view ModelArchName(ModelArch arch);
// INVALID_ARGUMENT naming `model_type` (and `source`) for anything but the three.
absl::StatusOr<ModelArch> ParseModelArch(absl::string_view model_type,
                                         absl::string_view source = "");

enum class RopeType { kDefault, kYarn };

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  // YaRN only (DeepSeek-V2-Lite: factor 40, original 4096, beta 32/1, mscale 0.707 both).
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  // 0: not in config.json (transformers reads them with .get(): with either missing or 0,
  // the attention scaling is mscale(factor, 1), not a ratio).
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
};

struct ModelConfig {
  ModelArch arch = ModelArch::kQwen3Moe;
  // Where it came from: a file path or "embedded:<model_type>"; used in error messages.
  std::string source;

  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  int64_t num_heads = 0;
  // GQA key/value heads. DeepSeek (MLA) configs carry it too; it does not shape the KV.
  int64_t num_kv_heads = 0;
  // GQA head dim: Qwen3 explicit, Mixtral hidden/heads. MLA: qk_nope + qk_rope.
  int64_t head_dim = 0;

  // MLA (deepseek_v2 only; 0 elsewhere). q_lora_rank unset = q_proj without LoRA.
  int64_t kv_lora_rank = 0;
  std::optional<int64_t> q_lora_rank;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  // Experts.
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;       // top-k
  int64_t n_shared_experts = 0;          // DeepSeek: shared MLP of n_shared * moe_intermediate
  int64_t moe_intermediate_size = 0;     // one routed expert (Mixtral: = intermediate_size)
  int64_t intermediate_size = 0;         // dense MLP (DeepSeek first layer, Qwen3 mlp_only)
  int64_t first_k_dense_replace = 0;     // DeepSeek: layers [0, k) are dense
  int64_t moe_layer_freq = 1;            // DeepSeek: MoE where layer % freq == 0
  int64_t decoder_sparse_step = 1;       // Qwen3: MoE where (layer + 1) % step == 0
  std::vector<int64_t> mlp_only_layers;  // Qwen3: always dense
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  std::string scoring_func = "softmax";
  std::string topk_method = "greedy";
  int64_t n_group = 0;  // DeepSeek group-limited routing (0: none)
  int64_t topk_group = 0;

  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  int64_t max_position_embeddings = 0;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  bool tie_word_embeddings = false;
  // "bfloat16" (all three), "float16", "float32"; the checkpoint's own dtype.
  std::string dtype = "bfloat16";

  // Parses config.json text. `source` names the file in every error.
  static absl::StatusOr<ModelConfig> FromJson(absl::string_view json_text,
                                              absl::string_view source);
  static absl::StatusOr<ModelConfig> FromFile(const std::string& path);
  // The embedded copy of the real model's config: "deepseek_v2" (DeepSeek-V2-Lite),
  // "qwen3_moe" (Qwen3-30B-A3B), "mixtral" (Mixtral-8x7B). num_layers_override > 0
  // keeps only the first that many layers (must not exceed the real count).
  static absl::StatusOr<ModelConfig> ForSyntheticArch(absl::string_view arch,
                                                      int64_t num_layers_override = 0);

  // Precise INVALID_ARGUMENT for impossible shapes (run by the parsers).
  absl::Status Validate() const;

  bool is_mla() const { return arch == ModelArch::kDeepseekV2; }
  // Does `layer` have routed experts (else a dense MLP of intermediate_size)?
  bool IsMoeLayer(int64_t layer) const;
  int64_t num_moe_layers() const;
  // bf16 bytes of one routed expert: gate, up [moe_intermediate, hidden], down [hidden, ...].
  uint64_t routed_expert_bytes() const {
    return uint64_t{3} * 2 * static_cast<uint64_t>(moe_intermediate_size) *
           static_cast<uint64_t>(hidden_size);
  }
  // Per-head width of q and k: MLA qk_nope + qk_rope, GQA head_dim.
  int64_t qk_head_dim() const { return is_mla() ? qk_nope_head_dim + qk_rope_head_dim : head_dim; }
  // Width of the attention output per head: MLA v_head_dim, GQA head_dim.
  int64_t attn_v_head_dim() const { return is_mla() ? v_head_dim : head_dim; }

  // The KV cache geometry: GQA kv heads x head_dim (K and V), MLA kv_lora_rank + rope.
  KvGeometry kv_geometry(uint32_t block_tokens = 256) const;
  // bf16 KV bytes of one token over all layers (V2-Lite 31104 = 30.375 KiB,
  // Qwen3-30B-A3B 98304 = 96 KiB, Mixtral 131072 = 128 KiB).
  uint64_t kv_bytes_per_token() const { return kv_geometry().bytes_per_token(); }

  // One line for logs.
  std::string DebugString() const;
};

// The embedded config.json text of a real model ("deepseek_v2", "qwen3_moe",
// "mixtral"); NOT_FOUND otherwise.
absl::StatusOr<absl::string_view> EmbeddedModelConfigJson(absl::string_view arch);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_MODEL_CONFIG_H_
