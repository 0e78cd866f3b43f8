#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>

#include "common/model_weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/model_test_util.h"
#include "tests/common/test_util.h"

namespace writescope {
namespace {

using weights_internal::Bf16ToFloat;

ModelConfig Config(absl::string_view arch, int64_t layers) {
  auto config = ModelConfig::ForSyntheticArch(arch, layers);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// A small config of real structure (real configs at 2 layers are still ~1 GB).
ModelConfig SmallConfig(absl::string_view arch) {
  auto config = ModelConfig::FromJson(testing::TinyConfigJson(arch).dump(), "tiny");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

class SyntheticArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SyntheticArchTest, ShapesAndWorkerSplit) {
  const ModelConfig config = SmallConfig(GetParam());
  for (SideFilter side : {SideFilter::kAll, SideFilter::kGpu, SideFilter::kCpu}) {
    SyntheticOptions options;
    options.side = side;
    options.seed = 7;
    LoadProgress progress;
    options.progress = &progress;
    auto weights = MakeSyntheticWeights(config, options);
    WS_ASSERT_OK(weights.status());
    size_t held = 0;
    for (const TensorSpec& spec : ExpectedTensors(config)) {
      const Bf16Tensor* tensor = (*weights)->Find(spec.name);
      if (!SideSelected(side, spec.side)) {
        EXPECT_EQ(tensor, nullptr) << spec.name;
        continue;
      }
      ++held;
      ASSERT_NE(tensor, nullptr) << spec.name;
      EXPECT_EQ(tensor->shape, spec.shape);
      EXPECT_EQ(tensor->side, spec.side);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor->data) % 64, 0u) << spec.name;
      EXPECT_EQ(spec.side == WorkerSide::kCpu, spec.is_routed_expert()) << spec.name;
    }
    EXPECT_EQ((*weights)->num_tensors(), held);
    EXPECT_EQ((*weights)->owned_bytes(), (*weights)->total_bytes());
    EXPECT_TRUE(progress.finished.load());
    EXPECT_EQ(progress.tensors_done.load(), held);
    EXPECT_EQ(progress.bytes_done.load(), progress.bytes_total.load());
  }
}

TEST_P(SyntheticArchTest, SameInterfaceAsTheLoader) {
  // The accessors callers use work the same on synthetic weights.
  const ModelConfig config = SmallConfig(GetParam());
  auto weights = MakeSyntheticWeights(config, {});
  WS_ASSERT_OK(weights.status());
  const int64_t moe_layer = config.num_layers - 1;
  ASSERT_TRUE(config.IsMoeLayer(moe_layer));
  const Bf16Tensor& down = (*weights)->RoutedExpert(moe_layer, 1, MlpMatrix::kDown);
  EXPECT_EQ(down.shape, (std::vector<int64_t>{config.hidden_size, config.moe_intermediate_size}));
  EXPECT_EQ((*weights)->Router(moe_layer).shape,
            (std::vector<int64_t>{config.n_routed_experts, config.hidden_size}));
  EXPECT_EQ((*weights)->Get("model.layers.0.nonexistent.weight").status().code(),
            absl::StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Archs, SyntheticArchTest,
                         ::testing::Values("deepseek_v2", "qwen3_moe", "mixtral"));

TEST(SyntheticTest, DeterministicBySeedAndIndependentOfSideAndThreads) {
  const ModelConfig config = SmallConfig("qwen3_moe");
  SyntheticOptions all;
  all.seed = 42;
  auto a = MakeSyntheticWeights(config, all);
  WS_ASSERT_OK(a.status());

  SyntheticOptions cpu = all;
  cpu.side = SideFilter::kCpu;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  auto b = MakeSyntheticWeights(config, cpu);
  omp_set_num_threads(threads);
  WS_ASSERT_OK(b.status());

  SyntheticOptions other = all;
  other.seed = 43;
  auto c = MakeSyntheticWeights(config, other);
  WS_ASSERT_OK(c.status());

  int differing = 0;
  for (const TensorSpec& spec : (*b)->specs()) {
    const Bf16Tensor& x = (*a)->At(spec.name);
    const Bf16Tensor& y = (*b)->At(spec.name);
    ASSERT_EQ(std::memcmp(x.data, y.data, x.bytes()), 0) << spec.name;
    differing += std::memcmp(x.data, (*c)->At(spec.name).data, x.bytes()) != 0;
  }
  EXPECT_EQ(differing, static_cast<int>((*b)->num_tensors()));
}

TEST(SyntheticTest, SensibleScales) {
  // Real Mixtral shapes, one layer, GPU side only (~0.6 GB would be the CPU side).
  const ModelConfig config = Config("mixtral", 1);
  SyntheticOptions options;
  options.side = SideFilter::kGpu;
  auto weights = MakeSyntheticWeights(config, options);
  WS_ASSERT_OK(weights.status());

  auto stats = [](const Bf16Tensor& t) {
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = Bf16ToFloat(t.data[i]);
      sum += v;
      sum_sq += v * v;
    }
    const double mean = sum / t.numel();
    return std::pair<double, double>{mean, std::sqrt(sum_sq / t.numel() - mean * mean)};
  };
  auto [q_mean, q_std] = stats((*weights)->At("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_NEAR(q_mean, 0.0, 1e-3);
  EXPECT_NEAR(q_std, 1.0 / std::sqrt(4096.0), 0.02 / std::sqrt(4096.0) * 10);
  auto [n_mean, n_std] = stats((*weights)->At("model.layers.0.input_layernorm.weight"));
  EXPECT_NEAR(n_mean, 1.0, 0.01);
  EXPECT_NEAR(n_std, 0.05, 0.01);
  auto [e_mean, e_std] = stats((*weights)->At("model.embed_tokens.weight"));
  EXPECT_NEAR(e_mean, 0.0, 1e-2);
  EXPECT_NEAR(e_std, 1.0, 0.02);
}

TEST(SyntheticTest, RealShapesCpuSideOneLayer) {
  // DeepSeek-V2-Lite, 2 layers (layer 0 dense): the CPU side is layer 1's 64 experts.
  const ModelConfig config = Config("deepseek_v2", 2);
  SyntheticOptions options;
  options.side = SideFilter::kCpu;
  auto weights = MakeSyntheticWeights(config, options);
  WS_ASSERT_OK(weights.status());
  EXPECT_EQ((*weights)->num_tensors(), 64u * 3);
  EXPECT_EQ((*weights)->total_bytes(), 64u * 3 * 1408 * 2048 * 2);
}

TEST(SyntheticTest, TiedEmbeddings) {
  nlohmann::json json = testing::TinyConfigJson("mixtral");
  json["tie_word_embeddings"] = true;
  auto config = ModelConfig::FromJson(json.dump(), "tied");
  WS_ASSERT_OK(config.status());
  auto weights = MakeSyntheticWeights(*config, {});
  WS_ASSERT_OK(weights.status());
  EXPECT_EQ((*weights)->At("lm_head.weight").data,
            (*weights)->At("model.embed_tokens.weight").data);
}

}  // namespace
}  // namespace writescope
