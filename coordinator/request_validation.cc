#include "coordinator/request_validation.h"

#include <cmath>
#include <cstdint>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace writescope::coordinator {
namespace {

absl::Status CheckRequestId(const std::string& id, const RequestLimits& limits) {
  if (id.size() > limits.max_request_id_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("request_id is ", id.size(),
                                                   " bytes, longer than this server's limit of ",
                                                   limits.max_request_id_bytes));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    const unsigned char byte = static_cast<unsigned char>(id[i]);
    if (byte < 0x21 || byte > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrFormat("request_id byte %d is 0x%02x: only printable ASCII 0x21..0x7e (no "
                          "spaces or control bytes) is allowed",
                          i, byte));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPrompt(const v1::GenerateRequest& request, const RequestLimits& limits) {
  const auto& prompt = request.prompt_token_ids();
  if (prompt.empty()) return absl::InvalidArgumentError("prompt_token_ids is empty");
  const uint64_t prompt_limit =
      limits.max_prompt_tokens != 0 ? limits.max_prompt_tokens : limits.max_context;
  if (static_cast<uint64_t>(prompt.size()) > prompt_limit) {
    return absl::InvalidArgumentError(absl::StrCat("prompt_token_ids has ", prompt.size(),
                                                   " tokens, more than this server's limit of ",
                                                   prompt_limit));
  }
  for (int i = 0; i < prompt.size(); ++i) {
    if (prompt[i] >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt_token_ids[", i, "] = ", prompt[i],
                                                     " is outside the vocabulary [0, ",
                                                     limits.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

// The prompt plus what is to be generated must fit the model's positions.
absl::Status CheckContext(const v1::GenerateRequest& request, const RequestLimits& limits) {
  const uint64_t prompt = static_cast<uint64_t>(request.prompt_token_ids_size());
  const uint64_t max_tokens = request.sampling().max_tokens();
  if (max_tokens == 0) {
    if (prompt >= limits.max_context) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt_token_ids has ", prompt,
          " tokens, which leaves no room to generate in the "
          "model's context of ",
          limits.max_context, " (sampling.max_tokens = 0 means the rest of the context)"));
    }
    return absl::OkStatus();
  }
  if (prompt + max_tokens > limits.max_context) {
    const uint64_t room = prompt < limits.max_context ? limits.max_context - prompt : 0;
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.max_tokens = ", max_tokens, " with ", prompt,
                     " prompt_token_ids exceeds the model's context of ", limits.max_context,
                     " (at most ", room, " tokens can be generated)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSamplingParams(const v1::SamplingParams& sampling,
                                    const RequestLimits& limits) {
  const float temperature = sampling.temperature();
  if (!std::isfinite(temperature)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.temperature = %g must be a finite number >= 0", temperature));
  }
  if (temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.temperature = %g must be >= 0", temperature));
  }
  const float top_p = sampling.top_p();
  // Written so that NaN fails too.
  if (!(top_p >= 0 && top_p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.top_p = %g must be in [0, 1]", top_p));
  }
  if (sampling.top_k() > limits.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling.top_k = ", sampling.top_k(), " exceeds the vocabulary size ", limits.vocab_size));
  }
  if (sampling.logprobs() > limits.max_logprobs) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.logprobs = ", sampling.logprobs(),
                                                   " exceeds this server's limit of ",
                                                   limits.max_logprobs));
  }
  const auto& stops = sampling.stop_token_ids();
  if (static_cast<uint64_t>(stops.size()) > limits.max_stop_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.stop_token_ids has ", stops.size(),
                                                   " ids, more than this server's limit of ",
                                                   limits.max_stop_tokens));
  }
  for (int i = 0; i < stops.size(); ++i) {
    if (stops[i] >= limits.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.stop_token_ids[", i, "] = ", stops[i],
                       " is outside the vocabulary [0, ", limits.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateGenerateRequest(const v1::GenerateRequest& request,
                                     const RequestLimits& limits) {
  WS_RETURN_IF_ERROR(CheckRequestId(request.request_id(), limits));
  WS_RETURN_IF_ERROR(CheckPrompt(request, limits));
  WS_RETURN_IF_ERROR(CheckContext(request, limits));
  return ValidateSamplingParams(request.sampling(), limits);
}

uint32_t ResolveMaxTokens(const v1::GenerateRequest& request, const RequestLimits& limits) {
  if (request.sampling().max_tokens() != 0) return request.sampling().max_tokens();
  const uint64_t prompt = static_cast<uint64_t>(request.prompt_token_ids_size());
  return prompt < limits.max_context ? static_cast<uint32_t>(limits.max_context - prompt) : 0;
}

uint64_t ResolveSeed(const v1::SamplingParams& params) {
  if (params.has_seed()) return params.seed();
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

SamplerOptions SamplerOptionsFrom(const v1::SamplingParams& params, uint64_t seed) {
  SamplerOptions options;
  options.temperature = params.temperature();
  options.top_k = params.top_k();
  options.top_p = params.top_p() == 0.0f ? 1.0f : params.top_p();
  options.seed = seed;
  options.num_top = params.logprobs();
  return options;
}

}  // namespace writescope::coordinator
