// The gpu_worker's GPU matrix products (bf16 tensor-core products of x split three ways, on
// the weights' copies in DeviceWeights) against the host Linear, for every attention-side weight of a small model of each architecture. Needs a CUDA
// device (label gpu); the host device has no backend (the host Linear runs).
#include "gpu_worker/device_linear.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/model_tensors.h"
#include "common/status.h"
#include "common/sampler.h"
#include "gpu_worker/pinned_array.h"
#include "gtest/gtest.h"
#include "tests/gpu_worker/device_test_util.h"
#include "kernels/bf16.h"
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
    const double error = std::fabs(double(got[i]) - want[i]);
    // A NaN or an infinity is the worst error there is (std::max would pass a NaN over).
    if (!std::isfinite(error)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, error);
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return worst / scale;
}

// The backend over the weights' device copies, which must outlive it.
struct DeviceLinearUnderTest {
  std::unique_ptr<DeviceWeights> device_weights;
  std::unique_ptr<DeviceLinear> linear;
};

absl::StatusOr<DeviceLinearUnderTest> MakeDeviceLinear(Device* device, const ModelWeights& weights,
                                                       const DeviceLinearOptions& options = {}) {
  DeviceLinearUnderTest made;
  WS_ASSIGN_OR_RETURN(made.device_weights,
                      DeviceWeights::Upload(weights, device, VramBudget{}, /*kv_bytes=*/0));
  WS_ASSIGN_OR_RETURN(made.linear,
                      CreateDeviceLinear(device, weights, *made.device_weights, options));
  return made;
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
  auto made = MakeDeviceLinear(host.get(), **weights);
  WS_ASSERT_OK(made.status());
  EXPECT_EQ(made->linear, nullptr);
}

class DeviceLinearArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceLinearArchTest, MatchesHostLinearForEveryWeight) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
  WS_SKIP_WITHOUT_CUDA(device);
  const ModelConfig config = kernels::model::testing::TinyConfig(GetParam());
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kGpu, .seed = 5});
  WS_ASSERT_OK(weights.status());
  auto made = MakeDeviceLinear(device->get(), **weights);
  WS_ASSERT_OK(made.status());
  DeviceLinear* linear = made->linear.get();
  ASSERT_NE(linear, nullptr);
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
      WS_ASSERT_OK(linear->Linear(x.data(), tokens, w, got.data()));
      EXPECT_LT(MaxRelativeError(want.data(), got.data(), want.size()), 1e-5)
          << spec.name << " tokens " << tokens;
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
  EXPECT_GT(linear->scratch_bytes(), 0u);
}

