// Inputs and error metric shared by the routed-expert tests (CpuExperts, the gpu_worker's
// DeviceExperts on both devices).
#ifndef WRITESCOPE_TESTS_KERNELS_EXPERTS_EXPERT_TEST_UTIL_H_
#define WRITESCOPE_TESTS_KERNELS_EXPERTS_EXPERT_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace writescope::kernels::experts::testing {

// One Forward's inputs: x [tokens, hidden] ~ N(0, 1), top_k distinct experts per token
// out of num_experts, route weights in [0.05, 1).
struct Routing {
  int64_t tokens = 0, top_k = 0;
  std::vector<float> x;
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

inline Routing RandomRouting(int64_t tokens, int64_t hidden, int64_t num_experts, int64_t top_k,
                             uint64_t seed) {
  Routing r;
  r.tokens = tokens;
  r.top_k = top_k;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> weight(0.05f, 1.0f);
  r.x.resize(tokens * hidden);
  for (float& v : r.x) v = normal(rng);
  std::vector<int32_t> pool(num_experts);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int64_t k = 0; k < top_k; ++k) {
      r.ids.push_back(pool[k]);
      r.weights.push_back(weight(rng));
    }
  }
  return r;
}

// ||a - b|| / ||b|| (Frobenius); NaN anywhere gives NaN, different sizes infinity.
inline double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double{a[i]} - b[i];
    num += d * d;
    den += double{b[i]} * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace writescope::kernels::experts::testing

#endif  // WRITESCOPE_TESTS_KERNELS_EXPERTS_EXPERT_TEST_UTIL_H_
