#include "gpu_worker/device.h"

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"

namespace writescope::gpu {

absl::Status Device::CopyPiecesOnDevice(absl::Span<const CopyPiece> pieces, Stream stream) {
  for (const CopyPiece& piece : pieces) {
    WS_RETURN_IF_ERROR(CopyOnDevice(piece.dst, piece.src, piece.bytes, stream));
  }
  return absl::OkStatus();
}

absl::Status Device::SynchronizeAll() {
  for (int i = 0; i < kNumStreams; ++i) WS_RETURN_IF_ERROR(Synchronize(static_cast<Stream>(i)));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Device>> CreateDevice(const std::string& kind) {
  if (kind == "host") return CreateHostDevice();
  if (kind == "cuda") return CreateCudaDevice(0);
  if (kind == "auto") {
    absl::StatusOr<std::unique_ptr<Device>> cuda = CreateCudaDevice(0);
    if (cuda.ok()) return cuda;
    WS_LOG(INFO) << "no CUDA device (" << cuda.status().message() << "); using the host device";
    return CreateHostDevice();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--device must be auto, cuda or host, not '", kind, "'"));
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(Device* device, size_t bytes) {
  DeviceBuffer buffer;
  if (bytes > 0) {
    WS_ASSIGN_OR_RETURN(buffer.data_, device->Allocate(bytes));
  }
  buffer.device_ = device;
  buffer.size_ = bytes;
  return buffer;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) (void)device_->Free(data_);
    device_ = other.device_;
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) {
    absl::Status status = device_->Free(data_);
    if (!status.ok()) WS_LOG(WARNING) << "freeing device buffer: " << status;
  }
}

}  // namespace writescope::gpu
