#include "common/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace writescope {
namespace {

using Json = nlohmann::json;

// Copies of the three real config.json files (../shared/models/, as the models' Hugging
// Face pages publish them), so `--synthetic ARCH` needs no file.
constexpr absl::string_view kDeepseekV2LiteConfig = R"json({
  "architectures": ["DeepseekV2ForCausalLM"],
  "model_type": "deepseek_v2",
  "vocab_size": 102400,
  "hidden_size": 2048,
  "intermediate_size": 10944,
  "moe_intermediate_size": 1408,
  "num_hidden_layers": 27,
  "num_attention_heads": 16,
  "num_key_value_heads": 16,
  "n_shared_experts": 2,
  "n_routed_experts": 64,
  "num_experts_per_tok": 6,
  "first_k_dense_replace": 1,
  "moe_layer_freq": 1,
  "n_group": 1,
  "topk_group": 1,
  "topk_method": "greedy",
  "scoring_func": "softmax",
  "norm_topk_prob": false,
  "routed_scaling_factor": 1.0,
  "kv_lora_rank": 512,
  "q_lora_rank": null,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "v_head_dim": 128,
  "hidden_act": "silu",
  "rms_norm_eps": 1e-06,
  "max_position_embeddings": 163840,
  "rope_theta": 10000,
  "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                   "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
  "bos_token_id": 100000,
  "eos_token_id": 100001,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16"
})json";

constexpr absl::string_view kQwen3MoeConfig = R"json({
  "architectures": ["Qwen3MoeForCausalLM"],
  "model_type": "qwen3_moe",
  "vocab_size": 151936,
  "hidden_size": 2048,
  "intermediate_size": 6144,
  "moe_intermediate_size": 768,
  "num_hidden_layers": 48,
  "num_attention_heads": 32,
  "num_key_value_heads": 4,
  "head_dim": 128,
  "num_experts": 128,
  "num_experts_per_tok": 8,
  "norm_topk_prob": true,
  "decoder_sparse_step": 1,
  "mlp_only_layers": [],
  "attention_bias": false,
  "hidden_act": "silu",
  "rms_norm_eps": 1e-06,
  "max_position_embeddings": 40960,
  "rope_theta": 1000000.0,
  "rope_scaling": null,
  "sliding_window": null,
  "use_sliding_window": false,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16"
})json";

constexpr absl::string_view kMixtralConfig = R"json({
  "architectures": ["MixtralForCausalLM"],
  "model_type": "mixtral",
  "vocab_size": 32000,
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "num_hidden_layers": 32,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "num_local_experts": 8,
  "num_experts_per_tok": 2,
  "hidden_act": "silu",
  "rms_norm_eps": 1e-05,
  "max_position_embeddings": 32768,
  "rope_theta": 1000000.0,
  "sliding_window": null,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16"
})json";

// Typed, non-throwing reads of one JSON object's fields, with errors naming the
// source file and the field ("<file>: field 'rope_parameters.factor' ...").
class FieldReader {
 public:
  FieldReader(const Json& object, absl::string_view source, std::string prefix = "")
      : object_(object), source_(source), prefix_(std::move(prefix)) {}

