#include "common/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>

namespace writescope {
namespace {

using internal_sampler::RankedToken;

constexpr float kInf = std::numeric_limits<float>::infinity();

// A nucleus search (top_p without top_k) first tries the kNucleusFirst most likely,
// then kNucleusFirst * kNucleusGrowth, each by one cheap scan: peaked distributions,
// the usual case, end there. Past that a bisection is cheaper than larger heaps.
constexpr size_t kNucleusFirst = 128;
constexpr size_t kNucleusGrowth = 4;
constexpr size_t kNucleusLastScan = kNucleusFirst * kNucleusGrowth;
// Selections of fewer than vocab / kHeapFraction use a bounded heap in one scan
// (O(V) compares, O(n log n) moves for logits in no particular order); larger ones
// nth_element the ids, whose fixed O(V) cost with indirect compares is then cheaper.
constexpr size_t kHeapFraction = 16;
// Past that, a histogram of the exponents x = (key - max) / T over [-87, 0] (the float exp's
// range: below it every weight is exp(-87)) finds the bucket where the nucleus ends.
constexpr int kExponentBuckets = 4096;

// Writes into keys [logits.size()] logits with NaN as -inf and returns their max,
// which is always finite so that the row always has mass: if some logits are +inf
// they become 0 and all others -inf (the mass shared equally among them); if all are
// -inf they all become 0 (uniform, the limit of equal logits).
float SanitizeLogits(absl::Span<const float> logits, std::vector<float>* keys) {
  keys->resize(logits.size());
  float max_key = -kInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float key = std::isnan(logits[i]) ? -kInf : logits[i];
    (*keys)[i] = key;
    max_key = std::max(max_key, key);
  }
  if (max_key == kInf) {
    for (float& key : *keys) key = key == kInf ? 0.0f : -kInf;
    return 0.0f;
  }
  if (max_key == -kInf) {
    std::fill(keys->begin(), keys->end(), 0.0f);
    return 0.0f;
  }
  return max_key;
}

}  // namespace

namespace internal_sampler {
namespace {

// exp(x) for x <= 0 in float (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-7
// polynomial of r, times 2^n from the exponent bits); below -87 (and -inf) it returns
// exp(-87) ~ 1.6e-38, below the smallest normal float: a row's sum is >= 1 (the max key
// gives exp(0) = 1), so such terms are lost to rounding either way. Relative error
// < 1e-7 (sampler_test). Branch-free, so that the loops below vectorize. The CPU attention
// kernels use the same polynomial (Ops::Exp in kernels/cpu/); it is written again here
// because common/ does not depend on kernels/ (oneDNN, OpenMP, per-ISA pragma regions),
// which the coordinator and the clang fuzz build of the request validation would then link.
inline __attribute__((always_inline)) float ExpNonPositive(float x) {
  x = std::max(x, -87.0f);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // n in [-126, 0]
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

// The sum in kLanes double accumulators, in a fixed order (one build gives the same bits on
// every call, whatever the thread).
constexpr int kLanes = 16;
inline __attribute__((always_inline)) double SumLanes(const float* keys, size_t n,
                                                      float max_key) {
  double acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    float e[kLanes];
    for (int j = 0; j < kLanes; ++j) e[j] = ExpNonPositive(keys[i + j] - max_key);
    for (int j = 0; j < kLanes; ++j) acc[j] += e[j];
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += ExpNonPositive(keys[i] - max_key);
  double sum = 0.0;
  for (int j = 0; j < kLanes; ++j) sum += acc[j];
  return sum;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#define WS_SAMPLER_AVX512 __attribute__((target("avx512f")))
#else
#define WS_SAMPLER_AVX512 __attribute__((target("avx512f"), optimize("tree-vectorize")))
#endif
WS_SAMPLER_AVX512 double SumLanesAvx512(const float* keys, size_t n, float max_key) {
  return SumLanes(keys, n, max_key);
}
#endif

// A key's exponent (key - max) / T, <= 0 (-0 at T = inf), clamped to the float exp's range
// [-87, 0]; NaN (a -inf key at T = inf) clamps too, so that none reaches the exponent bits.
inline __attribute__((always_inline)) float ClampedExponent(float key, float max_key,
                                                            float temperature) {
  const float x = (key - max_key) / temperature;
  return x > -87.0f ? x : -87.0f;
}

// TemperedWeight's formula in float, inlined into the loops below: a -inf key weighs exactly 0.
inline __attribute__((always_inline)) float WeightOf(float key, float max_key,
                                                     float temperature) {
  const float w = ExpNonPositive(ClampedExponent(key, max_key, temperature));
  return key == -kInf ? 0.0f : w;
}

// weights[i] = WeightOf(keys[i]), kLanes at a time (float, then widened), so that it
// vectorizes.
inline __attribute__((always_inline)) void WeighAll(const float* keys, size_t n, float max_key,
                                                    float temperature, double* weights) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    float w[kLanes];
    for (int j = 0; j < kLanes; ++j) w[j] = WeightOf(keys[i + j], max_key, temperature);
    for (int j = 0; j < kLanes; ++j) weights[i + j] = w[j];
  }
  for (; i < n; ++i) weights[i] = WeightOf(keys[i], max_key, temperature);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
WS_SAMPLER_AVX512 void WeighAllAvx512(const float* keys, size_t n, float max_key,
                                      float temperature, double* weights) {
  WeighAll(keys, n, max_key, temperature, weights);
}
#undef WS_SAMPLER_AVX512
#endif

bool HasAvx512() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool avx512 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return avx512;
#else
  return false;
#endif
}

}  // namespace

double TemperedWeight(float key, float max_key, float temperature) {
  return WeightOf(key, max_key, temperature);
}

void TemperedWeights(absl::Span<const float> keys, float max_key, float temperature,
                     double* weights) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (HasAvx512()) return WeighAllAvx512(keys.data(), keys.size(), max_key, temperature, weights);
#endif
  WeighAll(keys.data(), keys.size(), max_key, temperature, weights);
}

