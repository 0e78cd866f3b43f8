// ws_reference: the single-process forward (kernels/model/host_model.h) of a model folder,
// the reference the trio's output is compared with in tests/e2e/generate_test.py. It runs
// the product's numerics (MLA prefill absorbed, as the workers compute it).
//
//   ws_reference --model=DIR --prompt_ids=1,2,3 [--greedy=N] [--chunk=256]
//
// Prints one JSON object: {"prompt_logprobs": [...] (for prompt tokens 1..n-1),
// "greedy": [...], "greedy_logprobs": [...], "greedy_margins": [...]}.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/model_weights.h"
#include "kernels/model/host_model.h"

ABSL_FLAG(std::string, model, "", "Hugging Face model folder");
ABSL_FLAG(std::string, prompt_ids, "", "Comma-separated prompt token ids");
ABSL_FLAG(int, greedy, 8, "Greedy tokens to generate after the prompt");
ABSL_FLAG(int, chunk, 256, "Prefill chunk tokens (0: one pass)");

namespace {

void PrintList(const char* name, const std::vector<float>& values, size_t from, bool comma) {
  std::printf("\"%s\":[", name);
  for (size_t i = from; i < values.size(); ++i) {
    std::printf("%s%.9g", i > from ? "," : "", values[i]);
  }
  std::printf("]%s", comma ? "," : "");
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "ws_reference: %s\n", message.c_str());
  return EXIT_FAILURE;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<int32_t> prompt;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_prompt_ids), ',', absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) return Fail("bad --prompt_ids");
    prompt.push_back(id);
  }
  if (prompt.empty()) return Fail("--prompt_ids is empty");
  auto weights = writescope::LoadModelFolder(absl::GetFlag(FLAGS_model), {});
  if (!weights.ok()) return Fail(std::string(weights.status().message()));
  // The numerics the workers compute: MLA prefill in the absorbed form, like decode.
  writescope::kernels::model::HostModelOptions options;
  options.mla_prefill = writescope::kernels::model::MlaPrefillMode::kAbsorbed;
  auto model =
      writescope::kernels::model::HostModel::Create((*weights)->config(), **weights, options);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  const int chunk = absl::GetFlag(FLAGS_chunk);
  auto logprobs = (*model)->PromptLogProbs(prompt, chunk);
  if (!logprobs.ok()) return Fail(std::string(logprobs.status().message()));
  auto greedy = (*model)->Greedy(prompt, absl::GetFlag(FLAGS_greedy), chunk);
  if (!greedy.ok()) return Fail(std::string(greedy.status().message()));
  std::printf("{");
  PrintList("prompt_logprobs", *logprobs, 1, true);
  std::printf("\"greedy\":[");
  for (size_t i = 0; i < greedy->tokens.size(); ++i) {
    std::printf("%s%d", i > 0 ? "," : "", greedy->tokens[i]);
  }
  std::printf("],");
  PrintList("greedy_logprobs", greedy->logprobs, 0, true);
  PrintList("greedy_margins", greedy->margins, 0, false);
  std::printf("}\n");
  return EXIT_SUCCESS;
}
