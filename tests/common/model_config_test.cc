#include "common/model_config.h"

#include <fstream>
#include <random>
#include <string>

#include "common/model_tensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/test_util.h"

namespace writescope {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

Json EmbeddedJson(absl::string_view arch) {
  auto text = EmbeddedModelConfigJson(arch);
  EXPECT_TRUE(text.ok());
  return Json::parse(text->begin(), text->end());
}

absl::StatusOr<ModelConfig> Parse(const Json& json) {
  return ModelConfig::FromJson(json.dump(), "test/config.json");
}

// Rewrites a 4.x config into the 5.x style transformers 5 saves.
Json ToV5(Json json) {
  Json rope = Json::object();
  if (json.contains("rope_scaling") && json["rope_scaling"].is_object()) {
    rope = json["rope_scaling"];
    if (rope.contains("type")) {
      rope["rope_type"] = rope["type"];
      rope.erase("type");
    }
  } else {
    rope["rope_type"] = "default";
  }
  rope["rope_theta"] = json["rope_theta"];
  json.erase("rope_scaling");
  json.erase("rope_theta");
  json["rope_parameters"] = rope;
  json["dtype"] = json["torch_dtype"];
  json.erase("torch_dtype");
  json["transformers_version"] = "5.0.0";
  return json;
}

TEST(ModelConfigTest, DeepseekV2Lite) {
  auto config = ModelConfig::ForSyntheticArch("deepseek_v2");
  WS_ASSERT_OK(config.status());
  const ModelConfig& c = *config;
  EXPECT_EQ(c.arch, ModelArch::kDeepseekV2);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_layers, 27);
  EXPECT_EQ(c.vocab_size, 102400);
  EXPECT_EQ(c.num_heads, 16);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_FALSE(c.q_lora_rank.has_value());
  EXPECT_EQ(c.qk_nope_head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.qk_head_dim(), 192);
  EXPECT_EQ(c.n_routed_experts, 64);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_EQ(c.moe_intermediate_size, 1408);
  EXPECT_EQ(c.intermediate_size, 10944);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.rope.type, RopeType::kYarn);
  EXPECT_EQ(c.rope.theta, 10000);
  EXPECT_EQ(c.rope.factor, 40);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_EQ(c.rope.beta_fast, 32);
  EXPECT_EQ(c.rope.beta_slow, 1);
  EXPECT_DOUBLE_EQ(c.rope.mscale, 0.707);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 0.707);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  EXPECT_EQ(c.bos_token_id, 100000);
  EXPECT_THAT(c.eos_token_ids, ::testing::ElementsAre(100001));
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(1));
  EXPECT_TRUE(c.IsMoeLayer(26));
  EXPECT_EQ(c.num_moe_layers(), 26);
  const KvGeometry g = c.kv_geometry();
  EXPECT_EQ(g.kind, AttentionKind::kMla);
  EXPECT_EQ(g.kv_lora_rank, 512u);
  EXPECT_EQ(g.rope_dim, 64u);
  EXPECT_EQ(g.num_layers, 27u);
  // 27 layers * 576 values * 2 bytes = 31104 B = 30.375 KiB.
  EXPECT_EQ(c.kv_bytes_per_token(), 31104u);
}

TEST(ModelConfigTest, Qwen3Moe) {
  auto config = ModelConfig::ForSyntheticArch("qwen3_moe");
  WS_ASSERT_OK(config.status());
  const ModelConfig& c = *config;
  EXPECT_EQ(c.arch, ModelArch::kQwen3Moe);
  EXPECT_EQ(c.num_layers, 48);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.n_routed_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 768);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.num_moe_layers(), 48);
  const KvGeometry g = c.kv_geometry();
  EXPECT_EQ(g.kind, AttentionKind::kGqa);
  EXPECT_EQ(g.num_kv_heads, 4u);
  EXPECT_EQ(g.head_dim, 128u);
  EXPECT_EQ(c.kv_bytes_per_token(), 96u * 1024);
}

TEST(ModelConfigTest, Mixtral) {
  auto config = ModelConfig::ForSyntheticArch("mixtral");
  WS_ASSERT_OK(config.status());
  const ModelConfig& c = *config;
  EXPECT_EQ(c.arch, ModelArch::kMixtral);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.head_dim, 128);  // hidden / heads
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 14336);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.kv_bytes_per_token(), 128u * 1024);
}

