// A deterministic KV pattern for checking the KV paths end to end: every bf16 value of
// every (sequence, token, layer) has a known value, so a block can be verified wherever
// it landed, by whichever process reads it.
#ifndef WRITESCOPE_COMMON_KV_PATTERN_H_
#define WRITESCOPE_COMMON_KV_PATTERN_H_

#include <cstdint>
#include <string>

#include "common/kv_layout.h"

namespace writescope {

// Value `index` (in [0, values_per_token_layer)) of token `token` of sequence `seq` in
// `layer`. GQA index: K head h dim d = h*head_dim + d, V = kv_heads*head_dim + that;
// MLA index = position in the latent row.
uint16_t KvPatternValue(uint64_t seq, uint64_t token, uint32_t layer, uint64_t index);

// Fills one layer-block (common/kv_layout.h) holding tokens [first_token,
// first_token + num_tokens) of `seq`, num_tokens <= block_tokens; rows past num_tokens
// are left alone.
void FillKvPatternBlock(const KvGeometry& geometry, uint64_t seq, uint64_t first_token,
                        uint32_t num_tokens, uint32_t layer, uint16_t* block);

// Counts values of a layer-block that differ from the pattern; describes the first one
// in `first_mismatch` (if not null and still empty).
uint64_t CountKvPatternMismatches(const KvGeometry& geometry, uint64_t seq, uint64_t first_token,
                                  uint32_t num_tokens, uint32_t layer, const uint16_t* block,
                                  std::string* first_mismatch);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_KV_PATTERN_H_
