// Our host forward against Hugging Face transformers on the tiny fixtures that
// deploy/make_fixtures.py writes to tests/fixtures/<arch>/ (config.json, model.safetensors,
// expected.json). Each architecture whose folder is absent is skipped.
//
// Tolerances (bf16-appropriate): transformers computes everything in fp32 on the bf16 weights;
// we round what the attention kernels read to bf16 (K/V or the MLA latent in the cache, the
// query), as the real workers do. Per prompt position:
//   |our log p - transformers' log p| <= kMaxLogProbDiff, mean over the prompt
//     <= kMeanLogProbDiff;
//   our top-1 == transformers' top-1 wherever its top-1 margin > kMargin;
//   greedy continuation: the same tokens up to the first step whose margin is <= kMargin (a
//     near tie may legitimately go either way; after it the sequences differ), with log-probs
//     within kMaxLogProbDiff.
// The environment variable WS_FIXTURES_DIR overrides the fixtures folder.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/model/host_model.h"
#include "kernels/model/layers.h"
#include "nlohmann/json.hpp"

namespace writescope::kernels::model {
namespace {

constexpr double kMaxLogProbDiff = 0.05;
constexpr double kMeanLogProbDiff = 0.01;
constexpr double kMargin = 0.05;

using Json = nlohmann::json;

std::string FixturesDir() {
  const char* env = std::getenv("WS_FIXTURES_DIR");
  return env != nullptr ? env : WS_FIXTURES_DIR;
}

struct Fixture {
  std::unique_ptr<ModelWeights> weights;
  Json expected;
};

// Loads <dir>/<folder> with the expected outputs of <dir>/<arch>; false (after
// GTEST_SKIP or a failure) when it cannot.
bool LoadFixture(const std::string& arch, const std::string& folder, Fixture* fixture) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(FixturesDir()) / folder;
  const fs::path expected = fs::path(FixturesDir()) / arch / "expected.json";
  if (!fs::exists(dir / "config.json") || !fs::exists(expected)) {
    return false;
  }
  auto weights = LoadModelFolder(dir.string());
  EXPECT_TRUE(weights.ok()) << weights.status();
  if (!weights.ok()) return false;
  fixture->weights = std::move(*weights);
  std::ifstream in(expected);
  std::stringstream text;
  text << in.rdbuf();
  fixture->expected = Json::parse(text.str());
  return true;
}

// The MLA softmax-scale convention transformers used (it changed with PR
// #47435), read from the scale it recorded; GQA: checks the scale.
MlaSoftmaxScale ConventionOf(const ModelConfig& config, const Json& expected) {
  const Json& reference = expected.value("reference", Json::object());
  if (!reference.contains("attention_softmax_scale")) return MlaSoftmaxScale::kWithYarnMscale;
  const double theirs = reference["attention_softmax_scale"].get<double>();
  for (MlaSoftmaxScale mode : {MlaSoftmaxScale::kWithYarnMscale, MlaSoftmaxScale::kPlain}) {
    if (std::fabs(AttentionSoftmaxScale(config, mode) - theirs) <= 1e-6 * theirs) {
      if (config.is_mla()) {
        std::cout << "transformers " << expected.value("transformers_version", "?")
                  << " MLA softmax scale " << theirs << ": "
                  << (mode == MlaSoftmaxScale::kPlain ? "plain 1/sqrt(qk_head_dim)"
                                                      : "with YaRN mscale^2")
                  << "\n";
      }
      return mode;
    }
  }
  ADD_FAILURE() << "transformers' softmax scale " << theirs << " matches neither convention ("
                << AttentionSoftmaxScale(config, MlaSoftmaxScale::kWithYarnMscale) << ", "
                << AttentionSoftmaxScale(config, MlaSoftmaxScale::kPlain) << ")";
  return MlaSoftmaxScale::kWithYarnMscale;
}

void CheckRope(const HostModel& model, const Json& expected) {
  const Json& reference = expected.value("reference", Json::object());
  if (reference.contains("rope_inv_freq")) {
    const auto theirs = reference["rope_inv_freq"].get<std::vector<double>>();
    ASSERT_EQ(theirs.size(), model.rope().inv_freq.size());
    for (size_t i = 0; i < theirs.size(); ++i) {
      EXPECT_NEAR(model.rope().inv_freq[i], theirs[i], 2e-6 * std::fabs(theirs[i])) << i;
    }
  }
  if (reference.contains("rope_attention_scaling")) {
    EXPECT_NEAR(model.rope().attention_scaling, reference["rope_attention_scaling"].get<double>(),
                1e-6);
  }
}

void CheckPrompt(HostModel& model, const Json& prompt, int64_t chunk_tokens, bool greedy_too) {
  const std::string name = prompt.value("name", "?");
  SCOPED_TRACE(name + " chunk " + std::to_string(chunk_tokens));
  const auto tokens = prompt["token_ids"].get<std::vector<int32_t>>();
  const int64_t vocab = model.config().vocab_size;
  HostSequence seq = model.NewSequence();
  auto logits = model.Prefill(seq, tokens, chunk_tokens);
  ASSERT_TRUE(logits.ok()) << logits.status();
  std::vector<float> logprobs = *logits;
  LogSoftmax(logprobs.data(), static_cast<int64_t>(tokens.size()), vocab, logprobs.data());
  const Json& theirs = prompt["prompt_logprobs"];
  ASSERT_EQ(theirs.size(), tokens.size());
  double max_diff = 0, sum_diff = 0;
  int64_t worst = -1;
  for (size_t i = 1; i < tokens.size(); ++i) {
    const double ours = logprobs[(i - 1) * vocab + tokens[i]];
    const double diff = std::fabs(ours - theirs[i].get<double>());
    sum_diff += diff;
    if (diff > max_diff) max_diff = diff, worst = static_cast<int64_t>(i);
  }
  const double mean_diff = sum_diff / (tokens.size() - 1);
  std::cout << name << " (chunk " << chunk_tokens << "): " << tokens.size()
            << " tokens, log-prob |diff| max " << max_diff << " at " << worst << ", mean "
            << mean_diff << "\n";
  EXPECT_LE(max_diff, kMaxLogProbDiff) << "worst position " << worst;
  EXPECT_LE(mean_diff, kMeanLogProbDiff);

  // Top-1 after each prefix, where transformers' margin is clear.
  if (prompt.contains("prompt_top1_ids")) {
    int64_t mismatches = 0, checked = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (prompt["prompt_top1_margins"][i].get<double>() <= kMargin) continue;
      ++checked;
      const float* row = logits->data() + i * vocab;
      const int32_t best = std::max_element(row, row + vocab) - row;
      if (best != prompt["prompt_top1_ids"][i].get<int32_t>()) {
        ADD_FAILURE() << "top-1 after position " << i << ": ours " << best << ", transformers "
                      << prompt["prompt_top1_ids"][i] << " (margin "
                      << prompt["prompt_top1_margins"][i] << ")";
        if (++mismatches >= 5) break;
      }
    }
    std::cout << "  top-1 checked at " << checked << " positions, " << mismatches
              << " mismatches\n";
  }
  if (!greedy_too) return;

