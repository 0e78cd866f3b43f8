// The shared-memory arena: one POSIX shared-memory object that the three processes
// map. It holds named regions (the data-plane channels, the CPU-compute KV region,
// the GPU-transfer KV region), each aligned for DMA and huge pages.
//
// The coordinator creates the arena (mode 0600, a fresh name per launch) and unlinks
// it on shutdown; the workers open it by name. Layout: a 4 KiB header with a table of
// regions, then the regions at 2 MiB-aligned offsets.
#ifndef WRITESCOPE_COMMON_SHM_ARENA_H_
#define WRITESCOPE_COMMON_SHM_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace writescope {

inline constexpr size_t kArenaRegionAlignment = size_t{2} << 20;  // 2 MiB
inline constexpr size_t kArenaMaxRegions = 16;
inline constexpr size_t kArenaRegionNameBytes = 32;

struct ArenaRegionSpec {
  std::string name;  // at most kArenaRegionNameBytes - 1 characters
  uint64_t bytes = 0;
};

struct ArenaRegionInfo {
  std::string name;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

class ShmArena {
 public:
  // Creates a new arena; fails with ALREADY_EXISTS if the name is taken. `name` is a
  // POSIX shm name: a leading '/', no other '/', at most 200 characters.
  static absl::StatusOr<std::unique_ptr<ShmArena>> Create(
      absl::string_view name, absl::Span<const ArenaRegionSpec> regions);
  // Maps an existing arena and validates its header.
  static absl::StatusOr<std::unique_ptr<ShmArena>> Open(absl::string_view name);

  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;
  // Unmaps; an arena this process created is also unlinked.
  ~ShmArena();

  // The bytes of a named region, or NOT_FOUND.
  absl::StatusOr<absl::Span<std::byte>> Region(absl::string_view name) const;
  const std::vector<ArenaRegionInfo>& regions() const { return regions_; }

  // Removes the name from /dev/shm; existing mappings stay valid.
  absl::Status Unlink();

  const std::string& name() const { return name_; }
  std::byte* base() const { return base_; }
  size_t size() const { return size_; }
  bool owner() const { return owner_; }

 private:
  ShmArena(std::string name, std::byte* base, size_t size, bool owner)
      : name_(std::move(name)), base_(base), size_(size), owner_(owner) {}
  absl::Status ReadHeader();

  std::string name_;
  std::byte* base_;
  size_t size_;
  bool owner_;
  bool unlinked_ = false;
  std::vector<ArenaRegionInfo> regions_;
};

// How PrefaultPages maps the pages: readable only, or writable too (a later write then
// takes no fault either).
enum class PrefaultAccess { kRead, kWrite };

// Maps every page of `bytes` (a range of a mapping of this process) now, so that a later
// first access takes no page fault: MADV_POPULATE_READ/WRITE where the kernel has them
// (Linux 5.14), else (EINVAL: an older kernel) a touch per page. A mapping of a
// shared-memory object gets its own page-table entries per process: pages another process
// wrote (the gpu_worker's KV writes) still fault on this process's first read of them.
// Pages of the object not written yet are allocated (tmpfs), so prefault only what will be
// used; RESOURCE_EXHAUSTED when they cannot be (a full /dev/shm: a touch there would end
// the process with SIGBUS), INTERNAL for another refusal. `bytes` must lie in a read-write
// mapping for kWrite, a readable one for kRead.
absl::Status PrefaultPages(absl::Span<std::byte> bytes, PrefaultAccess access);

// Validates an arena name as described at ShmArena::Create.
absl::Status ValidateArenaName(absl::string_view name);

}  // namespace writescope

#endif  // WRITESCOPE_COMMON_SHM_ARENA_H_
