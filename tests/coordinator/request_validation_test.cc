#include "coordinator/request_validation.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/test_util.h"

namespace writescope::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A small model: 512 ids, 64 positions, the whole context allowed as prompt.
RequestLimits SmallLimits() {
  RequestLimits limits;
  limits.vocab_size = 512;
  limits.max_context = 64;
  limits.max_prompt_tokens = 64;
  limits.max_logprobs = 20;
  limits.max_stop_tokens = 4;
  limits.max_request_id_bytes = 16;
  return limits;
}

v1::GenerateRequest Prompt(uint32_t tokens) {
  v1::GenerateRequest request;
  for (uint32_t i = 0; i < tokens; ++i) request.add_prompt_token_ids((i * 7 + 1) % 512);
  return request;
}

// Every field set to an allowed value.
v1::GenerateRequest FullRequest() {
  v1::GenerateRequest request = Prompt(8);
  request.set_request_id("req-0001_A~z");
  request.set_stream_interval(4);
  v1::SamplingParams* sampling = request.mutable_sampling();
  sampling->set_max_tokens(16);
  sampling->set_temperature(0.7f);
  sampling->set_top_k(40);
  sampling->set_top_p(0.9f);
  sampling->set_seed(1234);
  sampling->add_stop_token_ids(0);
  sampling->add_stop_token_ids(511);
  sampling->set_logprobs(5);
  sampling->set_prompt_logprobs(true);
  return request;
}

TEST(ValidateGenerateRequestTest, AcceptsAFullRequest) {
  WS_EXPECT_OK(ValidateGenerateRequest(FullRequest(), SmallLimits()));
}

TEST(ValidateGenerateRequestTest, AcceptsAMinimalGreedyRequestWithoutSampling) {
  const v1::GenerateRequest request = Prompt(1);
  ASSERT_FALSE(request.has_sampling());
  WS_EXPECT_OK(ValidateGenerateRequest(request, SmallLimits()));
  EXPECT_EQ(ResolveMaxTokens(request, SmallLimits()), 63u);
}

TEST(ValidateGenerateRequestTest, AcceptsTheEdgesOfEveryRange) {
  const RequestLimits limits = SmallLimits();
  v1::GenerateRequest request = Prompt(4);
  request.add_prompt_token_ids(511);  // the last id of the vocabulary
  request.set_request_id(std::string(16, '~'));
  v1::SamplingParams* sampling = request.mutable_sampling();
  sampling->set_temperature(0.0f);
  sampling->set_top_p(1.0f);
  sampling->set_top_k(512);
  sampling->set_logprobs(20);
  for (uint32_t id : {0u, 1u, 510u, 511u}) sampling->add_stop_token_ids(id);
  WS_EXPECT_OK(ValidateGenerateRequest(request, limits));

  sampling->set_top_p(0.0f);  // 0: unset, nucleus sampling off
  sampling->set_temperature(1e30f);
  request.set_request_id("!");
  WS_EXPECT_OK(ValidateGenerateRequest(request, limits));

  sampling->set_temperature(-0.0f);  // negative zero is zero
  WS_EXPECT_OK(ValidateGenerateRequest(request, limits));
}

TEST(ValidateGenerateRequestTest, PromptPlusMaxTokensFillsTheContextExactly) {
  const RequestLimits limits = SmallLimits();
  v1::GenerateRequest request = Prompt(limits.max_context - 1);
  request.mutable_sampling()->set_max_tokens(1);
  WS_EXPECT_OK(ValidateGenerateRequest(request, limits));
  EXPECT_EQ(ResolveMaxTokens(request, limits), 1u);

  // One more generated token does not fit.
  request.mutable_sampling()->set_max_tokens(2);
  absl::Status status = ValidateGenerateRequest(request, limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("sampling.max_tokens = 2"));
  EXPECT_THAT(status.message(), HasSubstr("at most 1 tokens"));

  // Nor does one more prompt token.
  request = Prompt(limits.max_context);
  request.mutable_sampling()->set_max_tokens(1);
  status = ValidateGenerateRequest(request, limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("sampling.max_tokens = 1"));
  EXPECT_THAT(status.message(), HasSubstr("context of 64"));
}

