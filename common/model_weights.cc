#include "common/model_weights.h"

#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/model_weights_internal.h"

namespace writescope {

namespace weights_internal {

uint16_t FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bf16ToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

uint16_t HalfToBf16(uint16_t half_bits) {
  const uint32_t sign = static_cast<uint32_t>(half_bits & 0x8000u) << 16;
  const uint32_t exponent = (half_bits >> 10) & 0x1fu;
  uint32_t mantissa = half_bits & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {
      // Subnormal half: normalize (bf16 represents it as a normal number).
      int shift = 0;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ffu;
      bits = sign | ((127 - 15 + 1 - shift) << 23) | (mantissa << 13);
    }
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return FloatToBf16(value);
}

}  // namespace weights_internal

LoadProgressSnapshot Snapshot(const LoadProgress& progress) {
  LoadProgressSnapshot s;
  s.tensors_done = progress.tensors_done.load(std::memory_order_relaxed);
  s.tensors_total = progress.tensors_total.load(std::memory_order_relaxed);
  s.bytes_done = progress.bytes_done.load(std::memory_order_relaxed);
  s.bytes_total = progress.bytes_total.load(std::memory_order_relaxed);
  return s;
}

const Bf16Tensor* ModelWeights::Find(absl::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<const Bf16Tensor*> ModelWeights::Get(absl::string_view name) const {
  const Bf16Tensor* tensor = Find(name);
  if (tensor != nullptr) return tensor;
  return absl::NotFoundError(absl::StrCat("tensor ", name, " is not held by these weights (",
                                          ModelArchName(config_.arch), ", side ",
                                          SideFilterName(side_), ")"));
}

const Bf16Tensor& ModelWeights::At(absl::string_view name) const {
  const Bf16Tensor* tensor = Find(name);
  WS_CHECK(tensor != nullptr) << "tensor " << name << " is not held (side " << SideFilterName(side_)
                              << ")";
  return *tensor;
}

const Bf16Tensor& ModelWeights::RoutedExpert(int64_t layer, int64_t expert,
                                             MlpMatrix matrix) const {
  return At(RoutedExpertTensorName(config_, layer, expert, matrix));
}

const Bf16Tensor& ModelWeights::Router(int64_t layer) const {
  return At(RouterTensorName(config_, layer));
}

ModelWeightsBuilder::ModelWeightsBuilder(const ModelConfig& config, SideFilter side)
    : weights_(new ModelWeights()) {
  weights_->config_ = config;
  weights_->side_ = side;
}

void ModelWeightsBuilder::KeepAlive(std::shared_ptr<const void> storage) {
  weights_->storage_.push_back(std::move(storage));
}

void ModelWeightsBuilder::Add(const TensorSpec& spec, Bf16Tensor tensor) {
  weights_->specs_.push_back(spec);
  weights_->tensors_.emplace(spec.name, std::move(tensor));
}

std::unique_ptr<ModelWeights> ModelWeightsBuilder::Finish() {
  absl::flat_hash_set<const uint16_t*> seen;
  uint64_t total = 0;
  for (const auto& [name, tensor] : weights_->tensors_) {
    if (seen.insert(tensor.data).second) total += tensor.bytes();
  }
  weights_->total_bytes_ = total;
  return std::move(weights_);
}

ProgressReporter::ProgressReporter(LoadProgress* external, ProgressCallback callback,
                                   std::string what)
    : progress_(external != nullptr ? external : &own_),
      callback_(std::move(callback)),
      what_(std::move(what)) {}

void ProgressReporter::Start(uint64_t tensors_total, uint64_t bytes_total) {
  progress_->tensors_done.store(0);
  progress_->bytes_done.store(0);
  progress_->tensors_total.store(tensors_total);
  progress_->bytes_total.store(bytes_total);
  progress_->finished.store(false);
  start_ = absl::Now();
  WS_LOG(INFO) << what_ << ": " << tensors_total << " tensors, "
               << absl::StrFormat("%.2f GiB", bytes_total / double(1 << 30));
}

void ProgressReporter::Advance(uint64_t tensors, uint64_t bytes) {
  progress_->tensors_done.fetch_add(tensors, std::memory_order_relaxed);
  const uint64_t done = progress_->bytes_done.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  const uint64_t total = progress_->bytes_total.load(std::memory_order_relaxed);
  const int decile = total == 0 ? 10 : static_cast<int>(done * 10 / total);
  if (decile <= last_decile_ || decile >= 10) return;  // the final report comes from Finish
  std::lock_guard<std::mutex> lock(mu_);
  if (decile <= last_decile_) return;
  last_decile_ = decile;
  Report(Snapshot(*progress_), false);
}

void ProgressReporter::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  last_decile_ = 10;
  progress_->finished.store(true);
  Report(Snapshot(*progress_), true);
}

absl::Status ProgressReporter::CheckCancelled() const {
  if (!cancelled()) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat(what_, ": cancelled (the worker is stopping)"));
}

void ProgressReporter::Report(const LoadProgressSnapshot& s, bool final) {
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  WS_LOG(INFO) << what_ << (final ? ": done " : ": ")
               << absl::StrFormat("%3.0f%%", 100.0 * s.fraction()) << " (" << s.tensors_done << "/"
               << s.tensors_total << " tensors, "
               << absl::StrFormat("%.2f/%.2f GiB, %.1f s", s.bytes_done / double(1 << 30),
                                  s.bytes_total / double(1 << 30), seconds)
               << ")";
  if (callback_) callback_(s);
}

}  // namespace writescope
