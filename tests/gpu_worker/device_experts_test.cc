// The host device's DeviceExperts (what CI runs of the gpu_worker's expert path): equal to
// the cpu_worker's CpuExperts on the same inputs, and its errors. The CUDA version is
// tested against CpuExperts in cuda_experts_test (label gpu).
#include "gpu_worker/device_experts.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/experts/cpu_experts.h"
#include "tests/common/test_util.h"
#include "tests/gpu_worker/resident_experts_checks.h"
#include "tests/kernels/experts/expert_test_util.h"
#include "tests/kernels/model/tiny_models.h"

namespace writescope::gpu {
namespace {

using kernels::experts::testing::RandomRouting;
using kernels::experts::testing::Routing;

class DeviceExpertsHostTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceExpertsHostTest, EqualsTheCpuWorkersExperts) {
  std::unique_ptr<Device> device = CreateHostDevice();
  const ModelConfig config = kernels::model::testing::TinyConfig(GetParam());
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kCpu, .seed = 11});
  WS_ASSERT_OK(weights.status());
  auto experts = CreateDeviceExperts(device.get(), **weights, 300, uint64_t{1} << 30);
  WS_ASSERT_OK(experts.status());
  EXPECT_EQ((*experts)->device_bytes(), 0u);
  EXPECT_EQ((*experts)->calibrated_bytes_per_ms(), 0.0);
  const int64_t H = config.hidden_size, k = config.num_experts_per_tok;
  int layers = 0;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    if (!config.IsMoeLayer(layer)) {
      std::vector<float> x(H), y(H);
      int32_t id = 0;
      float w = 1;
      EXPECT_EQ((*experts)->Forward(layer, x.data(), 1, 1, &id, &w, y.data()).code(),
                absl::StatusCode::kInvalidArgument);
      continue;
    }
    ++layers;
    auto reference = kernels::experts::CpuExperts::ForLayer(
        **weights, layer, {.precision = kernels::experts::ExpertPrecision::kAuto, .prepack = false});
    WS_ASSERT_OK(reference.status());
    WS_ASSERT_OK((*experts)->Prefetch(layer));
    for (int64_t tokens : {1, 5, 77, 257}) {
      const Routing r = RandomRouting(tokens, H, config.n_routed_experts, k, 31 * tokens + layer);
      std::vector<float> want(tokens * H), got(tokens * H + 8, 42.0f);
      WS_ASSERT_OK((*reference)->Forward(r.x.data(), tokens, k, r.ids.data(), r.weights.data(),
                                         want.data()));
      WS_ASSERT_OK((*experts)->Forward(layer, r.x.data(), tokens, k, r.ids.data(),
                                       r.weights.data(), got.data()));
      for (int64_t i = 0; i < tokens * H; ++i) ASSERT_EQ(got[i], want[i]) << i;
      for (int64_t i = tokens * H; i < tokens * H + 8; ++i) ASSERT_EQ(got[i], 42.0f);  // guard
    }
    // A repeated expert within a token.
    std::vector<float> x(H, 1.0f), y(H);
    std::vector<int32_t> ids(k, 0);
    std::vector<float> w(k, 1.0f);
    if (k > 1) {
      EXPECT_EQ((*experts)->Forward(layer, x.data(), 1, k, ids.data(), w.data(), y.data()).code(),
                absl::StatusCode::kInvalidArgument);
    }
    ids[0] = static_cast<int32_t>(config.n_routed_experts);
    EXPECT_EQ((*experts)->Forward(layer, x.data(), 1, k, ids.data(), w.data(), y.data()).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_GT(layers, 0);
  WS_EXPECT_OK((*experts)->EndStep());
  EXPECT_EQ((*experts)->Prefetch(config.num_layers).code(), absl::StatusCode::kInvalidArgument);
}

// Hot experts (the resident set) on the host device: ForwardResident over the resident
// pairs plus CpuExperts over the rest equals CpuExperts over all pairs.
TEST_P(DeviceExpertsHostTest, ResidentExperts) {
  std::unique_ptr<Device> device = CreateHostDevice();
  const ModelConfig config = kernels::model::testing::TinyConfig(GetParam(), 4);
  auto weights = MakeSyntheticWeights(config, {.side = SideFilter::kCpu, .seed = 12});
  WS_ASSERT_OK(weights.status());
  const uint64_t expert_bytes = uint64_t{6} * config.moe_intermediate_size * config.hidden_size;
  auto experts = CreateDeviceExperts(device.get(), **weights, 300, 1000 * expert_bytes + 1);
  WS_ASSERT_OK(experts.status());
  EXPECT_EQ((*experts)->resident_capacity(), 1000);  // the host counts the budget only
  testing::CheckResidentExperts(**experts, **weights, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Archs, DeviceExpertsHostTest,
                         ::testing::Values("qwen3_moe", "mixtral", "deepseek_v2"));

}  // namespace
}  // namespace writescope::gpu
