#include "gpu_worker/device_weights.h"

#include "absl/strings/str_format.h"
#include "common/status.h"

namespace writescope::gpu {
namespace {

constexpr uint64_t kAlignment = 256;

uint64_t AlignUp(uint64_t value) { return (value + kAlignment - 1) / kAlignment * kAlignment; }

double GiB(uint64_t bytes) { return bytes / double(uint64_t{1} << 30); }

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(const ModelWeights& weights,
                                                                     Device* device,
                                                                     const VramBudget& budget,
                                                                     uint64_t kv_bytes) {
  uint64_t total = 0;
  for (const TensorSpec& spec : weights.specs()) {
    const Bf16Tensor* tensor = weights.Find(spec.name);
    if (tensor != nullptr) total += AlignUp(tensor->bytes());
  }
  const uint64_t needed = total + kv_bytes + budget.workspace_bytes;
  if (needed > budget.total_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the gpu_worker needs %.2f GiB of VRAM (weights %.2f + KV %.2f + workspace %.2f) but "
        "--vram_budget_gib allows %.2f GiB",
        GiB(needed), GiB(total), GiB(kv_bytes), GiB(budget.workspace_bytes), GiB(budget.total_bytes)));
  }
  if (device->is_cuda()) {
    WS_ASSIGN_OR_RETURN(auto memory, device->MemoryInfo());
    if (total + budget.workspace_bytes > memory.second) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s has %.2f GiB free; the weights and workspace need %.2f GiB", device->name(),
          GiB(memory.second), GiB(total + budget.workspace_bytes)));
    }
  }
  auto result = std::unique_ptr<DeviceWeights>(new DeviceWeights());
  if (!device->is_cuda()) {
    // The host device's memory is host memory: the loaded views are already where the
    // host kernels read them, so copying would only hold every weight twice.
    for (const TensorSpec& spec : weights.specs()) {
      const Bf16Tensor* tensor = weights.Find(spec.name);
      if (tensor != nullptr) result->tensors_[spec.name] = tensor->data;
    }
    result->bytes_ = total;
    return result;
  }
  if (total == 0) return result;
  WS_ASSIGN_OR_RETURN(result->buffer_, DeviceBuffer::Allocate(device, total));
  result->bytes_ = total;
  uint64_t offset = 0;
  for (const TensorSpec& spec : weights.specs()) {
    const Bf16Tensor* tensor = weights.Find(spec.name);
    if (tensor == nullptr) continue;
    auto* destination = static_cast<std::byte*>(result->buffer_.data()) + offset;
    WS_RETURN_IF_ERROR(device->CopyToDevice(destination, tensor->data, tensor->bytes(), Stream::kCopyIn));
    result->tensors_[spec.name] = reinterpret_cast<const uint16_t*>(destination);
    offset += AlignUp(tensor->bytes());
  }
  WS_RETURN_IF_ERROR(device->Synchronize(Stream::kCopyIn));
  return result;
}

const uint16_t* DeviceWeights::Find(absl::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

}  // namespace writescope::gpu