  // nullptr when absent (a JSON null counts as present; see IsNullOrAbsent).
  const Json* Find(absl::string_view key) const {
    auto it = object_.find(std::string(key));
    return it == object_.end() ? nullptr : &*it;
  }
  bool Has(absl::string_view key) const { return Find(key) != nullptr; }
  bool IsNullOrAbsent(absl::string_view key) const {
    const Json* value = Find(key);
    return value == nullptr || value->is_null();
  }

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field '", prefix_, key, "' ", what));
  }
  absl::Status Missing(absl::string_view key) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": missing required field '", prefix_, key, "'"));
  }

  // An integer (an integral float such as 2048.0 is accepted too).
  absl::StatusOr<int64_t> Int(absl::string_view key) const {
    const Json* value = Find(key);
    if (value == nullptr || value->is_null()) return Missing(key);
    return AsInt(key, *value);
  }
  absl::StatusOr<int64_t> Int(absl::string_view key, int64_t fallback) const {
    if (IsNullOrAbsent(key)) return fallback;
    return Int(key);
  }
  absl::StatusOr<double> Double(absl::string_view key, double fallback) const {
    const Json* value = Find(key);
    if (value == nullptr || value->is_null()) return fallback;
    if (!value->is_number())
      return Error(key, absl::StrCat("must be a number, got ", Dump(*value)));
    const double result = value->get<double>();
    if (!std::isfinite(result)) return Error(key, "must be finite");
    return result;
  }
  absl::StatusOr<bool> Bool(absl::string_view key, bool fallback) const {
    const Json* value = Find(key);
    if (value == nullptr || value->is_null()) return fallback;
    if (!value->is_boolean()) {
      return Error(key, absl::StrCat("must be true or false, got ", Dump(*value)));
    }
    return value->get<bool>();
  }
  absl::StatusOr<std::string> String(absl::string_view key, absl::string_view fallback) const {
    const Json* value = Find(key);
    if (value == nullptr || value->is_null()) return std::string(fallback);
    if (!value->is_string())
      return Error(key, absl::StrCat("must be a string, got ", Dump(*value)));
    return value->get<std::string>();
  }
  // An integer or a list of integers (eos_token_id may be either); null/absent: empty.
  absl::StatusOr<std::vector<int64_t>> IntOrIntList(absl::string_view key) const {
    std::vector<int64_t> result;
    const Json* value = Find(key);
    if (value == nullptr || value->is_null()) return result;
    if (value->is_array()) {
      for (const Json& element : *value) {
        WS_ASSIGN_OR_RETURN(int64_t v, AsInt(key, element));
        result.push_back(v);
      }
      return result;
    }
    WS_ASSIGN_OR_RETURN(int64_t v, AsInt(key, *value));
    result.push_back(v);
    return result;
  }

  static std::string Dump(const Json& value) {
    std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
    if (text.size() > 64) text = text.substr(0, 61) + "...";
    return text;
  }

 private:
  absl::StatusOr<int64_t> AsInt(absl::string_view key, const Json& value) const {
    if (value.is_number_unsigned()) {
      const uint64_t v = value.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(key, absl::StrCat("is out of range: ", v));
      }
      return static_cast<int64_t>(v);
    }
    if (value.is_number_integer()) return value.get<int64_t>();
    if (value.is_number_float()) {
      const double v = value.get<double>();
      if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15) {
        return static_cast<int64_t>(v);
      }
    }
    return Error(key, absl::StrCat("must be an integer, got ", Dump(value)));
  }

  const Json& object_;
  absl::string_view source_;
  std::string prefix_;
};

// Real config.json files nest 3 deep (rope_parameters.full_attention.*). The parser
// itself is iterative, but dumping a value for an error message and copying are
// recursive: without a bound, 100,000 levels of '[' (200 KB) overflowed the 8 MB stack.
constexpr int kMaxConfigJsonDepth = 32;

struct ConfigTooDeep {};

absl::StatusOr<Json> ParseJsonObject(absl::string_view text, absl::string_view source) {
  const Json::parser_callback_t limit_depth = [](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxConfigJsonDepth) throw ConfigTooDeep{};
    return true;
  };
  Json json;
  try {
    json = Json::parse(text.begin(), text.end(), limit_depth);
  } catch (const ConfigTooDeep&) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": JSON nested deeper than ", kMaxConfigJsonDepth, " levels"));
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": malformed JSON: ", e.what()));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": config must be a JSON object"));
  }
  return json;
}

