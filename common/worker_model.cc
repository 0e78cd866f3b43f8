#include "common/worker_model.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace writescope {

absl::Status ValidateModelSource(const ModelSource& source) {
  if (source.model_path.empty() == source.synthetic_arch.empty()) {
    return absl::InvalidArgumentError(
        "give exactly one of a model folder (--model) or a synthetic architecture (--synthetic)");
  }
  if (!source.model_path.empty() && source.num_layers != 0) {
    return absl::InvalidArgumentError("--num_layers applies to synthetic weights only");
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> LoadModelConfig(const ModelSource& source) {
  WS_RETURN_IF_ERROR(ValidateModelSource(source));
  if (!source.synthetic_arch.empty()) {
    return ModelConfig::ForSyntheticArch(source.synthetic_arch, source.num_layers);
  }
  return ModelConfig::FromFile(source.model_path + "/config.json");
}

std::string DescribeModelSource(const ModelSource& source) {
  if (!source.model_path.empty()) return source.model_path;
  return absl::StrCat("synthetic:", source.synthetic_arch,
                      source.num_layers > 0 ? absl::StrCat(" (", source.num_layers, " layers)") : "");
}

void ToLoadRequest(const ModelSource& source, internal::LoadRequest* request) {
  request->set_model_path(source.model_path);
  request->set_synthetic_arch(source.synthetic_arch);
  request->set_num_layers(static_cast<uint32_t>(source.num_layers));
  request->set_seed(source.seed);
}

ModelSource FromLoadRequest(const internal::LoadRequest& request) {
  return {.model_path = request.model_path(),
          .synthetic_arch = request.synthetic_arch(),
          .num_layers = request.num_layers(),
          .seed = request.seed()};
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadWorkerWeights(const ModelSource& source,
                                                                SideFilter side,
                                                                LoadProgress* progress,
                                                                const std::string& shared_name,
                                                                uint64_t shared_reserve_bytes) {
  WS_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(source));
  if (!source.synthetic_arch.empty()) {
    return MakeSyntheticWeights(config, {.side = side,
                                         .seed = source.seed,
                                         .progress = progress,
                                         .on_progress = nullptr,
                                         .shared_name = shared_name,
                                         .shared_reserve_bytes = shared_reserve_bytes});
  }
  return LoadModelFolder(source.model_path, {.side = side, .populate = false,
                                             .strict_unused = false, .progress = progress,
                                             .on_progress = nullptr});
}

std::string SyntheticExpertsShmName(const std::string& arena_name) {
  return arena_name + "-synthetic-experts";
}

absl::Status CheckKvMatchesModel(const ModelConfig& model, const KvCacheConfig& kv) {
  const KvGeometry expected = model.kv_geometry(kv.geometry.block_tokens);
  const KvGeometry& got = kv.geometry;
  if (expected.kind != got.kind || expected.num_layers != got.num_layers ||
      expected.num_kv_heads != got.num_kv_heads || expected.head_dim != got.head_dim ||
      expected.kv_lora_rank != got.kv_lora_rank || expected.rope_dim != got.rope_dim) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the KV cache geometry (", got.bytes_per_token(), " B/token) does not match the model ",
        model.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace writescope
