#include "common/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace writescope {
namespace {

using Json = nlohmann::json;

struct DtypeEntry {
  SafetensorsDtype dtype;
  absl::string_view name;
  size_t size;
};

constexpr DtypeEntry kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1},      {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},          {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1}, {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},        {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},      {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},        {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kI64, "I64", 8},        {SafetensorsDtype::kU64, "U64", 8},
    {SafetensorsDtype::kF64, "F64", 8},
};

bool DtypeFromName(absl::string_view name, SafetensorsDtype* dtype) {
  for (const DtypeEntry& entry : kDtypes) {
    if (entry.name == name) {
      *dtype = entry.dtype;
      return true;
    }
  }
  return false;
}

// A short, printable rendering of an untrusted JSON value for error messages.
std::string Brief(const Json& value) {
  std::string text = value.dump(-1, ' ', true, Json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// A printable tensor name (names come from untrusted input).
std::string Quoted(absl::string_view name) {
  std::string text = Json(std::string(name)).dump(-1, ' ', true, Json::error_handler_t::replace);
  if (text.size() > 200) text = text.substr(0, 197) + "...";
  return text;
}

// Thrown from the parse callback to stop on inputs we refuse (caught below).
struct HeaderRejected {
  std::string message;
};

constexpr int kMaxJsonDepth = 8;

absl::Status TensorError(absl::string_view source, absl::string_view name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": tensor ", Quoted(name), ": ", what));
}

absl::StatusOr<uint64_t> NonNegative(const Json& value, absl::string_view source,
                                     absl::string_view name, absl::string_view field) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  return TensorError(source, name,
                     absl::StrCat(field, " must hold non-negative integers, got ", Brief(value)));
}

absl::StatusOr<SafetensorsTensorInfo> ParseTensorEntry(const std::string& name, const Json& entry,
                                                       uint64_t data_bytes,
                                                       absl::string_view source) {
  SafetensorsTensorInfo info;
  info.name = name;
  if (!entry.is_object()) {
    return TensorError(source, name, absl::StrCat("entry must be an object, got ", Brief(entry)));
  }
  auto dtype_it = entry.find("dtype");
  auto shape_it = entry.find("shape");
  auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end()) return TensorError(source, name, "missing 'dtype'");
  if (shape_it == entry.end()) return TensorError(source, name, "missing 'shape'");
  if (offsets_it == entry.end()) return TensorError(source, name, "missing 'data_offsets'");

  if (!dtype_it->is_string()) {
    return TensorError(source, name,
                       absl::StrCat("dtype must be a string, got ", Brief(*dtype_it)));
  }
  const std::string dtype_name = dtype_it->get<std::string>();
  if (!DtypeFromName(dtype_name, &info.dtype)) {
    return TensorError(source, name, absl::StrCat("unknown dtype ", Quoted(dtype_name)));
  }

  if (!shape_it->is_array()) {
    return TensorError(source, name, absl::StrCat("shape must be a list, got ", Brief(*shape_it)));
  }
  if (shape_it->size() > 16) {
    return TensorError(source, name,
                       absl::StrCat("shape has ", shape_it->size(), " dimensions (at most 16)"));
  }
  uint64_t numel = 1;
  bool overflow = false;
  for (const Json& dim : *shape_it) {
    WS_ASSIGN_OR_RETURN(uint64_t d, NonNegative(dim, source, name, "shape"));
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
    info.shape.push_back(static_cast<int64_t>(d));
    if (__builtin_mul_overflow(numel, d, &numel)) overflow = true;
  }
  uint64_t expected_bytes = 0;
  if (overflow ||
      __builtin_mul_overflow(numel, SafetensorsDtypeSize(info.dtype), &expected_bytes) ||
      numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return TensorError(source, name, absl::StrCat("shape ", Brief(*shape_it), " overflows"));
  }
  info.numel = static_cast<int64_t>(numel);

  if (!offsets_it->is_array() || offsets_it->size() != 2) {
    return TensorError(source, name,
                       absl::StrCat("data_offsets must be [begin, end], got ", Brief(*offsets_it)));
  }
  WS_ASSIGN_OR_RETURN(info.data_begin, NonNegative((*offsets_it)[0], source, name, "data_offsets"));
  WS_ASSIGN_OR_RETURN(info.data_end, NonNegative((*offsets_it)[1], source, name, "data_offsets"));
  if (info.data_begin > info.data_end) {
    return TensorError(source, name,
                       absl::StrCat("data_offsets [", info.data_begin, ", ", info.data_end,
                                    "] end before they begin"));
  }
  if (info.data_end > data_bytes) {
    return TensorError(
        source, name,
        absl::StrCat("data_offsets [", info.data_begin, ", ", info.data_end,
                     "] run past the data section (", data_bytes, " bytes): truncated file?"));
  }
  if (info.data_end - info.data_begin != expected_bytes) {
    return TensorError(
        source, name,
        absl::StrCat("data_offsets [", info.data_begin, ", ", info.data_end, "] hold ",
                     info.data_end - info.data_begin, " bytes but dtype ", dtype_name, " x shape ",
                     Brief(*shape_it), " needs ", expected_bytes));
  }
  return info;
}

}  // namespace

