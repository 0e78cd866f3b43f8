// The CUDA routed experts (gpu_worker/cuda_experts.h) against CpuExperts' bf16 path and the
// fp32 reference (kernels/model/layers.h SwiGluMlp per expert, summed over k in double), on
// tiny synthetic models of the three architectures: every MoE layer, odd token counts,
// layers out of order (the two-buffer residency), chunked and grown scratch, bad routing,
// the VRAM budget. Needs a CUDA device (label gpu): skips without one.
#include "gpu_worker/cuda_experts.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "gtest/gtest.h"
#include "tests/gpu_worker/device_test_util.h"
#include "kernels/experts/cpu_experts.h"
#include "kernels/model/layers.h"
#include "tests/common/test_util.h"
#include "tests/gpu_worker/resident_experts_checks.h"
#include "tests/kernels/experts/expert_test_util.h"
#include "tests/kernels/model/tiny_models.h"

namespace writescope::gpu {
namespace {

using kernels::experts::CpuExperts;
using kernels::experts::ExpertPrecision;

constexpr float kGuard = -12345.0f;
constexpr int64_t kGuardFloats = 64;
constexpr uint64_t kLargeBudget = uint64_t{1} << 30;

using kernels::experts::testing::RelativeError;
using kernels::experts::testing::Routing;

Routing RandomRouting(const ModelConfig& config, int64_t tokens, int64_t top_k, uint64_t seed) {
  return kernels::experts::testing::RandomRouting(tokens, config.hidden_size,
                                                  config.n_routed_experts, top_k, seed);
}

std::vector<int64_t> MoeLayers(const ModelConfig& config) {
  std::vector<int64_t> layers;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    if (config.IsMoeLayer(l)) layers.push_back(l);
  }
  return layers;
}

std::unique_ptr<ModelWeights> SyntheticCpuSide(const ModelConfig& config, uint64_t seed) {
  SyntheticOptions options;
  options.side = SideFilter::kCpu;
  options.seed = seed;
  auto weights = MakeSyntheticWeights(config, options);
  EXPECT_TRUE(weights.ok()) << weights.status();
  return weights.ok() ? *std::move(weights) : nullptr;
}

uint64_t LayerBytes(const ModelConfig& config) {
  return 2 * 3 * static_cast<uint64_t>(config.n_routed_experts) * config.moe_intermediate_size *
         config.hidden_size;
}

// y from `experts`, written into a buffer with guard words on both sides (y itself starts
// NaN, so that an unwritten value shows); INTERNAL when a guard word changed.
absl::StatusOr<std::vector<float>> DeviceForward(DeviceExperts& experts, int64_t layer,
                                                 const Routing& r, int64_t hidden) {
  const int64_t n = r.tokens * hidden;
  std::vector<float> guarded(n + 2 * kGuardFloats, kGuard);
  float* y = guarded.data() + kGuardFloats;
  std::fill(y, y + n, NAN);
  WS_RETURN_IF_ERROR(
      experts.Forward(layer, r.x.data(), r.tokens, r.top_k, r.ids.data(), r.weights.data(), y));
  for (int64_t i = 0; i < kGuardFloats; ++i) {
    if (guarded[i] != kGuard || guarded[kGuardFloats + n + i] != kGuard) {
      return absl::InternalError(absl::StrCat("guard word ", i, " overwritten"));
    }
  }
  return std::vector<float>(y, y + n);
}

// The fp32 reference: per expert, SwiGluMlp over its tokens; y summed over k in double.
std::vector<float> ReferenceForward(const ModelWeights& weights, int64_t layer, const Routing& r) {
  const ModelConfig& config = weights.config();
  const int64_t H = config.hidden_size;
  std::vector<double> acc(r.tokens * H, 0.0);
  for (int64_t e = 0; e < config.n_routed_experts; ++e) {
    std::vector<int64_t> pairs;
    for (int64_t i = 0; i < r.tokens * r.top_k; ++i) {
      if (r.ids[i] == e) pairs.push_back(i);
    }
    if (pairs.empty()) continue;
    const int64_t n = pairs.size();
    std::vector<float> xe(n * H), ye(n * H);
    for (int64_t p = 0; p < n; ++p) {
      std::copy_n(r.x.data() + (pairs[p] / r.top_k) * H, H, xe.data() + p * H);
    }
    const absl::Status status = kernels::model::SwiGluMlp(
        xe.data(), n, kernels::model::AsLinear(weights.RoutedExpert(layer, e, MlpMatrix::kGate)),
        kernels::model::AsLinear(weights.RoutedExpert(layer, e, MlpMatrix::kUp)),
        kernels::model::AsLinear(weights.RoutedExpert(layer, e, MlpMatrix::kDown)), ye.data());
    EXPECT_TRUE(status.ok()) << status;
    for (int64_t p = 0; p < n; ++p) {
      const int64_t t = pairs[p] / r.top_k;
      for (int64_t c = 0; c < H; ++c) {
        acc[t * H + c] += double{r.weights[pairs[p]]} * ye[p * H + c];
      }
    }
  }
  return std::vector<float>(acc.begin(), acc.end());
}

class CudaExpertsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
    WS_SKIP_WITHOUT_CUDA(device);
    device_ = *std::move(device);
    config_ = kernels::model::testing::TinyConfig(GetParam(), 4);
    weights_ = SyntheticCpuSide(config_, 11);
    ASSERT_NE(weights_, nullptr);
    moe_layers_ = MoeLayers(config_);
    ASSERT_FALSE(moe_layers_.empty());
  }

  // CpuExperts' bf16 path for `layer` (created once).
  absl::StatusOr<std::vector<float>> CpuForward(int64_t layer, const Routing& r) {
    std::unique_ptr<CpuExperts>& cpu = cpu_[layer];
    if (cpu == nullptr) {
      WS_ASSIGN_OR_RETURN(
          cpu, CpuExperts::ForLayer(*weights_, layer,
                                    {.precision = ExpertPrecision::kBf16, .prepack = false}));
    }
    std::vector<float> y(r.tokens * config_.hidden_size);
    WS_RETURN_IF_ERROR(
        cpu->Forward(r.x.data(), r.tokens, r.top_k, r.ids.data(), r.weights.data(), y.data()));
    return y;
  }

  // Device vs CpuExperts (and vs the fp32 reference when `reference`) on one routing.
  void ExpectMatches(DeviceExperts& experts, int64_t layer, const Routing& r, bool reference,
                     const std::string& what) {
    absl::StatusOr<std::vector<float>> got = DeviceForward(experts, layer, r, config_.hidden_size);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status();
    absl::StatusOr<std::vector<float>> cpu = CpuForward(layer, r);
    ASSERT_TRUE(cpu.ok()) << what << ": " << cpu.status();
    const double vs_cpu = RelativeError(*got, *cpu);
    EXPECT_LT(vs_cpu, 1e-2) << what << " against CpuExperts";
    if (reference) {
      const double vs_ref = RelativeError(*got, ReferenceForward(*weights_, layer, r));
      EXPECT_LT(vs_ref, 1e-2) << what << " against the fp32 reference";
    }
  }

  std::unique_ptr<DeviceExperts> Create(int64_t max_tokens, uint64_t budget = kLargeBudget) {
    auto experts = CreateCudaExperts(device_.get(), *weights_, max_tokens, budget);
    EXPECT_TRUE(experts.ok()) << experts.status();
    return experts.ok() ? *std::move(experts) : nullptr;
  }

  std::unique_ptr<Device> device_;
  ModelConfig config_;
  std::unique_ptr<ModelWeights> weights_;
  std::vector<int64_t> moe_layers_;
  absl::flat_hash_map<int64_t, std::unique_ptr<CpuExperts>> cpu_;
};

