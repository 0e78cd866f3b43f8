#include "kernels/model/layers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "dnnl.hpp"
#include "kernels/bf16.h"

namespace writescope::kernels::model {
namespace {

// Elementwise loops go parallel from about a millisecond of serial work (a prefill chunk).
// A decode step's rows (tens of tokens) stay on the calling thread: in the gpu_worker a
// parallel region would wait for threads on cores the cpu_worker's attention or experts
// keep busy at that moment, and take milliseconds instead of microseconds.
constexpr int64_t kParallelElements = int64_t{1} << 20;

void WidenRows(const uint16_t* src, int64_t n, float* dst) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}

dnnl::engine& CpuEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

}  // namespace

LinearWeight AsLinear(const Bf16Tensor& tensor) {
  WS_CHECK(tensor.shape.size() == 2) << tensor.origin << " is not 2-D";
  return LinearWeight{tensor.data, tensor.shape[0], tensor.shape[1]};
}

LinearWeight SliceRows(const LinearWeight& w, int64_t row0, int64_t rows) {
  WS_CHECK(row0 >= 0 && row0 + rows <= w.out_features);
  return LinearWeight{w.data + row0 * w.in_features, rows, w.in_features};
}

const float* F32WeightCache::Get(const LinearWeight& w) {
  {
    absl::MutexLock lock(&mu_);
    auto it = map_.find(w.data);
    if (it != map_.end()) return it->second.get();
  }
  const int64_t n = w.out_features * w.in_features;
  auto widened = std::make_unique<float[]>(n);
  WidenRows(w.data, n, widened.get());
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = map_.try_emplace(w.data, std::move(widened));
  if (inserted) bytes_ += 4 * static_cast<uint64_t>(n);
  return it->second.get();
}

uint64_t F32WeightCache::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

absl::Status Linear(const float* x, int64_t tokens, const LinearWeight& w, float* y,
                    F32WeightCache* cache) {
  if (tokens == 0) return absl::OkStatus();
  if (w.data == nullptr || w.out_features <= 0 || w.in_features <= 0 || tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: bad shape tokens=", tokens, " W=[",
                                                   w.out_features, ", ", w.in_features, "]"));
  }
  std::vector<float> scratch;
  const float* wf = nullptr;
  if (cache != nullptr) {
    wf = cache->Get(w);
  } else {
    scratch.resize(w.out_features * w.in_features);
    WidenRows(w.data, w.out_features * w.in_features, scratch.data());
    wf = scratch.data();
  }
  using dnnl::memory;
  try {
    dnnl::engine& engine = CpuEngine();
    const memory::dim m = tokens, k = w.in_features, n = w.out_features;
    // The weight [n, k] row-major is the [k, n] operand in "ba" order: no transpose copy.
    memory::desc src_md({m, k}, memory::data_type::f32, memory::format_tag::ab);
    memory::desc wei_md({k, n}, memory::data_type::f32, memory::format_tag::ba);
    memory::desc dst_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
    dnnl::matmul::desc desc(src_md, wei_md, dst_md);
    dnnl::matmul::primitive_desc pd(desc, engine);
    dnnl::matmul matmul(pd);
    memory src(src_md, engine, const_cast<float*>(x));
    memory wei(wei_md, engine, const_cast<float*>(wf));
    memory dst(dst_md, engine, y);
    dnnl::stream stream(engine);
    matmul.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN matmul [", tokens, " x ", w.in_features,
                                            "] x [", w.in_features, " x ", w.out_features,
                                            "]: ", e.what()));
  }
  return absl::OkStatus();
}

void ToBf16(const float* x, int64_t n, uint16_t* out) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16(x[i]);
}

void AddInPlace(float* x, const float* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void RmsNorm(const float* x, int64_t rows, int64_t dim, const uint16_t* weight, double eps,
             float* y) {
#pragma omp parallel for schedule(static) if (rows * dim > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum_sq = 0;
    for (int64_t i = 0; i < dim; ++i) sum_sq += double{xr[i]} * xr[i];
    // HF: torch.rsqrt(variance + eps) in fp32, then x * that, then weight * (fp32 product).
    const float variance = static_cast<float>(sum_sq / dim);
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(double{variance} + eps));
    for (int64_t i = 0; i < dim; ++i) yr[i] = Bf16ToFloat(weight[i]) * (xr[i] * inv_rms);
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-double{g}))) * up[i];
  }
}