absl::string_view SafetensorsDtypeName(SafetensorsDtype dtype) {
  for (const DtypeEntry& entry : kDtypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "?";
}

size_t SafetensorsDtypeSize(SafetensorsDtype dtype) {
  for (const DtypeEntry& entry : kDtypes) {
    if (entry.dtype == dtype) return entry.size;
  }
  return 0;
}

const SafetensorsTensorInfo* SafetensorsHeader::Find(absl::string_view name) const {
  auto it = std::lower_bound(
      tensors.begin(), tensors.end(), name,
      [](const SafetensorsTensorInfo& t, absl::string_view n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view file_bytes,
                                                         absl::string_view source) {
  SafetensorsHeader header;
  header.file_bytes = file_bytes.size();
  if (file_bytes.size() < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a safetensors file: ", file_bytes.size(),
                     " bytes, shorter than the 8-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file_bytes[i]);
  if (n > file_bytes.size() - 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": header length ", n, " runs past the end of the file (",
                     file_bytes.size(), " bytes): truncated or not a safetensors file"));
  }
  if (n > kMaxSafetensorsHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": header length ", n,
                                                   " exceeds the limit of ",
                                                   kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (n < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": header length ", n, " is too small for a JSON object"));
  }
  header.header_bytes = n;
  header.data_offset = 8 + n;
  const uint64_t data_bytes = file_bytes.size() - header.data_offset;
  const absl::string_view text = file_bytes.substr(8, n);

  // Refuse duplicate tensor names (a JSON parser would silently keep the last) and
  // absurd nesting.
  std::set<std::string> top_keys;
  Json::parser_callback_t callback = [&](int depth, Json::parse_event_t event,
                                         Json& parsed) -> bool {
    if (depth > kMaxJsonDepth) throw HeaderRejected{"JSON nested too deeply"};
    if (event == Json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      if (!top_keys.insert(parsed.get<std::string>()).second) {
        throw HeaderRejected{absl::StrCat("duplicate entry ", Quoted(parsed.get<std::string>()))};
      }
    }
    return true;
  };
  Json json;
  try {
    json = Json::parse(text.begin(), text.end(), callback);
  } catch (const HeaderRejected& rejected) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": header: ", rejected.message));
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": header is not valid JSON: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": header unreadable: ", e.what()));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": header must be a JSON object, got ", Brief(json)));
  }

  for (auto it = json.begin(); it != json.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat(source, ": __metadata__ must be an object of strings, got ", Brief(*it)));
      }
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(source, ": __metadata__ entry ",
                                                         Quoted(m.key()), " must be a string, got ",
                                                         Brief(*m)));
        }
        header.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    WS_ASSIGN_OR_RETURN(SafetensorsTensorInfo info,
                        ParseTensorEntry(it.key(), *it, data_bytes, source));
    header.tensors.push_back(std::move(info));
  }

  // Overlaps: sort by data range; empty tensors own no bytes.
  std::vector<const SafetensorsTensorInfo*> by_offset;
  for (const SafetensorsTensorInfo& t : header.tensors) {
    if (t.bytes() > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SafetensorsTensorInfo* a, const SafetensorsTensorInfo* b) {
              return a->data_begin < b->data_begin;
            });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const SafetensorsTensorInfo& prev = *by_offset[i - 1];
    const SafetensorsTensorInfo& cur = *by_offset[i];
    if (cur.data_begin < prev.data_end) {
      return TensorError(source, cur.name,
                         absl::StrCat("data_offsets [", cur.data_begin, ", ", cur.data_end,
                                      "] overlap those of tensor ", Quoted(prev.name), " [",
                                      prev.data_begin, ", ", prev.data_end, "]"));
    }
  }
  // nlohmann's object is a std::map: the tensors are already sorted by name.
  return header;
}

absl::StatusOr<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoToStatus(error, absl::StrCat("fstat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a safetensors file: ", size, " bytes, shorter than the 8-byte header length"));
  }
  void* base = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_error = errno;
  close(fd);
  if (base == MAP_FAILED) return ErrnoToStatus(map_error, absl::StrCat("mmap ", path));

  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->base_ = static_cast<const uint8_t*>(base);
  file->mapped_bytes_ = size;
  WS_ASSIGN_OR_RETURN(
      file->header_,
      ParseSafetensorsHeader(absl::string_view(reinterpret_cast<const char*>(file->base_), size),
                             path));
  return std::shared_ptr<const SafetensorsFile>(std::move(file));
}

SafetensorsFile::~SafetensorsFile() {
  if (base_ != nullptr) munmap(const_cast<uint8_t*>(base_), mapped_bytes_);
}

absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<SafetensorsWriteTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsWriteTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat(t.name, ": negative dimension"));
      numel *= static_cast<uint64_t>(d);
    }
    if (numel * SafetensorsDtypeSize(t.dtype) != t.bytes.size()) {
      return absl::InvalidArgumentError(absl::StrCat(t.name, ": ", t.bytes.size(), " bytes for ",
                                                     numel, " elements of ",
                                                     SafetensorsDtypeName(t.dtype)));
    }
    if (header.contains(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor ", t.name));
    }
    header[t.name] = {{"dtype", std::string(SafetensorsDtypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + text.size() + offset);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += text;
  for (const SafetensorsWriteTensor& t : tensors) out += t.bytes;
  return out;
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<SafetensorsWriteTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  WS_ASSIGN_OR_RETURN(std::string bytes, SerializeSafetensors(tensors, metadata));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot create ", path));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace writescope
