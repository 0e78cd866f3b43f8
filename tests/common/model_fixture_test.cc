// Loads the tiny reference models deploy/make_fixtures.py writes into tests/fixtures/
// (skips when they have not been generated yet): every expected tensor resolves, nothing
// is left over, and the recorded transformers outputs are well formed.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/model_weights.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/test_util.h"

namespace writescope {
namespace {

class FixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Dir() const { return std::string(WS_FIXTURES_DIR) + "/" + GetParam(); }
  void SetUp() override {
    if (!std::filesystem::exists(Dir() + "/config.json")) {
      GTEST_SKIP() << "no fixture at " << Dir() << " (run deploy/make_fixtures.py)";
    }
  }
};

TEST_P(FixtureTest, EveryTensorResolves) {
  LoadOptions options;
  options.strict_unused = true;
  auto weights = LoadModelFolder(Dir(), options);
  WS_ASSERT_OK(weights.status());
  const ModelConfig& config = (*weights)->config();
  EXPECT_EQ(ModelArchName(config.arch), GetParam());
  EXPECT_EQ((*weights)->num_tensors(), ExpectedTensors(config).size());
  for (const TensorSpec& spec : (*weights)->specs()) {
    const Bf16Tensor& tensor = (*weights)->At(spec.name);
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      ASSERT_TRUE(std::isfinite(weights_internal::Bf16ToFloat(tensor.data[i])))
          << spec.name << "[" << i << "]";
    }
  }
  if (GetParam() == "deepseek_v2") {
    EXPECT_EQ(config.rope.type, RopeType::kYarn);
    EXPECT_FALSE(config.q_lora_rank.has_value());
    EXPECT_FALSE(config.IsMoeLayer(0));
  }
}

TEST_P(FixtureTest, ExpectedOutputsAreWellFormed) {
  std::ifstream in(Dir() + "/expected.json");
  ASSERT_TRUE(in) << "fixture without expected.json";
  nlohmann::json expected = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(expected.is_discarded());
  auto config = ModelConfig::FromFile(Dir() + "/config.json");
  WS_ASSERT_OK(config.status());
  ASSERT_TRUE(expected.contains("prompts"));
  ASSERT_FALSE(expected["prompts"].empty());
  for (const auto& prompt : expected["prompts"]) {
    const auto& ids = prompt["token_ids"];
    ASSERT_GT(ids.size(), 512u) << "prompts must cross two 256-token blocks";
    ASSERT_EQ(prompt["prompt_logprobs"].size(), ids.size());
    for (const auto& id : ids) {
      ASSERT_GE(id.get<int64_t>(), 0);
      ASSERT_LT(id.get<int64_t>(), config->vocab_size);
    }
    const auto& greedy = prompt["greedy"];
    ASSERT_EQ(greedy["token_ids"].size(), greedy["logprobs"].size());
    ASSERT_EQ(greedy["token_ids"].size(), greedy["margins"].size());
    for (const auto& lp : greedy["logprobs"]) ASSERT_LE(lp.get<double>(), 0.0);
    for (const auto& margin : greedy["margins"]) ASSERT_GE(margin.get<double>(), 0.0);
  }
}

TEST_P(FixtureTest, FixtureIsSmall) {
  for (const std::string& dir : {Dir(), Dir() + "_fused"}) {
    if (!std::filesystem::exists(dir)) continue;
    uint64_t bytes = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.is_regular_file()) bytes += entry.file_size();
    }
    EXPECT_LT(bytes, uint64_t{2} << 20) << dir;
  }
}

// The same model saved in transformers 5's runtime layout (fused experts) loads to the
// same tensors: checks the loader's name-mapping table against transformers itself.
TEST_P(FixtureTest, FusedLayoutLoadsTheSameTensors) {
  const std::string fused_dir = Dir() + "_fused";
  if (!std::filesystem::exists(fused_dir + "/model.safetensors")) {
    GTEST_SKIP() << "no fused fixture at " << fused_dir;
  }
  LoadOptions options;
  options.strict_unused = true;
  auto canonical = LoadModelFolder(Dir(), options);
  WS_ASSERT_OK(canonical.status());
  auto fused = LoadModelFolder(fused_dir, options);
  WS_ASSERT_OK(fused.status());
  ASSERT_EQ((*fused)->num_tensors(), (*canonical)->num_tensors());
  for (const TensorSpec& spec : (*canonical)->specs()) {
    const Bf16Tensor& a = (*canonical)->At(spec.name);
    const Bf16Tensor& b = (*fused)->At(spec.name);
    ASSERT_EQ(a.shape, b.shape) << spec.name;
    ASSERT_EQ(std::memcmp(a.data, b.data, a.bytes()), 0)
        << spec.name << ": " << a.origin << " vs " << b.origin;
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, FixtureTest,
                         ::testing::Values("deepseek_v2", "qwen3_moe", "mixtral"));

}  // namespace
}  // namespace writescope
