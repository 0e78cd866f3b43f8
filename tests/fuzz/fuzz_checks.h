// The properties the fuzzers check, shared by the libFuzzer targets (tests/fuzz/*_fuzzer.cc,
// clang + sanitizers) and the regression test that replays the corpora and every crash
// found (tests/common/fuzz_regression_test.cc, the normal g++ build).
//
// Each Check* runs one parser on untrusted bytes and returns the parser's status and,
// when an input is accepted (or refused) in a way the parser's contract forbids, a
// description of the broken invariant. A crash, a sanitizer report or a non-empty
// `violation` is a bug.
#ifndef WRITESCOPE_TESTS_FUZZ_FUZZ_CHECKS_H_
#define WRITESCOPE_TESTS_FUZZ_FUZZ_CHECKS_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/kv_config.h"
#include "common/kv_spec.h"
#include "common/model_config.h"
#include "common/model_tensors.h"
#include "common/safetensors.h"
#include "coordinator/request_validation.h"

namespace writescope::fuzz {

struct FuzzResult {
  absl::Status parse;     // what the parser returned
  std::string violation;  // empty unless an invariant is broken
};

// The body of every LLVMFuzzerTestOneInput: runs `check` on the input and aborts (libFuzzer
// saves the input) when an invariant is broken.
inline int RunFuzzCheck(FuzzResult (*check)(absl::string_view), const uint8_t* data,
                        size_t size) {
  const FuzzResult result = check(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!result.violation.empty()) {
    std::fprintf(stderr, "invariant broken: %s\nparser status: %s\n", result.violation.c_str(),
                 result.parse.ToString().c_str());
    std::abort();
  }
  return 0;
}

namespace internal_checks {

inline FuzzResult Violation(absl::Status parse, std::string what) {
  return FuzzResult{std::move(parse), std::move(what)};
}

// a * b, or false when it overflows uint64.
inline bool MulU64(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

}  // namespace internal_checks

// ParseSafetensorsHeader on the bytes of a whole file. Accepted: every tensor's data lie
// inside the data section, match dtype x shape, do not overlap; names sorted, unique and
// found by Find; re-serializing the tensors yields a file that parses to the same
// tensors. Refused: INVALID_ARGUMENT naming the source.
inline FuzzResult CheckSafetensorsHeader(absl::string_view bytes) {
  using internal_checks::Violation;
  constexpr absl::string_view kSource = "fuzz.safetensors";
  absl::StatusOr<SafetensorsHeader> parsed = ParseSafetensorsHeader(bytes, kSource);
  if (!parsed.ok()) {
    if (parsed.status().code() != absl::StatusCode::kInvalidArgument) {
      return Violation(parsed.status(), "refusal is not INVALID_ARGUMENT");
    }
    if (!absl::StrContains(parsed.status().message(), kSource)) {
      return Violation(parsed.status(), "error does not name the file");
    }
    return {parsed.status(), ""};
  }
  const SafetensorsHeader& h = *parsed;
  if (h.file_bytes != bytes.size()) return Violation(parsed.status(), "file_bytes != input size");
  if (h.data_offset != 8 + h.header_bytes || h.data_offset > bytes.size()) {
    return Violation(parsed.status(), "data_offset is not 8 + N inside the file");
  }
  const uint64_t data_bytes = bytes.size() - h.data_offset;
  std::vector<const SafetensorsTensorInfo*> by_offset;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const SafetensorsTensorInfo& t = h.tensors[i];
    if (i > 0 && !(h.tensors[i - 1].name < t.name)) {
      return Violation(parsed.status(), absl::StrCat("tensors not sorted/unique at ", t.name));
    }
    if (h.Find(t.name) != &t) return Violation(parsed.status(), "Find misses " + t.name);
    if (t.data_begin > t.data_end || t.data_end > data_bytes) {
      return Violation(parsed.status(),
                       absl::StrCat(t.name, ": range [", t.data_begin, ", ", t.data_end,
                                    ") outside the data section of ", data_bytes, " bytes"));
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || !internal_checks::MulU64(numel, static_cast<uint64_t>(d), &numel)) {
        return Violation(parsed.status(), t.name + ": bad shape accepted");
      }
    }
    uint64_t expected = 0;
    if (t.numel < 0 || static_cast<uint64_t>(t.numel) != numel ||
        !internal_checks::MulU64(numel, SafetensorsDtypeSize(t.dtype), &expected) ||
        expected != t.bytes()) {
      return Violation(parsed.status(), t.name + ": byte count != numel x dtype size");
    }
    if (t.bytes() > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->data_begin < b->data_begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->data_begin < by_offset[i - 1]->data_end) {
      return Violation(parsed.status(),
                       absl::StrCat(by_offset[i]->name, " overlaps ", by_offset[i - 1]->name));
    }
  }

