// LoadModelFolder: a Hugging Face model folder -> ModelWeights of one worker side.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/model_weights.h"
#include "common/model_weights_internal.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace writescope {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr size_t kMaxListedProblems = 20;

// Where a tensor of the checkpoint is: file + header entry.
struct FileTensor {
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensorInfo* info = nullptr;
};

// A canonical tensor resolved to (part of) a checkpoint tensor.
struct Resolved {
  FileTensor source;
  int64_t element_offset = 0;
  bool fused = false;
};

absl::StatusOr<std::string> ReadSmallFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path.string()));
  return text.str();
}

// The shard file names, from the index when there is one, else every *.safetensors.
absl::StatusOr<std::vector<std::string>> ShardNames(const fs::path& folder,
                                                    std::map<std::string, std::string>* index) {
  const fs::path index_path = folder / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    WS_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(index_path));
    Json json;
    try {
      json = Json::parse(text);
    } catch (const Json::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path.string(), ": malformed JSON: ", e.what()));
    }
    if (!json.is_object() || !json.contains("weight_map") || !json["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path.string(), ": missing object 'weight_map'"));
    }
    std::vector<std::string> names;
    for (auto it = json["weight_map"].begin(); it != json["weight_map"].end(); ++it) {
      if (!it->is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": weight_map entry '",
                                                       it.key(), "' must be a file name"));
      }
      const std::string file = it->get<std::string>();
      // Shards sit in the folder itself; refuse paths that would leave it.
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
        return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": weight_map entry '",
                                                       it.key(), "' names an invalid shard '", file,
                                                       "'"));
      }
      (*index)[it.key()] = file;
      names.push_back(file);
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    if (names.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": empty weight_map"));
    }
    return names;
  }
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    if (entry.path().extension() == ".safetensors") names.push_back(entry.path().filename());
  }
  if (ec)
    return absl::NotFoundError(absl::StrCat("cannot list ", folder.string(), ": ", ec.message()));
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    return absl::NotFoundError(
        absl::StrCat("model folder ", folder.string(), " has no *.safetensors file"));
  }
  return names;
}

std::string ListProblems(const std::vector<std::string>& problems) {
  std::vector<std::string> shown(problems.begin(),
                                 problems.begin() + std::min(problems.size(), kMaxListedProblems));
  std::string text = absl::StrJoin(shown, "; ");
  if (problems.size() > shown.size()) {
    absl::StrAppend(&text, "; ... and ", problems.size() - shown.size(), " more");
  }
  return text;
}

bool SupportedDtype(SafetensorsDtype dtype) {
  return dtype == SafetensorsDtype::kBF16 || dtype == SafetensorsDtype::kF16 ||
         dtype == SafetensorsDtype::kF32;
}

// Converts (or copies, when misaligned) a checkpoint tensor to bf16 into `out`.
void ConvertToBf16(const SafetensorsFile& file, const SafetensorsTensorInfo& info, uint16_t* out) {
  const uint8_t* src = file.data(info);
  const int64_t n = info.numel;
  switch (info.dtype) {
    case SafetensorsDtype::kBF16:
      std::memcpy(out, src, static_cast<size_t>(n) * 2);
      break;
    case SafetensorsDtype::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t half;
        std::memcpy(&half, src + 2 * i, 2);
        out[i] = weights_internal::HalfToBf16(half);
      }
      break;
    case SafetensorsDtype::kF32:
      for (int64_t i = 0; i < n; ++i) {
        float value;
        std::memcpy(&value, src + 4 * i, 4);
        out[i] = weights_internal::FloatToBf16(value);
      }
      break;
    default:
      WS_CHECK(false) << "unsupported dtype reached conversion";
  }
}

