#include "common/model_tensors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace writescope {
namespace {

absl::string_view ProjName(MlpMatrix matrix) {
  switch (matrix) {
    case MlpMatrix::kGate:
      return "gate_proj";
    case MlpMatrix::kUp:
      return "up_proj";
    case MlpMatrix::kDown:
      return "down_proj";
  }
  return "";
}

// Mixtral's w1 = gate, w3 = up, w2 = down.
absl::string_view MixtralExpertName(MlpMatrix matrix) {
  switch (matrix) {
    case MlpMatrix::kGate:
      return "w1";
    case MlpMatrix::kUp:
      return "w3";
    case MlpMatrix::kDown:
      return "w2";
  }
  return "";
}

class SpecBuilder {
 public:
  explicit SpecBuilder(std::vector<TensorSpec>& out) : out_(out) {}

  void Add(std::string name, std::vector<int64_t> shape, WorkerSide side, TensorInit init,
           int64_t layer) {
    TensorSpec spec;
    spec.name = std::move(name);
    spec.shape = std::move(shape);
    spec.side = side;
    spec.init = init;
    spec.layer = layer;
    out_.push_back(std::move(spec));
  }
  void Linear(int64_t layer, absl::string_view suffix, int64_t out, int64_t in) {
    Add(LayerTensorName(layer, suffix), {out, in}, WorkerSide::kGpu, TensorInit::kLinear, layer);
  }
  void Norm(int64_t layer, absl::string_view suffix, int64_t width) {
    Add(LayerTensorName(layer, suffix), {width}, WorkerSide::kGpu, TensorInit::kNorm, layer);
  }
  // A SwiGLU MLP on the GPU (dense layer or shared experts) at model.layers.L.<prefix>.
  void GpuMlp(int64_t layer, absl::string_view prefix, int64_t hidden, int64_t inter) {
    Linear(layer, absl::StrCat(prefix, "gate_proj.weight"), inter, hidden);
    Linear(layer, absl::StrCat(prefix, "up_proj.weight"), inter, hidden);
    Linear(layer, absl::StrCat(prefix, "down_proj.weight"), hidden, inter);
  }
  void RoutedExperts(const ModelConfig& c, int64_t layer) {
    const int64_t hidden = c.hidden_size;
    const int64_t inter = c.moe_intermediate_size;
    for (int64_t e = 0; e < c.n_routed_experts; ++e) {
      for (MlpMatrix m : {MlpMatrix::kGate, MlpMatrix::kUp, MlpMatrix::kDown}) {
        TensorSpec spec;
        spec.name = RoutedExpertTensorName(c, layer, e, m);
        spec.shape = m == MlpMatrix::kDown ? std::vector<int64_t>{hidden, inter}
                                           : std::vector<int64_t>{inter, hidden};
        spec.side = WorkerSide::kCpu;
        spec.init = TensorInit::kLinear;
        spec.layer = layer;
        spec.expert = e;
        spec.matrix = m;
        out_.push_back(std::move(spec));
      }
    }
  }

 private:
  std::vector<TensorSpec>& out_;
};

void AddAttention(const ModelConfig& c, int64_t layer, SpecBuilder& b) {
  const int64_t hidden = c.hidden_size;
  if (c.is_mla()) {
    const int64_t q_width = c.num_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim);
    if (c.q_lora_rank.has_value()) {
      b.Linear(layer, "self_attn.q_a_proj.weight", *c.q_lora_rank, hidden);
      b.Norm(layer, "self_attn.q_a_layernorm.weight", *c.q_lora_rank);
      b.Linear(layer, "self_attn.q_b_proj.weight", q_width, *c.q_lora_rank);
    } else {
      b.Linear(layer, "self_attn.q_proj.weight", q_width, hidden);
    }
    b.Linear(layer, "self_attn.kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim,
             hidden);
    b.Norm(layer, "self_attn.kv_a_layernorm.weight", c.kv_lora_rank);
    b.Linear(layer, "self_attn.kv_b_proj.weight", c.num_heads * (c.qk_nope_head_dim + c.v_head_dim),
             c.kv_lora_rank);
    b.Linear(layer, "self_attn.o_proj.weight", hidden, c.num_heads * c.v_head_dim);
    return;
  }
  b.Linear(layer, "self_attn.q_proj.weight", c.num_heads * c.head_dim, hidden);
  b.Linear(layer, "self_attn.k_proj.weight", c.num_kv_heads * c.head_dim, hidden);
  b.Linear(layer, "self_attn.v_proj.weight", c.num_kv_heads * c.head_dim, hidden);
  b.Linear(layer, "self_attn.o_proj.weight", hidden, c.num_heads * c.head_dim);
  if (c.arch == ModelArch::kQwen3Moe) {
    b.Norm(layer, "self_attn.q_norm.weight", c.head_dim);
    b.Norm(layer, "self_attn.k_norm.weight", c.head_dim);
  }
}

