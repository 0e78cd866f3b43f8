// What the workers and the coordinator share about the served model: which model
// (a folder fixed at launch, or synthetic weights of a real architecture), its config,
// and each worker's half of the weights.
#ifndef WRITESCOPE_COMMON_WORKER_MODEL_H_
#define WRITESCOPE_COMMON_WORKER_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/kv_config.h"
#include "common/model_config.h"
#include "common/model_weights.h"
#include "writescope/internal/worker.pb.h"

namespace writescope {

struct ModelSource {
  std::string model_path;      // a Hugging Face folder, or
  std::string synthetic_arch;  // deepseek_v2 | qwen3_moe | mixtral
  int64_t num_layers = 0;      // synthetic only; 0 = the real model's count
  uint64_t seed = 0;           // synthetic only
};

// Exactly one of model_path / synthetic_arch; INVALID_ARGUMENT otherwise.
absl::Status ValidateModelSource(const ModelSource& source);
absl::StatusOr<ModelConfig> LoadModelConfig(const ModelSource& source);
// "synthetic:qwen3_moe (4 layers)" or the folder.
std::string DescribeModelSource(const ModelSource& source);

void ToLoadRequest(const ModelSource& source, internal::LoadRequest* request);
ModelSource FromLoadRequest(const internal::LoadRequest& request);

// The worker's side of the weights; `progress` advances while it loads. Synthetic weights
// go into the shared-memory segment `shared_name` when it is not empty and the file system
// keeps `shared_reserve_bytes` free beside it (SyntheticOptions): the processes that ask
// for the same side with the same name hold one copy.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadWorkerWeights(const ModelSource& source,
                                                                SideFilter side,
                                                                LoadProgress* progress,
                                                                const std::string& shared_name = "",
                                                                uint64_t shared_reserve_bytes = 0);

// The shared-memory name of the synthetic routed experts of the launch whose arena is
// `arena_name`: the cpu_worker runs them, the gpu_worker streams them (one copy in host
// memory). The coordinator unlinks it once both workers have loaded, and at shutdown.
std::string SyntheticExpertsShmName(const std::string& arena_name);

// FAILED_PRECONDITION unless the KV cache was sized for this model's geometry.
absl::Status CheckKvMatchesModel(const ModelConfig& model, const KvCacheConfig& kv);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_WORKER_MODEL_H_
