// The sampler's cost per row: Sampler::Sample over rows of the real vocabularies, for the
// option mixes a request can ask, on logits of three shapes (flat like synthetic weights'
// lm_head, normal, peaked). One thread, as each of the gpu_worker's OpenMP threads samples
// its rows. Prints a table: us per row and ns per logit.
//
//   sampler_bench [--vocabs=102400,151936,32000] [--rows=200]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/sampler.h"

ABSL_FLAG(std::string, vocabs, "102400,151936,32000",
          "vocabulary sizes (DeepSeek-V2-Lite, Qwen3, Mixtral)");
ABSL_FLAG(int, rows, 200, "rows sampled per case (each with its own draw)");

namespace {

struct Mix {
  const char* name;
  writescope::SamplerOptions options;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<size_t> vocabs;
  for (const auto& part : absl::StrSplit(absl::GetFlag(FLAGS_vocabs), ',')) {
    size_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v == 0) {
      std::fprintf(stderr, "sampler_bench: --vocabs wants positive sizes, got '%s'\n",
                   std::string(part).c_str());
      return 2;
    }
    vocabs.push_back(v);
  }
  const int rows = absl::GetFlag(FLAGS_rows);
  if (rows <= 0) {
    std::fprintf(stderr, "sampler_bench: --rows must be positive\n");
    return 2;
  }
  const Mix mixes[] = {
      {"greedy", {.temperature = 0.0f}},
      {"t0.7", {.temperature = 0.7f}},
      {"t0.7/p0.9", {.temperature = 0.7f, .top_p = 0.9f}},
      {"t0.7/k50", {.temperature = 0.7f, .top_k = 50}},
      {"t1.0/k50/p0.95", {.temperature = 1.0f, .top_k = 50, .top_p = 0.95f}},
      {"t0.7/lp5", {.temperature = 0.7f, .num_top = 5}},
  };
  // Logit spreads: 0.05 (flat: synthetic weights' lm_head), 1 and 5 (peaked).
  const float scales[] = {0.05f, 1.0f, 5.0f};
  std::printf("%8s %-16s %6s %10s %10s\n", "vocab", "options", "spread", "us/row", "ns/logit");
  for (const size_t vocab : vocabs) {
    std::mt19937_64 rng(vocab);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const float scale : scales) {
      std::vector<float> logits(vocab);
      for (float& logit : logits) logit = scale * normal(rng);
      for (const Mix& mix : mixes) {
        writescope::Sampler sampler(mix.options);
        sampler.Sample(logits, 0.5);  // buffers sized
        int64_t checksum = 0;
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < rows; ++i) {
          checksum += sampler.Sample(logits, (i + 0.5) / rows).token_id;
        }
        const double us = std::chrono::duration<double, std::micro>(
                              std::chrono::steady_clock::now() - start).count() / rows;
        std::printf("%8zu %-16s %6.2f %10.1f %10.2f\n", vocab, mix.name, scale, us,
                    1e3 * us / static_cast<double>(vocab));
        if (checksum < 0) return 1;  // keeps the samples
      }
    }
  }
  return 0;
}
