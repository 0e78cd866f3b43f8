// Regenerates the binary seeds of the fuzz corpora with the project's own writers
// (SerializeSafetensors, ToKvSpec, protobuf), so the seeds are what our code really produces:
//
//   build-fuzz/fuzz/fuzz_make_seeds tests/fuzz/corpus
//
// The config.json seeds are plain copies (deploy/fuzz.sh --refresh-seeds copies them).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "common/kv_config.h"
#include "common/kv_spec.h"
#include "common/model_config.h"
#include "common/safetensors.h"
#include "tests/fuzz/fuzz_checks.h"
#include "writescope/v1/writescope.pb.h"

namespace writescope {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
}

std::string Pattern(size_t n) {
  std::string bytes(n, '\0');
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>(i * 37 + 11);
  return bytes;
}

int Main(const fs::path& corpus) {
  const fs::path st = corpus / "safetensors_header_fuzzer";
  auto two = SerializeSafetensors(
      {{"model.embed_tokens.weight", SafetensorsDtype::kBF16, {2, 3}, Pattern(12)},
       {"model.norm.weight", SafetensorsDtype::kF32, {4}, Pattern(16)}},
      {{"format", "pt"}});
  auto odd = SerializeSafetensors({{"scalar", SafetensorsDtype::kF16, {}, Pattern(2)},
                                   {"empty", SafetensorsDtype::kU8, {0, 5}, ""},
                                   {"ids", SafetensorsDtype::kI64, {1, 1}, Pattern(8)},
                                   {"fp8", SafetensorsDtype::kF8E4M3, {3}, Pattern(3)},
                                   {"flags", SafetensorsDtype::kBool, {2}, Pattern(2)}});
  auto none = SerializeSafetensors({});
  if (!two.ok() || !odd.ok() || !none.ok()) {
    std::fprintf(stderr, "SerializeSafetensors failed\n");
    return 1;
  }
  Write(st / "valid_two_tensors.safetensors", *two);
  Write(st / "valid_odd_dtypes_and_shapes.safetensors", *odd);
  Write(st / "valid_no_tensors.safetensors", *none);
  Write(st / "truncated_length.safetensors", two->substr(0, 5));
  Write(st / "truncated_header.safetensors", two->substr(0, 8 + (two->size() - 8 - 28) / 2));
  Write(st / "truncated_data.safetensors", two->substr(0, two->size() - 3));

  const fs::path kv = corpus / "kv_spec_fuzzer";
  for (const char* arch : {"deepseek_v2", "qwen3_moe", "mixtral"}) {
    auto model = ModelConfig::ForSyntheticArch(arch);
    if (!model.ok()) return 1;
    KvCacheConfig config;
    config.geometry = model->kv_geometry(64);
    config.window_tokens = 256;
    config.cpu_compute_bytes = uint64_t{256} << 20;
    config.gpu_transfer_bytes = uint64_t{64} << 20;
    config.max_sequences = 4;
    auto resolved = ResolveKvCacheConfig(config);
    if (!resolved.ok()) {
      std::fprintf(stderr, "%s: %s\n", arch, resolved.status().ToString().c_str());
      return 1;
    }
    Write(kv / (std::string("valid_") + arch + ".kvspec"), ToKvSpec(*resolved).SerializeAsString());
  }
  // A spec the coordinator never sends: W not a multiple of the block size.
  internal::KvSpec bad = ToKvSpec(*ResolveKvCacheConfig([] {
    KvCacheConfig c;
    c.geometry.num_layers = 2;
    c.geometry.num_kv_heads = 2;
    c.geometry.head_dim = 8;
    c.geometry.block_tokens = 16;
    c.window_tokens = 32;
    return c;
  }()));
  Write(kv / "valid_small_gqa.kvspec", bad.SerializeAsString());
  bad.set_window_tokens(40);
  Write(kv / "invalid_window.kvspec", bad.SerializeAsString());

  // GenerateRequests around fuzz::FuzzRequestLimits() (vocab 512, context 96, prompt 80).
  // Each seed's verdict is checked here against its name, as fuzz_regression_test would.
  const fs::path gen = corpus / "request_validation_fuzzer";
  bool verdicts_ok = true;
  auto write_request = [&](const std::string& name, const std::string& bytes) {
    Write(gen / name, bytes);
    const fuzz::FuzzResult result = fuzz::CheckGenerateRequest(bytes);
    const bool want_ok = name.rfind("valid_", 0) == 0;
    if (!result.violation.empty() || result.parse.ok() != want_ok) {
      std::fprintf(stderr, "%s: %s %s\n", name.c_str(), result.parse.ToString().c_str(),
                   result.violation.c_str());
      verdicts_ok = false;
    }
  };
  auto prompt = [](uint32_t tokens) {
    v1::GenerateRequest request;
    for (uint32_t i = 0; i < tokens; ++i) request.add_prompt_token_ids((i * 37 + 11) % 512);
    return request;
  };
  v1::GenerateRequest greedy = prompt(4);
  greedy.mutable_sampling()->set_max_tokens(8);
  write_request("valid_greedy.pb", greedy.SerializeAsString());
  v1::GenerateRequest full = prompt(16);
  full.set_request_id("req-seed_1");
  full.set_stream_interval(2);
  v1::SamplingParams* sampling = full.mutable_sampling();
  sampling->set_max_tokens(32);
  sampling->set_temperature(0.8f);
  sampling->set_top_k(50);
  sampling->set_top_p(0.95f);
  sampling->set_seed(42);
  sampling->add_stop_token_ids(2);
  sampling->add_stop_token_ids(511);
  sampling->set_ignore_eos(true);
  sampling->set_logprobs(5);
  sampling->set_prompt_logprobs(true);
  write_request("valid_all_fields.pb", full.SerializeAsString());
  v1::GenerateRequest fills = prompt(80);
  fills.mutable_sampling()->set_max_tokens(16);
  write_request("valid_fills_context.pb", fills.SerializeAsString());
  fills.mutable_sampling()->set_max_tokens(0);
  write_request("valid_rest_of_context.pb", fills.SerializeAsString());
  fills.mutable_sampling()->set_max_tokens(17);
  write_request("invalid_context_overflow.pb", fills.SerializeAsString());
  v1::GenerateRequest bad_request = greedy;
  bad_request.add_prompt_token_ids(512);
  write_request("invalid_token_outside_vocab.pb", bad_request.SerializeAsString());
  bad_request = full;
  bad_request.mutable_sampling()->set_temperature(std::numeric_limits<float>::quiet_NaN());
  write_request("invalid_temperature_nan.pb", bad_request.SerializeAsString());
  bad_request = full;
  bad_request.mutable_sampling()->set_top_p(1.5f);
  write_request("invalid_top_p.pb", bad_request.SerializeAsString());
  bad_request = full;
  bad_request.set_request_id("has space");
  write_request("invalid_request_id.pb", bad_request.SerializeAsString());
  // Only the packed prompt: cutting its last byte leaves the length prefix unsatisfied.
  const std::string packed = prompt(8).SerializeAsString();
  write_request("truncated_prompt.pb", packed.substr(0, packed.size() - 1));
  return verdicts_ok ? 0 : 1;
}

}  // namespace
}  // namespace writescope

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  return writescope::Main(argv[1]);
}