TEST(ModelConfigTest, SharedConfigFilesMatchEmbeddedCopies) {
  for (const auto& [arch, file] : std::vector<std::pair<std::string, std::string>>{
           {"deepseek_v2", "deepseek-v2-lite.config.json"},
           {"qwen3_moe", "qwen3-30b-a3b.config.json"},
           {"mixtral", "mixtral-8x7b.config.json"}}) {
    const std::string path = std::string(WS_SHARED_MODELS_DIR) + "/" + file;
    std::ifstream in(path);
    if (!in) GTEST_SKIP() << "no " << path;
    auto from_file = ModelConfig::FromFile(path);
    WS_ASSERT_OK(from_file.status());
    auto embedded = ModelConfig::ForSyntheticArch(arch);
    WS_ASSERT_OK(embedded.status());
    from_file->source = embedded->source;
    EXPECT_EQ(from_file->DebugString(), embedded->DebugString()) << arch;
  }
}

TEST(ModelConfigTest, TransformersV5StyleParsesTheSame) {
  for (absl::string_view arch : {"deepseek_v2", "qwen3_moe", "mixtral"}) {
    SCOPED_TRACE(std::string(arch));
    auto v4 = Parse(EmbeddedJson(arch));
    WS_ASSERT_OK(v4.status());
    auto v5 = Parse(ToV5(EmbeddedJson(arch)));
    WS_ASSERT_OK(v5.status());
    EXPECT_EQ(v4->DebugString(), v5->DebugString());
  }
}

TEST(ModelConfigTest, V5RopeParametersKeyedByLayerTypeAndLegacyTypeKey) {
  Json json = ToV5(EmbeddedJson("deepseek_v2"));
  Json per_layer = {{"full_attention", json["rope_parameters"]}};
  json["rope_parameters"] = per_layer;
  auto config = Parse(json);
  WS_ASSERT_OK(config.status());
  EXPECT_EQ(config->rope.type, RopeType::kYarn);
  EXPECT_EQ(config->rope.factor, 40);

  Json legacy = EmbeddedJson("deepseek_v2");
  legacy["rope_scaling"].erase("type");
  legacy["rope_scaling"]["rope_type"] = "yarn";
  config = Parse(legacy);
  WS_ASSERT_OK(config.status());
  EXPECT_EQ(config->rope.type, RopeType::kYarn);
}

TEST(ModelConfigTest, V5DtypeWinsOverTorchDtype) {
  Json json = EmbeddedJson("mixtral");
  json["dtype"] = "float32";
  auto config = Parse(json);
  WS_ASSERT_OK(config.status());
  EXPECT_EQ(config->dtype, "float32");
}

TEST(ModelConfigTest, RefusesOtherModelTypesByName) {
  Json json = EmbeddedJson("mixtral");
  json["model_type"] = "llama";
  auto config = Parse(json);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("test/config.json"));
  EXPECT_THAT(config.status().message(), HasSubstr("unsupported model_type 'llama'"));

  json.erase("model_type");
  config = Parse(json);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("missing required field 'model_type'"));
}

TEST(ModelConfigTest, MalformedJson) {
  auto config = ModelConfig::FromJson("{\"model_type\": ", "bad.json");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("bad.json: malformed JSON"));
  config = ModelConfig::FromJson("[1, 2]", "list.json");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("must be a JSON object"));
}

struct BadField {
  std::string test_name;
  std::string arch;
  std::string field;
  Json value;  // null: erase the field
  std::string expected_message;
};

class ModelConfigRefusalTest : public ::testing::TestWithParam<BadField> {};

TEST_P(ModelConfigRefusalTest, NamesTheProblem) {
  const BadField& bad = GetParam();
  Json json = EmbeddedJson(bad.arch);
  if (bad.value.is_null()) {
    json.erase(bad.field);
  } else {
    json[bad.field] = bad.value;
  }
  auto config = Parse(json);
  ASSERT_FALSE(config.ok()) << config->DebugString();
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr(bad.expected_message));
  EXPECT_THAT(config.status().message(), HasSubstr("test/config.json"));
}

