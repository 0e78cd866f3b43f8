// The resident (hot) experts' contract (gpu_worker/device_experts.h), checked the same way
// on the host device (device_experts_test, CI) and on CUDA (cuda_experts_test, label gpu):
// the pairs of resident experts on the device plus the rest on CpuExperts (the cpu_worker,
// skipping the hot pairs) equal CpuExperts over all pairs; every refusal; a failed
// SetResident keeps the earlier set.
#ifndef WRITESCOPE_TESTS_GPU_WORKER_RESIDENT_EXPERTS_CHECKS_H_
#define WRITESCOPE_TESTS_GPU_WORKER_RESIDENT_EXPERTS_CHECKS_H_

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpu_worker/device_experts.h"
#include "gpu_worker/hot_experts.h"
#include "gtest/gtest.h"
#include "kernels/experts/cpu_experts.h"
#include "tests/common/test_util.h"
#include "tests/kernels/experts/expert_test_util.h"

namespace writescope::gpu::testing {

// Every other expert of each MoE layer, except: the first MoE layer has every expert, and
// the last (when there are 3 or more) none.
inline std::vector<ExpertRef> AlternateSet(const ModelConfig& config) {
  std::vector<int64_t> moe;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    if (config.IsMoeLayer(l)) moe.push_back(l);
  }
  std::vector<ExpertRef> set;
  for (size_t i = 0; i < moe.size(); ++i) {
    if (moe.size() >= 3 && i + 1 == moe.size()) continue;
    for (int32_t e = 0; e < config.n_routed_experts; ++e) {
      if (i == 0 || e % 2 == 1) set.push_back({moe[i], e});
    }
  }
  return set;
}

// hot (device) + cold (CpuExperts with the hot pairs skipped) against CpuExperts on all.
inline void ExpectHotPlusColdEqualsAll(DeviceExperts& experts, const ModelWeights& weights,
                                       double tolerance) {
  using kernels::experts::CpuExperts;
  using kernels::experts::testing::RandomRouting;
  using kernels::experts::testing::RelativeError;
  using kernels::experts::testing::Routing;
  const ModelConfig& config = weights.config();
  const int64_t H = config.hidden_size, k = config.num_experts_per_tok;
  constexpr float kGuard = -12345.0f;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    if (!config.IsMoeLayer(layer)) continue;
    // bf16 as the cpu_worker runs it where oneDNN has it, else f32 (an AVX2-only CPU).
    auto cpu = CpuExperts::ForLayer(
        weights, layer,
        {.precision = kernels::experts::OneDnnHasBf16Matmul()
                          ? kernels::experts::ExpertPrecision::kBf16
                          : kernels::experts::ExpertPrecision::kF32,
         .prepack = false});
    WS_ASSERT_OK(cpu.status());
    for (int64_t tokens : {1, 5, 77, 257}) {
      const std::string what = absl::StrCat("layer ", layer, ", ", tokens, " tokens");
      const Routing r = RandomRouting(tokens, H, config.n_routed_experts, k, 7 * tokens + layer);
      std::vector<int32_t> hot_ids, cold_ids;
      std::vector<float> hot_w, cold_w;
      const int64_t hot_pairs = HotExperts::Split(
          [&](int32_t e) { return experts.IsResident(layer, e); }, r.ids.data(), r.weights.data(),
          tokens, k, &hot_ids, &hot_w, &cold_ids, &cold_w);
      std::vector<float> all(tokens * H), cold(tokens * H);
      WS_ASSERT_OK((*cpu)->Forward(r.x.data(), tokens, k, r.ids.data(), r.weights.data(),
                                   all.data()));
      WS_ASSERT_OK(
          (*cpu)->Forward(r.x.data(), tokens, k, cold_ids.data(), cold_w.data(), cold.data()));
      std::vector<float> guarded(tokens * H + 16, kGuard);
      float* hot = guarded.data() + 8;
      std::fill(hot, hot + tokens * H, NAN);
      WS_ASSERT_OK(experts.ForwardResident(layer, r.x.data(), tokens, k, hot_ids.data(),
                                           hot_w.data(), hot));
      for (int i = 0; i < 8; ++i) {
        ASSERT_EQ(guarded[i], kGuard) << what;
        ASSERT_EQ(guarded[8 + tokens * H + i], kGuard) << what;
      }
      std::vector<float> sum(tokens * H);
      for (int64_t i = 0; i < tokens * H; ++i) sum[i] = hot[i] + cold[i];
      EXPECT_LE(RelativeError(sum, all), tolerance) << what << ", " << hot_pairs << " hot pairs";
      if (hot_pairs == 0) {
        for (int64_t i = 0; i < tokens * H; ++i) ASSERT_EQ(hot[i], 0.0f) << what;
      }
    }
  }
}

