// Loading time and resident memory of one worker's weights: a Hugging Face model folder
// or synthetic weights of a real shape.
//
//   model_load_bench --synthetic=qwen3_moe --num_layers=48 --side=cpu
//   model_load_bench --model_dir=/models/DeepSeek-V2-Lite --side=gpu --populate
//
// Prints one line: tensors, GiB, seconds, GiB/s, resident memory before and after, and
// the bytes the loader allocated itself (0 for a bf16 checkpoint: views of the mmap).
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/log.h"
#include "common/model_weights.h"

ABSL_FLAG(std::string, model_dir, "", "Hugging Face model folder to load");
ABSL_FLAG(std::string, synthetic, "", "deepseek_v2 | qwen3_moe | mixtral: synthetic weights");
ABSL_FLAG(int64_t, num_layers, 0, "with --synthetic: keep this many layers (0: all)");
ABSL_FLAG(std::string, side, "all", "all | gpu | cpu: which worker's tensors");
ABSL_FLAG(uint64_t, seed, 0, "with --synthetic: the random seed");
ABSL_FLAG(bool, populate, false, "with --model_dir: read every page during the load");

namespace {

// Resident set size of this process in bytes (VmRSS), 0 if unknown.
uint64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "VmRSS: %llu kB", &kib) == 1) return kib * 1024;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  writescope::SetLogProcessName("model_load_bench");
  const std::string side_name = absl::GetFlag(FLAGS_side);
  writescope::SideFilter side = writescope::SideFilter::kAll;
  if (side_name == "gpu") {
    side = writescope::SideFilter::kGpu;
  } else if (side_name == "cpu") {
    side = writescope::SideFilter::kCpu;
  } else if (side_name != "all") {
    std::fprintf(stderr, "--side must be all, gpu or cpu\n");
    return 2;
  }

  const uint64_t rss_before = ResidentBytes();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<writescope::ModelWeights>> weights;
  if (!absl::GetFlag(FLAGS_synthetic).empty()) {
    auto config = writescope::ModelConfig::ForSyntheticArch(absl::GetFlag(FLAGS_synthetic),
                                                            absl::GetFlag(FLAGS_num_layers));
    if (!config.ok()) {
      std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
      return 1;
    }
    WS_LOG(INFO) << config->DebugString();
    writescope::SyntheticOptions options;
    options.side = side;
    options.seed = absl::GetFlag(FLAGS_seed);
    weights = writescope::MakeSyntheticWeights(*config, options);
  } else if (!absl::GetFlag(FLAGS_model_dir).empty()) {
    writescope::LoadOptions options;
    options.side = side;
    options.populate = absl::GetFlag(FLAGS_populate);
    weights = writescope::LoadModelFolder(absl::GetFlag(FLAGS_model_dir), options);
  } else {
    std::fprintf(stderr, "give --model_dir or --synthetic\n");
    return 2;
  }
  if (!weights.ok()) {
    std::fprintf(stderr, "%s\n", weights.status().ToString().c_str());
    return 1;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const uint64_t rss_after = ResidentBytes();
  const double gib = (*weights)->total_bytes() / double(1 << 30);
  std::printf(
      "%s side=%s layers=%lld tensors=%zu weights=%.3f GiB time=%.2f s (%.2f GiB/s) "
      "rss_before=%.3f GiB rss_after=%.3f GiB owned=%.3f GiB\n",
      std::string(writescope::ModelArchName((*weights)->config().arch)).c_str(),
      side_name.c_str(), static_cast<long long>((*weights)->config().num_layers),
      (*weights)->num_tensors(), gib, seconds, seconds > 0 ? gib / seconds : 0.0,
      rss_before / double(1 << 30), rss_after / double(1 << 30),
      (*weights)->owned_bytes() / double(1 << 30));
  return 0;
}
