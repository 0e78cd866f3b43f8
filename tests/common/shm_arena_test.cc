#include "common/shm_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/data_plane.h"
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

}  // namespace
}  // namespace writescope