  // Round trip through the writer: the same tensors, in a fresh layout.
  std::vector<SafetensorsWriteTensor> tensors;
  for (const SafetensorsTensorInfo& t : h.tensors) {
    tensors.push_back(
        SafetensorsWriteTensor{t.name, t.dtype, t.shape,
                               std::string(bytes.substr(h.data_offset + t.data_begin, t.bytes()))});
  }
  absl::StatusOr<std::string> rewritten = SerializeSafetensors(tensors, h.metadata);
  if (!rewritten.ok()) {
    return Violation(rewritten.status(), "an accepted file does not re-serialize");
  }
  absl::StatusOr<SafetensorsHeader> reparsed = ParseSafetensorsHeader(*rewritten, kSource);
  if (!reparsed.ok()) return Violation(reparsed.status(), "the re-serialized file is refused");
  if (reparsed->tensors.size() != h.tensors.size() || reparsed->metadata != h.metadata) {
    return Violation(parsed.status(), "the round trip changed the tensor list or metadata");
  }
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const SafetensorsTensorInfo& a = h.tensors[i];
    const SafetensorsTensorInfo& b = reparsed->tensors[i];
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.bytes() != b.bytes() ||
        bytes.substr(h.data_offset + a.data_begin, a.bytes()) !=
            absl::string_view(*rewritten).substr(reparsed->data_offset + b.data_begin, b.bytes())) {
      return Violation(parsed.status(), "the round trip changed tensor " + a.name);
    }
  }
  return {parsed.status(), ""};
}

// ModelConfig::FromJson. Accepted: Validate() passes, the derived quantities are sane
// (MoE layer count, KV geometry fits the uint32 fields), and — for configs small enough
// to list — every expected tensor has a positive element count that fits int64.
// Refused: INVALID_ARGUMENT naming the source.
inline FuzzResult CheckModelConfig(absl::string_view bytes) {
  using internal_checks::Violation;
  constexpr absl::string_view kSource = "fuzz/config.json";
  absl::StatusOr<ModelConfig> parsed = ModelConfig::FromJson(bytes, kSource);
  if (!parsed.ok()) {
    if (parsed.status().code() != absl::StatusCode::kInvalidArgument) {
      return Violation(parsed.status(), "refusal is not INVALID_ARGUMENT");
    }
    if (!absl::StrContains(parsed.status().message(), kSource)) {
      return Violation(parsed.status(), "error does not name the file");
    }
    return {parsed.status(), ""};
  }
  const ModelConfig& c = *parsed;
  if (absl::Status valid = c.Validate(); !valid.ok()) {
    return Violation(valid, "accepted config fails Validate()");
  }
  const int64_t moe_layers = c.num_moe_layers();
  if (moe_layers < 0 || moe_layers > c.num_layers) {
    return Violation(parsed.status(), absl::StrCat("num_moe_layers ", moe_layers));
  }
  const KvGeometry g = c.kv_geometry();
  if (static_cast<int64_t>(g.num_layers) != c.num_layers) {
    return Violation(parsed.status(), "num_layers does not fit the KV geometry");
  }
  if (g.bytes_per_token() == 0) return Violation(parsed.status(), "zero KV bytes per token");
  (void)c.DebugString();

  // ExpectedTensors lists every routed expert of every layer: only for small configs.
  const uint64_t approx_tensors =
      static_cast<uint64_t>(c.num_layers) * (3 * static_cast<uint64_t>(c.n_routed_experts) + 32);
  if (approx_tensors <= 4000) {
    for (const TensorSpec& spec : ExpectedTensors(c)) {
      int64_t numel = 1;
      for (int64_t d : spec.shape) {
        if (d <= 0 || __builtin_mul_overflow(numel, d, &numel)) {
          return Violation(parsed.status(),
                           absl::StrCat(spec.name, " has shape ", ShapeString(spec.shape)));
        }
      }
      if (spec.numel() != numel) return Violation(parsed.status(), spec.name + ": numel()");
      (void)CandidateLocations(c, spec);
    }
  }
  return {parsed.status(), ""};
}