TEST_P(CudaExpertsTest, MatchesCpuExpertsOnEveryMoeLayer) {
  std::unique_ptr<DeviceExperts> experts = Create(1000);
  ASSERT_NE(experts, nullptr);
  EXPECT_GE(experts->device_bytes(), 2 * LayerBytes(config_));
  EXPECT_GT(experts->calibrated_bytes_per_ms(), 0.0);
  const int64_t top_k = config_.num_experts_per_tok;
  for (int64_t tokens : {1, 5, 77, 257, 1000}) {
    // A step: Prefetch of the first MoE layer, then every MoE layer in order.
    WS_ASSERT_OK(experts->Prefetch(moe_layers_.front()));
    for (int64_t layer : moe_layers_) {
      const Routing r = RandomRouting(config_, tokens, top_k, tokens * 100 + layer);
      ExpectMatches(*experts, layer, r, /*reference=*/true,
                    absl::StrCat("layer ", layer, ", ", tokens, " tokens"));
      // Each layer's copy was queued ahead (by Prefetch or the previous Forward) and is
      // reported by the Forward that consumes it.
      const DeviceExpertsStats& stats = experts->last_stats();
      EXPECT_EQ(stats.bytes_streamed, LayerBytes(config_)) << "layer " << layer;
      EXPECT_GE(stats.wait_ms, 0.0);
      EXPECT_GE(stats.total_ms, stats.wait_ms);
    }
    WS_ASSERT_OK(experts->EndStep());
  }
}