inline void CheckResidentExperts(DeviceExperts& experts, const ModelWeights& weights,
                                 double tolerance) {
  const ModelConfig& config = weights.config();
  const int64_t H = config.hidden_size, k = config.num_experts_per_tok;
  const int32_t E = static_cast<int32_t>(config.n_routed_experts);
  int64_t first_moe = -1, dense = -1;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    if (config.IsMoeLayer(l) && first_moe < 0) first_moe = l;
    if (!config.IsMoeLayer(l) && dense < 0) dense = l;
  }
  ASSERT_GE(first_moe, 0);
  // Nothing resident: every pair skipped gives zero; a real id is refused.
  EXPECT_EQ(experts.num_resident(), 0);
  EXPECT_FALSE(experts.IsResident(first_moe, 0));
  std::vector<float> x(2 * H, 0.5f), y(2 * H, 7.0f), w(2 * k, 0.5f);
  std::vector<int32_t> skipped(2 * k, -1);
  WS_ASSERT_OK(experts.ForwardResident(first_moe, x.data(), 2, k, skipped.data(), w.data(),
                                       y.data()));
  for (float v : y) ASSERT_EQ(v, 0.0f);
  std::vector<int32_t> one = skipped;
  one[0] = 0;
  absl::Status s = experts.ForwardResident(first_moe, x.data(), 2, k, one.data(), w.data(), y.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("expert 0 is not resident"), std::string::npos) << s;

  // Refused sets.
  const int64_t capacity = experts.resident_capacity();
  ASSERT_GT(capacity, static_cast<int64_t>(AlternateSet(config).size()));
  EXPECT_EQ(experts.SetResident({{first_moe, E}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(experts.SetResident({{first_moe, -1}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(experts.SetResident({{first_moe, 1}, {first_moe, 1}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(experts.SetResident({{config.num_layers, 0}}).code(),
            absl::StatusCode::kInvalidArgument);
  if (dense >= 0) {
    EXPECT_EQ(experts.SetResident({{dense, 0}}).code(), absl::StatusCode::kInvalidArgument);
  }
  std::vector<ExpertRef> too_many(capacity + 1, ExpertRef{first_moe, 0});
  s = experts.SetResident(too_many);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(absl::StrCat("room for ", capacity)), std::string::npos) << s;
  EXPECT_EQ(experts.num_resident(), 0);

  // A set: hot + cold equals all pairs; its ids are resident, the others not.
  const std::vector<ExpertRef> set = AlternateSet(config);
  WS_ASSERT_OK(experts.SetResident(set));
  EXPECT_EQ(experts.num_resident(), static_cast<int64_t>(set.size()));
  for (const ExpertRef& ref : set) EXPECT_TRUE(experts.IsResident(ref.layer, ref.expert));
  EXPECT_FALSE(experts.IsResident(first_moe, E));
  EXPECT_FALSE(experts.IsResident(-1, 0));
  ExpectHotPlusColdEqualsAll(experts, weights, tolerance);
  // A refused set keeps this one.
  EXPECT_FALSE(experts.SetResident({{first_moe, 0}, {first_moe, 0}}).ok());
  EXPECT_EQ(experts.num_resident(), static_cast<int64_t>(set.size()));
  ExpectHotPlusColdEqualsAll(experts, weights, tolerance);
  // Every expert resident, then none.
  std::vector<ExpertRef> every;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    if (!config.IsMoeLayer(l)) continue;
    for (int32_t e = 0; e < E; ++e) every.push_back({l, e});
  }
  if (static_cast<int64_t>(every.size()) <= capacity) {
    WS_ASSERT_OK(experts.SetResident(every));
    ExpectHotPlusColdEqualsAll(experts, weights, tolerance);
  }
  WS_ASSERT_OK(experts.SetResident({}));
  EXPECT_EQ(experts.num_resident(), 0);
  EXPECT_EQ(experts.resident_bytes(), 0u);
  EXPECT_EQ(experts.ForwardResident(first_moe, x.data(), 2, k, one.data(), w.data(), y.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace writescope::gpu::testing

#endif  // WRITESCOPE_TESTS_GPU_WORKER_RESIDENT_EXPERTS_CHECKS_H_