absl::Status SwiGluMlp(const float* x, int64_t tokens, const LinearWeight& gate,
                       const LinearWeight& up, const LinearWeight& down, float* y,
                       F32WeightCache* cache) {
  return SwiGluMlp(x, tokens, gate, up, down, y,
                   [cache](const float* in, int64_t n, const LinearWeight& w, float* out) {
                     return Linear(in, n, w, out, cache);
                   });
}

absl::Status SwiGluMlp(const float* x, int64_t tokens, const LinearWeight& gate,
                       const LinearWeight& up, const LinearWeight& down, float* y,
                       MatmulFn matmul) {
  WS_RETURN_IF_ERROR(ValidateSwiGluShapes(gate, up, down));
  const int64_t inter = gate.out_features;
  std::vector<float> g(tokens * inter), u(tokens * inter);
  WS_RETURN_IF_ERROR(matmul(x, tokens, gate, g.data()));
  WS_RETURN_IF_ERROR(matmul(x, tokens, up, u.data()));
  SiluMul(g.data(), u.data(), tokens * inter, g.data());
  return matmul(g.data(), tokens, down, y);
}

absl::Status ValidateSwiGluShapes(const LinearWeight& gate, const LinearWeight& up,
                                  const LinearWeight& down) {
  if (gate.out_features != up.out_features || down.in_features != gate.out_features ||
      gate.in_features != up.in_features || down.out_features != gate.in_features) {
    return absl::InvalidArgumentError(
        absl::StrCat("SwiGluMlp: inconsistent shapes gate [", gate.out_features, ", ",
                     gate.in_features, "] up [", up.out_features, ", ", up.in_features, "] down [",
                     down.out_features, ", ", down.in_features, "]"));
  }
  return absl::OkStatus();
}

absl::Status Embed(const Bf16Tensor& table, absl::Span<const int32_t> tokens, float* out) {
  const int64_t vocab = table.rows(), hidden = table.cols();
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0 || tokens[t] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", tokens[t], " at index ", t, " is outside [0, ", vocab, ")"));
    }
    const uint16_t* row = table.data + int64_t{tokens[t]} * hidden;
    for (int64_t i = 0; i < hidden; ++i) out[t * hidden + i] = Bf16ToFloat(row[i]);
  }
  return absl::OkStatus();
}

void LogSoftmax(const float* x, int64_t rows, int64_t n, float* y) {
#pragma omp parallel for schedule(static) if (rows * n > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float max = *std::max_element(xr, xr + n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double{xr[i]} - max);
    const double log_z = max + std::log(sum);
    for (int64_t i = 0; i < n; ++i) yr[i] = static_cast<float>(xr[i] - log_z);
  }
}

double YarnGetMscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

