// HostModel at lengths that cross the real 256-token KV tiles (and the D-window
// size) twice: one-shot prefill == chunked prefill == prefill + decode, for
// each architecture (~3 s on 2 cores: a unit test).
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/model/host_model.h"
#include "tests/kernels/model/tiny_models.h"

namespace writescope::kernels::model {
namespace {

using testing::MaxAbsDiff;
using testing::RandomTokens;
using testing::TinyConfig;

class HostModelLongTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HostModelLongTest, SixHundredTokensAcrossTiles) {
  const ModelConfig config = TinyConfig(GetParam());
  auto weights = MakeSyntheticWeights(config, {.seed = 21});
  ASSERT_TRUE(weights.ok());
  // Naive MLA decode here: the comparison is then fp32-tight for every
  // architecture (host_model_test covers absorbed == naive).
  auto model = HostModel::Create(config, **weights,
                                 {.block_tokens = 256, .mla_decode = MlaDecodeMode::kNaive});
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t n = 600, vocab = config.vocab_size;
  const auto tokens = RandomTokens(n, vocab, 4);

  HostSequence one = (*model)->NewSequence();
  auto full = (*model)->Prefill(one, tokens);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(one.num_blocks(), 3);

  HostSequence chunked_seq = (*model)->NewSequence();
  auto chunked = (*model)->Prefill(chunked_seq, tokens, 200);
  ASSERT_TRUE(chunked.ok());
  std::cout << GetParam() << ": |chunked - one-shot| max " << MaxAbsDiff(*chunked, *full) << "\n";
  EXPECT_LT(MaxAbsDiff(*chunked, *full), 2e-3);

  HostSequence seq = (*model)->NewSequence();
  const int64_t head = 100;
  auto first = (*model)->Prefill(seq, absl::MakeConstSpan(tokens).subspan(0, head), 64);
  ASSERT_TRUE(first.ok());
  std::vector<float> decoded = *first;
  for (int64_t i = head; i < n; ++i) {
    auto step = (*model)->Decode(seq, tokens[i]);
    ASSERT_TRUE(step.ok()) << step.status();
    decoded.insert(decoded.end(), step->begin(), step->end());
  }
  std::cout << GetParam() << ": |decode - one-shot| max " << MaxAbsDiff(decoded, *full) << "\n";
  EXPECT_LT(MaxAbsDiff(decoded, *full), 2e-3);
}

INSTANTIATE_TEST_SUITE_P(Archs, HostModelLongTest,
                         ::testing::Values("deepseek_v2", "qwen3_moe", "mixtral"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace writescope::kernels::model
