// Multi-head latent attention (DeepSeek-V2) on the host: the naive form (prefill, and the
// reference) and the pieces of the absorbed form (decode) around kernels' CpuMlaDecode.
//
// Per token the KV cache holds ONE latent row of kv_lora_rank + rope_dim values:
//   [ c_kv = kv_a_layernorm(kv_a_proj(x)[:kv_lora_rank])  |  k_pe = RoPE(kv_a_proj(x)[kv_lora:]) ]
// kv_b_proj [heads * (nope + v), kv_lora_rank] holds, per head h, the rows
//   W_UK_h = rows [h*(nope+v), h*(nope+v)+nope)        k_nope_h = W_UK_h c_kv
//   W_UV_h = rows [h*(nope+v)+nope, (h+1)*(nope+v))    v_h      = W_UV_h c_kv
// so q_nope_h . k_nope_h = (W_UK_h^T q_nope_h) . c_kv: the absorbed query is
// [W_UK_h^T q_nope_h (kv_lora_rank) | q_pe_h (rope_dim)] against the latent row itself, and the
// attention output over latents o_lat_h (kv_lora_rank) gives v-space output W_UV_h o_lat_h.
#ifndef WRITESCOPE_KERNELS_MODEL_MLA_H_
#define WRITESCOPE_KERNELS_MODEL_MLA_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/model/layers.h"

namespace writescope::kernels::model {

struct MlaDims {
  int64_t num_heads = 0;
  int64_t qk_nope = 0;
  int64_t qk_rope = 0;
  int64_t v_dim = 0;
  int64_t kv_lora_rank = 0;

  int64_t q_head_dim() const { return qk_nope + qk_rope; }
  int64_t latent_dim() const { return kv_lora_rank + qk_rope; }
  int64_t kv_b_rows_per_head() const { return qk_nope + v_dim; }
};

// Naive (transformers' own) MLA attention of `num_queries` queries over `num_keys` cached
// latent rows, causal by absolute position: query i (position query_position0 + i) sees key j
// (position j) iff j <= query_position0 + i.
//   q        [num_queries][num_heads][qk_nope + qk_rope]  (q_pe already rotated)
//   latents  [num_keys][kv_lora_rank + qk_rope] fp32       (c_kv normed, k_pe rotated)
//   kv_b     [num_heads * (qk_nope + v_dim), kv_lora_rank]
//   out      [num_queries][num_heads][v_dim]
// k_nope and v of every key are expanded through kv_b (Linear), scores in fp32 with a double
// softmax.
absl::Status MlaNaiveAttention(const MlaDims& dims, const float* q, int64_t num_queries,
                               int64_t query_position0, const float* latents, int64_t num_keys,
                               const LinearWeight& kv_b, float softmax_scale, float* out,
                               F32WeightCache* cache = nullptr);

// q_absorbed[t][h] = [W_UK_h^T q_nope[t][h] | q_pe[t][h]]:
//   q           [tokens][num_heads][qk_nope + qk_rope]
//   q_absorbed  [tokens][num_heads][kv_lora_rank + qk_rope] fp32
void MlaAbsorbQuery(const MlaDims& dims, const float* q, int64_t tokens, const LinearWeight& kv_b,
                    float* q_absorbed);

// out[t][h] = W_UV_h o_latent[t][h]:
//   o_latent [tokens][num_heads][kv_lora_rank], out [tokens][num_heads][v_dim]
void MlaApplyUv(const MlaDims& dims, const float* o_latent, int64_t tokens,
                const LinearWeight& kv_b, float* out);

}  // namespace writescope::kernels::model

#endif  // WRITESCOPE_KERNELS_MODEL_MLA_H_
