// The gpu_worker writes KV through its real paths (prefill into both regions, decode
// appends, a D-window flush into the CPU region) into a shared arena; a separate
// process, told only the arena name and which CPU slots hold which tokens (as the
// coordinator would tell the cpu_worker), opens the arena by name and reads the CPU
// region in place through KvRegionView, checking every byte.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/data_plane.h"
#include "common/kv_config.h"
#include "common/shm_arena.h"
#include "coordinator/placement.h"
#include "cpu_worker/kv_view.h"
#include "gpu_worker/device.h"
#include "gpu_worker/kv_cache.h"
#include "gtest/gtest.h"
#include "tests/common/test_util.h"
#include "tests/gpu_worker/kv_test_util.h"

namespace writescope {
namespace {

using coordinator::PlacedBlock;

// What the cpu_worker learns about one CPU block.
struct CpuBlockNote {
  uint32_t slot;
  uint64_t sequence;
  uint64_t first_token;
};

// The child: returns 0 when every token matched, 1 when some did not (an exit status, so
// not their count: 256 mismatches would read as 0), or 100+ on setup errors.
int ReadInChild(const std::string& arena_name, const KvGeometry& g, int pipe_fd) {
  std::vector<CpuBlockNote> notes;
  CpuBlockNote note;
  while (read(pipe_fd, &note, sizeof(note)) == sizeof(note)) notes.push_back(note);
  auto arena = ShmArena::Open(arena_name);
  if (!arena.ok()) return 100;
  auto view = cpu::KvRegionView::Open(**arena, g);
  if (!view.ok()) return 101;
  if (notes.empty()) return 102;
  int mismatches = 0;
  const uint64_t head_bytes = uint64_t{g.head_dim} * 2;
  for (const CpuBlockNote& n : notes) {
    if (!view->Check(n.slot, 0).ok()) return 103;
    for (uint32_t k = 0; k < g.block_tokens; ++k) {
      const testing::TokenKv want = testing::PatternTokenKv(g, n.sequence, n.first_token + k);
      for (uint32_t layer = 0; layer < g.num_layers; ++layer) {
        const std::byte* row = want.data() + layer * g.bytes_per_token_layer();
        bool same = true;
        if (g.kind == AttentionKind::kGqa) {
          for (uint32_t h = 0; h < g.num_kv_heads; ++h) {
            const uint16_t* keys = view->Keys(n.slot, layer, h) + uint64_t{k} * g.head_dim;
            const uint16_t* values = view->Values(n.slot, layer, h) + uint64_t{k} * g.head_dim;
            same &= std::memcmp(keys, row + h * head_bytes, head_bytes) == 0;
            same &= std::memcmp(values, row + (g.num_kv_heads + h) * head_bytes, head_bytes) == 0;
          }
        } else {
          const uint16_t* latent =
              view->Latents(n.slot, layer) + uint64_t{k} * (g.kv_lora_rank + g.rope_dim);
          same = std::memcmp(latent, row, g.bytes_per_token_layer()) == 0;
        }
        mismatches += !same;
      }
    }
  }
  return mismatches > 0 ? 1 : 0;
}

// The parent's end of the child: a test that returns early (a failed ASSERT) closes the pipe
// and ends the child, rather than leaving it blocked on the pipe until the test binary exits.
struct ChildGuard {
  pid_t pid = -1;
  int write_fd = -1;
  ~ChildGuard() {
    if (write_fd >= 0) close(write_fd);
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

class KvViewCrossProcessTest : public ::testing::TestWithParam<KvGeometry> {};

TEST_P(KvViewCrossProcessTest, ChildReadsWhatTheGpuWorkerWroteInPlace) {
  const KvGeometry geometry = GetParam();
  KvCacheConfig config;
  config.geometry = geometry;
  config.window_tokens = geometry.block_tokens;
  config.cpu_compute_bytes = 9 * geometry.block_bytes();
  config.gpu_transfer_bytes = 4 * geometry.block_bytes();
  config.max_sequences = 3;
  config.gpu_kv_budget_bytes = 1 << 20;
  auto resolved = ResolveKvCacheConfig(config);
  WS_ASSERT_OK(resolved.status());
  config = *resolved;
  const std::string name = testing::UniqueArenaName("kvview");

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[1]);
    _exit(ReadInChild(name, geometry, fds[0]));
  }
  close(fds[0]);
  ChildGuard guard{.pid = child, .write_fd = fds[1]};