TEST_P(CudaExpertsTest, LayersOutOfOrderAndRepeated) {
  std::unique_ptr<DeviceExperts> experts = Create(64);
  ASSERT_NE(experts, nullptr);
  const std::vector<int64_t> order = {moe_layers_.back(),  moe_layers_.front(),
                                      moe_layers_.front(), moe_layers_[moe_layers_.size() / 2],
                                      moe_layers_.back(),  moe_layers_.back(),
                                      moe_layers_.front()};
  for (size_t i = 0; i < order.size(); ++i) {
    const Routing r = RandomRouting(config_, 37, config_.num_experts_per_tok, 500 + i);
    ExpectMatches(*experts, order[i], r, /*reference=*/false,
                  absl::StrCat("call ", i, " (layer ", order[i], ")"));
    const bool repeat = i > 0 && order[i] == order[i - 1];
    // A repeat finds the layer resident; in this order every other call streams it (or
    // consumes the copy the previous Forward queued).
    EXPECT_EQ(experts->last_stats().bytes_streamed, repeat ? 0 : LayerBytes(config_))
        << "call " << i << " (layer " << order[i] << ")";
  }
  // After EndStep nothing is resident: the same layer is streamed again, and still right.
  WS_ASSERT_OK(experts->EndStep());
  const Routing r = RandomRouting(config_, 9, config_.num_experts_per_tok, 900);
  ExpectMatches(*experts, moe_layers_.front(), r, /*reference=*/true, "after EndStep");
  EXPECT_EQ(experts->last_stats().bytes_streamed, LayerBytes(config_));
  WS_ASSERT_OK(experts->EndStep());
  WS_ASSERT_OK(experts->EndStep());  // idempotent
}

TEST_P(CudaExpertsTest, MoreTokensThanMaxTokens) {
  // Budget enough to grow: the scratch grows to the request.
  std::unique_ptr<DeviceExperts> grows = Create(16);
  ASSERT_NE(grows, nullptr);
  const uint64_t small_bytes = grows->device_bytes();
  const Routing r = RandomRouting(config_, 100, config_.num_experts_per_tok, 31);
  ExpectMatches(*grows, moe_layers_.front(), r, /*reference=*/true, "grown scratch");
  EXPECT_GT(grows->device_bytes(), small_bytes);

  // Budget exactly what 16 tokens take: the request runs in chunks, nothing grows; also
  // with a top-k above the config's (fewer tokens per chunk).
  std::unique_ptr<DeviceExperts> chunks = Create(16, small_bytes);
  ASSERT_NE(chunks, nullptr);
  EXPECT_EQ(chunks->device_bytes(), small_bytes);
  ExpectMatches(*chunks, moe_layers_.front(), r, /*reference=*/true, "chunks");
  const int64_t wide_k =
      std::min<int64_t>(config_.num_experts_per_tok + 1, config_.n_routed_experts);
  const Routing wide = RandomRouting(config_, 100, wide_k, 32);
  ExpectMatches(*chunks, moe_layers_.back(), wide, /*reference=*/true, "chunks, wider top-k");
  EXPECT_EQ(chunks->device_bytes(), small_bytes);
}