std::string FusedExpertTensor(int64_t layer, MlpMatrix matrix) {
  return LayerTensorName(
      layer, matrix == MlpMatrix::kDown ? "mlp.experts.down_proj" : "mlp.experts.gate_up_proj");
}

}  // namespace

absl::string_view WorkerSideName(WorkerSide side) {
  return side == WorkerSide::kGpu ? "gpu" : "cpu";
}

absl::string_view SideFilterName(SideFilter filter) {
  switch (filter) {
    case SideFilter::kAll:
      return "all";
    case SideFilter::kGpu:
      return "gpu";
    case SideFilter::kCpu:
      return "cpu";
  }
  return "";
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string LayerTensorName(int64_t layer, absl::string_view suffix) {
  return absl::StrCat("model.layers.", layer, ".", suffix);
}

std::string RouterTensorName(const ModelConfig& config, int64_t layer) {
  return LayerTensorName(layer, config.arch == ModelArch::kMixtral ? "block_sparse_moe.gate.weight"
                                                                   : "mlp.gate.weight");
}

std::string RoutedExpertTensorName(const ModelConfig& config, int64_t layer, int64_t expert,
                                   MlpMatrix matrix) {
  if (config.arch == ModelArch::kMixtral) {
    return LayerTensorName(layer, absl::StrCat("block_sparse_moe.experts.", expert, ".",
                                               MixtralExpertName(matrix), ".weight"));
  }
  return LayerTensorName(layer,
                         absl::StrCat("mlp.experts.", expert, ".", ProjName(matrix), ".weight"));
}

std::string DenseMlpTensorName(int64_t layer, MlpMatrix matrix) {
  return LayerTensorName(layer, absl::StrCat("mlp.", ProjName(matrix), ".weight"));
}

std::string SharedExpertTensorName(int64_t layer, MlpMatrix matrix) {
  return LayerTensorName(layer, absl::StrCat("mlp.shared_experts.", ProjName(matrix), ".weight"));
}

std::vector<TensorSpec> ExpectedTensors(const ModelConfig& c) {
  std::vector<TensorSpec> specs;
  SpecBuilder b(specs);
  const int64_t hidden = c.hidden_size;
  b.Add("model.embed_tokens.weight", {c.vocab_size, hidden}, WorkerSide::kGpu,
        TensorInit::kEmbedding, -1);
  b.Add("model.norm.weight", {hidden}, WorkerSide::kGpu, TensorInit::kNorm, -1);
  b.Add("lm_head.weight", {c.vocab_size, hidden}, WorkerSide::kGpu, TensorInit::kLinear, -1);

  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    b.Norm(layer, "input_layernorm.weight", hidden);
    b.Norm(layer, "post_attention_layernorm.weight", hidden);
    AddAttention(c, layer, b);
    if (!c.IsMoeLayer(layer)) {
      b.GpuMlp(layer, "mlp.", hidden, c.intermediate_size);
      continue;
    }
    b.Add(RouterTensorName(c, layer), {c.n_routed_experts, hidden}, WorkerSide::kGpu,
          TensorInit::kLinear, layer);
    if (c.arch == ModelArch::kDeepseekV2 && c.n_shared_experts > 0) {
      b.GpuMlp(layer, "mlp.shared_experts.", hidden, c.n_shared_experts * c.moe_intermediate_size);
    }
    b.RoutedExperts(c, layer);
  }
  return specs;
}

// The name-mapping table: canonical tensor -> where a transformers-5 runtime-layout
// checkpoint keeps it (see the header comment).
std::vector<TensorLocation> CandidateLocations(const ModelConfig& c, const TensorSpec& spec) {
  std::vector<TensorLocation> locations;
  locations.push_back(TensorLocation{spec.name, spec.shape, 0});

  if (spec.is_routed_expert()) {
    const int64_t experts = c.n_routed_experts;
    const int64_t hidden = c.hidden_size;
    const int64_t inter = c.moe_intermediate_size;
    TensorLocation fused;
    fused.tensor = FusedExpertTensor(spec.layer, spec.matrix);
    if (spec.matrix == MlpMatrix::kDown) {
      fused.stored_shape = {experts, hidden, inter};
      fused.element_offset = spec.expert * hidden * inter;
    } else {
      fused.stored_shape = {experts, 2 * inter, hidden};
      const int64_t part = spec.matrix == MlpMatrix::kGate ? 0 : 1;
      fused.element_offset = (spec.expert * 2 + part) * inter * hidden;
    }
    locations.push_back(std::move(fused));
  } else if (c.arch == ModelArch::kMixtral && spec.layer >= 0 &&
             spec.name == RouterTensorName(c, spec.layer)) {
    locations.push_back(
        TensorLocation{LayerTensorName(spec.layer, "mlp.gate.weight"), spec.shape, 0});
  } else if (c.tie_word_embeddings && spec.name == "lm_head.weight") {
    locations.push_back(TensorLocation{"model.embed_tokens.weight", spec.shape, 0});
  }
  return locations;
}

}  // namespace writescope
