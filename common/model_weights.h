// The weights one worker holds: bf16 views by canonical tensor name (common/model_tensors.h),
// the same interface whether they come from a Hugging Face model folder or are synthetic.
//
//   auto weights = LoadModelFolder("/models/Qwen3-30B-A3B", {.side = SideFilter::kCpu});
//   auto weights = MakeSyntheticWeights(*ModelConfig::ForSyntheticArch("qwen3_moe", 4),
//                                       {.side = SideFilter::kGpu, .seed = 1});
//   const Bf16Tensor& w = (*weights)->RoutedExpert(layer, expert, MlpMatrix::kGate);
//
// Memory: a bf16 checkpoint tensor is a view into the file's read-only mmap (never held
// twice); an F16/F32 tensor, or one not 2-byte aligned in its file, is converted once into
// an owned buffer; synthetic weights live in one anonymous mapping per ModelWeights.
#ifndef WRITESCOPE_COMMON_MODEL_WEIGHTS_H_
#define WRITESCOPE_COMMON_MODEL_WEIGHTS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_config.h"
#include "common/model_tensors.h"

namespace writescope {

// A read-only, contiguous, row-major bf16 tensor (raw bf16 bits as uint16_t).
struct Bf16Tensor {
  const uint16_t* data = nullptr;
  std::vector<int64_t> shape;
  WorkerSide side = WorkerSide::kGpu;
  // "file.safetensors:tensor", "file.safetensors:fused[elements 1572864+786432]" (a slice
  // of a fused tensor), "synthetic": for messages.
  std::string origin;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  uint64_t bytes() const { return 2 * static_cast<uint64_t>(numel()); }
  // 2-D views: rows = shape[0], cols = shape[1] (a Linear weight is [out, in]).
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 0 : shape[1]; }
};

// Counters a loader advances while it works; safe to read from another thread (server
// info while loading).
struct LoadProgress {
  std::atomic<uint64_t> tensors_done{0};
  std::atomic<uint64_t> tensors_total{0};
  std::atomic<uint64_t> bytes_done{0};
  std::atomic<uint64_t> bytes_total{0};
  std::atomic<bool> finished{false};
  // Set from another thread (the worker is stopping): the loader stops at its next tensor
  // piece and returns CANCELLED.
  std::atomic<bool> cancelled{false};
};

struct LoadProgressSnapshot {
  uint64_t tensors_done = 0;
  uint64_t tensors_total = 0;
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;
  double fraction() const {
    return bytes_total == 0 ? 1.0 : static_cast<double>(bytes_done) / bytes_total;
  }
};
LoadProgressSnapshot Snapshot(const LoadProgress& progress);

// Called (from a loading thread, serialized) each time another ~10% of the bytes are done
// and once at the end.
using ProgressCallback = std::function<void(const LoadProgressSnapshot&)>;

class ModelWeights {
 public:
  const ModelConfig& config() const { return config_; }
  SideFilter side() const { return side_; }

  // nullptr when the tensor is not held (other side, or not part of the model).
  const Bf16Tensor* Find(absl::string_view name) const;
  // NOT_FOUND naming the tensor and this side.
  absl::StatusOr<const Bf16Tensor*> Get(absl::string_view name) const;
  // Fatal when not held: for code that loaded the right side and knows the model.
  const Bf16Tensor& At(absl::string_view name) const;
  const Bf16Tensor& RoutedExpert(int64_t layer, int64_t expert, MlpMatrix matrix) const;
  const Bf16Tensor& Router(int64_t layer) const;

  // The specs of the tensors held, in ExpectedTensors order.
  const std::vector<TensorSpec>& specs() const { return specs_; }
  size_t num_tensors() const { return specs_.size(); }
  // bf16 bytes of every tensor held (views of a shared tensor, e.g. tied lm_head, once).
  uint64_t total_bytes() const { return total_bytes_; }
  // Bytes this object allocated itself (conversions, synthetic); the rest are file views.
  uint64_t owned_bytes() const { return owned_bytes_; }
  // Checkpoint tensors no expected tensor used (logged as a warning by the loader).
  const std::vector<std::string>& unused_checkpoint_tensors() const { return unused_; }