INSTANTIATE_TEST_SUITE_P(
    Fields, ModelConfigRefusalTest,
    ::testing::Values(
        BadField{"MissingHidden", "qwen3_moe", "hidden_size", nullptr,
                 "missing required field 'hidden_size'"},
        BadField{"MissingKvLoraRank", "deepseek_v2", "kv_lora_rank", nullptr,
                 "missing required field 'kv_lora_rank'"},
        BadField{"MissingNumExperts", "qwen3_moe", "num_experts", nullptr,
                 "missing required field 'num_experts'"},
        BadField{"ZeroLayers", "mixtral", "num_hidden_layers", 0,
                 "num_hidden_layers must be > 0, got 0"},
        BadField{"NegativeVocab", "mixtral", "vocab_size", -5, "vocab_size must be > 0, got -5"},
        BadField{"StringHidden", "mixtral", "hidden_size", "4096",
                 "field 'hidden_size' must be an integer"},
        BadField{"FractionalHidden", "mixtral", "hidden_size", 4096.5,
                 "field 'hidden_size' must be an integer"},
        BadField{"HeadsNotMultipleOfKvHeads", "qwen3_moe", "num_key_value_heads", 5,
                 "num_attention_heads (32) must be a multiple of num_key_value_heads (5)"},
        BadField{"TopKAboveExperts", "mixtral", "num_experts_per_tok", 9,
                 "num_experts_per_tok (9) exceeds the number of experts (8)"},
        BadField{"OddRopeDim", "deepseek_v2", "qk_rope_head_dim", 63,
                 "qk_rope_head_dim must be even"},
        BadField{"SigmoidScoring", "deepseek_v2", "scoring_func", "sigmoid",
                 "scoring_func 'sigmoid' is not supported"},
        BadField{"LinearRope", "mixtral", "rope_scaling", Json{{"type", "linear"}, {"factor", 2}},
                 "unsupported RoPE type 'linear'"},
        BadField{"YarnWithoutFactor", "qwen3_moe", "rope_scaling", Json{{"rope_type", "yarn"}},
                 "missing required field 'rope_scaling.factor'"},
        BadField{"SlidingWindow", "mixtral", "sliding_window", 4096,
                 "sliding-window attention is not supported"},
        BadField{"Gelu", "qwen3_moe", "hidden_act", "gelu", "only silu is supported"},
        BadField{"Int8Dtype", "qwen3_moe", "torch_dtype", "int8", "is 'int8'"},
        BadField{"MlpOnlyLayerOutOfRange", "qwen3_moe", "mlp_only_layers", Json::array({48}),
                 "mlp_only_layers entry 48 is not a layer in [0, 48)"},
        BadField{"ZeroSparseStep", "qwen3_moe", "decoder_sparse_step", 0,
                 "decoder_sparse_step must be > 0"},
        BadField{"AbsurdHidden", "mixtral", "hidden_size", int64_t{1} << 40,
                 "hidden_size = 1099511627776 exceeds the sanity limit"},
        BadField{"NegativeEps", "mixtral", "rms_norm_eps", -1.0, "rms_norm_eps must be > 0"}),
    [](const ::testing::TestParamInfo<BadField>& info) { return info.param.test_name; });

TEST(ModelConfigTest, GroupLimitedRoutingKeepsEnoughExpertsForTheTopK) {
  Json json = EmbeddedJson("deepseek_v2");  // 64 experts, top 6
  json["topk_method"] = "group_limited_greedy";
  json["n_group"] = 16;  // 4 experts a group
  json["topk_group"] = 2;  // 8 kept
  WS_ASSERT_OK(Parse(json).status());
  json["topk_group"] = 1;  // 4 kept, 6 wanted
  auto config = Parse(json);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(),
              HasSubstr("num_experts_per_tok (6) exceeds the experts of the topk_group (1) "
                        "groups kept (4)"));
}

TEST(ModelConfigTest, DenseLayerRules) {
  Json qwen = EmbeddedJson("qwen3_moe");
  qwen["mlp_only_layers"] = Json::array({0, 3});
  qwen["decoder_sparse_step"] = 2;
  auto config = Parse(qwen);
  WS_ASSERT_OK(config.status());
  // MoE where (layer + 1) % 2 == 0 and not in mlp_only_layers.
  EXPECT_FALSE(config->IsMoeLayer(0));
  EXPECT_TRUE(config->IsMoeLayer(1));
  EXPECT_FALSE(config->IsMoeLayer(2));
  EXPECT_FALSE(config->IsMoeLayer(3));
  EXPECT_TRUE(config->IsMoeLayer(5));

  Json deepseek = EmbeddedJson("deepseek_v2");
  deepseek["first_k_dense_replace"] = 2;
  deepseek["moe_layer_freq"] = 2;
  config = Parse(deepseek);
  WS_ASSERT_OK(config.status());
  EXPECT_FALSE(config->IsMoeLayer(0));
  EXPECT_FALSE(config->IsMoeLayer(1));
  EXPECT_TRUE(config->IsMoeLayer(2));
  EXPECT_FALSE(config->IsMoeLayer(3));
  EXPECT_TRUE(config->IsMoeLayer(4));
}