// Reads the RoPE settings from either style. 5.x `rope_parameters` holds everything
// (possibly keyed by layer type); 4.x has `rope_theta` beside `rope_scaling`.
absl::Status ParseRope(const FieldReader& top, absl::string_view source, double default_theta,
                       ModelConfig& config) {
  const Json* params = nullptr;
  std::string prefix;
  double theta = default_theta;
  if (!top.IsNullOrAbsent("rope_parameters")) {
    params = top.Find("rope_parameters");
    prefix = "rope_parameters.";
    if (!params->is_object()) {
      return top.Error("rope_parameters", "must be an object");
    }
    // Per-layer-type form: {"full_attention": {...}}. All three models use only full
    // attention.
    if (!params->contains("rope_type") && !params->contains("type") &&
        !params->contains("rope_theta")) {
      auto it = params->find("full_attention");
      if (it == params->end() && params->size() == 1) it = params->begin();
      if (it == params->end() || !it->is_object()) {
        return top.Error("rope_parameters",
                         "has neither rope_type/rope_theta nor a 'full_attention' entry");
      }
      prefix = absl::StrCat("rope_parameters.", it.key(), ".");
      params = &*it;
    }
    // rope_theta may still sit at the top level in hand-written 5.x configs.
    WS_ASSIGN_OR_RETURN(theta, top.Double("rope_theta", default_theta));
  } else {
    WS_ASSIGN_OR_RETURN(theta, top.Double("rope_theta", default_theta));
    if (!top.IsNullOrAbsent("rope_scaling")) {
      params = top.Find("rope_scaling");
      prefix = "rope_scaling.";
      if (!params->is_object()) return top.Error("rope_scaling", "must be an object or null");
    }
  }
  config.rope = RopeConfig{};
  config.rope.theta = theta;
  if (params == nullptr) return absl::OkStatus();

  FieldReader rope(*params, source, prefix);
  WS_ASSIGN_OR_RETURN(config.rope.theta, rope.Double("rope_theta", theta));
  WS_ASSIGN_OR_RETURN(std::string type, rope.String("rope_type", ""));
  if (type.empty()) {
    WS_ASSIGN_OR_RETURN(type, rope.String("type", "default"));
  }
  if (type == "default") {
    config.rope.type = RopeType::kDefault;
    return absl::OkStatus();
  }
  if (type != "yarn") {
    return absl::InvalidArgumentError(absl::StrCat(source, ": unsupported RoPE type '", type,
                                                   "' in '", prefix,
                                                   "' (supported: default, yarn)"));
  }
  config.rope.type = RopeType::kYarn;
  if (rope.IsNullOrAbsent("factor")) return rope.Missing("factor");
  WS_ASSIGN_OR_RETURN(config.rope.factor, rope.Double("factor", 1.0));
  // transformers falls back to max_position_embeddings when the original is not given.
  WS_ASSIGN_OR_RETURN(config.rope.original_max_position_embeddings,
                      rope.Int("original_max_position_embeddings", config.max_position_embeddings));
  WS_ASSIGN_OR_RETURN(config.rope.beta_fast, rope.Double("beta_fast", 32.0));
  WS_ASSIGN_OR_RETURN(config.rope.beta_slow, rope.Double("beta_slow", 1.0));
  WS_ASSIGN_OR_RETURN(config.rope.mscale, rope.Double("mscale", 0.0));
  WS_ASSIGN_OR_RETURN(config.rope.mscale_all_dim, rope.Double("mscale_all_dim", 0.0));
  return absl::OkStatus();
}

absl::Status ParseDeepseekV2(const FieldReader& f, ModelConfig& c) {
  WS_ASSIGN_OR_RETURN(c.num_kv_heads, f.Int("num_key_value_heads", c.num_heads));
  WS_ASSIGN_OR_RETURN(c.kv_lora_rank, f.Int("kv_lora_rank"));
  // transformers' DeepseekV2Config default is 1536 (q with LoRA); V2-Lite says null.
  if (!f.Has("q_lora_rank")) {
    c.q_lora_rank = 1536;
  } else if (!f.IsNullOrAbsent("q_lora_rank")) {
    WS_ASSIGN_OR_RETURN(int64_t rank, f.Int("q_lora_rank"));
    c.q_lora_rank = rank;
  }
  WS_ASSIGN_OR_RETURN(c.qk_nope_head_dim, f.Int("qk_nope_head_dim"));
  WS_ASSIGN_OR_RETURN(c.qk_rope_head_dim, f.Int("qk_rope_head_dim"));
  WS_ASSIGN_OR_RETURN(c.v_head_dim, f.Int("v_head_dim"));
  // Validate() bounds both parts, but only after parsing: the sum must not overflow here.
  if (__builtin_add_overflow(c.qk_nope_head_dim, c.qk_rope_head_dim, &c.head_dim)) {
    return f.Error("qk_nope_head_dim", absl::StrCat("+ qk_rope_head_dim overflows: ",
                                                    c.qk_nope_head_dim, " + ", c.qk_rope_head_dim));
  }
  WS_ASSIGN_OR_RETURN(c.n_routed_experts, f.Int("n_routed_experts"));
  WS_ASSIGN_OR_RETURN(c.num_experts_per_tok, f.Int("num_experts_per_tok"));
  WS_ASSIGN_OR_RETURN(c.n_shared_experts, f.Int("n_shared_experts", 0));
  WS_ASSIGN_OR_RETURN(c.moe_intermediate_size, f.Int("moe_intermediate_size"));
  WS_ASSIGN_OR_RETURN(c.intermediate_size, f.Int("intermediate_size"));
  WS_ASSIGN_OR_RETURN(c.first_k_dense_replace, f.Int("first_k_dense_replace", 0));
  WS_ASSIGN_OR_RETURN(c.moe_layer_freq, f.Int("moe_layer_freq", 1));
  WS_ASSIGN_OR_RETURN(c.norm_topk_prob, f.Bool("norm_topk_prob", false));
  WS_ASSIGN_OR_RETURN(c.routed_scaling_factor, f.Double("routed_scaling_factor", 1.0));
  WS_ASSIGN_OR_RETURN(c.scoring_func, f.String("scoring_func", "softmax"));
  WS_ASSIGN_OR_RETURN(c.topk_method, f.String("topk_method", "greedy"));
  WS_ASSIGN_OR_RETURN(c.n_group, f.Int("n_group", 0));
  WS_ASSIGN_OR_RETURN(c.topk_group, f.Int("topk_group", 0));
  return absl::OkStatus();
}