double SumExpShifted(absl::Span<const float> keys, float max_key) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (HasAvx512()) return SumLanesAvx512(keys.data(), keys.size(), max_key);
#endif
  return SumExpShiftedPortable(keys, max_key);
}

double SumExpShiftedPortable(absl::Span<const float> keys, float max_key) {
  return SumLanes(keys.data(), keys.size(), max_key);
}

}  // namespace internal_sampler

namespace {

using internal_sampler::SumExpShifted;

// The one formula for a raw log-probability, so that Sampler::Sample and
// LogSoftmaxInto agree to the bit.
float LogprobOf(float key, float max_key, double log_sum_exp_shifted) {
  return static_cast<float>((static_cast<double>(key) - max_key) - log_sum_exp_shifted);
}

// Most likely first: larger key, then lower id. Keys must not be NaN.
struct KeyThenId {
  const float* keys;
  bool operator()(int32_t a, int32_t b) const {
    return keys[a] > keys[b] || (keys[a] == keys[b] && a < b);
  }
};

// The ids of the `count` largest keys (no NaN; count <= keys.size()), largest
// first, ties to the lower id, into (*best)[0..count).
void SelectBest(absl::Span<const float> keys, size_t count, std::vector<int32_t>* best,
                std::vector<RankedToken>* heap) {
  const size_t size = keys.size();
  if (count == 0) {
    best->clear();
    return;
  }
  if (count * kHeapFraction >= size) {
    best->resize(size);
    std::iota(best->begin(), best->end(), 0);
    const KeyThenId order{keys.data()};
    if (count < size) std::nth_element(best->begin(), best->begin() + count, best->end(), order);
    std::sort(best->begin(), best->begin() + count, order);
    best->resize(count);
    return;
  }
  // A heap whose front is the worst of the best so far. Ids arrive ascending, so a
  // newcomer beats the front exactly when its key is strictly larger.
  auto better = [](const RankedToken& a, const RankedToken& b) {
    return a.key > b.key || (a.key == b.key && a.id < b.id);
  };
  heap->clear();
  for (size_t i = 0; i < size; ++i) {
    const float key = keys[i];
    if (heap->size() < count) {
      heap->push_back(RankedToken{key, static_cast<int32_t>(i)});
      std::push_heap(heap->begin(), heap->end(), better);
    } else if (key > heap->front().key) {
      std::pop_heap(heap->begin(), heap->end(), better);
      heap->back() = RankedToken{key, static_cast<int32_t>(i)};
      std::push_heap(heap->begin(), heap->end(), better);
    }
  }
  std::sort_heap(heap->begin(), heap->end(), better);
  best->resize(count);
  for (size_t i = 0; i < count; ++i) (*best)[i] = (*heap)[i].id;
}

std::vector<TokenLogprob> TopOf(absl::Span<const float> logprobs, uint32_t n,
                                std::vector<int32_t>* best, std::vector<RankedToken>* heap) {
  const size_t count = std::min<size_t>(n, logprobs.size());
  SelectBest(logprobs, count, best, heap);
  std::vector<TokenLogprob> top;
  top.reserve(count);
  for (int32_t id : *best) top.push_back(TokenLogprob{id, logprobs[id]});
  return top;
}

// The first id at which the running sum of weights exceeds u * total, over the
// `count` ids id_at(0..count) in order; ids of zero weight are never returned. The
// total is summed in the walk's order, so the walk reaches it; u * total rounding up
// to the total falls back to the last positive weight.
template <typename IdAt>
int32_t WalkTo(double u, size_t count, const std::vector<double>& weights, IdAt id_at) {
  double total = 0.0;
  for (size_t i = 0; i < count; ++i) total += weights[id_at(i)];
  const double target = u * total;
  double running = 0.0;
  int32_t last_positive = id_at(0);
  for (size_t i = 0; i < count; ++i) {
    const int32_t id = id_at(i);
    const double weight = weights[id];
    if (weight <= 0.0) continue;
    running += weight;
    last_positive = id;
    if (running > target) return id;
  }
  return last_positive;
}

}  // namespace