// The coordinator -> worker KV spec: bytes parsed as internal::KvSpec, then FromKvSpec.
// Accepted: ValidateKvCacheConfig passes, every size the workers allocate from it
// (block, region, D-window, ping-pong) is computed without uint64 wrap-around and the
// GPU part fits the budget, and ToKvSpec/FromKvSpec round-trips. Refused:
// INVALID_ARGUMENT or RESOURCE_EXHAUSTED.
inline FuzzResult CheckKvSpec(absl::string_view bytes) {
  using internal_checks::MulU64;
  using internal_checks::Violation;
  internal::KvSpec spec;
  if (!spec.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return {absl::InvalidArgumentError("not a KvSpec"), ""};
  }
  absl::StatusOr<KvCacheConfig> parsed = FromKvSpec(spec);
  if (!parsed.ok()) {
    if (parsed.status().code() != absl::StatusCode::kInvalidArgument &&
        parsed.status().code() != absl::StatusCode::kResourceExhausted) {
      return Violation(parsed.status(),
                       "refusal is neither INVALID_ARGUMENT nor "
                       "RESOURCE_EXHAUSTED");
    }
    return {parsed.status(), ""};
  }
  const KvCacheConfig& config = *parsed;
  if (absl::Status valid = ValidateKvCacheConfig(config); !valid.ok()) {
    return Violation(valid, "accepted config fails ValidateKvCacheConfig");
  }
  const KvGeometry& g = config.geometry;
  // The sizes again, refusing wrap-around.
  uint64_t values = 0, token_layer = 0, layer_block = 0, block = 0, token = 0, window_seq = 0,
           window = 0, pingpong = 0, pingpong2 = 0;
  const bool exact =
      (g.kind == AttentionKind::kGqa ? MulU64(uint64_t{2} * g.num_kv_heads, g.head_dim, &values)
                                     : (values = uint64_t{g.kv_lora_rank} + g.rope_dim, true)) &&
      MulU64(values, 2, &token_layer) && MulU64(token_layer, g.block_tokens, &layer_block) &&
      MulU64(layer_block, g.num_layers, &block) && MulU64(token_layer, g.num_layers, &token) &&
      MulU64(token, config.window_tokens, &window_seq) &&
      MulU64(window_seq, config.max_sequences, &window) &&
      MulU64(layer_block, config.pingpong_blocks, &pingpong) && MulU64(pingpong, 2, &pingpong2) &&
      window + pingpong2 >= window;
  if (!exact) {
    return Violation(parsed.status(),
                     "accepted config whose sizes overflow uint64: " + config.DebugString());
  }
  if (block != g.block_bytes() || window != config.window_bytes() || block == 0) {
    return Violation(parsed.status(), "size helpers disagree with exact arithmetic");
  }
  if (window + pingpong2 > config.gpu_kv_budget_bytes) {
    return Violation(parsed.status(), "D-window + ping-pong exceed the GPU budget");
  }
  if (config.window_tokens % g.block_tokens != 0 || config.max_sequences == 0 ||
      config.pingpong_blocks == 0) {
    return Violation(parsed.status(), "accepted an impossible window/sequence/ping-pong");
  }
  for (KvRegion region : {KvRegion::kCpuCompute, KvRegion::kGpuTransfer}) {
    if (config.region_used_bytes(region) > config.region_bytes(region)) {
      return Violation(parsed.status(), "region slots exceed the region bytes");
    }
  }
  (void)config.DebugString();
  absl::StatusOr<KvCacheConfig> again = FromKvSpec(ToKvSpec(config));
  if (!again.ok()) return Violation(again.status(), "ToKvSpec/FromKvSpec round trip refused");
  if (ToKvSpec(*again).SerializeAsString() != ToKvSpec(config).SerializeAsString()) {
    return Violation(parsed.status(), "ToKvSpec/FromKvSpec round trip changed the config");
  }
  return {parsed.status(), ""};
}