absl::Status ParseQwen3Moe(const FieldReader& f, ModelConfig& c) {
  WS_ASSIGN_OR_RETURN(c.num_kv_heads, f.Int("num_key_value_heads", c.num_heads));
  if (c.num_heads > 0) {
    WS_ASSIGN_OR_RETURN(c.head_dim, f.Int("head_dim", c.hidden_size / c.num_heads));
  }
  // The expert count: 4.x writes "num_experts"; transformers 5 renamed the attribute and
  // writes "num_local_experts" (as Mixtral's). Either is accepted; both must then agree.
  const bool has_num_experts = !f.IsNullOrAbsent("num_experts");
  const bool has_local_experts = !f.IsNullOrAbsent("num_local_experts");
  if (!has_num_experts && !has_local_experts) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.source, ": missing required field 'num_experts' (transformers 4.x) or ",
                     "'num_local_experts' (transformers 5)"));
  }
  if (has_num_experts) {
    WS_ASSIGN_OR_RETURN(c.n_routed_experts, f.Int("num_experts"));
  }
  if (has_local_experts) {
    WS_ASSIGN_OR_RETURN(int64_t local_experts, f.Int("num_local_experts"));
    if (has_num_experts && local_experts != c.n_routed_experts) {
      return f.Error("num_local_experts",
                     absl::StrCat("is ", local_experts, " but 'num_experts' is ",
                                  c.n_routed_experts, ": the expert count is ambiguous"));
    }
    c.n_routed_experts = local_experts;
  }
  WS_ASSIGN_OR_RETURN(c.num_experts_per_tok, f.Int("num_experts_per_tok"));
  WS_ASSIGN_OR_RETURN(c.moe_intermediate_size, f.Int("moe_intermediate_size"));
  WS_ASSIGN_OR_RETURN(c.intermediate_size, f.Int("intermediate_size", 0));
  WS_ASSIGN_OR_RETURN(c.decoder_sparse_step, f.Int("decoder_sparse_step", 1));
  if (!f.IsNullOrAbsent("mlp_only_layers")) {
    const Json* list = f.Find("mlp_only_layers");
    if (!list->is_array()) return f.Error("mlp_only_layers", "must be a list of layer indices");
    WS_ASSIGN_OR_RETURN(c.mlp_only_layers, f.IntOrIntList("mlp_only_layers"));
  }
  WS_ASSIGN_OR_RETURN(c.norm_topk_prob, f.Bool("norm_topk_prob", false));
  WS_ASSIGN_OR_RETURN(bool use_sliding_window, f.Bool("use_sliding_window", false));
  if (use_sliding_window && !f.IsNullOrAbsent("sliding_window")) {
    return f.Error("use_sliding_window", "is true: sliding-window attention is not supported");
  }
  return absl::OkStatus();
}

absl::Status ParseMixtral(const FieldReader& f, ModelConfig& c) {
  WS_ASSIGN_OR_RETURN(c.num_kv_heads, f.Int("num_key_value_heads", c.num_heads));
  if (c.num_heads > 0) {
    WS_ASSIGN_OR_RETURN(c.head_dim, f.Int("head_dim", c.hidden_size / c.num_heads));
  }
  WS_ASSIGN_OR_RETURN(c.n_routed_experts, f.Int("num_local_experts", 8));
  WS_ASSIGN_OR_RETURN(c.num_experts_per_tok, f.Int("num_experts_per_tok", 2));
  WS_ASSIGN_OR_RETURN(c.intermediate_size, f.Int("intermediate_size"));
  c.moe_intermediate_size = c.intermediate_size;
  // Mixtral's router takes the softmax of the top-k logits: softmax then renormalize.
  c.norm_topk_prob = true;
  if (!f.IsNullOrAbsent("sliding_window")) {
    WS_ASSIGN_OR_RETURN(int64_t window, f.Int("sliding_window"));
    return f.Error("sliding_window",
                   absl::StrCat("is ", window, ": sliding-window attention is not supported"));
  }
  return absl::OkStatus();
}

