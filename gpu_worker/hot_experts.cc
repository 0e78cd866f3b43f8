#include "gpu_worker/hot_experts.h"

#include <algorithm>
#include <numeric>

namespace writescope::gpu {

HotExperts::HotExperts(const ModelConfig& config, const HotExpertsOptions& options)
    : config_(config), options_(options) {
  expert_bytes_ = config.routed_expert_bytes();
  total_experts_ = config.num_moe_layers() * config.n_routed_experts;
  if (options_.enabled) counts_.assign(config.num_layers * config.n_routed_experts, 0);
}

void HotExperts::Count(int64_t layer, const int32_t* ids, int64_t tokens, int64_t top_k) {
  if (!counting() || layer < 0 || layer >= config_.num_layers) return;
  const int64_t experts = config_.n_routed_experts;
  int64_t* row = counts_.data() + layer * experts;
  for (int64_t i = 0; i < tokens * top_k; ++i) {
    if (ids[i] >= 0 && ids[i] < experts) ++row[ids[i]];
  }
}

bool HotExperts::EndStep(int64_t tokens) {
  if (!counting()) return false;
  return tokens_seen_.fetch_add(tokens) + tokens >= options_.warmup_tokens;
}

const char* HotExperts::state() const {
  if (!options_.enabled) return "off";
  switch (phase_.load()) {
    case kCounting:
      return "warming up";
    case kUploading:
      return "uploading";
    case kResident:
      return "resident";
    default:
      return "failed";
  }
}

std::vector<ExpertRef> HotExperts::Choose(int64_t capacity) {
  phase_.store(kUploading);
  chosen_.store(true);
  int64_t take = std::max<int64_t>(capacity, 0);
  if (options_.max_bytes > 0) {
    take = std::min<int64_t>(take, static_cast<int64_t>(options_.max_bytes / expert_bytes_));
  }
  const int64_t experts = config_.n_routed_experts;
  std::vector<int64_t> order;
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    if (!config_.IsMoeLayer(layer)) continue;
    for (int64_t e = 0; e < experts; ++e) order.push_back(layer * experts + e);
  }
  take = std::min<int64_t>(take, static_cast<int64_t>(order.size()));
  // Most selected first; ties in (layer, expert) order.
  std::stable_sort(order.begin(), order.end(),
                   [this](int64_t a, int64_t b) { return counts_[a] > counts_[b]; });
  order.resize(take);
  std::sort(order.begin(), order.end());
  std::vector<ExpertRef> set;
  set.reserve(order.size());
  for (int64_t i : order) {
    set.push_back({.layer = i / experts, .expert = static_cast<int32_t>(i % experts)});
  }
  return set;
}

int64_t HotExperts::Split(const std::function<bool(int32_t)>& is_resident, const int32_t* ids,
                          const float* weights, int64_t tokens, int64_t top_k,
                          std::vector<int32_t>* hot_ids, std::vector<float>* hot_weights,
                          std::vector<int32_t>* cold_ids, std::vector<float>* cold_weights) {
  const int64_t pairs = tokens * top_k;
  hot_ids->assign(pairs, -1);
  cold_ids->assign(pairs, -1);
  hot_weights->assign(pairs, 0.0f);
  cold_weights->assign(pairs, 0.0f);
  int64_t hot = 0;
  for (int64_t i = 0; i < pairs; ++i) {
    if (ids[i] >= 0 && is_resident(ids[i])) {
      (*hot_ids)[i] = ids[i];
      (*hot_weights)[i] = weights[i];
      ++hot;
    } else {
      (*cold_ids)[i] = ids[i];
      (*cold_weights)[i] = weights[i];
    }
  }
  return hot;
}

int64_t HotExperts::Distinct(const int32_t* ids, int64_t count, int64_t num_experts) {
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(num_experts, 0)), false);
  int64_t distinct = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] >= 0 && ids[i] < num_experts && !seen[ids[i]]) {
      seen[ids[i]] = true;
      ++distinct;
    }
  }
  return distinct;
}

}  // namespace writescope::gpu
