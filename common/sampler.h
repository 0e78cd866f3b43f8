// The token sampler, pure logic: one generated token from one row of raw model logits,
// with its log-probability and the top alternatives. The coordinator owns each request's
// seeded generator and draws u (NextDraw); the gpu_worker, which has the logits, samples
// with that u (Sample(logits, u)), so only the token travels, never the [vocab] row.
//
// Conventions. Log-probabilities are natural log, fp32, of the RAW distribution
// (softmax of the logits at temperature 1, before top-k/top-p), accumulated in
// double. NaN logits count as -inf. Degenerate rows stay defined and never give
// NaN: when some logits are +inf the mass is shared equally among them; when every
// logit is -inf (or NaN) the row is treated as all-equal, i.e. uniform.
//
// Ordering. "Most likely" orders by logit, descending, ties to the lower token id.
// At temperature T > 0 this is the order of softmax(logits / T), except where exp
// rounds two different logits to the same double (huge T): we then keep the one
// with the higher logit, which keeps top_k = 1 exactly the greedy choice.
//
// Sampling at T > 0: p = softmax(logits / T); top_k > 0 keeps the k most likely;
// then top_p < 1 keeps the smallest prefix, in that order, whose cumulative share
// of the kept mass is >= top_p (at least one token). As in vLLM, Hugging Face and
// llama.cpp, top-p is measured on the distribution already cut and renormalised by
// top-k. The kept weights are renormalised and one draw u in [0, 1) is taken from
// a std::mt19937_64 seeded with the request's seed, u = (gen() >> 11) * 2^-53: the
// token is the first whose running sum of weights exceeds u * total. Greedy (T = 0)
// draws nothing. So one seed fixes the whole sequence of tokens of a request, on
// every standard library (up to last-bit differences of exp between math libraries).
//
// Cost per call for a vocabulary of V: V exps for the raw log-sum-exp, plus V more
// when the whole vocabulary is weighed (no top_k, temperature != 1). top_k = k and
// the top list select in one O(V) scan with a bounded heap, and weigh only k; top_p
// without top_k tries the few hundred most likely the same way, then falls back to
// an O(V) bisection with nth_element; only kept tokens are ever sorted. The draw walks
// the kept tokens most likely first, except after that fallback, where it walks
// them in id order (both are fixed by the logits and the seed, on any library).
// Buffers are members, reused across calls.
// Not thread-safe; one Sampler per request.
#ifndef WRITESCOPE_COMMON_SAMPLER_H_
#define WRITESCOPE_COMMON_SAMPLER_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "common/logit_row_stats.h"

namespace writescope {

// One alternative with its log-probability.
struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t token_id = 0;
  // log-softmax of the RAW logits (temperature 1, no top-k/p) at token_id, natural log.
  float logprob = 0.0f;
  // The `num_top` most likely tokens under the raw log-softmax, descending, ties to
  // the lower id.
  std::vector<TokenLogprob> top;
};

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy (argmax, ties to the lower id). Must be >= 0 and finite.
  uint32_t top_k = 0;        // 0: off
  float top_p = 1.0f;        // in (0, 1]; 1 (or 0, meaning unset) is off
  uint64_t seed = 0;
  uint32_t num_top = 0;  // alternatives to report
};

namespace internal_sampler {
// Scratch entry of the top-n selection; an implementation detail.
struct RankedToken {
  float key;
  int32_t id;
};
// Sum over keys of exp(key - max_key), for keys <= max_key (finite max; keys may be -inf):
// float exps (relative error < 1e-7 each) summed in double in a fixed order, on AVX-512
// where the CPU has it. The log-softmax's denominator, shared by Sample and LogSoftmaxInto.
double SumExpShifted(absl::Span<const float> keys, float max_key);
// The same without AVX-512 (what SumExpShifted runs on other CPUs), for tests.
double SumExpShiftedPortable(absl::Span<const float> keys, float max_key);
// A token's unnormalized probability at `temperature` (> 0, may be +inf), for a key <=
// max_key (finite): exp((key - max_key) / temperature) as a float exp (relative error
// < 1e-7; below exp(-87) it gives exp(-87), never 0), and exactly 0 for a -inf key.
double TemperedWeight(float key, float max_key, float temperature);
// TemperedWeight of every key into weights[0..keys.size()), on AVX-512 where the CPU has it:
// one vectorized pass over the row (a double exp a token took most of the 1.2 ms a sampled
// row of 102400 cost on the build machine).
void TemperedWeights(absl::Span<const float> keys, float max_key, float temperature,
                     double* weights);
}  // namespace internal_sampler

