// A validating reader (memory-mapped) and a small writer of the safetensors format:
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header][data section]
//   header = {"<tensor>": {"dtype": "BF16", "shape": [d0, ...], "data_offsets": [b, e]},
//             ..., "__metadata__": {"<key>": "<string>", ...}}
//
// data_offsets are byte offsets into the data section (after the header), e - b must be
// numel(shape) * sizeof(dtype). The parser trusts nothing: every malformed input (short
// file, header length beyond the file, bad JSON, unknown dtype, negative or overflowing
// shapes, offsets out of range, overlapping or not matching dtype x shape) yields an
// INVALID_ARGUMENT naming the file and the tensor, never a crash. It is written to be
// fuzzed: ParseSafetensorsHeader works on any byte buffer.
#ifndef WRITESCOPE_COMMON_SAFETENSORS_H_
#define WRITESCOPE_COMMON_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace writescope {

// Every dtype the format defines. The model loader accepts BF16, F16 and F32; a file
// holding other dtypes still opens (the error comes only if a model tensor has one).
enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kF8E4M3,
  kF8E5M2,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kI64,
  kU64,
  kF64,
};
absl::string_view SafetensorsDtypeName(SafetensorsDtype dtype);  // "BF16", ...
size_t SafetensorsDtypeSize(SafetensorsDtype dtype);             // bytes per element

struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kBF16;
  std::vector<int64_t> shape;
  // Byte range in the data section: [data_begin, data_end).
  uint64_t data_begin = 0;
  uint64_t data_end = 0;
  int64_t numel = 0;
  uint64_t bytes() const { return data_end - data_begin; }
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;  // N
  uint64_t data_offset = 0;   // 8 + N: file offset of the data section
  uint64_t file_bytes = 0;
  // Sorted by name.
  std::vector<SafetensorsTensorInfo> tensors;
  std::map<std::string, std::string> metadata;

  const SafetensorsTensorInfo* Find(absl::string_view name) const;
};

// Headers larger than this are refused (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;

// Parses and validates the header of the complete file `file_bytes`; `source` names the
// file in errors.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view file_bytes,
                                                         absl::string_view source);

// A read-only memory mapping of a validated .safetensors file. Tensor data are views
// into the mapping: nothing is copied, pages load on first touch.
class SafetensorsFile {
 public:
  // NOT_FOUND for a missing file, INVALID_ARGUMENT for a malformed one.
  static absl::StatusOr<std::shared_ptr<const SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<SafetensorsTensorInfo>& tensors() const { return header_.tensors; }
  const SafetensorsTensorInfo* Find(absl::string_view name) const { return header_.Find(name); }
  // First byte of the tensor's data (inside the mapping). Valid while this file lives.
  const uint8_t* data(const SafetensorsTensorInfo& tensor) const {
    return base_ + header_.data_offset + tensor.data_begin;
  }
  uint64_t file_bytes() const { return header_.file_bytes; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t mapped_bytes_ = 0;
  SafetensorsHeader header_;
};

// One tensor to write: raw little-endian bytes, numel(shape) * sizeof(dtype) of them.
struct SafetensorsWriteTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kBF16;
  std::vector<int64_t> shape;
  std::string bytes;
};

// The bytes of a safetensors file (header padded with spaces to 8-byte alignment, data
// in the given order). INVALID_ARGUMENT when a tensor's byte count does not match.
absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<SafetensorsWriteTensor>& tensors,
    const std::map<std::string, std::string>& metadata = {});
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<SafetensorsWriteTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_SAFETENSORS_H_
