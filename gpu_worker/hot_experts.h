// Which routed experts stay resident in VRAM (issue 5; docs/notes/hot_experts.md), and how a
// MoE layer's (token, k) pairs split between them and the cpu_worker. Pure logic: the
// device side is DeviceExperts' resident set.
//
// The rule: count the selections per (layer, expert) over the first `warmup_tokens` tokens
// the gpu_worker routes (any step, prefill included); then take the most selected pairs
// (ties by layer, then expert), as many as the VRAM left over holds (capped by
// `max_bytes` when set). The set is fixed after that.
//
//   HotExperts hot(config, {.enabled = true});
//   hot.Count(layer, ids, tokens, top_k);          // every MoE layer of a step
//   if (hot.EndStep(tokens)) experts->SetResident(hot.Choose(capacity));
//   HotExperts::Split(is_resident, ids, w, tokens, top_k, &hot_ids, &hot_w, &cold_ids, &cold_w);
//
// Counting and choosing are not thread-safe (the gpu_worker's step thread); the progress
// getters are (the worker's Stats).
#ifndef WRITESCOPE_GPU_WORKER_HOT_EXPERTS_H_
#define WRITESCOPE_GPU_WORKER_HOT_EXPERTS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/model_config.h"
#include "gpu_worker/device_experts.h"

namespace writescope::gpu {

struct HotExpertsOptions {
  bool enabled = false;
  // Tokens routed before the set is chosen (the count includes the step that crosses it).
  int64_t warmup_tokens = 4096;
  // At most this many bytes of resident experts (0: all the room the budget leaves).
  uint64_t max_bytes = 0;
};

class HotExperts {
 public:
  HotExperts(const ModelConfig& config, const HotExpertsOptions& options);

  bool enabled() const { return options_.enabled; }
  // Still counting (enabled and not chosen yet).
  bool counting() const { return options_.enabled && !chosen_.load(); }

  // Adds a MoE layer's routing (ids [tokens, top_k]; -1 is not counted) while counting.
  void Count(int64_t layer, const int32_t* ids, int64_t tokens, int64_t top_k);
  // A step routed `tokens` tokens; true when the warm-up is complete and the set is due.
  bool EndStep(int64_t tokens);

  // The most selected pairs, at most min(capacity, max_bytes / expert size), in (layer,
  // expert) order; marks the set chosen (state "uploading" until set_resident or
  // set_failed).
  std::vector<ExpertRef> Choose(int64_t capacity);
  void set_resident(int64_t experts, uint64_t bytes) {
    resident_experts_.store(experts);
    resident_bytes_.store(bytes);
    phase_.store(kResident);
  }
  void set_failed() { phase_.store(kFailed); }
  // "off", "warming up", "uploading", "resident" or "failed" (thread-safe).
  const char* state() const;

  // Progress (thread-safe).
  int64_t tokens_seen() const { return tokens_seen_.load(); }
  int64_t warmup_tokens() const { return options_.warmup_tokens; }
  bool chosen() const { return chosen_.load(); }
  int64_t resident_experts() const { return resident_experts_.load(); }
  uint64_t resident_bytes() const { return resident_bytes_.load(); }
  uint64_t expert_bytes() const { return expert_bytes_; }
  int64_t total_experts() const { return total_experts_; }

  // Splits a layer's routing: a pair of a resident expert goes to (hot_ids, hot_weights),
  // the others to (cold_ids, cold_weights); the other side gets id -1 and weight 0 in its
  // place. Returns the number of hot pairs.
  static int64_t Split(const std::function<bool(int32_t)>& is_resident, const int32_t* ids,
                       const float* weights, int64_t tokens, int64_t top_k,
                       std::vector<int32_t>* hot_ids, std::vector<float>* hot_weights,
                       std::vector<int32_t>* cold_ids, std::vector<float>* cold_weights);
  // The distinct experts among `count` ids (a layer's routing, or one side of a Split): ids
  // outside [0, num_experts), the -1 of the other side among them, are not counted.
  static int64_t Distinct(const int32_t* ids, int64_t count, int64_t num_experts);

 private:
  const ModelConfig& config_;
  HotExpertsOptions options_;
  uint64_t expert_bytes_ = 0;
  int64_t total_experts_ = 0;  // routed experts over all MoE layers
  std::vector<int64_t> counts_;  // [layer * E + expert]
  std::atomic<int64_t> tokens_seen_{0};
  std::atomic<bool> chosen_{false};
  std::atomic<int64_t> resident_experts_{0};
  std::atomic<uint64_t> resident_bytes_{0};
  enum Phase { kCounting, kUploading, kResident, kFailed };
  std::atomic<int> phase_{kCounting};
};

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_HOT_EXPERTS_H_