// transformers 5 writes Qwen3-MoE's expert count as "num_local_experts" (4.x: "num_experts").
TEST(ModelConfigTest, Qwen3ExpertCountInEitherStyle) {
  Json json = EmbeddedJson("qwen3_moe");
  json.erase("num_experts");
  json["num_local_experts"] = 64;
  auto config = Parse(json);
  WS_ASSERT_OK(config.status());
  EXPECT_EQ(config->n_routed_experts, 64);

  json["num_experts"] = 64;  // both, agreeing
  config = Parse(json);
  WS_ASSERT_OK(config.status());
  EXPECT_EQ(config->n_routed_experts, 64);

  json["num_experts"] = 128;  // both, disagreeing
  config = Parse(json);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("test/config.json"));
  EXPECT_THAT(config.status().message(),
              HasSubstr("'num_local_experts' is 64 but 'num_experts' is 128"));

  json.erase("num_experts");
  json["num_local_experts"] = nullptr;  // null counts as absent
  config = Parse(json);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("'num_local_experts' (transformers 5)"));
}

TEST(ModelConfigTest, QLoraRankDefaultsLikeTransformers) {
  Json json = EmbeddedJson("deepseek_v2");
  json.erase("q_lora_rank");
  auto config = Parse(json);
  WS_ASSERT_OK(config.status());
  EXPECT_EQ(config->q_lora_rank, 1536);
  json["q_lora_rank"] = 384;
  config = Parse(json);
  WS_ASSERT_OK(config.status());
  EXPECT_EQ(config->q_lora_rank, 384);
}

TEST(ModelConfigTest, EosListAndNulls) {
  Json json = EmbeddedJson("qwen3_moe");
  json["eos_token_id"] = Json::array({151645, 151643});
  json["bos_token_id"] = nullptr;
  auto config = Parse(json);
  WS_ASSERT_OK(config.status());
  EXPECT_FALSE(config->bos_token_id.has_value());
  EXPECT_THAT(config->eos_token_ids, ::testing::ElementsAre(151645, 151643));
}

TEST(ModelConfigTest, SyntheticLayerOverride) {
  auto config = ModelConfig::ForSyntheticArch("qwen3_moe", 4);
  WS_ASSERT_OK(config.status());
  EXPECT_EQ(config->num_layers, 4);
  EXPECT_EQ(config->kv_bytes_per_token(), 4u * 2 * 4 * 128 * 2);

  auto too_many = ModelConfig::ForSyntheticArch("mixtral", 33);
  ASSERT_FALSE(too_many.ok());
  EXPECT_THAT(too_many.status().message(), HasSubstr("must be in [1, 32]"));

  auto unknown = ModelConfig::ForSyntheticArch("llama");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown architecture 'llama'"));
}