TEST_P(CudaExpertsTest, ZeroTokensWritesNothing) {
  std::unique_ptr<DeviceExperts> experts = Create(8);
  ASSERT_NE(experts, nullptr);
  const Routing r = RandomRouting(config_, 1, config_.num_experts_per_tok, 3);
  std::vector<float> y(config_.hidden_size, kGuard);
  WS_ASSERT_OK(experts->Forward(moe_layers_.front(), r.x.data(), 0, r.top_k, r.ids.data(),
                                r.weights.data(), y.data()));
  for (float v : y) ASSERT_EQ(v, kGuard);
  EXPECT_EQ(experts->last_stats().bytes_streamed, 0u);
}

TEST_P(CudaExpertsTest, RejectsBadRouting) {
  std::unique_ptr<DeviceExperts> experts = Create(8);
  ASSERT_NE(experts, nullptr);
  const int64_t layer = moe_layers_.front();
  const int32_t num_experts = static_cast<int32_t>(config_.n_routed_experts);
  Routing r = RandomRouting(config_, 2, 2, 4);
  std::vector<float> y(2 * config_.hidden_size, kGuard);
  auto forward = [&](std::vector<int32_t> ids, int64_t top_k) {
    return experts->Forward(layer, r.x.data(), 2, top_k, ids.data(), r.weights.data(), y.data());
  };
  absl::Status s = forward({0, 1, num_experts, 0}, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(absl::StrCat("expert ", num_experts, " outside")), std::string::npos)
      << s;
  s = forward({-1, 0, 1, 2}, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = forward({0, 1, 2, 2}, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("token 1 routed to expert 2 twice"), std::string::npos) << s;
  s = forward({0, 1, 2, 3}, num_experts + 1);  // top_k above the expert count
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (float v : y) ASSERT_EQ(v, kGuard);
  // Still usable after the refusals.
  ExpectMatches(*experts, layer, RandomRouting(config_, 3, 2, 5), /*reference=*/false,
                "after refusals");
}

TEST_P(CudaExpertsTest, RejectsLayersWithoutRoutedExperts) {
  std::unique_ptr<DeviceExperts> experts = Create(8);
  ASSERT_NE(experts, nullptr);
  const Routing r = RandomRouting(config_, 1, config_.num_experts_per_tok, 6);
  std::vector<float> y(config_.hidden_size, kGuard);
  std::vector<int64_t> bad = {-1, config_.num_layers};
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    if (!config_.IsMoeLayer(l)) bad.push_back(l);  // deepseek_v2's dense first layer
  }
  if (GetParam() == "deepseek_v2") {
    EXPECT_EQ(bad.size(), 3u);
  }
  for (int64_t layer : bad) {
    EXPECT_EQ(experts->Prefetch(layer).code(), absl::StatusCode::kInvalidArgument) << layer;
    EXPECT_EQ(
        experts->Forward(layer, r.x.data(), 1, r.top_k, r.ids.data(), r.weights.data(), y.data())
            .code(),
        absl::StatusCode::kInvalidArgument)
        << layer;
  }
  for (float v : y) ASSERT_EQ(v, kGuard);
}

