#include "common/shm_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace writescope {
namespace {

constexpr uint64_t kArenaMagic = 0x414e455241535357ULL;  // "WSSARENA"
constexpr uint32_t kArenaVersion = 1;
constexpr size_t kHeaderBytes = 4096;

struct RegionEntry {
  char name[kArenaRegionNameBytes];
  uint64_t offset;
  uint64_t bytes;
};

struct ArenaHeader {
  // Written last by the creator, so an opener never sees a half-built header.
  std::atomic<uint64_t> magic;
  uint32_t version;
  uint32_t num_regions;
  uint64_t total_bytes;
  RegionEntry regions[kArenaMaxRegions];
};
static_assert(sizeof(ArenaHeader) <= kHeaderBytes);

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace

absl::Status PrefaultPages(absl::Span<std::byte> bytes, PrefaultAccess access) {
  if (bytes.empty()) return absl::OkStatus();
  const long page_size = sysconf(_SC_PAGESIZE);
  const size_t page = page_size > 0 ? static_cast<size_t>(page_size) : 4096;
  // madvise takes a page-aligned start.
  const auto start = reinterpret_cast<uintptr_t>(bytes.data()) / page * page;
  const size_t length = reinterpret_cast<uintptr_t>(bytes.data()) + bytes.size() - start;
#if defined(MADV_POPULATE_READ) && defined(MADV_POPULATE_WRITE)
  const int advice = access == PrefaultAccess::kWrite ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  if (madvise(reinterpret_cast<void*>(start), length, advice) == 0) return absl::OkStatus();
  const int error = errno;
  if (error == EFAULT || error == ENOMEM) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "mapping ", length, " bytes of shared memory: ", strerror(error),
        " (is /dev/shm large enough for the arena?)"));
  }
  if (error != EINVAL) {
    return absl::InternalError(
        absl::StrCat("mapping ", length, " bytes of shared memory: ", strerror(error)));
  }
#endif
  // Older kernels: touch one byte per page. A write touch is an atomic OR of nothing: the
  // memory may be live (a worker attaching to channels its peer writes), and a plain read
  // and rewrite could undo a write made between the two.
  for (size_t offset = 0; offset < length; offset += page) {
    auto* at = reinterpret_cast<unsigned char*>(start + offset);
    if (access == PrefaultAccess::kWrite) {
      std::atomic_ref<unsigned char>(*at).fetch_or(0, std::memory_order_relaxed);
    } else {
      static_cast<void>(*static_cast<volatile unsigned char*>(at));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateArenaName(absl::string_view name) {
  if (name.size() < 2 || name.size() > 200 || name[0] != '/' ||
      name.find('/', 1) != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena name '", name, "' must be '/' followed by 1-199 characters without '/'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShmArena>> ShmArena::Create(
    absl::string_view name, absl::Span<const ArenaRegionSpec> regions) {
  WS_RETURN_IF_ERROR(ValidateArenaName(name));
  if (regions.size() > kArenaMaxRegions) {
    return absl::InvalidArgumentError(
        absl::StrCat("an arena holds at most ", kArenaMaxRegions, " regions"));
  }
  // Lay out the regions after the header page.
  std::vector<ArenaRegionInfo> layout;
  uint64_t offset = kArenaRegionAlignment;
  for (const ArenaRegionSpec& spec : regions) {
    if (spec.name.empty() || spec.name.size() >= kArenaRegionNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat("bad arena region name '", spec.name, "'"));
    }
    for (const ArenaRegionInfo& other : layout) {
      if (other.name == spec.name) {
        return absl::InvalidArgumentError(absl::StrCat("duplicate arena region '", spec.name, "'"));
      }
    }
    layout.push_back({spec.name, offset, spec.bytes});
    // The arena's size is an off_t: a region whose end passes it (or wraps) is refused.
    constexpr uint64_t kMaxArenaBytes = uint64_t{1} << 62;
    if (spec.bytes > kMaxArenaBytes || offset + spec.bytes > kMaxArenaBytes) {
      return absl::InvalidArgumentError(absl::StrCat("arena region '", spec.name, "' of ",
                                                     spec.bytes, " bytes at offset ", offset,
                                                     ": the arena would pass 2^62 bytes"));
    }
    offset = AlignUp(offset + spec.bytes, kArenaRegionAlignment);
  }
  const uint64_t total = offset;

  const std::string shm_name(name);
  int fd = shm_open(shm_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("shm_open(", shm_name, ", O_CREAT|O_EXCL)"));
  // The mode given to shm_open is filtered by the umask; the arena must be 0600.
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, static_cast<off_t>(total)) != 0) {
    absl::Status status = ErrnoToStatus(errno, absl::StrCat("sizing arena ", shm_name, " to ", total, " bytes"));
    close(fd);
    shm_unlink(shm_name.c_str());
    return status;
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(shm_name.c_str());
    return ErrnoToStatus(mmap_errno, absl::StrCat("mmap arena ", shm_name));
  }
  auto arena = std::unique_ptr<ShmArena>(
      new ShmArena(shm_name, static_cast<std::byte*>(base), total, /*owner=*/true));
  auto* header = reinterpret_cast<ArenaHeader*>(base);
  header->version = kArenaVersion;
  header->num_regions = static_cast<uint32_t>(layout.size());
  header->total_bytes = total;
  for (size_t i = 0; i < layout.size(); ++i) {
    std::memset(header->regions[i].name, 0, kArenaRegionNameBytes);
    std::memcpy(header->regions[i].name, layout[i].name.data(), layout[i].name.size());
    header->regions[i].offset = layout[i].offset;
    header->regions[i].bytes = layout[i].bytes;
  }
  header->magic.store(kArenaMagic, std::memory_order_release);
  arena->regions_ = std::move(layout);
  return arena;
}

absl::StatusOr<std::unique_ptr<ShmArena>> ShmArena::Open(absl::string_view name) {
  WS_RETURN_IF_ERROR(ValidateArenaName(name));
  const std::string shm_name(name);
  int fd = shm_open(shm_name.c_str(), O_RDWR, 0);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("shm_open(", shm_name, ")"));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    absl::Status status = ErrnoToStatus(errno, "fstat arena");
    close(fd);
    return status;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < kHeaderBytes) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("arena ", shm_name, " is ", size, " bytes, smaller than its header"));
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  close(fd);
  if (base == MAP_FAILED) return ErrnoToStatus(mmap_errno, absl::StrCat("mmap arena ", shm_name));
  auto arena = std::unique_ptr<ShmArena>(
      new ShmArena(shm_name, static_cast<std::byte*>(base), size, /*owner=*/false));
  WS_RETURN_IF_ERROR(arena->ReadHeader());
  return arena;
}