TEST(ModelConfigTest, FromFileMissing) {
  auto config = ModelConfig::FromFile("/nonexistent/config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(config.status().message(), HasSubstr("/nonexistent/config.json"));
}

// Random byte mutations of the real configs: each parse is OK or an error, never a
// crash or an escaping exception (run under ASan/UBSan for a fuzz smoke test).
TEST(ModelConfigTest, MutationsNeverCrash) {
  std::mt19937_64 rng(99);
  int ok = 0;
  for (absl::string_view arch : {"deepseek_v2", "qwen3_moe", "mixtral"}) {
    const std::string original(*EmbeddedModelConfigJson(arch));
    for (int iteration = 0; iteration < 3000; ++iteration) {
      std::string text = original;
      const int mutations = 1 + static_cast<int>(rng() % 3);
      for (int m = 0; m < mutations; ++m) {
        const size_t pos = rng() % text.size();
        switch (rng() % 3) {
          case 0:
            text[pos] = "0123456789-.e\"nul[]{}:,"[rng() % 24];
            break;
          case 1:
            text.erase(pos, 1 + rng() % 8);
            break;
          case 2:
            text.insert(pos, 1, "9-\"[{"[rng() % 5]);
            break;
        }
        if (text.empty()) text = "{";
      }
      auto config = ModelConfig::FromJson(text, "fuzz");
      if (config.ok()) {
        ++ok;
        WS_EXPECT_OK(config->Validate());
        if (config->num_layers * config->n_routed_experts <= 100000) {
          (void)ExpectedTensors(*config).size();
        }
      }
    }
  }
  EXPECT_GT(ok, 0);
}

// ---- Expected tensors ----------------------------------------------------------------

const TensorSpec* FindSpec(const std::vector<TensorSpec>& specs, absl::string_view name) {
  for (const TensorSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

void ExpectSpec(const std::vector<TensorSpec>& specs, absl::string_view name,
                std::vector<int64_t> shape, WorkerSide side) {
  const TensorSpec* spec = FindSpec(specs, name);
  ASSERT_NE(spec, nullptr) << name;
  EXPECT_EQ(spec->shape, shape) << name;
  EXPECT_EQ(spec->side, side) << name;
}

uint64_t TotalParams(const std::vector<TensorSpec>& specs) {
  uint64_t total = 0;
  for (const TensorSpec& spec : specs) total += spec.numel();
  return total;
}

TEST(ExpectedTensorsTest, DeepseekV2Lite) {
  auto config = ModelConfig::ForSyntheticArch("deepseek_v2");
  WS_ASSERT_OK(config.status());
  const auto specs = ExpectedTensors(*config);
  constexpr auto kGpu = WorkerSide::kGpu;
  constexpr auto kCpu = WorkerSide::kCpu;
  ExpectSpec(specs, "model.embed_tokens.weight", {102400, 2048}, kGpu);
  ExpectSpec(specs, "lm_head.weight", {102400, 2048}, kGpu);
  ExpectSpec(specs, "model.norm.weight", {2048}, kGpu);
  ExpectSpec(specs, "model.layers.0.self_attn.q_proj.weight", {16 * 192, 2048}, kGpu);
  ExpectSpec(specs, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", {576, 2048}, kGpu);
  ExpectSpec(specs, "model.layers.0.self_attn.kv_a_layernorm.weight", {512}, kGpu);
  ExpectSpec(specs, "model.layers.0.self_attn.kv_b_proj.weight", {16 * 256, 512}, kGpu);
  ExpectSpec(specs, "model.layers.0.self_attn.o_proj.weight", {2048, 16 * 128}, kGpu);
  ExpectSpec(specs, "model.layers.0.mlp.gate_proj.weight", {10944, 2048}, kGpu);
  ExpectSpec(specs, "model.layers.0.mlp.down_proj.weight", {2048, 10944}, kGpu);
  EXPECT_EQ(FindSpec(specs, "model.layers.0.mlp.gate.weight"), nullptr);
  ExpectSpec(specs, "model.layers.1.mlp.gate.weight", {64, 2048}, kGpu);
  ExpectSpec(specs, "model.layers.1.mlp.shared_experts.gate_proj.weight", {2816, 2048}, kGpu);
  ExpectSpec(specs, "model.layers.1.mlp.shared_experts.down_proj.weight", {2048, 2816}, kGpu);
  ExpectSpec(specs, "model.layers.1.mlp.experts.63.up_proj.weight", {1408, 2048}, kCpu);
  ExpectSpec(specs, "model.layers.26.mlp.experts.0.down_proj.weight", {2048, 1408}, kCpu);
  EXPECT_EQ(FindSpec(specs, "model.layers.1.mlp.gate_proj.weight"), nullptr);
  // DeepSeek-V2-Lite has 15.7 B parameters.
  EXPECT_NEAR(TotalParams(specs) / 1e9, 15.7, 0.05);
}

TEST(ExpectedTensorsTest, Qwen3Moe) {
  auto config = ModelConfig::ForSyntheticArch("qwen3_moe");
  WS_ASSERT_OK(config.status());
  const auto specs = ExpectedTensors(*config);
  ExpectSpec(specs, "model.layers.5.self_attn.q_proj.weight", {4096, 2048}, WorkerSide::kGpu);
  ExpectSpec(specs, "model.layers.5.self_attn.k_proj.weight", {512, 2048}, WorkerSide::kGpu);
  ExpectSpec(specs, "model.layers.5.self_attn.o_proj.weight", {2048, 4096}, WorkerSide::kGpu);
  ExpectSpec(specs, "model.layers.5.self_attn.q_norm.weight", {128}, WorkerSide::kGpu);
  ExpectSpec(specs, "model.layers.5.self_attn.k_norm.weight", {128}, WorkerSide::kGpu);
  ExpectSpec(specs, "model.layers.5.mlp.gate.weight", {128, 2048}, WorkerSide::kGpu);
  ExpectSpec(specs, "model.layers.47.mlp.experts.127.gate_proj.weight", {768, 2048},
             WorkerSide::kCpu);
  // Qwen3-30B-A3B: 30.5 B parameters.
  EXPECT_NEAR(TotalParams(specs) / 1e9, 30.5, 0.1);
}

TEST(ExpectedTensorsTest, Mixtral) {
  auto config = ModelConfig::ForSyntheticArch("mixtral");
  WS_ASSERT_OK(config.status());
  const auto specs = ExpectedTensors(*config);
  ExpectSpec(specs, "model.layers.0.block_sparse_moe.gate.weight", {8, 4096}, WorkerSide::kGpu);
  ExpectSpec(specs, "model.layers.0.block_sparse_moe.experts.7.w1.weight", {14336, 4096},
             WorkerSide::kCpu);
  ExpectSpec(specs, "model.layers.0.block_sparse_moe.experts.7.w3.weight", {14336, 4096},
             WorkerSide::kCpu);
  ExpectSpec(specs, "model.layers.0.block_sparse_moe.experts.7.w2.weight", {4096, 14336},
             WorkerSide::kCpu);
  ExpectSpec(specs, "model.layers.31.self_attn.v_proj.weight", {1024, 4096}, WorkerSide::kGpu);
  // Mixtral-8x7B: 46.7 B parameters.
  EXPECT_NEAR(TotalParams(specs) / 1e9, 46.7, 0.1);
}

TEST(ExpectedTensorsTest, RoutedExpertsAreExactlyTheCpuSide) {
  for (absl::string_view arch : {"deepseek_v2", "qwen3_moe", "mixtral"}) {
    auto config = ModelConfig::ForSyntheticArch(arch, 3);
    WS_ASSERT_OK(config.status());
    int64_t experts = 0;
    for (const TensorSpec& spec : ExpectedTensors(*config)) {
      EXPECT_EQ(spec.side == WorkerSide::kCpu, spec.is_routed_expert()) << spec.name;
      experts += spec.is_routed_expert();
      EXPECT_EQ(spec.name.find("experts.") != std::string::npos &&
                    spec.name.find("shared_experts") == std::string::npos,
                spec.is_routed_expert())
          << spec.name;
    }
    EXPECT_EQ(experts, 3 * config->num_moe_layers() * config->n_routed_experts);
  }
}

TEST(ExpectedTensorsTest, FusedLocationsAreContiguousSlabs) {
  auto config = ModelConfig::ForSyntheticArch("qwen3_moe", 1);
  WS_ASSERT_OK(config.status());
  TensorSpec up;
  for (const TensorSpec& spec : ExpectedTensors(*config)) {
    if (spec.name == "model.layers.0.mlp.experts.5.up_proj.weight") up = spec;
  }
  const auto locations = CandidateLocations(*config, up);
  ASSERT_EQ(locations.size(), 2u);
  EXPECT_EQ(locations[0].tensor, up.name);
  EXPECT_EQ(locations[1].tensor, "model.layers.0.mlp.experts.gate_up_proj");
  EXPECT_EQ(locations[1].stored_shape, (std::vector<int64_t>{128, 2 * 768, 2048}));
  EXPECT_EQ(locations[1].element_offset, (5 * 2 + 1) * 768 * 2048);

  auto mixtral = ModelConfig::ForSyntheticArch("mixtral", 1);
  WS_ASSERT_OK(mixtral.status());
  TensorSpec router;
  router.name = RouterTensorName(*mixtral, 0);
  router.layer = 0;
  router.shape = {8, 4096};
  const auto router_locations = CandidateLocations(*mixtral, router);
  ASSERT_EQ(router_locations.size(), 2u);
  EXPECT_EQ(router_locations[1].tensor, "model.layers.0.mlp.gate.weight");
}

}  // namespace
}  // namespace writescope
