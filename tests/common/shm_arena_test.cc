#include "common/shm_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/data_plane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/test_util.h"

namespace writescope {
namespace {

std::filesystem::path ShmPath(const std::string& name) { return "/dev/shm" + name; }

TEST(ShmArenaTest, CreateLaysOutAlignedRegionsWithMode0600) {
  const std::string name = testing::UniqueArenaName("layout");
  auto arena = ShmArena::Create(name, {{"a", 1000}, {"b", 3 << 20}, {"empty", 0}});
  WS_ASSERT_OK(arena.status());
  struct stat st;
  ASSERT_EQ(stat(ShmPath(name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  ASSERT_EQ((*arena)->regions().size(), 3u);
  uint64_t previous_end = 0;
  for (const ArenaRegionInfo& region : (*arena)->regions()) {
    EXPECT_EQ(region.offset % kArenaRegionAlignment, 0u) << region.name;
    EXPECT_GE(region.offset, previous_end) << region.name << " overlaps its predecessor";
    previous_end = region.offset + region.bytes;
    EXPECT_LE(previous_end, (*arena)->size());
  }
  auto b = (*arena)->Region("b");
  WS_ASSERT_OK(b.status());
  EXPECT_EQ(b->size(), 3u << 20);
  EXPECT_EQ((*arena)->Region("missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(ShmArenaTest, DestructorUnlinksWhatItCreated) {
  const std::string name = testing::UniqueArenaName("unlink");
  {
    auto arena = ShmArena::Create(name, {{"a", 4096}});
    WS_ASSERT_OK(arena.status());
    EXPECT_TRUE(std::filesystem::exists(ShmPath(name)));
  }
  EXPECT_FALSE(std::filesystem::exists(ShmPath(name)));
}

TEST(ShmArenaTest, CreateRefusesExistingNameAndBadInput) {
  const std::string name = testing::UniqueArenaName("dup");
  auto arena = ShmArena::Create(name, {{"a", 4096}});
  WS_ASSERT_OK(arena.status());
  EXPECT_EQ(ShmArena::Create(name, {{"a", 4096}}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ShmArena::Create("no-slash", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmArena::Create("/a/b", {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmArena::Create(testing::UniqueArenaName("x"), {{"a", 1}, {"a", 1}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmArena::Open(testing::UniqueArenaName("missing")).status().code(),
            absl::StatusCode::kNotFound);
  // Sizes whose layout wraps around 2^64 (it made a 2 MiB arena whose second region lay
  // far outside the mapping) or passes an off_t.
  for (const uint64_t bytes : {~uint64_t{0} - (uint64_t{2} << 20) + 1, uint64_t{1} << 63}) {
    const std::string huge = testing::UniqueArenaName("huge");
    EXPECT_EQ(ShmArena::Create(huge, {{"a", 1000}, {"b", bytes}}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bytes;
    EXPECT_EQ(ShmArena::Open(huge).status().code(), absl::StatusCode::kNotFound);  // not made
  }
}

TEST(ShmArenaTest, ChildProcessSeesAndWritesTheSameBytes) {
  const std::string name = testing::UniqueArenaName("fork");
  auto arena = ShmArena::Create(name, ArenaRegions({.channel_bytes = 1 << 16,
                                                    .cpu_compute_bytes = 1 << 20,
                                                    .gpu_transfer_bytes = 1 << 20}));
  WS_ASSERT_OK(arena.status());
  auto cpu = (*arena)->Region(kCpuComputeRegion);
  WS_ASSERT_OK(cpu.status());
  for (size_t i = 0; i < cpu->size(); ++i) (*cpu)[i] = static_cast<std::byte>(i * 7);

  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Child: open by name, verify the parent's bytes, answer in the transfer region.
    auto opened = ShmArena::Open(name);
    if (!opened.ok()) _exit(1);
    auto region = (*opened)->Region(kCpuComputeRegion);
    if (!region.ok()) _exit(2);
    for (size_t i = 0; i < region->size(); ++i) {
      if ((*region)[i] != static_cast<std::byte>(i * 7)) _exit(3);
    }
    auto transfer = (*opened)->Region(kGpuTransferRegion);
    if (!transfer.ok()) _exit(4);
    std::memset(transfer->data(), 0x5a, transfer->size());
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto transfer = (*arena)->Region(kGpuTransferRegion);
  WS_ASSERT_OK(transfer.status());
  for (std::byte value : *transfer) ASSERT_EQ(value, std::byte{0x5a});
}

TEST(ShmArenaTest, OpenRejectsAnObjectWithoutHeader) {
  const std::string name = testing::UniqueArenaName("garbage");
  int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 16), 0);
  close(fd);
  EXPECT_EQ(ShmArena::Open(name).status().code(), absl::StatusCode::kFailedPrecondition);
  shm_unlink(name.c_str());
}

// Pages of `bytes` that have an entry in this process's page tables (/proc/self/pagemap,
// bit 63: present), or -1 when that file cannot be read.
long PresentPages(absl::Span<const std::byte> bytes) {
  const int fd = open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0) return -1;
  long present = 0;
  for (size_t offset = 0; offset < bytes.size(); offset += 4096) {
    uint64_t entry = 0;
    const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(&bytes[offset]) / 4096 * 8);
    if (pread(fd, &entry, sizeof(entry), at) != sizeof(entry)) {
      close(fd);
      return -1;
    }
    present += (entry >> 63) & 1;
  }
  close(fd);
  return present;
}

// Another mapping of the arena (a worker's) has no page-table entries for the pages the
// creator wrote, so its first read of each takes a fault; PrefaultPages makes them all
// present, and the mapping reads the same bytes.
TEST(ShmArenaTest, PrefaultedPagesArePresentBeforeTheirFirstRead) {
  if (sysconf(_SC_PAGESIZE) != 4096) GTEST_SKIP() << "pagemap is read per 4 KiB page here";
  constexpr size_t kBytes = size_t{8} << 20;
  const std::string name = testing::UniqueArenaName("prefault");
  auto arena = ShmArena::Create(name, {{"kv", kBytes}});
  WS_ASSERT_OK(arena.status());
  absl::Span<std::byte> written = *(*arena)->Region("kv");
  std::memset(written.data(), 0x33, written.size());
  auto opened = ShmArena::Open(name);
  WS_ASSERT_OK(opened.status());
  absl::Span<std::byte> kv = *(*opened)->Region("kv");
  const long cold = PresentPages(kv);
  if (cold < 0) GTEST_SKIP() << "/proc/self/pagemap cannot be read here";
  EXPECT_EQ(cold, 0);
  WS_EXPECT_OK(PrefaultPages(kv, PrefaultAccess::kRead));
  EXPECT_EQ(PresentPages(kv), static_cast<long>(kBytes / 4096));
  for (size_t offset = 0; offset < kv.size(); offset += 4096) {
    ASSERT_EQ(kv[offset], std::byte{0x33}) << offset;
  }
  // Empty ranges and a range that starts inside a page are fine.
  WS_EXPECT_OK(PrefaultPages({}, PrefaultAccess::kRead));
  WS_EXPECT_OK(PrefaultPages(kv.subspan(100, 5000), PrefaultAccess::kWrite));
  EXPECT_EQ(kv[100], std::byte{0x33});
}

// Pages that cannot be backed (here: past the end of the object, as a full /dev/shm would
// leave them) are an error, not a SIGBUS.
TEST(ShmArenaTest, PrefaultPagesReportsPagesThatCannotBeBacked) {
  const long page = sysconf(_SC_PAGESIZE);
  ASSERT_GT(page, 0);
  const std::string name = testing::UniqueArenaName("short");
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, page), 0);
  void* base = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  shm_unlink(name.c_str());
  ASSERT_NE(base, MAP_FAILED);
  auto* bytes = static_cast<std::byte*>(base);
#ifdef MADV_POPULATE_READ
  const bool populate = madvise(base, page, MADV_POPULATE_READ) == 0;
#else
  const bool populate = false;
#endif
  if (!populate) {
    munmap(base, 2 * page);
    GTEST_SKIP() << "no MADV_POPULATE_READ here: the fallback's touch would raise SIGBUS";
  }
  WS_EXPECT_OK(PrefaultPages({bytes, static_cast<size_t>(page)}, PrefaultAccess::kRead));
  const absl::Status past_end =
      PrefaultPages({bytes, 2 * static_cast<size_t>(page)}, PrefaultAccess::kRead);
  EXPECT_EQ(past_end.code(), absl::StatusCode::kResourceExhausted) << past_end;
  EXPECT_THAT(std::string(past_end.message()), ::testing::HasSubstr("/dev/shm"));
  munmap(base, 2 * page);
}

}  // namespace
}  // namespace writescope