absl::Status Positive(const ModelConfig& c, absl::string_view name, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(c.source, ": ", name, " must be > 0, got ", value));
}

// Upper bounds far above any real model, so that no tensor size computed from a config
// (e.g. a fused [experts, 2 * intermediate, hidden]) can overflow int64.
absl::Status AtMost(const ModelConfig& c, absl::string_view name, int64_t value, int64_t limit) {
  if (value <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(c.source, ": ", name, " = ", value, " exceeds the sanity limit ", limit));
}

absl::Status Invalid(const ModelConfig& c, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(c.source, ": ", what));
}

}  // namespace

absl::string_view ModelArchName(ModelArch arch) {
  switch (arch) {
    case ModelArch::kDeepseekV2:
      return "deepseek_v2";
    case ModelArch::kQwen3Moe:
      return "qwen3_moe";
    case ModelArch::kMixtral:
      return "mixtral";
  }
  return "unknown";
}

absl::StatusOr<ModelArch> ParseModelArch(absl::string_view model_type, absl::string_view source) {
  if (model_type == "deepseek_v2") return ModelArch::kDeepseekV2;
  if (model_type == "qwen3_moe") return ModelArch::kQwen3Moe;
  if (model_type == "mixtral") return ModelArch::kMixtral;
  return absl::InvalidArgumentError(absl::StrCat(source.empty() ? "" : absl::StrCat(source, ": "),
                                                 "unsupported model_type '", model_type,
                                                 "' (supported: deepseek_v2, qwen3_moe, mixtral)"));
}

absl::StatusOr<absl::string_view> EmbeddedModelConfigJson(absl::string_view arch) {
  if (arch == "deepseek_v2") return kDeepseekV2LiteConfig;
  if (arch == "qwen3_moe") return kQwen3MoeConfig;
  if (arch == "mixtral") return kMixtralConfig;
  return absl::NotFoundError(absl::StrCat("no embedded config for architecture '", arch,
                                          "' (known: deepseek_v2, qwen3_moe, mixtral)"));
}

absl::StatusOr<ModelConfig> ModelConfig::FromJson(absl::string_view json_text,
                                                  absl::string_view source) {
  WS_ASSIGN_OR_RETURN(Json json, ParseJsonObject(json_text, source));
  FieldReader f(json, source);
  ModelConfig c;
  c.source = std::string(source);

  if (f.IsNullOrAbsent("model_type")) return f.Missing("model_type");
  WS_ASSIGN_OR_RETURN(std::string model_type, f.String("model_type", ""));
  WS_ASSIGN_OR_RETURN(c.arch, ParseModelArch(model_type, source));

  WS_ASSIGN_OR_RETURN(c.hidden_size, f.Int("hidden_size"));
  WS_ASSIGN_OR_RETURN(c.num_layers, f.Int("num_hidden_layers"));
  WS_ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size"));
  WS_ASSIGN_OR_RETURN(c.num_heads, f.Int("num_attention_heads"));
  WS_ASSIGN_OR_RETURN(c.rms_norm_eps, f.Double("rms_norm_eps", 1e-6));
  WS_ASSIGN_OR_RETURN(c.max_position_embeddings, f.Int("max_position_embeddings"));
  WS_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  WS_ASSIGN_OR_RETURN(std::vector<int64_t> bos, f.IntOrIntList("bos_token_id"));
  if (bos.size() > 1) return f.Error("bos_token_id", "must be a single token id");
  if (!bos.empty()) c.bos_token_id = bos[0];
  WS_ASSIGN_OR_RETURN(c.eos_token_ids, f.IntOrIntList("eos_token_id"));

  // 5.x "dtype" wins over 4.x "torch_dtype".
  std::string dtype_key = f.IsNullOrAbsent("dtype") ? "torch_dtype" : "dtype";
  WS_ASSIGN_OR_RETURN(c.dtype, f.String(dtype_key, "bfloat16"));
  if (c.dtype != "bfloat16" && c.dtype != "float16" && c.dtype != "float32") {
    return f.Error(dtype_key,
                   absl::StrCat("is '", c.dtype, "' (supported: bfloat16, float16, float32)"));
  }

  WS_ASSIGN_OR_RETURN(std::string act, f.String("hidden_act", "silu"));
  if (act != "silu" && act != "swish") {
    return f.Error("hidden_act", absl::StrCat("is '", act, "' (only silu is supported)"));
  }
  WS_ASSIGN_OR_RETURN(bool attention_bias, f.Bool("attention_bias", false));
  if (attention_bias) return f.Error("attention_bias", "is true: biases are not supported");

  double default_theta = 10000.0;
  switch (c.arch) {
    case ModelArch::kDeepseekV2:
      WS_RETURN_IF_ERROR(ParseDeepseekV2(f, c));
      break;
    case ModelArch::kQwen3Moe:
      WS_RETURN_IF_ERROR(ParseQwen3Moe(f, c));
      break;
    case ModelArch::kMixtral:
      default_theta = 1e6;
      WS_RETURN_IF_ERROR(ParseMixtral(f, c));
      break;
  }
  WS_RETURN_IF_ERROR(ParseRope(f, source, default_theta, c));
  WS_RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::StatusOr<ModelConfig> ModelConfig::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open model config ", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read model config ", path));
  return FromJson(text.str(), path);
}

