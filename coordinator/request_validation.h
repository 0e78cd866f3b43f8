// Admission checks of a public GenerateRequest, before anything is queued or allocated.
//
// Pure logic over the proto and the limits of the loaded model and of this server: a
// request that passes can be tokenized, sampled and fit in the context without any later
// stage having to re-check its numbers. A request that fails gets INVALID_ARGUMENT whose
// message names the offending field as the proto spells it ("prompt_token_ids[3]",
// "sampling.temperature", "request_id"), so a client can fix it without reading our code.
#ifndef WRITESCOPE_COORDINATOR_REQUEST_VALIDATION_H_
#define WRITESCOPE_COORDINATOR_REQUEST_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/sampler.h"
#include "writescope/v1/writescope.pb.h"

namespace writescope::coordinator {

struct RequestLimits {
  uint32_t vocab_size = 0;
  uint32_t max_context = 0;        // the model's max positions: prompt + generated tokens
  uint32_t max_prompt_tokens = 0;  // server bound (<= max_context); 0: max_context alone
  uint32_t max_logprobs = 20;      // bound of sampling.logprobs (top alternatives per token)
  uint32_t max_stop_tokens = 64;   // bound of the number of sampling.stop_token_ids
  uint32_t max_request_id_bytes = 128;
};

// OK, or INVALID_ARGUMENT naming the first offending field, for:
//   request_id                longer than max_request_id_bytes, or a byte outside printable
//                             ASCII 0x21..0x7e (ids go into logs and traces verbatim);
//   prompt_token_ids          empty, longer than max_prompt_tokens, an id >= vocab_size;
//   sampling.max_tokens       prompt + max_tokens > max_context, or (max_tokens 0: "the rest
//                             of the context") a prompt that leaves no room for one token;
//   sampling.temperature      negative, NaN or infinite;
//   sampling.top_p            NaN, < 0 or > 1;
//   sampling.top_k            > vocab_size;
//   sampling.logprobs         > max_logprobs;
//   sampling.stop_token_ids   more than max_stop_tokens, or an id >= vocab_size.
// A request without `sampling` is greedy with max_tokens 0 and is checked as such.
absl::Status ValidateGenerateRequest(const v1::GenerateRequest& request,
                                     const RequestLimits& limits);

// The sampling part of ValidateGenerateRequest alone (temperature, top_p, top_k, logprobs,
// stop_token_ids; max_tokens is the request's): a bench checks its own with it.
absl::Status ValidateSamplingParams(const v1::SamplingParams& sampling,
                                    const RequestLimits& limits);

// The number of tokens to generate: sampling.max_tokens, or when 0 the rest of the context
// (max_context - prompt length, 0 when the prompt already fills it). For a request that
// passed ValidateGenerateRequest it is >= 1 and prompt + it <= max_context. (Engine::Queue
// caps a 0's further by what the KV regions hold.)
uint32_t ResolveMaxTokens(const v1::GenerateRequest& request, const RequestLimits& limits);

// Same seed, same draws: the seed the request gave, or a random one when it gave none.
uint64_t ResolveSeed(const v1::SamplingParams& params);

// The request's sampling parameters as SamplerOptions (top_p 0, unset, becomes 1).
SamplerOptions SamplerOptionsFrom(const v1::SamplingParams& params, uint64_t seed);

}  // namespace writescope::coordinator

#endif  // WRITESCOPE_COORDINATOR_REQUEST_VALIDATION_H_