 private:
  friend class ModelWeightsBuilder;
  ModelWeights() = default;

  ModelConfig config_;
  SideFilter side_ = SideFilter::kAll;
  std::vector<TensorSpec> specs_;
  absl::flat_hash_map<std::string, Bf16Tensor> tensors_;
  std::vector<std::shared_ptr<const void>> storage_;  // keeps mappings and buffers alive
  uint64_t total_bytes_ = 0;
  uint64_t owned_bytes_ = 0;
  std::vector<std::string> unused_;
};

struct LoadOptions {
  SideFilter side = SideFilter::kAll;
  // Read every page of the selected tensors during the load (in parallel), so that the
  // load pays the I/O and progress means something; otherwise pages load on first use.
  bool populate = false;
  // Checkpoint tensors that no expected tensor uses: a warning (false) or an error (true).
  bool strict_unused = false;
  // Optional: counters to advance (else internal ones) and a ~10% callback. Progress is
  // logged every ~10% either way.
  LoadProgress* progress = nullptr;
  ProgressCallback on_progress;
};

// A Hugging Face model folder: config.json + model.safetensors, or shards listed by
// model.safetensors.index.json, or (no index) every *.safetensors in the folder.
// Errors name the file and the tensor: a missing tensor (all of them, up to a limit),
// a wrong shape (expected vs found), an unsupported dtype, a duplicate across shards, a
// shard the index names but that does not exist, a malformed file.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModelFolder(const std::string& folder,
                                                              const LoadOptions& options = {});

struct SyntheticOptions {
  SideFilter side = SideFilter::kAll;
  // Same seed, same values, whatever the side or thread count: each tensor's values depend
  // only on (seed, tensor name, element index).
  uint64_t seed = 0;
  LoadProgress* progress = nullptr;
  ProgressCallback on_progress = nullptr;
  // A POSIX shared-memory name ("/ws-...") to hold the weights in, shared between
  // processes that ask for the same weights: the first to create it generates them, the
  // others map it and wait (CANCELLED if cancelled meanwhile). Where the segment cannot be
  // made or used (no room, its creator died or gave up, another model's segment of that
  // name) the weights go to private memory, with a warning. Empty: private memory. A
  // segment in use is not unlinked here (only a failed one): whoever chose the name does
  // (the coordinator, for the workers' routed experts).
  std::string shared_name = {};
  // The segment is made only when the shared-memory file system has this much free room
  // beyond it (sparse segments there, like the KV arena, take their pages later: filling
  // past the room would end in SIGBUS); else the weights go to private memory.
  uint64_t shared_reserve_bytes = 0;
};

// Random bf16 weights of the model's real shapes (take the layer count from the config:
// ModelConfig::ForSyntheticArch(arch, num_layers)). Linear weights ~ N(0, 1/fan_in),
// embeddings ~ N(0, 1), norms ~ 1 + N(0, 0.05^2). Generated in parallel (OpenMP).
// RESOURCE_EXHAUSTED when the memory cannot be mapped.
absl::StatusOr<std::unique_ptr<ModelWeights>> MakeSyntheticWeights(
    const ModelConfig& config, const SyntheticOptions& options = {});

}  // namespace writescope

// The loader's own conversions, exposed for its tests (kernels/bf16.h has the kernels').
namespace writescope::weights_internal {
// Round to nearest even; NaN stays a (quiet) NaN.
uint16_t FloatToBf16(float value);
float Bf16ToFloat(uint16_t bits);
// IEEE half -> bf16 (exact for every half value: bf16 has the wider exponent; the 10-bit
// mantissa rounds to 7 bits).
uint16_t HalfToBf16(uint16_t half_bits);
}  // namespace writescope::weights_internal

#endif  // WRITESCOPE_COMMON_MODEL_WEIGHTS_H_