// The limits request_validation_fuzzer checks against: small, so that short inputs reach
// every bound (the context and prompt bounds take tens of tokens, not thousands).
inline coordinator::RequestLimits FuzzRequestLimits() {
  coordinator::RequestLimits limits;
  limits.vocab_size = 512;
  limits.max_context = 96;
  limits.max_prompt_tokens = 80;
  limits.max_logprobs = 20;
  limits.max_stop_tokens = 8;
  limits.max_request_id_bytes = 24;
  return limits;
}

// A public GenerateRequest (bytes parsed as v1::GenerateRequest) through
// ValidateGenerateRequest and ResolveMaxTokens with FuzzRequestLimits(). The verdict must
// match an independent reading of the contract (request_validation.h), both ways.
// Accepted: ResolveMaxTokens is >= 1, equals max_tokens when that is set, and the prompt
// plus it fits the context. Refused: INVALID_ARGUMENT whose message names a proto field.
// Unparseable bytes are not a GenerateRequest and check nothing.
inline FuzzResult CheckGenerateRequest(absl::string_view bytes) {
  using internal_checks::Violation;
  v1::GenerateRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return {absl::InvalidArgumentError("not a GenerateRequest"), ""};
  }
  const coordinator::RequestLimits limits = FuzzRequestLimits();
  const absl::Status status = coordinator::ValidateGenerateRequest(request, limits);
  const uint32_t resolved = coordinator::ResolveMaxTokens(request, limits);

  // The contract, read independently (wide arithmetic, no early returns).
  const v1::SamplingParams& s = request.sampling();
  const uint64_t prompt = static_cast<uint64_t>(request.prompt_token_ids_size());
  bool valid = prompt > 0 && prompt <= limits.max_prompt_tokens &&
               request.request_id().size() <= limits.max_request_id_bytes &&
               std::isfinite(s.temperature()) && s.temperature() >= 0 && s.top_p() >= 0 &&
               s.top_p() <= 1 && s.top_k() <= limits.vocab_size &&
               s.logprobs() <= limits.max_logprobs &&
               static_cast<uint64_t>(s.stop_token_ids_size()) <= limits.max_stop_tokens &&
               (s.max_tokens() == 0 ? prompt < limits.max_context
                                    : prompt + s.max_tokens() <= limits.max_context);
  for (uint32_t id : request.prompt_token_ids()) valid = valid && id < limits.vocab_size;
  for (uint32_t id : s.stop_token_ids()) valid = valid && id < limits.vocab_size;
  for (char c : request.request_id()) {
    valid = valid && static_cast<unsigned char>(c) >= 0x21 && static_cast<unsigned char>(c) <= 0x7e;
  }

  const uint64_t expected_resolved =
      s.max_tokens() != 0 ? s.max_tokens()
                          : (prompt < limits.max_context ? limits.max_context - prompt : 0);
  if (resolved != expected_resolved) {
    return Violation(
        status, absl::StrCat("ResolveMaxTokens = ", resolved, ", expected ", expected_resolved));
  }
  if (status.ok()) {
    if (!valid) return Violation(status, "accepted a request the contract refuses");
    if (resolved == 0 || prompt + resolved > limits.max_context) {
      return Violation(status, absl::StrCat("accepted, but ", prompt, " prompt + ", resolved,
                                            " generated tokens do not fit the context"));
    }
    return {status, ""};
  }
  if (valid) return Violation(status, "refused a request the contract accepts");
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    return Violation(status, "refusal is not INVALID_ARGUMENT");
  }
  const absl::string_view message = status.message();
  if (!absl::StartsWith(message, "request_id") && !absl::StartsWith(message, "prompt_token_ids") &&
      !absl::StartsWith(message, "sampling.")) {
    return Violation(status, "the error does not start with the field it refuses");
  }
  return {status, ""};
}

}  // namespace writescope::fuzz

#endif  // WRITESCOPE_TESTS_FUZZ_FUZZ_CHECKS_H_