// lm_head's product reduced on the device (LinearRowStats) against the stats of the same
// product copied back (Linear, then the host's ComputeLogitRowStats): the same product, so the
// max, its first index and the +inf count are exact and the sum within its order's rounding;
// the greedy token and log-probability follow. Odd token counts, 0 included, and guards after
// the output.
TEST_P(DeviceLinearArchTest, LmHeadRowStatsMatchTheCopiedLogits) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
  WS_SKIP_WITHOUT_CUDA(device);
  const ModelConfig config = kernels::model::testing::TinyConfig(GetParam());
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kGpu, .seed = 19});
  WS_ASSERT_OK(weights.status());
  auto made = MakeDeviceLinear(device->get(), **weights);
  WS_ASSERT_OK(made.status());
  DeviceLinear* linear = made->linear.get();
  ASSERT_NE(linear, nullptr);
  const LinearWeight w = AsLinear((*weights)->At("lm_head.weight"));
  std::mt19937_64 rng(23);
  std::normal_distribution<float> normal;
  for (int64_t tokens : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{65}}) {
    std::vector<float> x(tokens * w.in_features);
    for (float& v : x) v = normal(rng);
    std::vector<float> logits(tokens * w.out_features);
    WS_ASSERT_OK(linear->Linear(x.data(), tokens, w, logits.data()));
    LogitRowStats guard;
    guard.argmax = -3;
    std::vector<LogitRowStats> stats(tokens + 2, guard);
    WS_ASSERT_OK(linear->LinearRowStats(x.data(), tokens, w, stats.data()));
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

// MLA's absorbed per-head products (one strided-batched product each) against mla.h's host loops
// (double accumulation) on every layer's kv_b of a tiny DeepSeek-V2.
TEST(DeviceLinearTest, MlaProductsMatchTheHostLoops) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
  WS_SKIP_WITHOUT_CUDA(device);
  // v_head_dim != qk_nope_head_dim, so that a swapped offset or stride shows.
  ModelConfig config = kernels::model::testing::TinyConfig("deepseek_v2");
  config.v_head_dim = config.qk_nope_head_dim + 8;
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kGpu, .seed = 9});
  WS_ASSERT_OK(weights.status());
  auto made = MakeDeviceLinear(device->get(), **weights);
  WS_ASSERT_OK(made.status());
  DeviceLinear* linear = made->linear.get();
  ASSERT_NE(linear, nullptr);
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
      WS_ASSERT_OK(linear->MlaAbsorb(d, q.data(), tokens, kv_b, got.data()));
      EXPECT_LT(MaxRelativeError(want.data(), got.data(), want.size()), 1e-5)
          << "absorb, layer " << layer << " tokens " << tokens;
      std::vector<float> o(tokens * d.num_heads * d.kv_lora_rank);
      for (float& v : o) v = normal(rng);
      std::vector<float> want_v(tokens * d.num_heads * d.v_dim + 8, 3.0f), got_v(want_v);
      kernels::model::MlaApplyUv(d, o.data(), tokens, kv_b, want_v.data());
      WS_ASSERT_OK(linear->MlaUv(d, o.data(), tokens, kv_b, got_v.data()));
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
  WS_SKIP_WITHOUT_CUDA(device);
  // Intermediate sizes other than the hidden size (the tiny configs make every MLP matrix
  // square), so that a product of the wrong shape or order shows.
  ModelConfig config = kernels::model::testing::TinyConfig("deepseek_v2");
  config.intermediate_size = 96;
  config.moe_intermediate_size = 24;
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kGpu, .seed = 13});
  WS_ASSERT_OK(weights.status());
  auto made = MakeDeviceLinear(device->get(), **weights);
  WS_ASSERT_OK(made.status());
  DeviceLinear* linear = made->linear.get();
  ASSERT_NE(linear, nullptr);
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
      WS_ASSERT_OK(linear->SwiGlu(x.data(), tokens, gate, up, down, got.data()));
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
  EXPECT_EQ(linear->SwiGlu(x.data(), 1, gate, gate, gate, y.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

// The products called again and again on new inputs, at the same rows and at more (the
// device buffers then grow), into pageable outputs (which come back through the pinned
// bounce buffer) and pinned ones in turn, each call against the host. (Session 34 ran these
// calls through CUDA graphs, run 188, and kept the test when the graphs were removed.)
// Each with the default split scratch (a call is one chunk), with room for one token (a
// chunk per token), and with 20000 bytes (chunks of a few tokens, the last one shorter); and
// with the default slices of the inner dimension (none at these sizes) and with slices of 40
// (several, the last one shorter, where a product's inner dimension is over 40).
class DeviceLinearScratchTest
    : public ::testing::TestWithParam<std::tuple<std::string, uint64_t, int64_t>> {};

TEST_P(DeviceLinearScratchTest, RepeatedCallsMatchTheHostOnNewInputs) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
  WS_SKIP_WITHOUT_CUDA(device);
  const auto& [arch, split_scratch_bytes, k_slice] = GetParam();
  ModelConfig config = kernels::model::testing::TinyConfig(arch);
  config.intermediate_size = 96;
  config.moe_intermediate_size = 24;
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kGpu, .seed = 29});
  WS_ASSERT_OK(weights.status());
  auto made = MakeDeviceLinear(device->get(), **weights,
                               {.split_scratch_bytes = split_scratch_bytes, .k_slice = k_slice});
  WS_ASSERT_OK(made.status());
  DeviceLinear* linear = made->linear.get();
  ASSERT_NE(linear, nullptr);
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
      WS_ASSERT_OK(linear->Linear(x.data(), tokens, w, y));
      EXPECT_LT(MaxRelativeError(want.data(), y, n), 1e-5)
          << "[" << w.out_features << ", " << w.in_features << "] tokens " << tokens;
    }
    {
      std::vector<float> x(tokens * lm_head.in_features);
      for (float& v : x) v = normal(rng);
      std::vector<float> logits(tokens * lm_head.out_features);
      WS_ASSERT_OK(kernels::model::Linear(x.data(), tokens, lm_head, logits.data()));
      std::vector<LogitRowStats> stats(tokens);
      WS_ASSERT_OK(linear->LinearRowStats(x.data(), tokens, lm_head, stats.data()));
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
        WS_ASSERT_OK(linear->MlaAbsorb(d, q.data(), tokens, kv_b, y));
        EXPECT_LT(MaxRelativeError(want.data(), y, n), 1e-5) << "absorb, tokens " << tokens;
        std::vector<float> o(tokens * d.num_heads * d.kv_lora_rank);
        for (float& v : o) v = normal(rng);
        const size_t nv = tokens * d.num_heads * d.v_dim;
        std::vector<float> want_v(nv), got_v(nv);
        kernels::model::MlaApplyUv(d, o.data(), tokens, kv_b, want_v.data());
        float* yv = output(got_v, nv);
        WS_ASSERT_OK(linear->MlaUv(d, o.data(), tokens, kv_b, yv));
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
        WS_ASSERT_OK(linear->SwiGlu(x.data(), tokens, gate, up, down, y));
        EXPECT_LT(MaxRelativeError(want.data(), y, n), 1e-5)
            << "swiglu, layer " << layer << " tokens " << tokens;
      }
    }
  }
}