RopeTable MakeRopeTable(const RopeConfig& rope, int64_t dim, RopeStyle style) {
  WS_CHECK(dim > 0 && dim % 2 == 0) << "rotary dim " << dim;
  RopeTable table;
  table.style = style;
  table.dim = dim;
  const int64_t half = dim / 2;
  // torch: base ** (arange(0, dim, 2).float() / dim), all fp32.
  std::vector<float> pos_freqs(half);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    pos_freqs[i] = static_cast<float>(std::pow(rope.theta, double{exponent}));
  }
  table.inv_freq.resize(half);
  if (rope.type == RopeType::kDefault) {
    for (int64_t i = 0; i < half; ++i) table.inv_freq[i] = 1.0f / pos_freqs[i];
    table.attention_scaling = 1.0f;
    return table;
  }
  const double factor = rope.factor;
  if (rope.mscale != 0.0 && rope.mscale_all_dim != 0.0) {
    table.attention_scaling = static_cast<float>(YarnGetMscale(factor, rope.mscale) /
                                                 YarnGetMscale(factor, rope.mscale_all_dim));
  } else {
    table.attention_scaling = static_cast<float>(YarnGetMscale(factor));
  }
  const double base = rope.theta;
  const double original = static_cast<double>(rope.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(original / (rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
  };
  double low = std::floor(correction_dim(rope.beta_fast));
  double high = std::ceil(correction_dim(rope.beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  const float low_f = static_cast<float>(low), span_f = static_cast<float>(high - low);
  const float factor_f = static_cast<float>(factor);
  for (int64_t i = 0; i < half; ++i) {
    const float extrapolation = 1.0f / pos_freqs[i];
    const float interpolation = 1.0f / (factor_f * pos_freqs[i]);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / span_f, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    table.inv_freq[i] =
        interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return table;
}

namespace {

// ApplyRope's scaled cosines and sines of its tokens' angles, [tokens][dim / 2] each, kept per
// thread for the next call: a step's layers (and q and k within a layer) rotate the same
// positions with the same table, and at decode the sines and cosines (in double, as
// transformers computes them) cost more than the rotation: Qwen3's q at 32 tokens, 39 of 71
// us a call on the build machine (session 34). The cache is a memo of a pure function of
// the table's frequencies and scaling and the positions, which it compares in full, so a
// reuse gives the same bits as a fresh computation.
struct RopeAngles {
  std::vector<float> inv_freq;
  float scaling = std::numeric_limits<float>::quiet_NaN();  // never equal: empty at first
  std::vector<int64_t> positions;
  std::vector<float> cos, sin;
};

const RopeAngles& AnglesFor(const RopeTable& table, const int64_t* positions, int64_t tokens,
                            bool parallel) {
  thread_local RopeAngles cache;
  const int64_t half = table.dim / 2;
  if (cache.scaling == table.attention_scaling && cache.inv_freq == table.inv_freq &&
      cache.positions.size() == static_cast<size_t>(tokens) &&
      std::equal(positions, positions + tokens, cache.positions.begin())) {
    return cache;
  }
  cache.inv_freq = table.inv_freq;
  cache.scaling = table.attention_scaling;
  cache.positions.assign(positions, positions + tokens);
  cache.cos.resize(tokens * half);
  cache.sin.resize(tokens * half);
  float* cos_v = cache.cos.data();
  float* sin_v = cache.sin.data();
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < tokens; ++t) {
    const float position = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = table.inv_freq[i] * position;
      cos_v[t * half + i] = static_cast<float>(std::cos(double{angle})) * table.attention_scaling;
      sin_v[t * half + i] = static_cast<float>(std::sin(double{angle})) * table.attention_scaling;
    }
  }
  return cache;
}

}  // namespace

void ApplyRope(const RopeTable& table, float* x, int64_t tokens, int64_t heads, int64_t head_stride,
               const int64_t* positions) {
  const int64_t half = table.dim / 2;
  if (tokens <= 0 || half <= 0) return;
  const bool parallel = tokens * heads * half > kParallelElements;
  const RopeAngles& angles = AnglesFor(table, positions, tokens, parallel);
  const float* cos_all = angles.cos.data();
  const float* sin_all = angles.sin.data();
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* cos_v = cos_all + t * half;
    const float* sin_v = sin_all + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_stride;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = table.style == RopeStyle::kHalf ? i : 2 * i;
        const int64_t b = table.style == RopeStyle::kHalf ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cos_v[i] - x1 * sin_v[i];
        v[b] = x1 * cos_v[i] + x0 * sin_v[i];
      }
    }
  }
}

RouterSpec RouterSpecFor(const ModelConfig& config) {
  RouterSpec spec;
  spec.num_experts = config.n_routed_experts;
  spec.top_k = config.num_experts_per_tok;
  switch (config.arch) {
    case ModelArch::kMixtral:
      spec.renormalize = true;
      break;
    case ModelArch::kQwen3Moe:
      spec.renormalize = config.norm_topk_prob;
      break;
    case ModelArch::kDeepseekV2:
      spec.renormalize = config.norm_topk_prob && config.num_experts_per_tok > 1;
      spec.scaling = config.routed_scaling_factor;
      if (config.topk_method == "group_limited_greedy") {
        spec.method = TopkMethod::kGroupLimitedGreedy;
        spec.n_group = config.n_group;
        spec.topk_group = config.topk_group;
      }
      break;
  }
  return spec;
}