Sampler::Sampler(const SamplerOptions& options)
    : options_(options),
      greedy_(IsGreedy(options.temperature)),
      top_p_active_(options.top_p > 0.0f && options.top_p < 1.0f),
      generator_(options.seed) {}

void Sampler::Reset(const SamplerOptions& options) {
  options_ = options;
  greedy_ = IsGreedy(options.temperature);
  top_p_active_ = options.top_p > 0.0f && options.top_p < 1.0f;
  generator_.seed(options.seed);
}

double Sampler::NextDraw() {
  if (greedy_) return 0.0;
  return static_cast<double>(generator_() >> 11) * 0x1.0p-53;
}

SampledToken Sampler::Sample(absl::Span<const float> logits) {
  const double u = NextDraw();
  return Sample(logits, u);
}

SampledToken Sampler::Sample(absl::Span<const float> logits, double u) {
  // [0, 1): the largest double below 1 keeps the walk inside the kept tokens.
  u = std::isnan(u) ? 0.0 : std::clamp(u, 0.0, 0x1.fffffffffffffp-1);
  SampledToken result;
  if (logits.empty()) {
    result.logprob = -kInf;
    return result;
  }
  max_key_ = SanitizeLogits(logits, &keys_);
  if (greedy_) {
    // The first maximum: ties go to the lower id.
    result.token_id =
        static_cast<int32_t>(std::find(keys_.begin(), keys_.end(), max_key_) - keys_.begin());
  } else {
    result.token_id = Draw(u);
  }
  // The same sum as LogSoftmaxInto's, so that the two agree to the bit.
  const double log_sum_exp = std::log(SumExpShifted(keys_, max_key_));
  if (options_.num_top > 0) {
    logprobs_.resize(keys_.size());
    for (size_t i = 0; i < keys_.size(); ++i) {
      logprobs_[i] = LogprobOf(keys_[i], max_key_, log_sum_exp);
    }
    result.logprob = logprobs_[result.token_id];
    result.top = TopOf(logprobs_, options_.num_top, &candidates_, &heap_);
  } else {
    result.logprob = LogprobOf(keys_[result.token_id], max_key_, log_sum_exp);
  }
  return result;
}