// The accuracy of the products over a long inner dimension (4096, a Mixtral hidden size)
// against double accumulation: per output, |error| over sum_k |x_k w_k| (the scale of an
// fp32 dot product's rounding), its root mean square over 32 tokens x every output. The
// tensor cores' fp32 accumulation loses more than an FMA chain over the whole dimension;
// in slices of 512 (the default), added in fp32, less. Prints the host's oneDNN fp32
// product beside them.
TEST(DeviceLinearTest, SlicedInnerDimensionIsMoreAccurate) {
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
  WS_SKIP_WITHOUT_CUDA(device);
  ModelConfig config = kernels::model::testing::TinyConfig("qwen3_moe");
  config.hidden_size = 4096;
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kGpu, .seed = 37});
  WS_ASSERT_OK(weights.status());
  auto sliced = MakeDeviceLinear(device->get(), **weights);
  WS_ASSERT_OK(sliced.status());
  auto whole = MakeDeviceLinear(device->get(), **weights, {.k_slice = 0});
  WS_ASSERT_OK(whole.status());
  ASSERT_NE(sliced->linear, nullptr);
  ASSERT_NE(whole->linear, nullptr);
  const LinearWeight w = AsLinear((*weights)->At("model.layers.0.self_attn.q_proj.weight"));
  ASSERT_EQ(w.in_features, 4096);
  const int64_t tokens = 32;
  std::mt19937_64 rng(41);
  std::normal_distribution<float> normal;
  std::vector<float> x(tokens * w.in_features);
  for (float& v : x) v = normal(rng);
  std::vector<double> want(tokens * w.out_features), scale(want.size());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t o = 0; o < w.out_features; ++o) {
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < w.in_features; ++k) {
        const double term = double(x[t * w.in_features + k]) *
                            kernels::Bf16ToFloat(w.data[o * w.in_features + k]);
        sum += term;
        magnitude += std::fabs(term);
      }
      want[t * w.out_features + o] = sum;
      scale[t * w.out_features + o] = std::max(magnitude, 1e-30);
    }
  }
  const auto rms_error = [&](const std::vector<float>& got) {
    double squares = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double e = (got[i] - want[i]) / scale[i];
      squares += e * e;
    }
    return std::sqrt(squares / want.size());
  };
  std::vector<float> host(want.size()), got_sliced(want.size()), got_whole(want.size());
  WS_ASSERT_OK(kernels::model::Linear(x.data(), tokens, w, host.data()));
  WS_ASSERT_OK(sliced->linear->Linear(x.data(), tokens, w, got_sliced.data()));
  WS_ASSERT_OK(whole->linear->Linear(x.data(), tokens, w, got_whole.data()));
  const double e_host = rms_error(host), e_sliced = rms_error(got_sliced),
               e_whole = rms_error(got_whole);
  std::printf("rms |error| / sum |x w| over [%lld x %lld] x [%lld]: host fp32 %.3g, "
              "device sliced (512) %.3g, device whole %.3g\n",
              static_cast<long long>(w.out_features), static_cast<long long>(w.in_features),
              static_cast<long long>(tokens), e_host, e_sliced, e_whole);
  EXPECT_LT(e_sliced, e_whole);
  EXPECT_LT(e_sliced, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Archs, DeviceLinearArchTest,
                         ::testing::Values("qwen3_moe", "mixtral", "deepseek_v2"));
INSTANTIATE_TEST_SUITE_P(
    ArchsAndScratch, DeviceLinearScratchTest,
    ::testing::Combine(::testing::Values("qwen3_moe", "mixtral", "deepseek_v2"),
                       ::testing::Values(DeviceLinearOptions{}.split_scratch_bytes, uint64_t{1},
                                         uint64_t{20000}),
                       ::testing::Values(DeviceLinearOptions{}.k_slice, int64_t{40})));

}  // namespace
}  // namespace writescope::gpu
