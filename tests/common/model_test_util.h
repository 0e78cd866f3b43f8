// Tiny model folders for loader tests: config.json + safetensors with values that
// identify each element, in the canonical or the transformers-5 fused layout.
#ifndef WRITESCOPE_TESTS_COMMON_MODEL_TEST_UTIL_H_
#define WRITESCOPE_TESTS_COMMON_MODEL_TEST_UTIL_H_

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_config.h"
#include "common/model_tensors.h"
#include "common/model_weights.h"
#include "common/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace writescope::testing {

// A tiny config.json (transformers 4.x style) of each architecture.
inline nlohmann::json TinyConfigJson(absl::string_view arch) {
  nlohmann::json j;
  j["model_type"] = std::string(arch);
  j["vocab_size"] = 96;
  j["hidden_size"] = 32;
  j["num_attention_heads"] = 4;
  j["rms_norm_eps"] = 1e-6;
  j["max_position_embeddings"] = 4096;
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = "bfloat16";
  j["bos_token_id"] = 1;
  j["eos_token_id"] = 2;
  if (arch == "deepseek_v2") {
    j["num_hidden_layers"] = 3;
    j["num_key_value_heads"] = 4;
    j["intermediate_size"] = 48;
    j["moe_intermediate_size"] = 16;
    j["n_shared_experts"] = 1;
    j["n_routed_experts"] = 4;
    j["num_experts_per_tok"] = 2;
    j["first_k_dense_replace"] = 1;
    j["kv_lora_rank"] = 16;
    j["q_lora_rank"] = nullptr;
    j["qk_nope_head_dim"] = 8;
    j["qk_rope_head_dim"] = 4;
    j["v_head_dim"] = 8;
    j["rope_theta"] = 10000;
    j["rope_scaling"] = {
        {"type", "yarn"},         {"factor", 40},   {"original_max_position_embeddings", 128},
        {"beta_fast", 32},        {"beta_slow", 1}, {"mscale", 0.707},
        {"mscale_all_dim", 0.707}};
  } else if (arch == "qwen3_moe") {
    j["num_hidden_layers"] = 2;
    j["num_key_value_heads"] = 2;
    j["head_dim"] = 8;
    j["intermediate_size"] = 48;
    j["moe_intermediate_size"] = 16;
    j["num_experts"] = 4;
    j["num_experts_per_tok"] = 2;
    j["norm_topk_prob"] = true;
    j["rope_theta"] = 1e6;
  } else {
    j["num_hidden_layers"] = 2;
    j["num_key_value_heads"] = 2;
    j["intermediate_size"] = 16;
    j["num_local_experts"] = 4;
    j["num_experts_per_tok"] = 2;
    j["rope_theta"] = 1e6;
  }
  return j;
}

