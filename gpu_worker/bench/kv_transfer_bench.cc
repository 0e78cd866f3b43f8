// InplaceKVCache data paths at a model's shape (default Qwen3-30B-A3B: 48 layers, 4 KV
// heads, head_dim 128 -> 96 KiB of KV per token), through the real KvCache and
// KvPlacement:
//
//   1. per-layer transfer of the batch's GPU-transfer blocks into the ping-pong buffers
//      (the runtime's plan: runs of consecutive slots, chunks of the ping-pong capacity),
//      GB/s against --h2d_gbps and against one plain copy of the same bytes;
//   2. the D-window flush, amortised per decode step (each sequence flushes once every
//      W steps);
//   3. host bytes per KV token against the model's KV size, and device bytes against
//      the KV budget;
//   4. the prefill write path (blocks into their regions) against one plain copy.
//
// The transfer region must hold context x batch tokens of KV for every layer it keeps:
// 32K x 16 x 96 KiB = 48 GiB for 48 layers. --arena_layers keeps fewer layers in the
// arena (per-layer numbers do not depend on it); the ping-pong capacity and the
// budget check use the model's full layer count.
//
//   kv_transfer_bench --device=cuda --context=32768 --batch=16 --arena_layers=8
//   kv_transfer_bench --device=host --context=4096 --batch=4 --arena_layers=2
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/data_plane.h"
#include "common/kv_config.h"
#include "common/shm_arena.h"
#include "common/status.h"
#include "coordinator/placement.h"
#include "gpu_worker/device.h"
#include "gpu_worker/kv_cache.h"
#include "gpu_worker/kv_transfer_plan.h"

ABSL_FLAG(std::string, device, "auto", "auto|cuda|host");
ABSL_FLAG(uint32_t, context, 32768, "tokens per sequence");
ABSL_FLAG(uint32_t, batch, 16, "sequences in the decode batch");
ABSL_FLAG(uint32_t, layers, 48, "model layers (Qwen3-30B-A3B: 48)");
ABSL_FLAG(uint32_t, kv_heads, 4, "KV heads");
ABSL_FLAG(uint32_t, head_dim, 128, "head dim");
ABSL_FLAG(uint32_t, arena_layers, 8, "layers kept in the arena (fewer fit host RAM)");
ABSL_FLAG(uint32_t, window, 256, "D-window W = block size");
ABSL_FLAG(double, budget_gib, 2.0, "GPU KV budget (D-window + ping-pong), GiB");
ABSL_FLAG(double, cpu_share, 0.0, "share of blocks placed in the CPU-compute region");
ABSL_FLAG(double, h2d_gbps, 55.4, "pinned host-to-device ceiling (from the probe), GB/s");
ABSL_FLAG(int, steps, 5, "timed decode steps");