  // The greedy continuation, decoded through our decode path.
  const Json& greedy = prompt["greedy"];
  const auto want = greedy["token_ids"].get<std::vector<int32_t>>();
  auto got = model.Greedy(tokens, static_cast<int64_t>(want.size()), chunk_tokens);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t step = 0; step < want.size(); ++step) {
    const double margin = greedy["margins"][step].get<double>();
    if (got->tokens[step] != want[step]) {
      EXPECT_LE(margin, kMargin) << "greedy step " << step << ": ours " << got->tokens[step]
                                 << ", transformers " << want[step] << " (margin " << margin << ")";
      break;  // the sequences differ from here on
    }
    EXPECT_NEAR(got->logprobs[step], greedy["logprobs"][step].get<double>(), kMaxLogProbDiff)
        << "greedy step " << step;
    if (margin <= kMargin) break;  // a near tie: later steps may follow another branch
  }
}

// output_hidden_states of prompt 0 at a few positions: reported per layer to
// localize a mismatch; checked loosely (relative to the state's size) since the
// log-probs are the contract.
void CheckHiddenStates(HostModel& model, const Json& expected) {
  if (!expected.contains("debug")) return;
  const Json& debug = expected["debug"];
  const auto tokens =
      expected["prompts"][debug.value("prompt", 0)]["token_ids"].get<std::vector<int32_t>>();
  const auto positions = debug["positions"].get<std::vector<int64_t>>();
  HostSequence seq = model.NewSequence();
  ForwardTrace trace;
  ASSERT_TRUE(model.Prefill(seq, tokens, 0, &trace).ok());
  const Json& states = debug["hidden_states"];
  ASSERT_EQ(states.size(), trace.hidden_states.size());
  const int64_t hidden = model.config().hidden_size;
  for (size_t l = 0; l < states.size(); ++l) {
    double max_diff = 0, max_abs = 0;
    for (size_t p = 0; p < positions.size(); ++p) {
      const auto theirs = states[l][p].get<std::vector<double>>();
      for (int64_t c = 0; c < hidden; ++c) {
        const double ours = trace.hidden_states[l][positions[p] * hidden + c];
        max_diff = std::max(max_diff, std::fabs(ours - theirs[c]));
        max_abs = std::max(max_abs, std::fabs(theirs[c]));
      }
    }
    std::cout << "  hidden state " << l << ": max |diff| " << max_diff << " (max |value| "
              << max_abs << ")\n";
    EXPECT_LE(max_diff, 0.02 * std::max(1.0, max_abs)) << "hidden state " << l;
  }
}

class HfFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFixtureTest, MatchesTransformers) {
  const std::string arch = GetParam();
  Fixture fixture;
  if (!LoadFixture(arch, arch, &fixture)) {
    if (!HasFailure()) GTEST_SKIP() << "no fixture in " << FixturesDir() << "/" << arch;
    return;
  }
  const ModelConfig& config = fixture.weights->config();
  HostModelOptions options;
  options.mla_softmax_scale = ConventionOf(config, fixture.expected);
  auto model = HostModel::Create(config, *fixture.weights, options);
  ASSERT_TRUE(model.ok()) << model.status();
  CheckRope(**model, fixture.expected);
  CheckHiddenStates(**model, fixture.expected);
  for (const Json& prompt : fixture.expected["prompts"]) {
    CheckPrompt(**model, prompt, /*chunk_tokens=*/0, /*greedy_too=*/true);
  }
  // Chunks that straddle the 256-token tiles; greedy again after a chunked
  // prefill.
  CheckPrompt(**model, fixture.expected["prompts"][0], /*chunk_tokens=*/200,
              /*greedy_too=*/true);
}

// transformers 5's runtime layout (fused experts): the same model, the same
// outputs.
TEST_P(HfFixtureTest, FusedLayoutMatchesTransformers) {
  const std::string arch = GetParam();
  Fixture fixture;
  if (!LoadFixture(arch, arch + "_fused", &fixture)) {
    if (!HasFailure()) GTEST_SKIP() << "no fixture in " << FixturesDir() << "/" << arch << "_fused";
    return;
  }
  const ModelConfig& config = fixture.weights->config();
  HostModelOptions options;
  options.mla_softmax_scale = ConventionOf(config, fixture.expected);
  auto model = HostModel::Create(config, *fixture.weights, options);
  ASSERT_TRUE(model.ok()) << model.status();
  CheckPrompt(**model, fixture.expected["prompts"][0], /*chunk_tokens=*/0,
              /*greedy_too=*/false);
}

INSTANTIATE_TEST_SUITE_P(Archs, HfFixtureTest,
                         ::testing::Values("deepseek_v2", "qwen3_moe", "mixtral"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace writescope::kernels::model
