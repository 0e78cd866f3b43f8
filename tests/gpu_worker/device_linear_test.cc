// The gpu_worker's GPU matrix products (cuBLAS SGEMM on fp32 weight copies) against the host
// Linear, for every attention-side weight of a small model of each architecture. Needs a CUDA
// device (label gpu); the host device has no backend (the host Linear runs).
#include "gpu_worker/device_linear.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/model_tensors.h"
#include "common/sampler.h"
#include "gpu_worker/pinned_array.h"
#include "gtest/gtest.h"
#include "kernels/model/decoder_ops.h"
#include "kernels/model/layers.h"
#include "kernels/model/mla.h"
#include "tests/common/test_util.h"
#include "tests/kernels/model/tiny_models.h"

namespace writescope::gpu {
namespace {

using kernels::model::AsLinear;
using kernels::model::LinearWeight;

// max |got - want| over max |want| (at least 1e-30), over n values: fp32 products of the same
// fp32 values differ by their summation order only.
double MaxRelativeError(const float* want, const float* got, size_t n) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return worst / scale;
}

// A layer's SwiGLU matrix: its shared expert's in a MoE layer, its dense MLP's otherwise.
std::string MlpName(const ModelConfig& config, int64_t layer, MlpMatrix matrix) {
  return config.IsMoeLayer(layer) ? SharedExpertTensorName(layer, matrix)
                                  : DenseMlpTensorName(layer, matrix);
}

TEST(DeviceLinearTest, HostDeviceHasNoBackend) {
  std::unique_ptr<Device> host = CreateHostDevice();
  const ModelConfig config = kernels::model::testing::TinyConfig("qwen3_moe");
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kGpu, .seed = 3});
  WS_ASSERT_OK(weights.status());
  auto linear = CreateDeviceLinear(host.get(), **weights, uint64_t{1} << 30);
  WS_ASSERT_OK(linear.status());
  EXPECT_EQ(*linear, nullptr);
}

class DeviceLinearArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceLinearArchTest, MatchesHostLinearForEveryWeight) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
  if (!device.ok()) GTEST_SKIP() << "no CUDA device: " << device.status();
  const ModelConfig config = kernels::model::testing::TinyConfig(GetParam());
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kGpu, .seed = 5});
  WS_ASSERT_OK(weights.status());
  auto linear = CreateDeviceLinear(device->get(), **weights, uint64_t{1} << 30);
  WS_ASSERT_OK(linear.status());
  ASSERT_NE(*linear, nullptr);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  int checked = 0;
  for (const TensorSpec& spec : (*weights)->specs()) {
    if (spec.shape.size() != 2 || spec.name == "model.embed_tokens.weight") continue;
    const LinearWeight w = AsLinear((*weights)->At(spec.name));
    for (int64_t tokens : {int64_t{1}, int64_t{7}, int64_t{130}}) {
      std::vector<float> x(tokens * w.in_features);
      for (float& v : x) v = normal(rng);
      std::vector<float> want(tokens * w.out_features), got(want.size());
      WS_ASSERT_OK(kernels::model::Linear(x.data(), tokens, w, want.data()));
      WS_ASSERT_OK((*linear)->Linear(x.data(), tokens, w, got.data()));
      EXPECT_LT(MaxRelativeError(want.data(), got.data(), want.size()), 1e-5)
          << spec.name << " tokens " << tokens;
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
  EXPECT_GT((*linear)->weight_bytes(), 0u);
}

// lm_head's product reduced on the device (LinearRowStats) against the stats of the same
// product copied back (Linear, then the host's ComputeLogitRowStats): the same SGEMM, so the
// max, its first index and the +inf count are exact and the sum within its order's rounding;
// the greedy token and log-probability follow. Odd token counts, 0 included, and guards after
// the output.
TEST_P(DeviceLinearArchTest, LmHeadRowStatsMatchTheCopiedLogits) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
  if (!device.ok()) GTEST_SKIP() << "no CUDA device: " << device.status();
  const ModelConfig config = kernels::model::testing::TinyConfig(GetParam());
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kGpu, .seed = 19});
  WS_ASSERT_OK(weights.status());
  auto linear = CreateDeviceLinear(device->get(), **weights, uint64_t{1} << 30);
  WS_ASSERT_OK(linear.status());
  ASSERT_NE(*linear, nullptr);
  const LinearWeight w = AsLinear((*weights)->At("lm_head.weight"));
  std::mt19937_64 rng(23);
  std::normal_distribution<float> normal;
  for (int64_t tokens : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{65}}) {
    std::vector<float> x(tokens * w.in_features);
    for (float& v : x) v = normal(rng);
    std::vector<float> logits(tokens * w.out_features);
    WS_ASSERT_OK((*linear)->Linear(x.data(), tokens, w, logits.data()));
    LogitRowStats guard;
    guard.argmax = -3;
    std::vector<LogitRowStats> stats(tokens + 2, guard);
    WS_ASSERT_OK((*linear)->LinearRowStats(x.data(), tokens, w, stats.data()));
    EXPECT_EQ(stats[tokens].argmax, -3);
    EXPECT_EQ(stats[tokens + 1].argmax, -3);
    for (int64_t t = 0; t < tokens; ++t) {
      const LogitRowStats want = ComputeLogitRowStats(
          absl::MakeConstSpan(logits.data() + t * w.out_features, w.out_features));
      EXPECT_EQ(stats[t].max_key, want.max_key) << "token " << t << " of " << tokens;
      EXPECT_EQ(stats[t].argmax, want.argmax) << "token " << t << " of " << tokens;
      EXPECT_EQ(stats[t].num_pos_inf, 0u);
      EXPECT_NEAR(stats[t].sum_exp, want.sum_exp, 5e-7 * want.sum_exp);
      const SampledToken got = GreedyTokenFromStats(stats[t], w.out_features);
      Sampler greedy(SamplerOptions{});
      const SampledToken expected = greedy.Sample(
          absl::MakeConstSpan(logits.data() + t * w.out_features, w.out_features));
      EXPECT_EQ(got.token_id, expected.token_id);
      EXPECT_NEAR(got.logprob, expected.logprob, 1e-6);
    }
  }
}