namespace writescope {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void Row(const std::string& what, const std::string& value, const std::string& note = "") {
  std::printf("| %-44s | %20s | %-46s |\n", what.c_str(), value.c_str(), note.c_str());
}

absl::Status Run() {
  const uint32_t context = absl::GetFlag(FLAGS_context);
  const uint32_t batch = absl::GetFlag(FLAGS_batch);
  const uint32_t window = absl::GetFlag(FLAGS_window);
  const double share = absl::GetFlag(FLAGS_cpu_share);
  KvGeometry model{.kind = AttentionKind::kGqa,
                   .num_layers = absl::GetFlag(FLAGS_layers),
                   .block_tokens = window,
                   .num_kv_heads = absl::GetFlag(FLAGS_kv_heads),
                   .head_dim = absl::GetFlag(FLAGS_head_dim)};
  const uint64_t blocks_per_seq = context / window;
  const uint64_t cpu_blocks_per_seq = static_cast<uint64_t>(share * blocks_per_seq + 0.5);
  const uint64_t transfer_blocks_per_seq = blocks_per_seq - cpu_blocks_per_seq;

  // The model's budget split decides the ping-pong capacity.
  KvCacheConfig model_config{
      .geometry = model,
      .window_tokens = window,
      .gpu_kv_budget_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_budget_gib) * (1 << 30)),
      .max_sequences = batch};
  WS_ASSIGN_OR_RETURN(model_config, ResolveKvCacheConfig(model_config));

  KvCacheConfig config = model_config;
  config.geometry.num_layers = std::min(absl::GetFlag(FLAGS_arena_layers), model.num_layers);
  // +1 block per sequence in each region for the flush measurement.
  config.cpu_compute_bytes = (cpu_blocks_per_seq + 1) * batch * config.geometry.block_bytes();
  config.gpu_transfer_bytes = (transfer_blocks_per_seq + 1) * batch * config.geometry.block_bytes();
  WS_ASSIGN_OR_RETURN(config, ResolveKvCacheConfig(config));

  WS_ASSIGN_OR_RETURN(std::unique_ptr<gpu::Device> device,
                      gpu::CreateDevice(absl::GetFlag(FLAGS_device)));
  const std::string arena_name = absl::StrCat("/ws-kvbench-", getpid());
  WS_ASSIGN_OR_RETURN(std::unique_ptr<ShmArena> arena,
                      ShmArena::Create(arena_name, ArenaRegions(config.arena_sizes(1 << 16))));
  WS_ASSIGN_OR_RETURN(std::unique_ptr<gpu::KvCache> cache,
                      gpu::KvCache::Create(config, *arena, device.get()));
  WS_ASSIGN_OR_RETURN(std::unique_ptr<coordinator::KvPlacement> placement,
                      coordinator::KvPlacement::Create(config));
  // Touch the arena so page faults are not timed.
  for (KvRegion r : {KvRegion::kCpuCompute, KvRegion::kGpuTransfer}) {
    WS_ASSIGN_OR_RETURN(absl::Span<std::byte> bytes, arena->Region(KvRegionName(r)));
    std::memset(bytes.data(), 1, bytes.size());
  }

  // Place the batch: each sequence's CPU share spread evenly over its blocks.
  std::vector<gpu::StepSequence> step(batch);
  const uint64_t prompt = blocks_per_seq * window;
  for (uint32_t s = 0; s < batch; ++s) {
    WS_RETURN_IF_ERROR(placement->Admit(s));
    WS_ASSIGN_OR_RETURN(
        coordinator::PrefillPlan plan,
        placement->PlanPrefill(s, prompt, [&](const coordinator::PlacementRequest& r) {
          const uint64_t before = r.block_index * cpu_blocks_per_seq / blocks_per_seq;
          const uint64_t after = (r.block_index + 1) * cpu_blocks_per_seq / blocks_per_seq;
          return after > before ? KvRegion::kCpuCompute : KvRegion::kGpuTransfer;
        }));
    step[s].window_slot = plan.window_slot;
    for (const coordinator::PlacedBlock& b : plan.blocks) step[s].blocks.push_back(b.ref);
  }
  WS_ASSIGN_OR_RETURN(gpu::TransferPlan plan, gpu::BuildTransferPlan(config, step));

  const uint32_t L = config.geometry.num_layers;
  const uint64_t lbb = config.geometry.layer_block_bytes();
  std::printf(
      "InplaceKVCache bench on %s: %u layers x %u KV heads x dim %u (%s KiB KV/token), "
      "context %u x batch %u, W = block %u, CPU share %.2f, arena holds %u of %u "
      "layers\n\n",
      device->name().c_str(), model.num_layers, model.num_kv_heads, model.head_dim,
      absl::StrFormat("%.1f", model.bytes_per_token() / 1024.0).c_str(), context, batch, window,
      share, L, model.num_layers);
  std::printf("| %-44s | %20s | %-46s |\n", "measure", "value", "note");
  std::printf("|%s|%s|%s|\n", std::string(46, '-').c_str(), std::string(22, '-').c_str(),
              std::string(48, '-').c_str());

  // 1. Transfer into ping-pong, round by round as the decode loop drives it.
  double transfer_s = 0;
  const int steps = absl::GetFlag(FLAGS_steps);
  for (int i = 0; i <= steps; ++i) {  // i == 0 warms up
    const Clock::time_point t0 = Clock::now();
    WS_RETURN_IF_ERROR(cache->BeginTransfer(plan));
    for (uint32_t round = 0; round < plan.num_rounds(); ++round) {
      WS_RETURN_IF_ERROR(cache->ReadyRound(round).status());
    }
    WS_RETURN_IF_ERROR(device->SynchronizeAll());
    if (i > 0) transfer_s += Seconds(t0, Clock::now());
  }
  const double layer_bytes = static_cast<double>(plan.bytes_per_layer());
  const double per_layer_s = transfer_s / steps / L;
  const double gbps = per_layer_s > 0 ? layer_bytes / per_layer_s / 1e9 : 0;
  // The same bytes as one plain copy per chunk-sized piece (the contiguous ideal).
  double plain_s = 0;
  if (plan.num_rounds() > 0) {
    const std::byte* src = cache->BlockAddress({KvRegion::kGpuTransfer, 0}, 0);
    for (int i = 0; i <= steps; ++i) {
      const Clock::time_point t0 = Clock::now();
      for (uint32_t layer = 0; layer < L; ++layer) {
        for (size_t c = 0; c < plan.chunks.size(); ++c) {
          WS_RETURN_IF_ERROR(device->CopyToDevice(cache->pingpong_buffer(c % 2), src,
                                                  plan.chunks[c].num_blocks * lbb,
                                                  gpu::Stream::kCopyIn));
        }
      }
      WS_RETURN_IF_ERROR(device->Synchronize(gpu::Stream::kCopyIn));
      if (i > 0) plain_s += Seconds(t0, Clock::now());
    }
  }
  const double plain_gbps = plain_s > 0 ? layer_bytes * L * steps / plain_s / 1e9 : 0;
  const double ceiling = absl::GetFlag(FLAGS_h2d_gbps);
  Row("transfer blocks per layer (batch)", absl::StrCat(plan.blocks_per_layer()),
      absl::StrFormat("%.1f MiB per layer", layer_bytes / (1 << 20)));
  Row("ping-pong capacity / chunks per layer",
      absl::StrCat(config.pingpong_blocks, " / ", plan.chunks.size()),
      absl::StrCat(plan.copies_per_layer(), " copies per layer (coalesced runs)"));
  Row("transfer time per layer", absl::StrFormat("%.3f ms", per_layer_s * 1e3),
      absl::StrFormat("x %u layers = %.2f ms per step", model.num_layers,
                      per_layer_s * model.num_layers * 1e3));
  Row("transfer GB/s (plan, rounds)", absl::StrFormat("%.2f", gbps),
      absl::StrFormat("%.1f%% of --h2d_gbps %.1f", 100 * gbps / ceiling, ceiling));
  Row("plain contiguous copy GB/s", absl::StrFormat("%.2f", plain_gbps),
      absl::StrFormat("plan reaches %.1f%% of it", plain_gbps > 0 ? 100 * gbps / plain_gbps : 0.0));

  // 2. D-window flush: one flush per sequence, each sequence flushes every W steps.
  for (uint32_t s = 0; s < batch; ++s) {
    WS_RETURN_IF_ERROR(placement->AppendDecode(s, window).status());
  }
  // Fault in the window first (the host device allocates lazily).
  WS_RETURN_IF_ERROR(
      device->Fill(cache->WindowAddress(0, 0), 3, config.window_bytes(), gpu::Stream::kCompute));
  WS_RETURN_IF_ERROR(device->SynchronizeAll());
  const Clock::time_point f0 = Clock::now();
  uint64_t flush_copies = cache->stats().flush_copies;
  for (uint32_t s = 0; s < batch; ++s) {
    WS_ASSIGN_OR_RETURN(coordinator::FlushPlan flush,
                        placement->Flush(s, [&](const coordinator::PlacementRequest& r) {
                          return r.free_slots[KvRegionIndex(KvRegion::kGpuTransfer)] > 0
                                     ? KvRegion::kGpuTransfer
                                     : KvRegion::kCpuCompute;
                        }));
    std::vector<KvBlockRef> refs;
    for (const coordinator::PlacedBlock& b : flush.blocks) refs.push_back(b.ref);
    WS_RETURN_IF_ERROR(cache->FlushWindow(flush.window_slot, refs));
  }
  WS_RETURN_IF_ERROR(cache->WaitForWrites());
  const double flush_s = Seconds(f0, Clock::now());
  flush_copies = cache->stats().flush_copies - flush_copies;
  const double per_flush_model_s = flush_s / batch * model.num_layers / L;
  Row("D-window flush (one sequence, all layers)",
      absl::StrFormat("%.3f ms", per_flush_model_s * 1e3),
      absl::StrFormat("%.1f MiB, %d copies (1/layer) in the arena",
                      config.window_bytes_per_sequence() / double(1 << 20),
                      static_cast<int>(flush_copies / batch)));
  Row("flush cost per decode step (amortised)",
      absl::StrFormat("%.4f ms", per_flush_model_s * batch / window * 1e3),
      absl::StrFormat("batch %u flushes every %u steps, on kCopyOut", batch, window));

  // 3. Memory.
  const double host_per_token_layer =
      static_cast<double>(config.geometry.block_bytes()) / window / L;
  const double metadata_per_token = static_cast<double>(sizeof(coordinator::PlacedBlock)) / window;
  Row("host bytes per KV token (model, all layers)",
      absl::StrFormat("%.0f B", host_per_token_layer * model.num_layers),
      absl::StrFormat("model KV %d B/token: no token in two regions",
                      static_cast<int>(model.bytes_per_token())));
  Row("placement metadata per token", absl::StrFormat("%.3f B", metadata_per_token),
      absl::StrCat(sizeof(coordinator::PlacedBlock), " B per block on the coordinator"));
  Row("GPU KV bytes (model: D-window + ping-pong)",
      absl::StrFormat("%.3f GiB", model_config.gpu_bytes() / double(1 << 30)),
      absl::StrFormat("budget %.3f GiB (this run holds %.3f GiB)",
                      model_config.gpu_kv_budget_bytes / double(1 << 30),
                      cache->device_bytes() / double(1 << 30)));

  // 4. Prefill write path vs plain copy, for sequence 0's prompt.
  {
    const uint64_t prompt_bytes = blocks_per_seq * lbb;
    WS_ASSIGN_OR_RETURN(gpu::DeviceBuffer src,
                        gpu::DeviceBuffer::Allocate(device.get(), prompt_bytes));
    WS_RETURN_IF_ERROR(device->Fill(src.data(), 7, prompt_bytes, gpu::Stream::kCompute));
    std::vector<KvBlockRef> refs;
    for (const coordinator::PlacedBlock& b : placement->Find(0)->blocks) {
      if (refs.size() < blocks_per_seq) refs.push_back(b.ref);
    }
    const uint32_t window_slot = placement->Find(0)->window_slot;
    double write_s = 0;
    double copy_s = 0;
    // Plain copy target, per layer: as many contiguous bytes of the transfer region as
    // the prompt has transfer blocks, the CPU region (pageable) for the rest.
    const uint64_t transfer_bytes = transfer_blocks_per_seq * lbb;
    for (int i = 0; i <= steps; ++i) {
      Clock::time_point t0 = Clock::now();
      for (uint32_t layer = 0; layer < L; ++layer) {
        WS_RETURN_IF_ERROR(cache->WritePrefillLayer(layer, refs, window_slot, 0, src.data()));
      }
      WS_RETURN_IF_ERROR(device->SynchronizeAll());
      if (i > 0) write_s += Seconds(t0, Clock::now());
      t0 = Clock::now();
      for (uint32_t layer = 0; layer < L; ++layer) {
        if (transfer_bytes > 0) {
          WS_RETURN_IF_ERROR(
              device->CopyToHost(cache->BlockAddress({KvRegion::kGpuTransfer, 0}, layer),
                                 src.data(), transfer_bytes, gpu::Stream::kCopyOut));
        }
        if (prompt_bytes > transfer_bytes) {
          WS_RETURN_IF_ERROR(
              device->CopyToHost(cache->BlockAddress({KvRegion::kCpuCompute, 0}, layer),
                                 static_cast<const std::byte*>(src.data()) + transfer_bytes,
                                 prompt_bytes - transfer_bytes, gpu::Stream::kCopyOut));
        }
      }
      WS_RETURN_IF_ERROR(device->SynchronizeAll());
      if (i > 0) copy_s += Seconds(t0, Clock::now());
    }
    Row("prefill write path per layer", absl::StrFormat("%.3f ms", write_s / steps / L * 1e3),
        absl::StrFormat("%u tokens, %.1f MiB per layer", context, prompt_bytes / double(1 << 20)));
    Row("plain copy per layer (no placement)", absl::StrFormat("%.3f ms", copy_s / steps / L * 1e3),
        absl::StrFormat("overhead of placement: %+.2f%%",
                        copy_s > 0 ? 100 * (write_s - copy_s) / copy_s : 0.0));
  }
  std::printf("\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace writescope

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = writescope::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "kv_transfer_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