absl::StatusOr<ModelConfig> ModelConfig::ForSyntheticArch(absl::string_view arch,
                                                          int64_t num_layers_override) {
  auto json = EmbeddedModelConfigJson(arch);
  if (!json.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--synthetic: unknown architecture '", arch,
                     "' (supported: deepseek_v2, qwen3_moe, mixtral)"));
  }
  WS_ASSIGN_OR_RETURN(ModelConfig config, FromJson(*json, absl::StrCat("embedded:", arch)));
  if (num_layers_override < 0 || num_layers_override > config.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("--num-layers ", num_layers_override, " for ",
                                                   arch, ": must be in [1, ", config.num_layers,
                                                   "] (0 keeps all)"));
  }
  if (num_layers_override > 0) {
    config.num_layers = num_layers_override;
    std::erase_if(config.mlp_only_layers,
                  [&](int64_t layer) { return layer >= num_layers_override; });
  }
  return config;
}

absl::Status ModelConfig::Validate() const {
  const ModelConfig& c = *this;
  WS_RETURN_IF_ERROR(Positive(c, "hidden_size", hidden_size));
  WS_RETURN_IF_ERROR(Positive(c, "num_hidden_layers", num_layers));
  WS_RETURN_IF_ERROR(Positive(c, "vocab_size", vocab_size));
  WS_RETURN_IF_ERROR(Positive(c, "num_attention_heads", num_heads));
  WS_RETURN_IF_ERROR(Positive(c, "num_key_value_heads", num_kv_heads));
  WS_RETURN_IF_ERROR(Positive(c, "max_position_embeddings", max_position_embeddings));
  constexpr int64_t kMaxWidth = int64_t{1} << 20;
  WS_RETURN_IF_ERROR(AtMost(c, "hidden_size", hidden_size, kMaxWidth));
  WS_RETURN_IF_ERROR(AtMost(c, "num_hidden_layers", num_layers, 4096));
  WS_RETURN_IF_ERROR(AtMost(c, "vocab_size", vocab_size, int64_t{1} << 24));
  WS_RETURN_IF_ERROR(AtMost(c, "num_attention_heads", num_heads, 4096));
  WS_RETURN_IF_ERROR(AtMost(c, "head_dim", head_dim, kMaxWidth));
  WS_RETURN_IF_ERROR(AtMost(c, "kv_lora_rank", kv_lora_rank, kMaxWidth));
  WS_RETURN_IF_ERROR(AtMost(c, "q_lora_rank", q_lora_rank.value_or(0), kMaxWidth));
  WS_RETURN_IF_ERROR(AtMost(c, "qk_nope_head_dim", qk_nope_head_dim, kMaxWidth));
  WS_RETURN_IF_ERROR(AtMost(c, "qk_rope_head_dim", qk_rope_head_dim, kMaxWidth));
  WS_RETURN_IF_ERROR(AtMost(c, "v_head_dim", v_head_dim, kMaxWidth));
  WS_RETURN_IF_ERROR(AtMost(c, "number of experts", n_routed_experts, 16384));
  WS_RETURN_IF_ERROR(AtMost(c, "n_shared_experts", n_shared_experts, 64));
  WS_RETURN_IF_ERROR(AtMost(c, "moe_intermediate_size", moe_intermediate_size, kMaxWidth));
  WS_RETURN_IF_ERROR(AtMost(c, "intermediate_size", intermediate_size, kMaxWidth));
  if (num_heads % num_kv_heads != 0) {
    return Invalid(
        c, absl::StrCat("num_attention_heads (", num_heads,
                        ") must be a multiple of num_key_value_heads (", num_kv_heads, ")"));
  }
  if (!(rms_norm_eps > 0))
    return Invalid(c, absl::StrCat("rms_norm_eps must be > 0, got ", rms_norm_eps));

  if (is_mla()) {
    WS_RETURN_IF_ERROR(Positive(c, "kv_lora_rank", kv_lora_rank));
    WS_RETURN_IF_ERROR(Positive(c, "qk_nope_head_dim", qk_nope_head_dim));
    WS_RETURN_IF_ERROR(Positive(c, "qk_rope_head_dim", qk_rope_head_dim));
    WS_RETURN_IF_ERROR(Positive(c, "v_head_dim", v_head_dim));
    if (q_lora_rank.has_value()) WS_RETURN_IF_ERROR(Positive(c, "q_lora_rank", *q_lora_rank));
    if (qk_rope_head_dim % 2 != 0) {
      return Invalid(c, absl::StrCat("qk_rope_head_dim must be even, got ", qk_rope_head_dim));
    }
    if (scoring_func != "softmax") {
      return Invalid(c, absl::StrCat("scoring_func '", scoring_func,
                                     "' is not supported (deepseek_v2 uses softmax)"));
    }
    if (topk_method != "greedy" && topk_method != "group_limited_greedy") {
      return Invalid(c, absl::StrCat("topk_method '", topk_method,
                                     "' is not supported (greedy, group_limited_greedy)"));
    }
    if (topk_method == "group_limited_greedy") {
      WS_RETURN_IF_ERROR(Positive(c, "n_group", n_group));
      if (n_routed_experts % n_group != 0) {
        return Invalid(c, absl::StrCat("n_routed_experts (", n_routed_experts,
                                       ") must be a multiple of n_group (", n_group, ")"));
      }
      if (topk_group <= 0 || topk_group > n_group) {
        return Invalid(
            c, absl::StrCat("topk_group must be in [1, n_group=", n_group, "], got ", topk_group));
      }
      // The kept groups must hold the top-k: a masked expert chosen with score 0 would weigh
      // 0 in RouteTokens but its probability in RouterWeights.
      const int64_t kept = topk_group * (n_routed_experts / n_group);
      if (num_experts_per_tok > kept) {
        return Invalid(c, absl::StrCat("num_experts_per_tok (", num_experts_per_tok,
                                       ") exceeds the experts of the topk_group (", topk_group,
                                       ") groups kept (", kept, ")"));
      }
    }
    if (n_shared_experts < 0) {
      return Invalid(c, absl::StrCat("n_shared_experts must be >= 0, got ", n_shared_experts));
    }
    if (first_k_dense_replace < 0) {
      return Invalid(
          c, absl::StrCat("first_k_dense_replace must be >= 0, got ", first_k_dense_replace));
    }
    WS_RETURN_IF_ERROR(Positive(c, "moe_layer_freq", moe_layer_freq));
  } else {
    WS_RETURN_IF_ERROR(Positive(c, "head_dim", head_dim));
    if (head_dim % 2 != 0) return Invalid(c, absl::StrCat("head_dim must be even, got ", head_dim));
  }

  WS_RETURN_IF_ERROR(
      Positive(c,
               arch == ModelArch::kMixtral
                   ? "num_local_experts"
                   : (arch == ModelArch::kQwen3Moe ? "num_experts" : "n_routed_experts"),
               n_routed_experts));
  WS_RETURN_IF_ERROR(Positive(c, "num_experts_per_tok", num_experts_per_tok));
  if (num_experts_per_tok > n_routed_experts) {
    return Invalid(c, absl::StrCat("num_experts_per_tok (", num_experts_per_tok,
                                   ") exceeds the number of experts (", n_routed_experts, ")"));
  }
  WS_RETURN_IF_ERROR(
      Positive(c, arch == ModelArch::kMixtral ? "intermediate_size" : "moe_intermediate_size",
               moe_intermediate_size));
  if (arch == ModelArch::kQwen3Moe) {
    WS_RETURN_IF_ERROR(Positive(c, "decoder_sparse_step", decoder_sparse_step));
    for (int64_t layer : mlp_only_layers) {
      if (layer < 0 || layer >= num_layers) {
        return Invalid(c, absl::StrCat("mlp_only_layers entry ", layer, " is not a layer in [0, ",
                                       num_layers, ")"));
      }
    }
  }
  if (num_moe_layers() < num_layers)
    WS_RETURN_IF_ERROR(Positive(c, "intermediate_size", intermediate_size));
  if (!(routed_scaling_factor > 0)) {
    return Invalid(c,
                   absl::StrCat("routed_scaling_factor must be > 0, got ", routed_scaling_factor));
  }

  if (!(rope.theta > 0))
    return Invalid(c, absl::StrCat("rope_theta must be > 0, got ", rope.theta));
  if (rope.type == RopeType::kYarn) {
    if (!(rope.factor >= 1.0)) {
      return Invalid(c, absl::StrCat("YaRN factor must be >= 1, got ", rope.factor));
    }
    WS_RETURN_IF_ERROR(Positive(c, "YaRN original_max_position_embeddings",
                                rope.original_max_position_embeddings));
    if (!(rope.beta_fast > 0) || !(rope.beta_slow > 0)) {
      return Invalid(c, absl::StrCat("YaRN beta_fast/beta_slow must be > 0, got ", rope.beta_fast,
                                     "/", rope.beta_slow));
    }
  }
  for (int64_t eos : eos_token_ids) {
    if (eos < 0) return Invalid(c, absl::StrCat("eos_token_id must be >= 0, got ", eos));
  }
  if (bos_token_id.has_value() && *bos_token_id < 0) {
    return Invalid(c, absl::StrCat("bos_token_id must be >= 0, got ", *bos_token_id));
  }
  return absl::OkStatus();
}