namespace {

// softmax(dtype=float32) of one token's fp32 logits [n] -> probs [n].
void RouterSoftmax(const float* logits, int64_t n, float* probs) {
  const float max = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int64_t e = 0; e < n; ++e) sum += std::exp(double{logits[e]} - max);
  for (int64_t e = 0; e < n; ++e) {
    probs[e] = static_cast<float>(std::exp(double{logits[e]} - max) / sum);
  }
}

// weights [k] = scores of `ids` [k], renormalized (fp32 sum, in id order) and scaled per `spec`.
void WeighExperts(const float* scores, const int32_t* ids, const RouterSpec& spec, float* weights) {
  float top_sum = 0.0f;
  for (int64_t i = 0; i < spec.top_k; ++i) {
    weights[i] = scores[ids[i]];
    top_sum += weights[i];
  }
  for (int64_t i = 0; i < spec.top_k; ++i) {
    if (spec.renormalize) weights[i] /= top_sum;
    weights[i] = static_cast<float>(weights[i] * spec.scaling);
  }
}

}  // namespace

void RouteTokens(const float* logits, int64_t tokens, const RouterSpec& spec, int32_t* expert_ids,
                 float* weights, float* margins) {
  const int64_t e_count = spec.num_experts, k = spec.top_k;
  // Tokens are independent: a long prefill chunk routes on every core.
#pragma omp parallel if (tokens * e_count > (1 << 14))
  {
    std::vector<float> scores(e_count);
    std::vector<int32_t> order(e_count);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      RouterSoftmax(logits + t * e_count, e_count, scores.data());
      if (spec.method == TopkMethod::kGroupLimitedGreedy && spec.n_group > 1) {
        const int64_t per_group = e_count / spec.n_group;
        std::vector<float> group_max(spec.n_group);
        for (int64_t g = 0; g < spec.n_group; ++g) {
          group_max[g] = *std::max_element(scores.begin() + g * per_group,
                                           scores.begin() + (g + 1) * per_group);
        }
        std::vector<int64_t> groups(spec.n_group);
        std::iota(groups.begin(), groups.end(), 0);
        std::stable_sort(groups.begin(), groups.end(),
                         [&](int64_t a, int64_t b) { return group_max[a] > group_max[b]; });
        std::vector<bool> keep(spec.n_group, false);
        for (int64_t i = 0; i < spec.topk_group; ++i) keep[groups[i]] = true;
        // transformers: masked_fill(~mask, 0.0), then top-k over the masked scores.
        for (int64_t e = 0; e < e_count; ++e) {
          if (!keep[e / per_group]) scores[e] = 0.0f;
        }
      }
      std::iota(order.begin(), order.end(), 0);
      const int64_t sorted = std::min(k + 1, e_count);
      std::partial_sort(order.begin(), order.begin() + sorted, order.end(),
                        [&](int32_t a, int32_t b) {
                          return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
                        });
      if (margins != nullptr) {
        margins[t] = k < e_count ? scores[order[k - 1]] - scores[order[k]] : INFINITY;
      }
      std::copy_n(order.begin(), k, expert_ids + t * k);
      WeighExperts(scores.data(), expert_ids + t * k, spec, weights + t * k);
    }
  }  // omp parallel
}

void RouterWeights(const float* logits, int64_t tokens, const RouterSpec& spec,
                   const int32_t* expert_ids, float* weights) {
  const int64_t e_count = spec.num_experts, k = spec.top_k;
  std::vector<float> probs(e_count);
  for (int64_t t = 0; t < tokens; ++t) {
    // A chosen expert's masked score is its probability: the group mask only zeroes experts
    // of the groups that were not kept, none of which is chosen.
    RouterSoftmax(logits + t * e_count, e_count, probs.data());
    WeighExperts(probs.data(), expert_ids + t * k, spec, weights + t * k);
  }
}

}  // namespace writescope::kernels::model
