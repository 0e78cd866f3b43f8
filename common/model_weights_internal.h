// Shared by the folder loader and the synthetic generator: assembling a ModelWeights and
// reporting progress. Not for use outside common/model_*.cc.
#ifndef WRITESCOPE_COMMON_MODEL_WEIGHTS_INTERNAL_H_
#define WRITESCOPE_COMMON_MODEL_WEIGHTS_INTERNAL_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/model_weights.h"

namespace writescope {

class ModelWeightsBuilder {
 public:
  ModelWeightsBuilder(const ModelConfig& config, SideFilter side);

  void KeepAlive(std::shared_ptr<const void> storage);
  void AddOwnedBytes(uint64_t bytes) { weights_->owned_bytes_ += bytes; }
  void Add(const TensorSpec& spec, Bf16Tensor tensor);
  void SetUnused(std::vector<std::string> names) { weights_->unused_ = std::move(names); }
  std::unique_ptr<ModelWeights> Finish();

 private:
  std::unique_ptr<ModelWeights> weights_;
};

// Advances LoadProgress counters from any thread; logs (and calls back) each time
// another ~10% of the bytes are done.
class ProgressReporter {
 public:
  ProgressReporter(LoadProgress* external, ProgressCallback callback, std::string what);
  void Start(uint64_t tensors_total, uint64_t bytes_total);
  void Advance(uint64_t tensors, uint64_t bytes);
  void Finish();
  // Whether LoadProgress::cancelled is set.
  bool cancelled() const { return progress_->cancelled.load(std::memory_order_relaxed); }
  // CANCELLED naming the load when cancelled(); OK otherwise.
  absl::Status CheckCancelled() const;

 private:
  void Report(const LoadProgressSnapshot& snapshot, bool final);

  LoadProgress own_;
  LoadProgress* progress_;
  ProgressCallback callback_;
  std::string what_;
  std::mutex mu_;
  int last_decile_ = 0;
  absl::Time start_;
};

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_MODEL_WEIGHTS_INTERNAL_H_