TEST(ValidateGenerateRequestTest, MaxTokensZeroNeedsRoomForOneToken) {
  const RequestLimits limits = SmallLimits();
  v1::GenerateRequest request = Prompt(limits.max_context - 1);
  WS_EXPECT_OK(ValidateGenerateRequest(request, limits));
  EXPECT_EQ(ResolveMaxTokens(request, limits), 1u);

  request = Prompt(limits.max_context);
  const absl::Status status = ValidateGenerateRequest(request, limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("prompt_token_ids has 64 tokens"));
  EXPECT_THAT(status.message(), HasSubstr("sampling.max_tokens = 0"));
  EXPECT_EQ(ResolveMaxTokens(request, limits), 0u);
}

TEST(ValidateGenerateRequestTest, ContextCheckDoesNotWrapAround) {
  RequestLimits limits = SmallLimits();
  limits.max_context = std::numeric_limits<uint32_t>::max();
  limits.max_prompt_tokens = 64;
  v1::GenerateRequest request = Prompt(8);
  request.mutable_sampling()->set_max_tokens(std::numeric_limits<uint32_t>::max());
  const absl::Status status = ValidateGenerateRequest(request, limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("sampling.max_tokens"));
}

TEST(ValidateGenerateRequestTest, ZeroMaxPromptTokensMeansTheContextBound) {
  RequestLimits limits = SmallLimits();
  limits.max_prompt_tokens = 0;
  WS_EXPECT_OK(ValidateGenerateRequest(Prompt(63), limits));
  const absl::Status status = ValidateGenerateRequest(Prompt(65), limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("prompt_token_ids has 65 tokens"));
}

TEST(ResolveMaxTokensTest, ExplicitMaxTokensIsKept) {
  v1::GenerateRequest request = Prompt(10);
  request.mutable_sampling()->set_max_tokens(7);
  EXPECT_EQ(ResolveMaxTokens(request, SmallLimits()), 7u);
}

TEST(ResolveMaxTokensTest, ZeroIsTheRestOfTheContext) {
  EXPECT_EQ(ResolveMaxTokens(Prompt(10), SmallLimits()), 54u);
  EXPECT_EQ(ResolveMaxTokens(Prompt(100), SmallLimits()), 0u);  // invalid; no wrap-around
}

// One bad field per case: the refusal is INVALID_ARGUMENT and names the field.
struct BadCase {
  std::string name;
  std::function<void(v1::GenerateRequest&, RequestLimits&)> spoil;
  std::vector<std::string> message_has;  // the field as the proto spells it, and the value
};

class BadRequestTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadRequestTest, IsInvalidArgumentNamingTheField) {
  v1::GenerateRequest request = FullRequest();
  RequestLimits limits = SmallLimits();
  WS_ASSERT_OK(ValidateGenerateRequest(request, limits));
  GetParam().spoil(request, limits);
  const absl::Status status = ValidateGenerateRequest(request, limits);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const std::string& part : GetParam().message_has) {
    EXPECT_THAT(status.message(), HasSubstr(part));
  }
}

using Req = v1::GenerateRequest;
using Lim = RequestLimits;

