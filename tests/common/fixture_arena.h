// A tiny model fixture (tests/fixtures) with a KV arena of its geometry, for tests that load
// one worker alone (the path probes' tests). The including test defines WS_FIXTURES_DIR
// (target_compile_definitions); the environment variable of that name overrides it (the
// working tree a GPU bundle runs in: deploy/gpu-run.sh exports it).
#ifndef WRITESCOPE_TESTS_COMMON_FIXTURE_ARENA_H_
#define WRITESCOPE_TESTS_COMMON_FIXTURE_ARENA_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/data_plane.h"
#include "common/kv_config.h"
#include "common/kv_spec.h"
#include "common/shm_arena.h"
#include "common/status.h"
#include "common/worker_model.h"
#include "writescope/internal/worker.pb.h"

namespace writescope::testing {

inline std::string FixturesDir() {
  if (const char* dir = std::getenv("WS_FIXTURES_DIR")) return dir;
  return WS_FIXTURES_DIR;
}

struct FixtureArena {
  KvCacheConfig kv;                 // resolved
  std::unique_ptr<ShmArena> arena;  // with its data plane
  internal::LoadRequest load;       // the arena, the KV spec and the model filled in
};

// The fixture `arch` at `block_tokens` tokens per block: `shape` sets the rest of the KV
// config (regions, window, budget) on one with the model's geometry, then it is resolved
// and an arena named after `tag` is created. NOT_FOUND when the fixture is missing (the
// caller skips), the failing step's error otherwise.
inline absl::StatusOr<FixtureArena> MakeFixtureArena(
    const std::string& arch, uint32_t block_tokens, const std::string& tag,
    const std::function<void(KvCacheConfig&)>& shape) {
  ModelSource source;
  source.model_path = absl::StrCat(FixturesDir(), "/", arch);
  if (!std::filesystem::exists(source.model_path + "/config.json")) {
    return absl::NotFoundError(absl::StrCat("no fixture at ", source.model_path));
  }
  WS_ASSIGN_OR_RETURN(const ModelConfig model, LoadModelConfig(source));
  KvCacheConfig kv;
  kv.geometry = model.kv_geometry(block_tokens);
  shape(kv);
  FixtureArena out;
  WS_ASSIGN_OR_RETURN(out.kv, ResolveKvCacheConfig(kv));
  const std::string name = absl::StrCat("/ws-", tag, "-", getpid(), "-", arch);
  WS_ASSIGN_OR_RETURN(out.arena, ShmArena::Create(name, ArenaRegions(out.kv.arena_sizes())));
  WS_RETURN_IF_ERROR(CreateDataPlane(*out.arena).status());
  out.load.mutable_arena()->set_name(name);
  out.load.mutable_arena()->set_bytes(out.arena->size());
  *out.load.mutable_kv() = ToKvSpec(out.kv);
  ToLoadRequest(source, &out.load);
  return out;
}

// A path probe of these sizes over 3 sequences, every layer, 2 runs after the warm-up.
inline internal::PathProbeRequest ProbeRequest(const std::vector<uint64_t>& tokens) {
  internal::PathProbeRequest request;
  for (uint64_t t : tokens) request.add_tokens(t);
  request.set_sequences(3);
  request.set_layers(0);
  request.set_repeats(2);
  return request;
}

}  // namespace writescope::testing

#endif  // WRITESCOPE_TESTS_COMMON_FIXTURE_ARENA_H_