int32_t Sampler::Draw(double u) {
  const size_t vocab = keys_.size();
  const float temperature = options_.temperature;
  weights_.resize(vocab);
  auto weight_of = [&](int32_t id) {
    return internal_sampler::TemperedWeight(keys_[id], max_key_, temperature);
  };
  const double top_p = options_.top_p;
  // Smallest prefix of candidates_[0..count) (already ordered) whose weight reaches
  // top_p of `total`; at least one.
  auto nucleus_of = [&](size_t count, double total) {
    const double target = top_p * total;
    double running = 0.0;
    for (size_t i = 0; i < count; ++i) {
      running += weights_[candidates_[i]];
      if (running >= target) return i + 1;
    }
    return count;  // rounding kept the prefix short of the target: keep them all
  };

  if (options_.top_k > 0 && options_.top_k < vocab) {
    // Only the k candidates are weighed: k exps, not V.
    const size_t k = options_.top_k;
    SelectBest(keys_, k, &candidates_, &heap_);
    double total = 0.0;
    for (int32_t id : candidates_) {
      weights_[id] = weight_of(id);
      total += weights_[id];
    }
    return DrawAmong(top_p_active_ ? nucleus_of(k, total) : k, u);
  }

  internal_sampler::TemperedWeights(keys_, max_key_, temperature, weights_.data());
  double total = 0.0;
  for (size_t id = 0; id < vocab; ++id) total += weights_[id];
  if (!top_p_active_) {
    return WalkTo(u, vocab, weights_, [](size_t i) { return static_cast<int32_t>(i); });
  }

  // Nucleus without top-k. Usually it is small: try the few hundred most likely,
  // ordered by a cheap one-scan selection.
  const double target = top_p * total;
  for (size_t count = kNucleusFirst; count <= kNucleusLastScan && count * kHeapFraction < vocab;
       count *= kNucleusGrowth) {
    SelectBest(keys_, count, &candidates_, &heap_);
    double mass = 0.0;
    for (int32_t id : candidates_) mass += weights_[id];
    if (mass >= target) return DrawAmong(nucleus_of(count, total), u);
  }
  // A flatter distribution. Larger keys have larger exponents, so they lie in the same or
  // earlier buckets, and equal keys in one: the nucleus is the buckets before the one
  // where the mass reaches the target, whole, and a most-likely-first prefix of that one.
  // Only its tokens are ordered. The draw then walks in id order.
  const float bucket_scale = static_cast<float>(kExponentBuckets) / 87.0f;
  auto bucket_of = [&](float key) {
    const float x = internal_sampler::ClampedExponent(key, max_key_, temperature);
    return std::min(static_cast<int>(-x * bucket_scale), kExponentBuckets - 1);
  };
  bucket_of_.resize(vocab);
  bucket_mass_.assign(kExponentBuckets, 0.0);
  for (size_t id = 0; id < vocab; ++id) {
    if (weights_[id] > 0.0) {
      const int b = bucket_of(keys_[id]);
      bucket_of_[id] = static_cast<uint16_t>(b);
      bucket_mass_[b] += weights_[id];
    } else {
      bucket_of_[id] = kExponentBuckets;  // no bucket: weight 0, never kept
    }
  }
  // The bucket where the nucleus ends (the last with mass if rounding kept the sum short of
  // the target), and the mass of the buckets before it.
  int last = 0;
  double before = 0.0;
  for (int b = 0; b < kExponentBuckets; ++b) {
    if (bucket_mass_[b] <= 0.0) continue;
    last = b;
    if (before + bucket_mass_[b] >= target) break;
    before += bucket_mass_[b];
  }
  std::vector<RankedToken>& ranked = heap_;
  ranked.clear();
  for (size_t id = 0; id < vocab; ++id) {
    if (bucket_of_[id] == last) ranked.push_back(RankedToken{keys_[id], static_cast<int32_t>(id)});
  }
  // Within that bucket: bisect for the nucleus' end, nth_element halving the range (O(n)
  // when many tokens share the bucket), and sort only the last small range.
  auto better = [](const RankedToken& a, const RankedToken& b) {
    return a.key > b.key || (a.key == b.key && a.id < b.id);
  };
  // Invariant: ranked[0..lo) are the lo most likely and hold less than the target;
  // `needed` is the mass still missing; the nucleus ends in (lo, hi].
  size_t lo = 0;
  size_t hi = ranked.size();
  double needed = target - before;
  while (hi - lo > kNucleusFirst) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(ranked.begin() + lo, ranked.begin() + mid, ranked.begin() + hi, better);
    double mass = 0.0;
    for (size_t i = lo; i < mid; ++i) mass += weights_[ranked[i].id];
    if (mass >= needed) {
      hi = mid;
    } else {
      needed -= mass;
      lo = mid;
    }
  }
  std::sort(ranked.begin() + lo, ranked.begin() + hi, better);
  size_t nucleus = hi;  // rounding kept the sum short of the target: keep the range
  double running = 0.0;
  for (size_t i = lo; i < hi; ++i) {
    running += weights_[ranked[i].id];
    if (running >= needed) {
      nucleus = i + 1;
      break;
    }
  }
  for (size_t i = nucleus; i < ranked.size(); ++i) weights_[ranked[i].id] = 0.0;
  for (size_t id = 0; id < vocab; ++id) {
    if (bucket_of_[id] > last) weights_[id] = 0.0;
  }
  return WalkTo(u, vocab, weights_, [](size_t i) { return static_cast<int32_t>(i); });
}