absl::Status ShmArena::ReadHeader() {
  auto* header = reinterpret_cast<ArenaHeader*>(base_);
  if (header->magic.load(std::memory_order_acquire) != kArenaMagic) {
    return absl::FailedPreconditionError(absl::StrCat("arena ", name_, " has no valid header"));
  }
  if (header->version != kArenaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "arena ", name_, " has version ", header->version, ", expected ", kArenaVersion));
  }
  if (header->total_bytes != size_ || header->num_regions > kArenaMaxRegions) {
    return absl::FailedPreconditionError(absl::StrCat("arena ", name_, " header is inconsistent"));
  }
  for (uint32_t i = 0; i < header->num_regions; ++i) {
    const RegionEntry& entry = header->regions[i];
    if (entry.offset > size_ || entry.bytes > size_ - entry.offset) {
      return absl::FailedPreconditionError(
          absl::StrCat("arena ", name_, " region ", i, " lies outside the arena"));
    }
    regions_.push_back({std::string(entry.name, strnlen(entry.name, kArenaRegionNameBytes)),
                        entry.offset, entry.bytes});
  }
  return absl::OkStatus();
}

ShmArena::~ShmArena() {
  if (base_ != nullptr) munmap(base_, size_);
  if (owner_ && !unlinked_) {
    absl::Status status = Unlink();
    if (!status.ok()) WS_LOG(WARNING) << status;
  }
}

absl::Status ShmArena::Unlink() {
  if (unlinked_) return absl::OkStatus();
  unlinked_ = true;
  if (shm_unlink(name_.c_str()) != 0 && errno != ENOENT) {
    return ErrnoToStatus(errno, absl::StrCat("shm_unlink(", name_, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<std::byte>> ShmArena::Region(absl::string_view name) const {
  for (const ArenaRegionInfo& region : regions_) {
    if (region.name == name) return absl::Span<std::byte>(base_ + region.offset, region.bytes);
  }
  return absl::NotFoundError(absl::StrCat("arena ", name_, " has no region '", name, "'"));
}

}  // namespace writescope