bool ModelConfig::IsMoeLayer(int64_t layer) const {
  if (layer < 0 || layer >= num_layers || n_routed_experts <= 0) return false;
  switch (arch) {
    case ModelArch::kDeepseekV2:
      // The DeepSeek rule. transformers 5 ignores moe_layer_freq; V2-Lite has freq 1.
      return layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
    case ModelArch::kQwen3Moe:
      return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) ==
                 mlp_only_layers.end() &&
             (layer + 1) % decoder_sparse_step == 0;
    case ModelArch::kMixtral:
      return true;
  }
  return false;
}

int64_t ModelConfig::num_moe_layers() const {
  int64_t count = 0;
  for (int64_t layer = 0; layer < num_layers; ++layer) count += IsMoeLayer(layer) ? 1 : 0;
  return count;
}

KvGeometry ModelConfig::kv_geometry(uint32_t block_tokens) const {
  KvGeometry g;
  g.num_layers = static_cast<uint32_t>(num_layers);
  g.block_tokens = block_tokens;
  if (is_mla()) {
    g.kind = AttentionKind::kMla;
    g.kv_lora_rank = static_cast<uint32_t>(kv_lora_rank);
    g.rope_dim = static_cast<uint32_t>(qk_rope_head_dim);
  } else {
    g.kind = AttentionKind::kGqa;
    g.num_kv_heads = static_cast<uint32_t>(num_kv_heads);
    g.head_dim = static_cast<uint32_t>(head_dim);
  }
  return g;
}