int32_t Sampler::DrawAmong(size_t count, double u) {
  return WalkTo(u, count, weights_, [this](size_t i) { return candidates_[i]; });
}

void LogSoftmaxInto(absl::Span<const float> logits, std::vector<float>* out) {
  const float max_key = SanitizeLogits(logits, out);
  const double log_sum_exp = std::log(SumExpShifted(*out, max_key));
  for (float& value : *out) value = LogprobOf(value, max_key, log_sum_exp);
}

std::vector<TokenLogprob> TopLogprobs(absl::Span<const float> logprobs, uint32_t n) {
  // SelectBest wants no NaN; only a copy may change them.
  std::vector<float> keys(logprobs.begin(), logprobs.end());
  for (float& key : keys) key = std::isnan(key) ? -kInf : key;
  std::vector<int32_t> best;
  std::vector<RankedToken> heap;
  return TopOf(keys, n, &best, &heap);
}

LogitRowStats ComputeLogitRowStats(absl::Span<const float> logits) {
  LogitRowStats stats;
  if (logits.empty()) return stats;
  stats.max_key = -kInf;
  bool any_nan = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const bool nan = std::isnan(logits[i]);
    any_nan |= nan;
    const float key = nan ? -kInf : logits[i];
    if (key > stats.max_key) {
      stats.max_key = key;
      stats.argmax = static_cast<int32_t>(i);
    }
    if (key == kInf) ++stats.num_pos_inf;
  }
  if (!std::isfinite(stats.max_key)) return stats;
  if (!any_nan) {
    stats.sum_exp = SumExpShifted(logits, stats.max_key);  // the keys are the logits
  } else {
    std::vector<float> keys(logits.begin(), logits.end());
    for (float& key : keys) key = std::isnan(key) ? -kInf : key;
    stats.sum_exp = SumExpShifted(keys, stats.max_key);
  }
  return stats;
}

SampledToken GreedyTokenFromStats(const LogitRowStats& stats, size_t vocab) {
  SampledToken result;
  if (vocab == 0) {
    result.logprob = -kInf;
    return result;
  }
  // SanitizeLogits' cases: +inf keys become 0 and the rest -inf, so the mass is shared by
  // num_pos_inf equal keys; a row of -inf becomes all 0, uniform over the vocabulary.
  double sum = stats.sum_exp;
  if (stats.max_key == kInf) {
    sum = stats.num_pos_inf;
  } else if (stats.max_key == -kInf) {
    sum = static_cast<double>(vocab);
  }
  result.token_id = stats.max_key == -kInf ? 0 : stats.argmax;
  result.logprob = LogprobOf(0.0f, 0.0f, std::log(sum));
  return result;
}

}  // namespace writescope