// Hot experts resident in VRAM: ForwardResident over the resident pairs plus CpuExperts
// over the rest equals CpuExperts over all pairs; streamed layers still right beside them.
TEST_P(CudaExpertsTest, ResidentExperts) {
  std::unique_ptr<DeviceExperts> experts = Create(64);
  ASSERT_NE(experts, nullptr);
  const uint64_t streaming_bytes = experts->device_bytes();
  const uint64_t expert_bytes = LayerBytes(config_) / config_.n_routed_experts;
  EXPECT_EQ(experts->resident_capacity(),
            static_cast<int64_t>((kLargeBudget - streaming_bytes) / ((expert_bytes + 255) / 256 * 256)));
  testing::CheckResidentExperts(*experts, *weights_, 1e-2);
  // A set, then a streamed step next to it. (The checks grew the scratch: 257 tokens.)
  const uint64_t without_set = experts->device_bytes();
  EXPECT_GE(without_set, streaming_bytes);
  WS_ASSERT_OK(experts->SetResident(testing::AlternateSet(config_)));
  EXPECT_GT(experts->resident_bytes(), 0u);
  EXPECT_EQ(experts->device_bytes(), without_set + experts->resident_bytes());
  WS_ASSERT_OK(experts->Prefetch(moe_layers_.front()));
  for (int64_t layer : moe_layers_) {
    ExpectMatches(*experts, layer, RandomRouting(config_, 33, config_.num_experts_per_tok, layer),
                  /*reference=*/true, absl::StrCat("streamed layer ", layer, " beside the set"));
  }
  WS_ASSERT_OK(experts->EndStep());
  // The scratch grows only within what the resident set leaves. A budget where a 100-token
  // call would grow the scratch of a 16-token instance, filled with resident experts: the
  // call runs in chunks instead (resident pairs too, skipped ids in every chunk), and
  // still equals CpuExperts.
  std::unique_ptr<DeviceExperts> probe = Create(16);
  ASSERT_NE(probe, nullptr);
  const uint64_t small = probe->device_bytes();
  ExpectMatches(*probe, moe_layers_.front(),
                RandomRouting(config_, 100, config_.num_experts_per_tok, 76), /*reference=*/false,
                "growing probe");
  const uint64_t grown = probe->device_bytes();
  ASSERT_GT(grown, small);
  // Room for every expert but one, plus less than an expert and less than the growth:
  // filled, nothing is left for the scratch to grow into. (grown + 4096 held every
  // expert of the tiny DeepSeek fixture, whose scratch grows by more than its experts.)
  const uint64_t slot = (expert_bytes + 255) / 256 * 256;
  const int64_t all_experts = static_cast<int64_t>(moe_layers_.size()) * config_.n_routed_experts;
  const uint64_t spare = std::min(slot - 1, grown - small - 1);
  const uint64_t budget = small + static_cast<uint64_t>(all_experts - 1) * slot + spare;
  std::unique_ptr<DeviceExperts> tight = Create(16, budget);
  ASSERT_NE(tight, nullptr);
  ASSERT_EQ(tight->device_bytes(), small);
  ASSERT_EQ(tight->resident_capacity(), all_experts - 1);
  std::vector<ExpertRef> fill;
  for (int64_t layer : moe_layers_) {
    for (int32_t e = 0; e < config_.n_routed_experts; ++e) {
      if (static_cast<int64_t>(fill.size()) < tight->resident_capacity()) {
        fill.push_back({layer, e});
      }
    }
  }
  WS_ASSERT_OK(tight->SetResident(fill));
  const uint64_t before = tight->device_bytes();
  ASSERT_GT(before + (grown - small), budget);  // growing now would break the budget
  ExpectMatches(*tight, moe_layers_.front(),
                RandomRouting(config_, 100, config_.num_experts_per_tok, 77), /*reference=*/false,
                "chunks beside a full resident set");
  testing::ExpectHotPlusColdEqualsAll(*tight, *weights_, 1e-2);
  EXPECT_EQ(tight->device_bytes(), before);
}

TEST_P(CudaExpertsTest, ResourceExhaustedOverBudget) {
  for (uint64_t budget : {uint64_t{0}, uint64_t{4096}, LayerBytes(config_)}) {
    auto experts = CreateCudaExperts(device_.get(), *weights_, 64, budget);
    ASSERT_FALSE(experts.ok()) << "budget " << budget;
    EXPECT_EQ(experts.status().code(), absl::StatusCode::kResourceExhausted) << experts.status();
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaExpertsTest,
                         ::testing::Values("qwen3_moe", "mixtral", "deepseek_v2"));

// Needs no GPU: the CUDA experts refuse a device that is not CUDA (UNIMPLEMENTED in a build
// without CUDA).
TEST(CudaExpertsHostDevice, RefusesTheHostDevice) {
  std::unique_ptr<Device> host = CreateHostDevice();
  const ModelConfig config = kernels::model::testing::TinyConfig("qwen3_moe", 1);
  std::unique_ptr<ModelWeights> weights = SyntheticCpuSide(config, 1);
  ASSERT_NE(weights, nullptr);
  auto experts = CreateCudaExperts(host.get(), *weights, 8, kLargeBudget);
  ASSERT_FALSE(experts.ok());
  EXPECT_TRUE(experts.status().code() == absl::StatusCode::kFailedPrecondition ||
              experts.status().code() == absl::StatusCode::kUnimplemented)
      << experts.status();
}

}  // namespace
}  // namespace writescope::gpu
