// The tensors each architecture has, named exactly as the Hugging Face checkpoints name
// them, with their shapes, and which worker holds each (weights go where they run):
//
//   GPU worker: embeddings, attention projections, every norm, routers, shared experts,
//               dense MLP layers, lm_head
//   CPU worker: routed experts (hot ones may later move to the GPU: placement's job)
//
// Shapes are PyTorch's: a Linear weight is [out_features, in_features], row-major, so
// y = x W^T. Per layer L (E = expert, I = expert intermediate, H = hidden):
//
//   all         model.embed_tokens.weight [vocab, H]; model.norm.weight [H];
//               lm_head.weight [vocab, H] (absent when tied: the embedding is used);
//               model.layers.L.{input_layernorm,post_attention_layernorm}.weight [H]
//   deepseek_v2 self_attn.q_proj.weight [heads*(nope+rope), H]   (q_lora_rank null; else
//                 q_a_proj [q_lora, H], q_a_layernorm [q_lora],
//                 q_b_proj [heads*(nope+rope), q_lora])
//               self_attn.kv_a_proj_with_mqa.weight [kv_lora+rope, H]
//               self_attn.kv_a_layernorm.weight [kv_lora]
//               self_attn.kv_b_proj.weight [heads*(nope+v), kv_lora]
//               self_attn.o_proj.weight [H, heads*v]
//               dense (L < first_k_dense_replace): mlp.{gate,up}_proj [inter, H],
//                 mlp.down_proj [H, inter]
//               MoE: mlp.gate.weight [E, H];
//                 mlp.shared_experts.{gate,up}_proj [shared*I, H], down_proj [H, shared*I];
//                 mlp.experts.E.{gate,up}_proj [I, H], down_proj [H, I]
//   qwen3_moe   self_attn.{q,k,v,o}_proj.weight, self_attn.{q,k}_norm.weight [head_dim]
//               MoE: mlp.gate.weight [E, H]; mlp.experts.E.{gate,up,down}_proj.weight
//               dense (mlp_only_layers / decoder_sparse_step): mlp.{gate,up,down}_proj.weight
//   mixtral     self_attn.{q,k,v,o}_proj.weight; block_sparse_moe.gate.weight [E, H];
//               block_sparse_moe.experts.E.w1 (gate) / w3 (up) [I, H], w2 (down) [H, I]
//
// Checkpoint layouts: the names above are canonical (what transformers 4.x writes and what
// save_pretrained of transformers 5 writes by default, since it reverts its conversions).
// transformers 5 holds experts FUSED in memory and writes them so when asked to keep its
// runtime layout (save_pretrained(save_original_format=False)):
//
//   model.layers.L.mlp.experts.gate_up_proj [E, 2*I, H]   (gate rows [0, I), up rows [I, 2I))
//   model.layers.L.mlp.experts.down_proj    [E, H, I]
//   mixtral also renames block_sparse_moe.gate -> mlp.gate
//
// Every per-expert matrix is a contiguous slab of those, so CandidateLocations() maps a
// canonical tensor to zero-copy views of either layout.
#ifndef WRITESCOPE_COMMON_MODEL_TENSORS_H_
#define WRITESCOPE_COMMON_MODEL_TENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/model_config.h"

namespace writescope {

enum class WorkerSide { kGpu, kCpu };
absl::string_view WorkerSideName(WorkerSide side);  // "gpu" / "cpu"

// Which tensors a loader materializes.
enum class SideFilter { kAll, kGpu, kCpu };
inline bool SideSelected(SideFilter filter, WorkerSide side) {
  return filter == SideFilter::kAll || (filter == SideFilter::kGpu) == (side == WorkerSide::kGpu);
}
absl::string_view SideFilterName(SideFilter filter);  // "all" / "gpu" / "cpu"

// The three matrices of a SwiGLU MLP: down(silu(gate x) * up x).
enum class MlpMatrix { kGate, kUp, kDown };

// How synthetic weights initialize a tensor.
enum class TensorInit {
  kLinear,     // normal / sqrt(fan_in), fan_in = the last dimension
  kEmbedding,  // normal, std 1
  kNorm,       // RMSNorm weight: 1 + small noise
};

struct TensorSpec {
  std::string name;            // canonical checkpoint name
  std::vector<int64_t> shape;  // row-major
  WorkerSide side = WorkerSide::kGpu;
  TensorInit init = TensorInit::kLinear;
  int64_t layer = -1;                   // -1 for model-level tensors
  int64_t expert = -1;                  // routed experts only
  MlpMatrix matrix = MlpMatrix::kGate;  // routed experts only

  int64_t numel() const;
  uint64_t bf16_bytes() const { return 2 * static_cast<uint64_t>(numel()); }
  bool is_routed_expert() const { return expert >= 0; }
};

// Every tensor of the model, in a stable order (model-level, then layer by layer; within
// a layer attention, norms, router, shared/dense MLP, routed experts by expert).
std::vector<TensorSpec> ExpectedTensors(const ModelConfig& config);

// Names, so callers need not know each architecture's spelling.
std::string LayerTensorName(int64_t layer, absl::string_view suffix);  // model.layers.L.<suffix>
std::string RouterTensorName(const ModelConfig& config, int64_t layer);
std::string RoutedExpertTensorName(const ModelConfig& config, int64_t layer, int64_t expert,
                                   MlpMatrix matrix);
// Dense MLP of a non-MoE layer, and DeepSeek's shared experts.
std::string DenseMlpTensorName(int64_t layer, MlpMatrix matrix);
std::string SharedExpertTensorName(int64_t layer, MlpMatrix matrix);

// One place a checkpoint may hold a canonical tensor: the file tensor `tensor` of
// exactly `stored_shape`, whose elements [element_offset, element_offset + numel(spec))
// are the canonical tensor.
struct TensorLocation {
  std::string tensor;
  std::vector<int64_t> stored_shape;
  int64_t element_offset = 0;
};

// Where to look for `spec`, in order of preference: the canonical name first, then the
// transformers-5 fused/renamed layouts (the name-mapping table in model_tensors.cc).
// For tied embeddings lm_head.weight also resolves to model.embed_tokens.weight.
std::vector<TensorLocation> CandidateLocations(const ModelConfig& config, const TensorSpec& spec);

// "[2048, 128]".
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_MODEL_TENSORS_H_