  // The parent: coordinator metadata + gpu_worker paths, host device.
  auto arena = ShmArena::Create(name, ArenaRegions(config.arena_sizes(1 << 16)));
  WS_ASSERT_OK(arena.status());
  std::unique_ptr<gpu::Device> device = gpu::CreateHostDevice();
  auto cache = gpu::KvCache::Create(config, **arena, device.get());
  WS_ASSERT_OK(cache.status());
  auto placement = coordinator::KvPlacement::Create(config);
  WS_ASSERT_OK(placement.status());
  const uint32_t bt = geometry.block_tokens;
  const uint64_t lbb = geometry.layer_block_bytes();
  const uint64_t row = geometry.bytes_per_token_layer();

  for (uint64_t seq : {1, 2}) {
    WS_ASSERT_OK((*placement)->Admit(seq));
    const uint64_t n = seq == 1 ? 3 * bt + 2 : 4 * bt;
    int i = 0;
    auto plan = (*placement)->PlanPrefill(seq, n, [&](const coordinator::PlacementRequest&) {
      return i++ % 2 == 0 ? KvRegion::kCpuCompute : KvRegion::kGpuTransfer;
    });
    WS_ASSERT_OK(plan.status());
    std::vector<KvBlockRef> refs;
    for (const PlacedBlock& b : plan->blocks) refs.push_back(b.ref);
    for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
      std::vector<std::byte> host((n + bt - 1) / bt * lbb);
      for (uint64_t t = 0; t < n; ++t) {
        gpu::ScatterTokenRow(geometry,
                             testing::PatternTokenKv(geometry, seq, t).data() + layer * row, t % bt,
                             host.data() + t / bt * lbb);
      }
      auto staging = gpu::DeviceBuffer::Allocate(device.get(), host.size());
      WS_ASSERT_OK(staging.status());
      WS_ASSERT_OK(
          device->CopyToDevice(staging->data(), host.data(), host.size(), gpu::Stream::kCompute));
      WS_ASSERT_OK((*cache)->WritePrefillLayer(layer, refs, plan->window_slot, plan->window_tokens,
                                               staging->data()));
      WS_ASSERT_OK((*cache)->WaitForWrites());
    }
  }
  // Sequence 1 decodes until its window is full, then flushes it into the CPU region.
  auto staging = gpu::DeviceBuffer::Allocate(device.get(), row);
  WS_ASSERT_OK(staging.status());
  while (!(*placement)->NeedsFlush(1)) {
    auto position = (*placement)->AppendDecode(1);
    WS_ASSERT_OK(position.status());
    const uint64_t token = (*placement)->Find(1)->num_tokens() - 1;
    const testing::TokenKv kv = testing::PatternTokenKv(geometry, 1, token);
    for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
      WS_ASSERT_OK(device->CopyToDevice(staging->data(), kv.data() + layer * row, row,
                                        gpu::Stream::kCompute));
      WS_ASSERT_OK((*cache)->AppendToken((*placement)->Find(1)->window_slot, *position, layer,
                                         staging->data()));
    }
  }
  auto flush = (*placement)->Flush(1, coordinator::ChooseCpuCompute);
  WS_ASSERT_OK(flush.status());
  WS_ASSERT_OK((*cache)->FlushWindow(flush->window_slot, {flush->blocks[0].ref}));
  WS_ASSERT_OK((*cache)->WaitForWrites());

  // Tell the child which CPU slots hold which tokens, then let it read.
  int cpu_blocks = 0;
  for (uint64_t seq : {1, 2}) {
    for (const PlacedBlock& b : (*placement)->Find(seq)->blocks) {
      if (b.ref.region != KvRegion::kCpuCompute) continue;
      const CpuBlockNote note{b.ref.slot, seq, b.first_token};
      ASSERT_EQ(write(fds[1], &note, sizeof(note)), static_cast<ssize_t>(sizeof(note)));
      ++cpu_blocks;
    }
  }
  EXPECT_EQ(cpu_blocks, 2 + 2 + 1);  // two prefill blocks each, one flushed
  close(std::exchange(guard.write_fd, -1));
  int wstatus = 0;
  ASSERT_EQ(waitpid(std::exchange(guard.pid, -1), &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "1: mismatching tokens; >= 100: a setup error in the child";
}

INSTANTIATE_TEST_SUITE_P(Geometries, KvViewCrossProcessTest,
                         ::testing::Values(testing::SmallGqa(4), testing::SmallMla(3)),
                         [](const ::testing::TestParamInfo<KvGeometry>& info) {
                           return info.param.kind == AttentionKind::kGqa ? std::string("Gqa")
                                                                         : std::string("Mla");
                         });

}  // namespace
}  // namespace writescope