// MLA's absorbed per-head products (one strided-batched SGEMM each) against mla.h's host loops
// (double accumulation) on every layer's kv_b of a tiny DeepSeek-V2.
TEST(DeviceLinearTest, MlaProductsMatchTheHostLoops) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
  if (!device.ok()) GTEST_SKIP() << "no CUDA device: " << device.status();
  // v_head_dim != qk_nope_head_dim, so that a swapped offset or stride shows.
  ModelConfig config = kernels::model::testing::TinyConfig("deepseek_v2");
  config.v_head_dim = config.qk_nope_head_dim + 8;
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kGpu, .seed = 9});
  WS_ASSERT_OK(weights.status());
  auto linear = CreateDeviceLinear(device->get(), **weights, uint64_t{1} << 30);
  WS_ASSERT_OK(linear.status());
  ASSERT_NE(*linear, nullptr);
  auto ops = kernels::model::DecoderOps::Create(config, **weights);
  WS_ASSERT_OK(ops.status());
  const kernels::model::MlaDims d = (*ops)->mla_dims();
  ASSERT_NE(d.qk_nope, d.v_dim);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const LinearWeight kv_b = (*ops)->KvB(layer);
    for (int64_t tokens : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{130}}) {
      std::vector<float> q(tokens * d.num_heads * d.q_head_dim());
      for (float& v : q) v = normal(rng);
      std::vector<float> want(tokens * d.num_heads * d.latent_dim() + 8, 3.0f), got(want);
      kernels::model::MlaAbsorbQuery(d, q.data(), tokens, kv_b, want.data());
      WS_ASSERT_OK((*linear)->MlaAbsorb(d, q.data(), tokens, kv_b, got.data()));
      EXPECT_LT(MaxRelativeError(want.data(), got.data(), want.size()), 1e-5)
          << "absorb, layer " << layer << " tokens " << tokens;
      std::vector<float> o(tokens * d.num_heads * d.kv_lora_rank);
      for (float& v : o) v = normal(rng);
      std::vector<float> want_v(tokens * d.num_heads * d.v_dim + 8, 3.0f), got_v(want_v);
      kernels::model::MlaApplyUv(d, o.data(), tokens, kv_b, want_v.data());
      WS_ASSERT_OK((*linear)->MlaUv(d, o.data(), tokens, kv_b, got_v.data()));
      EXPECT_LT(MaxRelativeError(want_v.data(), got_v.data(), want_v.size()), 1e-5)
          << "uv, layer " << layer << " tokens " << tokens;
      for (int i = 1; i <= 8; ++i) {  // guards
        EXPECT_EQ(got[got.size() - i], 3.0f);
        EXPECT_EQ(got_v[got_v.size() - i], 3.0f);
      }
    }
  }
}

