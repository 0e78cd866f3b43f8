#include "kernels/model/mla.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/bf16.h"

namespace writescope::kernels::model {

absl::Status MlaNaiveAttention(const MlaDims& d, const float* q, int64_t num_queries,
                               int64_t query_position0, const float* latents, int64_t num_keys,
                               const LinearWeight& kv_b, float softmax_scale, float* out,
                               F32WeightCache* cache) {
  if (kv_b.in_features != d.kv_lora_rank ||
      kv_b.out_features != d.num_heads * d.kv_b_rows_per_head()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_b_proj is [", kv_b.out_features, ", ", kv_b.in_features, "], MLA dims need [",
        d.num_heads * d.kv_b_rows_per_head(), ", ", d.kv_lora_rank, "]"));
  }
  if (query_position0 < 0 || num_queries < 0 || num_keys < 0) {
    return absl::InvalidArgumentError(absl::StrCat("MLA: query_position0 ", query_position0,
                                                   ", ", num_queries, " queries, ", num_keys,
                                                   " keys: none may be negative"));
  }
  if (query_position0 + num_queries > num_keys) {
    return absl::InvalidArgumentError(absl::StrCat("MLA: queries up to position ",
                                                   query_position0 + num_queries - 1, " but only ",
                                                   num_keys, " keys"));
  }
  // c_kv of every key, then k_nope | v per head through kv_b.
  const int64_t latent = d.latent_dim();
  std::vector<float> c_kv(num_keys * d.kv_lora_rank);
  for (int64_t j = 0; j < num_keys; ++j) {
    std::copy_n(latents + j * latent, d.kv_lora_rank, c_kv.data() + j * d.kv_lora_rank);
  }
  const int64_t kv_width = d.num_heads * d.kv_b_rows_per_head();
  std::vector<float> kv(num_keys * kv_width);
  WS_RETURN_IF_ERROR(Linear(c_kv.data(), num_keys, kv_b, kv.data(), cache));

  const int64_t qd = d.q_head_dim();
#pragma omp parallel for schedule(dynamic, 1) collapse(2)
  for (int64_t i = 0; i < num_queries; ++i) {
    for (int64_t h = 0; h < d.num_heads; ++h) {
      const float* qh = q + (i * d.num_heads + h) * qd;
      const int64_t visible = query_position0 + i + 1;
      std::vector<double> scores(visible);
      double max = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        const float* k_nope = kv.data() + j * kv_width + h * d.kv_b_rows_per_head();
        const float* k_pe = latents + j * latent + d.kv_lora_rank;
        float dot = 0.0f;
        for (int64_t c = 0; c < d.qk_nope; ++c) dot += qh[c] * k_nope[c];
        for (int64_t c = 0; c < d.qk_rope; ++c) dot += qh[d.qk_nope + c] * k_pe[c];
        scores[j] = double{dot} * softmax_scale;
        max = std::max(max, scores[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < visible; ++j) sum += (scores[j] = std::exp(scores[j] - max));
      std::vector<double> acc(d.v_dim, 0.0);
      for (int64_t j = 0; j < visible; ++j) {
        const float* v = kv.data() + j * kv_width + h * d.kv_b_rows_per_head() + d.qk_nope;
        const double p = scores[j] / sum;
        for (int64_t c = 0; c < d.v_dim; ++c) acc[c] += p * v[c];
      }
      float* oh = out + (i * d.num_heads + h) * d.v_dim;
      for (int64_t c = 0; c < d.v_dim; ++c) oh[c] = static_cast<float>(acc[c]);
    }
  }
  return absl::OkStatus();
}

void MlaAbsorbQuery(const MlaDims& d, const float* q, int64_t tokens, const LinearWeight& kv_b,
                    float* q_absorbed) {
  const int64_t qd = d.q_head_dim(), latent = d.latent_dim();
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < d.num_heads; ++h) {
      const float* qh = q + (t * d.num_heads + h) * qd;
      float* dst = q_absorbed + (t * d.num_heads + h) * latent;
      std::vector<double> acc(d.kv_lora_rank, 0.0);
      for (int64_t r = 0; r < d.qk_nope; ++r) {
        const uint16_t* w_row = kv_b.data + (h * d.kv_b_rows_per_head() + r) * d.kv_lora_rank;
        const double qv = qh[r];
        for (int64_t c = 0; c < d.kv_lora_rank; ++c) acc[c] += qv * Bf16ToFloat(w_row[c]);
      }
      for (int64_t c = 0; c < d.kv_lora_rank; ++c) dst[c] = static_cast<float>(acc[c]);
      std::copy_n(qh + d.qk_nope, d.qk_rope, dst + d.kv_lora_rank);
    }
  }
}

void MlaApplyUv(const MlaDims& d, const float* o_latent, int64_t tokens, const LinearWeight& kv_b,
                float* out) {
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < d.num_heads; ++h) {
      const float* o = o_latent + (t * d.num_heads + h) * d.kv_lora_rank;
      float* dst = out + (t * d.num_heads + h) * d.v_dim;
      for (int64_t r = 0; r < d.v_dim; ++r) {
        const uint16_t* w_row =
            kv_b.data + (h * d.kv_b_rows_per_head() + d.qk_nope + r) * d.kv_lora_rank;
        double acc = 0;
        for (int64_t c = 0; c < d.kv_lora_rank; ++c) acc += double{o[c]} * Bf16ToFloat(w_row[c]);
        dst[r] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace writescope::kernels::model
