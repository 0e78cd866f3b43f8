#include "common/kv_pattern.h"

#include "absl/strings/str_cat.h"

namespace writescope {
namespace {

// splitmix64 finaliser: every input bit affects every output bit.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Visits every value of the first num_tokens rows of a layer-block: fn(offset, token, index).
template <typename Fn>
void ForEachValue(const KvGeometry& g, uint32_t num_tokens, Fn fn) {
  if (g.kind == AttentionKind::kMla) {
    const uint64_t row = uint64_t{g.kv_lora_rank} + g.rope_dim;
    for (uint32_t t = 0; t < num_tokens; ++t) {
      for (uint64_t c = 0; c < row; ++c) fn(g.latent_offset(t) + c, t, c);
    }
    return;
  }
  for (uint32_t h = 0; h < g.num_kv_heads; ++h) {
    for (uint32_t t = 0; t < num_tokens; ++t) {
      for (uint32_t d = 0; d < g.head_dim; ++d) {
        const uint64_t k_index = uint64_t{h} * g.head_dim + d;
        fn(g.k_offset(h, t) + d, t, k_index);
        fn(g.v_offset(h, t) + d, t, uint64_t{g.num_kv_heads} * g.head_dim + k_index);
      }
    }
  }
}

}  // namespace

uint16_t KvPatternValue(uint64_t seq, uint64_t token, uint32_t layer, uint64_t index) {
  const uint64_t h = Mix(Mix(Mix(seq) ^ token) ^ (uint64_t{layer} << 40 | index));
  return static_cast<uint16_t>(h);
}

void FillKvPatternBlock(const KvGeometry& geometry, uint64_t seq, uint64_t first_token,
                        uint32_t num_tokens, uint32_t layer, uint16_t* block) {
  ForEachValue(geometry, num_tokens, [&](uint64_t offset, uint32_t t, uint64_t index) {
    block[offset] = KvPatternValue(seq, first_token + t, layer, index);
  });
}

uint64_t CountKvPatternMismatches(const KvGeometry& geometry, uint64_t seq, uint64_t first_token,
                                  uint32_t num_tokens, uint32_t layer, const uint16_t* block,
                                  std::string* first_mismatch) {
  uint64_t mismatches = 0;
  ForEachValue(geometry, num_tokens, [&](uint64_t offset, uint32_t t, uint64_t index) {
    const uint16_t expected = KvPatternValue(seq, first_token + t, layer, index);
    if (block[offset] != expected) {
      if (mismatches == 0 && first_mismatch != nullptr && first_mismatch->empty()) {
        *first_mismatch = absl::StrCat("seq ", seq, " token ", first_token + t, " layer ", layer,
                                       " value ", index, ": found ", block[offset], ", expected ",
                                       expected);
      }
      ++mismatches;
    }
  });
  return mismatches;
}

}  // namespace writescope