// The SwiGLU chain on the device (two products, the activation, the third product, one round
// trip) against the host's SwiGluMlp over the same fp32 weights, for DeepSeek-V2's dense MLP
// and shared experts of every layer of a tiny model; odd token counts, 0 included, guard words
// after the output; and a mismatched chain refused.
TEST(DeviceLinearTest, SwiGluChainMatchesTheHostMlp) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
  if (!device.ok()) GTEST_SKIP() << "no CUDA device: " << device.status();
  // Intermediate sizes other than the hidden size (the tiny configs make every MLP matrix
  // square), so that a product of the wrong shape or order shows.
  ModelConfig config = kernels::model::testing::TinyConfig("deepseek_v2");
  config.intermediate_size = 96;
  config.moe_intermediate_size = 24;
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kGpu, .seed = 13});
  WS_ASSERT_OK(weights.status());
  auto linear = CreateDeviceLinear(device->get(), **weights, uint64_t{1} << 30);
  WS_ASSERT_OK(linear.status());
  ASSERT_NE(*linear, nullptr);
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal;
  int checked = 0;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const auto name = [&](MlpMatrix matrix) { return MlpName(config, layer, matrix); };
    const LinearWeight gate = AsLinear((*weights)->At(name(MlpMatrix::kGate)));
    const LinearWeight up = AsLinear((*weights)->At(name(MlpMatrix::kUp)));
    const LinearWeight down = AsLinear((*weights)->At(name(MlpMatrix::kDown)));
    for (int64_t tokens : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{77}, int64_t{257}}) {
      std::vector<float> x(tokens * gate.in_features);
      for (float& v : x) v = 2.0f * normal(rng);
      std::vector<float> want(tokens * down.out_features + 8, 3.0f), got(want);
      WS_ASSERT_OK(kernels::model::SwiGluMlp(x.data(), tokens, gate, up, down, want.data(),
                                             static_cast<kernels::model::F32WeightCache*>(nullptr)));
      WS_ASSERT_OK((*linear)->SwiGlu(x.data(), tokens, gate, up, down, got.data()));
      for (size_t i = 0; i + 8 < want.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[i])) << "layer " << layer << " tokens " << tokens << " " << i;
      }
      EXPECT_LT(MaxRelativeError(want.data(), got.data(), want.size() - 8), 1e-5)
          << "layer " << layer << " tokens " << tokens;
      for (int i = 1; i <= 8; ++i) EXPECT_EQ(got[got.size() - i], 3.0f) << "guard " << i;
      ++checked;
    }
  }
  EXPECT_GE(checked, 10);
  // down's input must be gate's output: a chain of the wrong matrices is refused.
  const LinearWeight gate = AsLinear((*weights)->At(DenseMlpTensorName(0, MlpMatrix::kGate)));
  ASSERT_NE(gate.out_features, gate.in_features);
  std::vector<float> x(gate.in_features), y(gate.out_features);
  EXPECT_EQ((*linear)->SwiGlu(x.data(), 1, gate, gate, gate, y.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

// The products called again and again on new inputs, at the same rows and at more (the
// device buffers then grow), into pageable outputs (which come back through the pinned
// bounce buffer) and pinned ones in turn, each call against the host. (Session 34 ran these
// calls through CUDA graphs, run 188, and kept the test when the graphs were removed.)
TEST_P(DeviceLinearArchTest, RepeatedCallsMatchTheHostOnNewInputs) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
  if (!device.ok()) GTEST_SKIP() << "no CUDA device: " << device.status();
  ModelConfig config = kernels::model::testing::TinyConfig(GetParam());
  config.intermediate_size = 96;
  config.moe_intermediate_size = 24;
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kGpu, .seed = 29});
  WS_ASSERT_OK(weights.status());
  auto linear = CreateDeviceLinear(device->get(), **weights, uint64_t{1} << 30);
  WS_ASSERT_OK(linear.status());
  ASSERT_NE(*linear, nullptr);
  auto ops = kernels::model::DecoderOps::Create(config, **weights);
  WS_ASSERT_OK(ops.status());
  std::vector<LinearWeight> plain;
  for (const TensorSpec& spec : (*weights)->specs()) {
    if (spec.shape.size() == 2 && spec.name != "model.embed_tokens.weight") {
      plain.push_back(AsLinear((*weights)->At(spec.name)));
    }
  }
  const LinearWeight lm_head = AsLinear((*weights)->At("lm_head.weight"));
  std::mt19937_64 rng(31);
  std::normal_distribution<float> normal;
  PinnedArray<float> pinned(device->get());
  int calls = 0;
  for (int64_t tokens : {5, 5, 5, 300, 5, 5, 5, 1, 1, 1}) {
    const bool into_pinned = calls++ % 2 == 1;
    const auto output = [&](std::vector<float>& pageable, size_t n) -> float* {
      if (!into_pinned) return pageable.data();
      pinned.Resize(static_cast<int64_t>(n));
      return pinned.data();
    };
    for (const LinearWeight& w : plain) {
      std::vector<float> x(tokens * w.in_features);
      for (float& v : x) v = normal(rng);
      const size_t n = tokens * w.out_features;
      std::vector<float> want(n), got(n);
      WS_ASSERT_OK(kernels::model::Linear(x.data(), tokens, w, want.data()));
      float* y = output(got, n);
      WS_ASSERT_OK((*linear)->Linear(x.data(), tokens, w, y));
      EXPECT_LT(MaxRelativeError(want.data(), y, n), 1e-5)
          << "[" << w.out_features << ", " << w.in_features << "] tokens " << tokens;
    }
    {
      std::vector<float> x(tokens * lm_head.in_features);
      for (float& v : x) v = normal(rng);
      std::vector<float> logits(tokens * lm_head.out_features);
      WS_ASSERT_OK(kernels::model::Linear(x.data(), tokens, lm_head, logits.data()));
      std::vector<LogitRowStats> stats(tokens);
      WS_ASSERT_OK((*linear)->LinearRowStats(x.data(), tokens, lm_head, stats.data()));
      for (int64_t t = 0; t < tokens; ++t) {
        const LogitRowStats want = ComputeLogitRowStats(absl::MakeConstSpan(
            logits.data() + t * lm_head.out_features, lm_head.out_features));
        EXPECT_EQ(stats[t].argmax, want.argmax) << "tokens " << tokens << " row " << t;
        EXPECT_NEAR(stats[t].max_key, want.max_key, 1e-5 * std::fabs(want.max_key) + 1e-6);
      }
    }
    for (int64_t layer = 0; layer < config.num_layers; ++layer) {
      const auto name = [&](MlpMatrix matrix) { return MlpName(config, layer, matrix); };
      if (config.is_mla()) {
        const kernels::model::MlaDims d = (*ops)->mla_dims();
        const LinearWeight kv_b = (*ops)->KvB(layer);
        std::vector<float> q(tokens * d.num_heads * d.q_head_dim());
        for (float& v : q) v = normal(rng);
        const size_t n = tokens * d.num_heads * d.latent_dim();
        std::vector<float> want(n), got(n);
        kernels::model::MlaAbsorbQuery(d, q.data(), tokens, kv_b, want.data());
        float* y = output(got, n);
        WS_ASSERT_OK((*linear)->MlaAbsorb(d, q.data(), tokens, kv_b, y));
        EXPECT_LT(MaxRelativeError(want.data(), y, n), 1e-5) << "absorb, tokens " << tokens;
        std::vector<float> o(tokens * d.num_heads * d.kv_lora_rank);
        for (float& v : o) v = normal(rng);
        const size_t nv = tokens * d.num_heads * d.v_dim;
        std::vector<float> want_v(nv), got_v(nv);
        kernels::model::MlaApplyUv(d, o.data(), tokens, kv_b, want_v.data());
        float* yv = output(got_v, nv);
        WS_ASSERT_OK((*linear)->MlaUv(d, o.data(), tokens, kv_b, yv));
        EXPECT_LT(MaxRelativeError(want_v.data(), yv, nv), 1e-5) << "uv, tokens " << tokens;
      }
      if (config.is_mla() || config.n_shared_experts > 0) {
        if (config.IsMoeLayer(layer) && config.n_shared_experts == 0) continue;
        const LinearWeight gate = AsLinear((*weights)->At(name(MlpMatrix::kGate)));
        const LinearWeight up = AsLinear((*weights)->At(name(MlpMatrix::kUp)));
        const LinearWeight down = AsLinear((*weights)->At(name(MlpMatrix::kDown)));
        std::vector<float> x(tokens * gate.in_features);
        for (float& v : x) v = normal(rng);
        const size_t n = tokens * down.out_features;
        std::vector<float> want(n), got(n);
        WS_ASSERT_OK(kernels::model::SwiGluMlp(x.data(), tokens, gate, up, down, want.data(),
                                               static_cast<kernels::model::F32WeightCache*>(nullptr)));
        float* y = output(got, n);
        WS_ASSERT_OK((*linear)->SwiGlu(x.data(), tokens, gate, up, down, y));
        EXPECT_LT(MaxRelativeError(want.data(), y, n), 1e-5)
            << "swiglu, layer " << layer << " tokens " << tokens;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, DeviceLinearArchTest,
                         ::testing::Values("qwen3_moe", "mixtral", "deepseek_v2"));

}  // namespace
}  // namespace writescope::gpu