class Sampler {
 public:
  // Options are assumed validated by the caller; out-of-range values degrade safely
  // (temperature <= 0 or NaN is greedy, top_p outside (0, 1) is off).
  explicit Sampler(const SamplerOptions& options);

  // logits: [vocab] raw model logits (fp32; may contain -inf; NaN is treated as
  // -inf). An empty row is a caller bug; it returns token 0 with logprob -inf.
  // Same as Sample(logits, NextDraw()).
  SampledToken Sample(absl::Span<const float> logits);

  // The next draw u in [0, 1) of the seeded generator at temperature > 0; 0, drawing
  // nothing, when greedy. One per sampled token.
  double NextDraw();

  // Samples with the given draw u in [0, 1) (clamped into it; ignored when greedy) instead
  // of the generator's: the same token Sample(logits) gives when u is its next draw.
  SampledToken Sample(absl::Span<const float> logits, double u);

  // Other options for the next calls, keeping the buffers (a worker samples many
  // requests with one Sampler); the generator is reseeded with options.seed.
  void Reset(const SamplerOptions& options);

 private:
  // The token drawn at temperature > 0 (keys_ and max_key_ already set).
  int32_t Draw(double u);
  // Draws u from weights_[candidates_[0..count)], in that order.
  int32_t DrawAmong(size_t count, double u);

  SamplerOptions options_;
  bool greedy_;
  bool top_p_active_;
  std::mt19937_64 generator_;
  // Reused per-call buffers, [vocab] unless noted.
  std::vector<float> keys_;  // sanitised logits (see SanitizeLogits in sampler.cc)
  float max_key_ = 0.0f;
  std::vector<double> weights_;  // unnormalised exp((key - max) / T), by token id
  // A flat row's nucleus search (Draw): each token's bucket of exponents, and their masses.
  std::vector<uint16_t> bucket_of_;
  std::vector<double> bucket_mass_;  // [kExponentBuckets in sampler.cc]
  std::vector<int32_t> candidates_;                  // token ids, most likely first; [<= vocab]
  std::vector<float> logprobs_;                      // raw log-softmax, only when num_top > 0
  std::vector<internal_sampler::RankedToken> heap_;  // selection scratch, [< vocab / 16]
};

// Raw natural-log softmax of logits (double accumulation) into out, resized to
// [logits.size()]; NaN counts as -inf.
void LogSoftmaxInto(absl::Span<const float> logits, std::vector<float>* out);

// The n largest of logprobs (n clamped to the size), descending, ties to the lower
// index; NaN counts as -inf.
std::vector<TokenLogprob> TopLogprobs(absl::Span<const float> logprobs, uint32_t n);

// Sampler's greedy rule: a temperature not above 0, or NaN, takes the argmax and draws
// nothing.
inline bool IsGreedy(float temperature) { return !(temperature > 0.0f); }

// The stats of one row of logits (common/logit_row_stats.h), the host reference of the
// device's reduction: its sum is Sampler's (SumExpShifted), so that GreedyTokenFromStats of
// these stats is Sampler::Sample's greedy token to the bit.
LogitRowStats ComputeLogitRowStats(absl::Span<const float> logits);

// The token and raw log-probability that Sampler::Sample gives when IsGreedy, with num_top
// 0, for a row of `vocab` logits with these stats, degenerate rows included (+inf
// keys share the mass, a row of -inf is uniform). An empty row gives token 0, logprob -inf.
SampledToken GreedyTokenFromStats(const LogitRowStats& stats, size_t vocab);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_SAMPLER_H_