// The value of element `index` of canonical tensor `name`: small multiples of 1/8,
// exact in bf16, f16 and f32.
inline float TestValue(absl::string_view name, int64_t index) {
  uint64_t hash = 1469598103934665603ull;
  for (char c : name) hash = (hash ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return static_cast<float>(static_cast<int64_t>((hash + static_cast<uint64_t>(index) * 7) % 33) -
                            16) /
         8.0f;
}

inline std::string EncodeValues(const std::vector<float>& values, SafetensorsDtype dtype) {
  std::string bytes;
  for (float v : values) {
    if (dtype == SafetensorsDtype::kF32) {
      bytes.append(reinterpret_cast<const char*>(&v), 4);
      continue;
    }
    uint16_t bits;
    if (dtype == SafetensorsDtype::kBF16) {
      bits = weights_internal::FloatToBf16(v);
    } else {  // F16: our test values are exact halves (|v| <= 2, multiples of 1/8)
      uint32_t f;
      std::memcpy(&f, &v, 4);
      const uint32_t sign = (f >> 16) & 0x8000u;
      const int exponent = static_cast<int>((f >> 23) & 0xff) - 127 + 15;
      bits = (f & 0x7fffffffu) == 0
                 ? static_cast<uint16_t>(sign)
                 : static_cast<uint16_t>(sign | (exponent << 10) | ((f >> 13) & 0x3ffu));
    }
    bytes.append(reinterpret_cast<const char*>(&bits), 2);
  }
  return bytes;
}

struct FolderOptions {
  bool fused_experts = false;  // transformers-5 runtime layout
  SafetensorsDtype dtype = SafetensorsDtype::kBF16;
  int shards = 1;              // > 1: model-0000i-of-0000n.safetensors + index
  bool write_index = true;     // with shards > 1
  std::set<std::string> omit;  // file tensor names to leave out
  std::map<std::string, std::vector<int64_t>> reshape;  // file tensor -> wrong shape
  std::vector<std::string> extra;                       // extra 1-D tensors
};

// A fresh, empty directory under the test temp dir, removed when the test program exits.
inline std::string MakeTempDir(absl::string_view tag) {
  static int counter = 0;
  static std::vector<std::string>* const dirs = [] {
    auto* list = new std::vector<std::string>();
    std::atexit([] {
      std::error_code ec;
      for (const std::string& d : *dirs) std::filesystem::remove_all(d, ec);
    });
    return list;
  }();
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/ws-model-", tag, "-", getpid(), "-", counter++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  dirs->push_back(dir);
  return dir;
}

// Writes config.json and the weights of `config_json`'s model into `dir`.
inline void WriteModelFolder(const std::string& dir, const nlohmann::json& config_json,
                             const FolderOptions& options = {}) {
  {
    std::ofstream out(dir + "/config.json");
    out << config_json.dump(2);
  }
  auto config = ModelConfig::FromJson(config_json.dump(), dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status();

  // File tensors, in order: canonical ones, or fused stacks.
  std::vector<SafetensorsWriteTensor> tensors;
  std::map<std::string, std::vector<float>> fused_values;
  std::map<std::string, std::vector<int64_t>> fused_shapes;
  std::vector<std::string> fused_order;
  for (const TensorSpec& spec : ExpectedTensors(*config)) {
    std::vector<float> values(spec.numel());
    for (int64_t i = 0; i < spec.numel(); ++i) values[i] = TestValue(spec.name, i);
    if (options.fused_experts && spec.is_routed_expert()) {
      const TensorLocation fused = CandidateLocations(*config, spec)[1];
      auto [it, inserted] = fused_values.try_emplace(fused.tensor);
      if (inserted) {
        int64_t n = 1;
        for (int64_t d : fused.stored_shape) n *= d;
        it->second.resize(n);
        fused_shapes[fused.tensor] = fused.stored_shape;
        fused_order.push_back(fused.tensor);
      }
      std::copy(values.begin(), values.end(), it->second.begin() + fused.element_offset);
      continue;
    }
    std::string name = spec.name;
    if (options.fused_experts && config->arch == ModelArch::kMixtral && spec.layer >= 0 &&
        name == RouterTensorName(*config, spec.layer)) {
      name = LayerTensorName(spec.layer, "mlp.gate.weight");
    }
    tensors.push_back(SafetensorsWriteTensor{name, options.dtype, spec.shape,
                                             EncodeValues(values, options.dtype)});
  }
  for (const std::string& name : fused_order) {
    tensors.push_back(SafetensorsWriteTensor{name, options.dtype, fused_shapes[name],
                                             EncodeValues(fused_values[name], options.dtype)});
  }
  for (const std::string& name : options.extra) {
    tensors.push_back(SafetensorsWriteTensor{
        name, options.dtype, {4}, EncodeValues({1, 2, 3, 4}, options.dtype)});
  }
  std::vector<SafetensorsWriteTensor> kept;
  for (SafetensorsWriteTensor& t : tensors) {
    if (options.omit.count(t.name) != 0) continue;
    auto reshape = options.reshape.find(t.name);
    if (reshape != options.reshape.end()) {
      t.shape = reshape->second;
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      t.bytes = EncodeValues(std::vector<float>(n, 0.5f), t.dtype);
    }
    kept.push_back(std::move(t));
  }

  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (options.shards <= 1) {
    ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", kept, metadata).ok());
    return;
  }
  nlohmann::json index;
  index["metadata"] = {{"total_size", 0}};
  index["weight_map"] = nlohmann::json::object();
  for (int shard = 0; shard < options.shards; ++shard) {
    const std::string file =
        absl::StrCat("model-0000", shard + 1, "-of-0000", options.shards, ".safetensors");
    std::vector<SafetensorsWriteTensor> part;
    for (size_t i = shard; i < kept.size(); i += options.shards) {
      part.push_back(kept[i]);
      index["weight_map"][kept[i].name] = file;
    }
    ASSERT_TRUE(WriteSafetensors(dir + "/" + file, part, metadata).ok());
  }
  if (options.write_index) {
    std::ofstream out(dir + "/model.safetensors.index.json");
    out << index.dump(2);
  }
}

}  // namespace writescope::testing

#endif  // WRITESCOPE_TESTS_COMMON_MODEL_TEST_UTIL_H_