// Reads one byte per page so the mapping is resident.
uint64_t TouchPages(const uint8_t* data, uint64_t bytes) {
  uint64_t sum = 0;
  for (uint64_t offset = 0; offset < bytes; offset += 4096) sum += data[offset];
  if (bytes > 0) sum += data[bytes - 1];
  return sum;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModelFolder(const std::string& folder_name,
                                                              const LoadOptions& options) {
  const fs::path folder(folder_name);
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    return absl::NotFoundError(absl::StrCat("model folder ", folder_name, " does not exist"));
  }
  const fs::path config_path = folder / "config.json";
  if (!fs::exists(config_path, ec)) {
    return absl::NotFoundError(absl::StrCat("model folder ", folder_name, " has no config.json"));
  }
  WS_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromFile(config_path.string()));
  WS_LOG(INFO) << "model: " << config.DebugString();

  // Open every shard and index its tensors.
  std::map<std::string, std::string> index;
  WS_ASSIGN_OR_RETURN(std::vector<std::string> shard_names, ShardNames(folder, &index));
  std::vector<std::shared_ptr<const SafetensorsFile>> files;
  absl::flat_hash_map<std::string, FileTensor> by_name;
  for (const std::string& shard : shard_names) {
    const fs::path path = folder / shard;
    if (!fs::exists(path, ec)) {
      return absl::NotFoundError(
          absl::StrCat("model folder ", folder_name, ": shard ", shard,
                       " named by model.safetensors.index.json does not exist"));
    }
    WS_ASSIGN_OR_RETURN(std::shared_ptr<const SafetensorsFile> file,
                        SafetensorsFile::Open(path.string()));
    for (const SafetensorsTensorInfo& info : file->tensors()) {
      auto [it, inserted] = by_name.try_emplace(info.name, FileTensor{file.get(), &info});
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat("model folder ", folder_name, ": tensor ", info.name, " is in both ",
                         it->second.file->path(), " and ", file->path()));
      }
    }
    files.push_back(std::move(file));
  }
  for (const auto& [tensor, shard] : index) {
    auto it = by_name.find(tensor);
    if (it == by_name.end() || fs::path(it->second.file->path()).filename() != shard) {
      return absl::InvalidArgumentError(
          absl::StrCat((folder / "model.safetensors.index.json").string(), ": tensor ", tensor,
                       " is listed in ", shard, " but that file does not hold it"));
    }
  }

  // Resolve every expected tensor (both sides: a broken checkpoint fails on every worker
  // the same way), checking names, shapes and dtypes from the headers only.
  const std::vector<TensorSpec> specs = ExpectedTensors(config);
  std::vector<Resolved> resolved(specs.size());
  std::vector<std::string> missing;
  std::vector<std::string> problems;
  absl::flat_hash_map<const SafetensorsTensorInfo*, int> uses;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    bool found = false;
    for (const TensorLocation& location : CandidateLocations(config, spec)) {
      auto it = by_name.find(location.tensor);
      if (it == by_name.end()) continue;
      found = true;
      const FileTensor& ft = it->second;
      const bool fused = location.tensor != spec.name;
      if (ft.info->shape != location.stored_shape) {
        problems.push_back(absl::StrCat("tensor ", location.tensor, " in ", ft.file->path(),
                                        " has shape ", ShapeString(ft.info->shape), ", expected ",
                                        ShapeString(location.stored_shape),
                                        fused ? absl::StrCat(" (holding ", spec.name, ")") : ""));
        break;
      }
      if (!SupportedDtype(ft.info->dtype)) {
        problems.push_back(absl::StrCat("tensor ", location.tensor, " in ", ft.file->path(),
                                        " has dtype ", SafetensorsDtypeName(ft.info->dtype),
                                        " (supported: BF16, F16, F32)"));
        break;
      }
      resolved[i] = Resolved{ft, location.element_offset, fused};
      ++uses[ft.info];
      break;
    }
    if (!found) missing.push_back(spec.name);
  }
  if (!missing.empty()) {
    problems.insert(
        problems.begin(),
        absl::StrCat(missing.size(), " expected tensor(s) missing: ", ListProblems(missing)));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model folder ", folder_name, " (",
                                                   ModelArchName(config.arch),
                                                   "): ", ListProblems(problems)));
  }

  std::vector<std::string> unused;
  for (const auto& file : files) {
    for (const SafetensorsTensorInfo& info : file->tensors()) {
      if (!uses.contains(&info)) unused.push_back(absl::StrCat(info.name, " (", file->path(), ")"));
    }
  }
  std::sort(unused.begin(), unused.end());
  if (!unused.empty()) {
    const std::string text = absl::StrCat(
        "model folder ", folder_name, ": ", unused.size(), " checkpoint tensor(s) not part of the ",
        ModelArchName(config.arch), " model: ", ListProblems(unused));
    if (options.strict_unused) return absl::InvalidArgumentError(text);
    WS_LOG(WARNING) << text;
  }

  // Materialize the selected side: one work item per checkpoint tensor used.
  struct WorkItem {
    FileTensor source;
    bool convert = false;
    uint64_t spec_count = 0;
    uint64_t spec_bytes = 0;
    std::shared_ptr<uint16_t[]> converted;
  };
  std::vector<WorkItem> work;
  absl::flat_hash_map<const SafetensorsTensorInfo*, size_t> work_index;
  uint64_t selected_count = 0;
  uint64_t selected_bytes = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!SideSelected(options.side, specs[i].side)) continue;
    const FileTensor& ft = resolved[i].source;
    auto [it, inserted] = work_index.try_emplace(ft.info, work.size());
    if (inserted) {
      WorkItem item;
      item.source = ft;
      const uintptr_t address = reinterpret_cast<uintptr_t>(ft.file->data(*ft.info));
      item.convert = ft.info->dtype != SafetensorsDtype::kBF16 || address % 2 != 0;
      work.push_back(std::move(item));
    }
    work[it->second].spec_count += 1;
    work[it->second].spec_bytes += specs[i].bf16_bytes();
    selected_count += 1;
    selected_bytes += specs[i].bf16_bytes();
  }

  ProgressReporter reporter(
      options.progress, options.on_progress,
      absl::StrCat("loading ", folder_name, " (", SideFilterName(options.side), " side)"));
  reporter.Start(selected_count, selected_bytes);
  uint64_t owned_bytes = 0;
  for (WorkItem& item : work) {
    if (item.convert) {
      item.converted.reset(new uint16_t[std::max<int64_t>(item.source.info->numel, 1)]);
      owned_bytes += 2 * static_cast<uint64_t>(item.source.info->numel);
    }
  }
  uint64_t sink = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : sink)
  for (size_t w = 0; w < work.size(); ++w) {
    if (reporter.cancelled()) continue;  // a loop of OpenMP cannot break: skip the rest
    WorkItem& item = work[w];
    if (item.convert) {
      ConvertToBf16(*item.source.file, *item.source.info, item.converted.get());
    } else if (options.populate) {
      sink += TouchPages(item.source.file->data(*item.source.info), item.source.info->bytes());
    }
    reporter.Advance(item.spec_count, item.spec_bytes);
  }
  (void)sink;
  WS_RETURN_IF_ERROR(reporter.CheckCancelled());
  reporter.Finish();

  ModelWeightsBuilder builder(config, options.side);
  for (const auto& file : files) builder.KeepAlive(file);
  for (const WorkItem& item : work) {
    if (item.converted) builder.KeepAlive(item.converted);
  }
  builder.AddOwnedBytes(owned_bytes);
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    if (!SideSelected(options.side, spec.side)) continue;
    const Resolved& r = resolved[i];
    const WorkItem& item = work[work_index.at(r.source.info)];
    const uint16_t* base =
        item.converted ? item.converted.get()
                       : reinterpret_cast<const uint16_t*>(r.source.file->data(*r.source.info));
    Bf16Tensor tensor;
    tensor.data = base + r.element_offset;
    tensor.shape = spec.shape;
    tensor.side = spec.side;
    tensor.origin =
        absl::StrCat(fs::path(r.source.file->path()).filename().string(), ":", r.source.info->name);
    if (r.fused)
      absl::StrAppend(&tensor.origin, "[elements ", r.element_offset, "+", spec.numel(), "]");
    if (item.convert) {
      absl::StrAppend(&tensor.origin, " (", SafetensorsDtypeName(r.source.info->dtype), "->BF16)");
    }
    builder.Add(spec, std::move(tensor));
  }
  builder.SetUnused(std::move(unused));
  return builder.Finish();
}

}  // namespace writescope
