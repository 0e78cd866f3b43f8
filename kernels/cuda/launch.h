// Internal to kernels/cuda: plain parameter blocks shared by cuda_attention.cc (host
// planning, Status) and the .cu files (kernels). No absl and no CUDA headers, so both
// nvcc and the host compiler read it. Launchers return a cudaError_t as int.
#ifndef WRITESCOPE_KERNELS_CUDA_LAUNCH_H_
#define WRITESCOPE_KERNELS_CUDA_LAUNCH_H_

#include <cstdint>

namespace writescope::kernels::cuda::internal {

struct KvParams {
  const uint16_t* tiles;
  const int32_t* seq_tile_begin;
  const int32_t* seq_last_tile_tokens;
  const uint16_t* window;
  int32_t window_capacity;
  const int32_t* seq_window_slot;
  const int32_t* seq_window_tokens;
  int64_t tile_values;    // bf16 values of one ping-pong tile
  int64_t window_values;  // bf16 values of one window slot
};

struct GqaParams {
  int32_t num_seqs, num_q_heads, num_kv_heads, head_dim, block_tokens;
  float scale_log2;  // softmax_scale * log2(e): scores are kept in base 2 inside
  const uint16_t* q;
  KvParams kv;
  int32_t num_splits, tokens_per_split;
  float* part_o;    // [num_splits][num_seqs * num_q_heads][head_dim]
  float* part_lse;  // [num_splits][num_seqs * num_q_heads], natural log
  float* o;
  float* lse;
};

struct MlaParams {
  int32_t num_seqs, num_heads, kv_lora_rank, rope_dim, block_tokens;
  float scale_log2;
  const uint16_t* q;
  KvParams kv;
  int32_t num_splits, tokens_per_split;
  float* part_o;    // [num_splits][num_seqs * num_heads][kv_lora_rank]
  float* part_lse;
  float* o;
  float* lse;
};

int LaunchGqaDecode(const GqaParams& p, void* stream);
int LaunchMlaDecode(const MlaParams& p, void* stream);
// Merges `num_parts` partials laid out [num_parts][rows][dim] into out.
int LaunchMergeSplits(const float* part_o, const float* part_lse, int32_t num_parts,
                      int64_t rows, int32_t dim, float* o, float* lse, void* stream);
int LaunchMergeTwo(const float* o_a, const float* lse_a, const float* o_b, const float* lse_b,
                   float* o_out, float* lse_out, int64_t rows, int32_t dim, void* stream);

}  // namespace writescope::kernels::cuda::internal

#endif  // WRITESCOPE_KERNELS_CUDA_LAUNCH_H_