std::string ModelConfig::DebugString() const {
  std::string attention =
      is_mla()
          ? absl::StrCat(
                "MLA heads=", num_heads, " kv_lora_rank=", kv_lora_rank,
                " q_lora_rank=", q_lora_rank.has_value() ? absl::StrCat(*q_lora_rank) : "none",
                " qk_nope=", qk_nope_head_dim, " qk_rope=", qk_rope_head_dim, " v=", v_head_dim)
          : absl::StrCat("GQA heads=", num_heads, "/", num_kv_heads, " head_dim=", head_dim);
  std::string rope_text =
      rope.type == RopeType::kDefault
          ? absl::StrCat("rope theta=", rope.theta)
          : absl::StrCat("rope yarn theta=", rope.theta, " factor=", rope.factor,
                         " original_max=", rope.original_max_position_embeddings,
                         " beta=", rope.beta_fast, "/", rope.beta_slow, " mscale=", rope.mscale,
                         "/", rope.mscale_all_dim);
  return absl::StrCat(ModelArchName(arch), " (", source, "): layers=", num_layers, " (",
                      num_moe_layers(), " MoE) hidden=", hidden_size, " vocab=", vocab_size, " ",
                      attention, " experts=", n_routed_experts, " top", num_experts_per_tok,
                      " shared=", n_shared_experts, " moe_inter=", moe_intermediate_size,
                      " dense_inter=", intermediate_size,
                      " norm_topk=", norm_topk_prob ? "yes" : "no", " ", rope_text,
                      " kv_bytes_per_token=", kv_bytes_per_token(), " dtype=", dtype);
}

}  // namespace writescope