INSTANTIATE_TEST_SUITE_P(
    Fields, BadRequestTest,
    ::testing::Values(BadCase{"EmptyPrompt",
                              [](Req& r, Lim&) { r.clear_prompt_token_ids(); },
                              {"prompt_token_ids is empty"}},
                      BadCase{"PromptLongerThanServerBound",
                              [](Req& r, Lim& l) {
                                l.max_prompt_tokens = 32;
                                r = Prompt(33);
                              },
                              {"prompt_token_ids has 33 tokens", "limit of 32"}},
                      BadCase{"PromptTokenOutsideVocabulary",
                              [](Req& r, Lim&) { r.set_prompt_token_ids(3, 70000); },
                              {"prompt_token_ids[3] = 70000 is outside the vocabulary [0, 512)"}},
                      BadCase{"PromptTokenEqualToVocabSize",
                              [](Req& r, Lim&) { r.set_prompt_token_ids(7, 512); },
                              {"prompt_token_ids[7] = 512"}},
                      BadCase{"PromptPlusMaxTokensExceedsContext",
                              [](Req& r, Lim&) { r.mutable_sampling()->set_max_tokens(57); },
                              {"sampling.max_tokens = 57", "8 prompt_token_ids", "context of 64"}},
                      BadCase{"NegativeTemperature",
                              [](Req& r, Lim&) { r.mutable_sampling()->set_temperature(-1.0f); },
                              {"sampling.temperature = -1 must be >= 0"}},
                      BadCase{"NaNTemperature",
                              [](Req& r, Lim&) { r.mutable_sampling()->set_temperature(kNaN); },
                              {"sampling.temperature = nan"}},
                      BadCase{"InfiniteTemperature",
                              [](Req& r, Lim&) { r.mutable_sampling()->set_temperature(kInf); },
                              {"sampling.temperature = inf"}},
                      BadCase{"NegativeInfiniteTemperature",
                              [](Req& r, Lim&) { r.mutable_sampling()->set_temperature(-kInf); },
                              {"sampling.temperature = -inf"}},
                      BadCase{"NaNTopP",
                              [](Req& r, Lim&) { r.mutable_sampling()->set_top_p(kNaN); },
                              {"sampling.top_p = nan must be in [0, 1]"}},
                      BadCase{"NegativeTopP",
                              [](Req& r, Lim&) { r.mutable_sampling()->set_top_p(-0.5f); },
                              {"sampling.top_p = -0.5"}},
                      BadCase{"TopPAboveOne",
                              [](Req& r, Lim&) { r.mutable_sampling()->set_top_p(1.5f); },
                              {"sampling.top_p = 1.5"}},
                      BadCase{"InfiniteTopP",
                              [](Req& r, Lim&) { r.mutable_sampling()->set_top_p(kInf); },
                              {"sampling.top_p = inf"}},
                      BadCase{"TopKAboveVocab",
                              [](Req& r, Lim&) { r.mutable_sampling()->set_top_k(513); },
                              {"sampling.top_k = 513", "512"}},
                      BadCase{"TooManyLogprobs",
                              [](Req& r, Lim&) { r.mutable_sampling()->set_logprobs(21); },
                              {"sampling.logprobs = 21", "limit of 20"}},
                      BadCase{"TooManyStopIds",
                              [](Req& r, Lim&) {
                                for (uint32_t id : {2u, 3u, 4u})
                                  r.mutable_sampling()->add_stop_token_ids(id);
                              },
                              {"sampling.stop_token_ids has 5 ids", "limit of 4"}},
                      BadCase{
                          "StopIdOutsideVocabulary",
                          [](Req& r, Lim&) { r.mutable_sampling()->set_stop_token_ids(1, 512); },
                          {"sampling.stop_token_ids[1] = 512 is outside the vocabulary [0, 512)"}},
                      BadCase{"RequestIdTooLong",
                              [](Req& r, Lim&) { r.set_request_id(std::string(17, 'a')); },
                              {"request_id is 17 bytes", "limit of 16"}},
                      BadCase{"RequestIdWithSpace",
                              [](Req& r, Lim&) { r.set_request_id("a b"); },
                              {"request_id byte 1 is 0x20"}},
                      BadCase{"RequestIdWithControlByte",
                              [](Req& r, Lim&) { r.set_request_id(std::string("a\nb")); },
                              {"request_id byte 1 is 0x0a"}},
                      BadCase{"RequestIdWithDel",
                              [](Req& r, Lim&) { r.set_request_id("ab\x7f"); },
                              {"request_id byte 2 is 0x7f"}},
                      BadCase{"RequestIdWithHighByte",
                              [](Req& r, Lim&) { r.set_request_id("\xc3\xa9"); },
                              {"request_id byte 0 is 0xc3"}},
                      BadCase{"ZeroVocabularyRefusesEveryToken",
                              [](Req& r, Lim& l) { l.vocab_size = 0; },
                              {"prompt_token_ids[0]", "[0, 0)"}}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(SamplerSeedTest, ResolveSeedAndOptionsFromProto) {
  v1::SamplingParams params;
  params.set_seed(99);
  EXPECT_EQ(ResolveSeed(params), 99u);
  params.set_seed(0);  // an explicit 0 is a seed too
  EXPECT_EQ(ResolveSeed(params), 0u);
  params.clear_seed();
  EXPECT_NE(ResolveSeed(params), ResolveSeed(params));  // 2^-64 odds of a collision

  params.set_temperature(0.7f);
  params.set_top_k(40);
  params.set_logprobs(3);
  SamplerOptions options = SamplerOptionsFrom(params, 55);
  EXPECT_EQ(options.temperature, 0.7f);
  EXPECT_EQ(options.top_k, 40u);
  EXPECT_EQ(options.top_p, 1.0f);  // unset
  EXPECT_EQ(options.seed, 55u);
  EXPECT_EQ(options.num_top, 3u);
  params.set_top_p(0.9f);
  EXPECT_EQ(SamplerOptionsFrom(params, 55).top_p, 0.9f);
}

}  // namespace
}  // namespace writescope::coordinator
