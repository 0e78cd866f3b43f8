// Replays the fuzzers' seed corpora (tests/fuzz/corpus/<fuzzer>/) and every input a
// fuzzer ever crashed on (tests/fuzz/regressions/<fuzzer>/) through the same parsers and
// invariants (tests/fuzz/fuzz_checks.h), in the normal g++ build: each input must yield
// a Status, never a crash, and break no invariant. Seeds named valid_* must be
// accepted; seeds named truncated_* must be refused.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/fuzz/fuzz_checks.h"

namespace writescope::fuzz {
namespace {

namespace fs = std::filesystem;

// tests/fuzz/ of this source tree (WS_FUZZ_DIR overrides).
fs::path FuzzDir() {
  if (const char* dir = std::getenv("WS_FUZZ_DIR")) return dir;
  return fs::path(__FILE__).parent_path().parent_path() / "fuzz";
}

std::vector<fs::path> FilesUnder(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct FuzzerCase {
  const char* fuzzer;
  std::function<FuzzResult(absl::string_view)> check;
};

class FuzzRegressionTest : public ::testing::TestWithParam<FuzzerCase> {};

TEST_P(FuzzRegressionTest, SeedCorpusKeepsItsPromises) {
  const fs::path dir = FuzzDir() / "corpus" / GetParam().fuzzer;
  const std::vector<fs::path> files = FilesUnder(dir);
  ASSERT_FALSE(files.empty()) << "no seed corpus in " << dir;
  int valid = 0;
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    const FuzzResult result = GetParam().check(ReadFile(file));
    EXPECT_EQ(result.violation, "") << result.parse;
    const std::string name = file.filename().string();
    if (absl::StartsWith(name, "valid_")) {
      ++valid;
      EXPECT_TRUE(result.parse.ok()) << result.parse;
    } else if (absl::StartsWith(name, "truncated_")) {
      EXPECT_FALSE(result.parse.ok());
    }
  }
  EXPECT_GT(valid, 0) << "the corpus of " << GetParam().fuzzer << " has no valid_* seed";
}

TEST_P(FuzzRegressionTest, EveryCrashFoundStaysFixed) {
  const fs::path dir = FuzzDir() / "regressions" / GetParam().fuzzer;
  const std::vector<fs::path> files = FilesUnder(dir);
  // Said, not passed in silence: a fuzzer that has found nothing yet has nothing to replay.
  if (files.empty()) GTEST_SKIP() << "no crash of " << GetParam().fuzzer << " recorded in " << dir;
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    const FuzzResult result = GetParam().check(ReadFile(file));
    EXPECT_EQ(result.violation, "") << result.parse;
  }
}

// The coordinator resolves W before it sends the spec: a spec with W=0 is refused, not
// resolved again by the worker that reads it.
TEST(FuzzRegressionTest, AKvSpecWithoutItsWindowIsRefused) {
  KvCacheConfig config;
  config.geometry = KvGeometry{.kind = AttentionKind::kMla,
                               .num_layers = 27,
                               .block_tokens = 0,
                               .kv_lora_rank = 512,
                               .rope_dim = 64};
  config.window_tokens = kAutoWindowTokens;
  config.max_sequences = 32;
  absl::StatusOr<KvCacheConfig> resolved = ResolveKvCacheConfig(config);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  internal::KvSpec spec = ToKvSpec(*resolved);
  EXPECT_EQ(spec.window_tokens(), 128u);
  EXPECT_EQ(CheckKvSpec(spec.SerializeAsString()).violation, "");
  EXPECT_TRUE(FromKvSpec(spec).ok());
  spec.set_window_tokens(0);
  const FuzzResult refused = CheckKvSpec(spec.SerializeAsString());
  EXPECT_EQ(refused.violation, "");
  EXPECT_EQ(refused.parse.code(), absl::StatusCode::kInvalidArgument) << refused.parse;
  EXPECT_TRUE(absl::StrContains(refused.parse.message(), "W must be > 0")) << refused.parse;
}

// Too large to check in: 100k levels of '[' (200 KB) overflowed the 8 MB stack of a plain
// -O2 build in the recursive dump of the error message (fixed with a depth limit).
TEST(FuzzRegressionTest, DeeplyNestedJsonIsRefusedNotACrash) {
  constexpr size_t kDepth = 1'000'000;
  const std::string nested = std::string(kDepth, '[') + std::string(kDepth, ']');
  const FuzzResult config =
      CheckModelConfig(R"({"model_type": "qwen3_moe", "hidden_size": )" + nested + "}");
  EXPECT_EQ(config.violation, "");
  EXPECT_TRUE(absl::StrContains(config.parse.message(), "nested deeper")) << config.parse;

  std::string header = R"({"t": )" + nested + "}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  const FuzzResult safetensors = CheckSafetensorsHeader(file + header);
  EXPECT_EQ(safetensors.violation, "");
  EXPECT_FALSE(safetensors.parse.ok());
}

INSTANTIATE_TEST_SUITE_P(
    Parsers, FuzzRegressionTest,
    ::testing::Values(FuzzerCase{"safetensors_header_fuzzer", CheckSafetensorsHeader},
                      FuzzerCase{"model_config_fuzzer", CheckModelConfig},
                      FuzzerCase{"kv_spec_fuzzer", CheckKvSpec},
                      FuzzerCase{"request_validation_fuzzer", CheckGenerateRequest}),
    [](const ::testing::TestParamInfo<FuzzerCase>& info) {
      std::string name = info.param.fuzzer;
      name = name.substr(0, name.size() - std::string("_fuzzer").size());
      std::string camel;
      bool upper = true;
      for (char ch : name) {
        if (ch == '_') {
          upper = true;
          continue;
        }
        camel += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
        upper = false;
      }
      return camel;  // SafetensorsHeader, ModelConfig, KvSpec
    });

}  // namespace
}  // namespace writescope::fuzz
