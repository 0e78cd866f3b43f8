// Where routed experts run: the cost rule's model, its decisions, and what it learns.
#include "coordinator/expert_placement.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "tests/common/test_util.h"

namespace writescope::coordinator {
namespace {

// Qwen3-30B-A3B's routed experts, the H200 machine's rates (order of magnitude): 128
// experts top-8, 1.21 GB per layer, 55 GB/s, the CPU at 0.2 ms per token and layer.
ExpertPlacementParams Qwen3Like() {
  return {.num_experts = 128,
          .top_k = 8,
          .moe_layers = 48,
          .gpu_streams = true,
          .stream_bytes_per_ms = 55e6,
          .layer_bytes = 1207959552,
          .cpu_ms_per_token = 0.2};
}

TEST(ExpertPlacementTest, ParsesModes) {
  EXPECT_EQ(*ParseExpertMode("auto"), ExpertMode::kAuto);
  EXPECT_EQ(*ParseExpertMode("cpu"), ExpertMode::kCpu);
  EXPECT_EQ(*ParseExpertMode("gpu"), ExpertMode::kGpu);
  EXPECT_EQ(ParseExpertMode("GPU").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseExpertMode("").status().code(), absl::StatusCode::kInvalidArgument);
  for (ExpertMode mode : {ExpertMode::kAuto, ExpertMode::kCpu, ExpertMode::kGpu}) {
    EXPECT_EQ(*ParseExpertMode(ExpertModeName(mode)), mode);
  }
}

TEST(ExpertPlacementTest, RefusesGpuModeWithoutAStreamingWorkerAndBadParams) {
  ExpertPlacementParams params = Qwen3Like();
  params.gpu_streams = false;
  EXPECT_EQ(ExpertPlacement::Create(ExpertMode::kGpu, params).status().code(),
            absl::StatusCode::kInvalidArgument);
  WS_EXPECT_OK(ExpertPlacement::Create(ExpertMode::kAuto, params).status());
  params = Qwen3Like();
  params.top_k = 200;
  EXPECT_FALSE(ExpertPlacement::Create(ExpertMode::kAuto, params).ok());
  params = Qwen3Like();
  params.stream_bytes_per_ms = NAN;
  EXPECT_FALSE(ExpertPlacement::Create(ExpertMode::kAuto, params).ok());
}

TEST(ExpertPlacementTest, AutoKeepsDecodeOnTheCpuAndSendsLongChunksToTheGpu) {
  auto placement = *ExpertPlacement::Create(ExpertMode::kAuto, Qwen3Like());
  // A whole layer streams in ~22 ms, whatever the batch; the CPU needs 0.2 ms per token:
  // the crossing is near 110 tokens.
  EXPECT_NEAR(placement.GpuMs(4096), 1207959552 / 55e6, 1e-3);
  EXPECT_NEAR(placement.GpuMs(1), placement.GpuMs(4096), 1e-9);
  EXPECT_FALSE(placement.OnGpu(1));
  EXPECT_FALSE(placement.OnGpu(32));
  EXPECT_FALSE(placement.OnGpu(109));
  EXPECT_TRUE(placement.OnGpu(111));
  EXPECT_TRUE(placement.OnGpu(4096));
  EXPECT_FALSE(placement.OnGpu(0));
}

TEST(ExpertPlacementTest, ForcedModesAndNoStreamingWorker) {
  auto cpu = *ExpertPlacement::Create(ExpertMode::kCpu, Qwen3Like());
  auto gpu = *ExpertPlacement::Create(ExpertMode::kGpu, Qwen3Like());
  for (int64_t tokens : {1, 100, 100000}) {
    EXPECT_FALSE(cpu.OnGpu(tokens));
    EXPECT_TRUE(gpu.OnGpu(tokens));
  }
  ExpertPlacementParams none = Qwen3Like();
  none.gpu_streams = false;
  auto auto_none = *ExpertPlacement::Create(ExpertMode::kAuto, none);
  EXPECT_FALSE(auto_none.OnGpu(100000));
  EXPECT_TRUE(std::isinf(auto_none.GpuMs(100000)));
  // The host device streams at rate 0: auto never picks it (no faster compute there).
  ExpertPlacementParams host = Qwen3Like();
  host.stream_bytes_per_ms = 0;
  EXPECT_FALSE(ExpertPlacement::Create(ExpertMode::kAuto, host)->OnGpu(100000));
  EXPECT_TRUE(ExpertPlacement::Create(ExpertMode::kGpu, host)->OnGpu(1));
  // A dense model has no experts to place.
  ExpertPlacementParams dense = Qwen3Like();
  dense.moe_layers = 0;
  EXPECT_FALSE(ExpertPlacement::Create(ExpertMode::kGpu, dense)->OnGpu(1000));
}

TEST(ExpertPlacementTest, LearnsTheCpuCostAtEverySize) {
  auto placement = *ExpertPlacement::Create(ExpertMode::kAuto, Qwen3Like());
  // The calibration: through the origin and 0.2 ms per token at 512.
  EXPECT_NEAR(placement.CpuMs(512), 512 * 0.2, 1e-6);
  EXPECT_NEAR(placement.CpuMs(0), 0.0, 1e-9);
  // The CPU turns out 4x slower than measured at load (another tenant): the crossing
  // moves down, chunks of 64 go to the GPU.
  EXPECT_FALSE(placement.OnGpu(64));
  for (int i = 0; i < 20; ++i) placement.ObserveCpu(512, 48 * 512 * 0.8);
  EXPECT_NEAR(placement.CpuMs(512), 512 * 0.8, 512 * 0.8 * 0.05);
  EXPECT_EQ(placement.cpu_steps(), 20u);
  EXPECT_TRUE(placement.OnGpu(64));
  // Decode steps are learned too: 16-token steps at 40 ms per layer (a competing load on
  // the CPU) cost more than a layer's stream (~22 ms): decode goes to the GPU.
  auto loaded = *ExpertPlacement::Create(ExpertMode::kAuto, Qwen3Like());
  EXPECT_FALSE(loaded.OnGpu(16));
  for (int i = 0; i < 10; ++i) loaded.ObserveCpu(16, 48 * 40.0);
  EXPECT_NEAR(loaded.CpuMs(16), 40.0, 2.0);
  EXPECT_TRUE(loaded.OnGpu(16));
  // ... without touching the prefill chunks' rate (bandwidth-bound decode says nothing of it).
  EXPECT_NEAR(loaded.CpuMs(512), 512 * 0.2, 1e-6);
  EXPECT_FALSE(loaded.OnGpu(64));
  // Nonsense is ignored.
  loaded.ObserveCpu(0, 10.0);
  loaded.ObserveCpu(16, NAN);
  loaded.ObserveCpu(16, -1.0);
  EXPECT_EQ(loaded.cpu_steps(), 10u);
}

// Decode on the GPU because the CPU was loaded: every kProbeEvery GPU steps one decode step
// probes the CPU. While the load lasts the probe confirms the GPU; once it ends, the probes
// bring decode back to the CPU within a few of them. Long chunks are never probes.
TEST(ExpertPlacementTest, ProbesTheCpuAndComesBackWhenTheLoadEnds) {
  auto placement = *ExpertPlacement::Create(ExpertMode::kAuto, Qwen3Like());
  const double stream_ms = placement.GpuMs(16);
  double cpu_ms = 40.0;  // per layer, a 16-token step under load
  int probes = 0, steps_on_gpu = 0;
  auto step = [&] {
    if (placement.OnGpu(16)) {
      EXPECT_TRUE(placement.OnGpu(4096));  // a long chunk is never a probe
      placement.ObserveGpu(16, 48 * stream_ms);
      ++steps_on_gpu;
    } else {
      if (steps_on_gpu > 0) ++probes;
      placement.ObserveCpu(16, 48 * cpu_ms);
    }
  };
  for (int i = 0; i < 10; ++i) step();  // learns the load
  probes = 0;
  steps_on_gpu = 0;
  for (int i = 0; i < 200; ++i) step();
  // One probe per kProbeEvery GPU steps.
  const int expected = 200 / static_cast<int>(ExpertPlacement::kProbeEvery + 1);
  EXPECT_EQ(steps_on_gpu + probes, 200);
  EXPECT_GE(probes, expected - 1);
  EXPECT_LE(probes, expected + 1);
  cpu_ms = 2.5;  // the load ends
  int back = -1;
  for (int i = 0; i < 400 && back < 0; ++i) {
    step();
    if (!placement.OnGpu(16) && placement.CpuMs(16) < stream_ms) back = i;
  }
  EXPECT_GE(back, 0);
  EXPECT_LE(back, 3 * static_cast<int>(ExpertPlacement::kProbeEvery) + 3);
  EXPECT_FALSE(placement.OnGpu(16));
  EXPECT_TRUE(placement.OnGpu(4096));
}

// Mixtral-8x7B's routed experts (8 of 2.82 GB per layer over 32 layers) at batch 32 x 32K
// (run 236 on the H200): a layer's stream ~51 ms, the CPU's experts 45-47 ms a layer at its
// slower times, and ~676K of a layer's 1.04M host tokens streamed at a read share of 0.35
// (4 KiB each: ~50 ms at the stream's rate).
TEST(ExpertPlacementTest, TheStepsOwnTransfersCountAgainstTheGpu) {
  const ExpertPlacementParams mixtral{.num_experts = 8,
                                      .top_k = 2,
                                      .moe_layers = 32,
                                      .gpu_streams = true,
                                      .stream_bytes_per_ms = 55e6,
                                      .layer_bytes = 2818572288,
                                      .cpu_ms_per_token = 2.0};
  auto placement = *ExpertPlacement::Create(ExpertMode::kAuto, mixtral);
  EXPECT_NEAR(placement.GpuMs(32), 2818572288 / 55e6, 1e-6);  // ~51.2 ms
  EXPECT_NEAR(placement.LinkMs(55'000'000), 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(placement.LinkMs(0), 0.0);
  // The CPU's experts come to 56 ms a layer, above the stream alone.
  for (int i = 0; i < 10; ++i) placement.ObserveCpu(32, 32 * 56.0);
  ASSERT_NEAR(placement.CpuMs(32), 56.0, 0.1);
  // Nothing streamed (all the step's KV in VRAM): the GPU.
  EXPECT_TRUE(placement.OnGpu(32, 0.0));
  EXPECT_TRUE(placement.OnGpu(32, placement.LinkMs(0)));
  // A step streaming 2 MiB of KV a layer: still the GPU (51.2 + 0.04 < 56).
  EXPECT_TRUE(placement.OnGpu(32, placement.LinkMs(2u << 20)));
  // At 32K the step's own rounds take ~50 ms a layer: the experts' 51 ms come on top of
  // them on the GPU, and run under them on the CPU. The CPU.
  const double rounds_ms = placement.LinkMs(uint64_t{676'000} * 4096);
  EXPECT_NEAR(rounds_ms, 50.34, 0.01);
  EXPECT_FALSE(placement.OnGpu(32, rounds_ms));
  // Not at 95 ms a layer either (below the ~101.6 of both) ...
  for (int i = 0; i < 20; ++i) placement.ObserveCpu(32, 32 * 95.0);
  EXPECT_FALSE(placement.OnGpu(32, rounds_ms));
  // ... but once the CPU is slower than both together (a heavy competing load).
  for (int i = 0; i < 20; ++i) placement.ObserveCpu(32, 32 * 110.0);
  EXPECT_TRUE(placement.OnGpu(32, rounds_ms));
  // A forced mode ignores the link; NaN or a negative time counts as none.
  auto forced = *ExpertPlacement::Create(ExpertMode::kGpu, mixtral);
  EXPECT_TRUE(forced.OnGpu(32, 1e9));
  auto fresh = *ExpertPlacement::Create(ExpertMode::kAuto, mixtral);
  for (int i = 0; i < 10; ++i) fresh.ObserveCpu(32, 32 * 56.0);
  EXPECT_TRUE(fresh.OnGpu(32, NAN));
  EXPECT_TRUE(fresh.OnGpu(32, -100.0));
  // The host device streams nothing: no link time.
  ExpertPlacementParams host = mixtral;
  host.stream_bytes_per_ms = 0;
  EXPECT_DOUBLE_EQ(ExpertPlacement::Create(ExpertMode::kAuto, host)->LinkMs(1 << 30), 0.0);
}

TEST(ExpertPlacementTest, CorrectsTheGpuModelByWhatItMeasures) {
  auto placement = *ExpertPlacement::Create(ExpertMode::kAuto, Qwen3Like());
  const double model = placement.GpuMs(2048);
  EXPECT_TRUE(placement.OnGpu(128));
  // Measured: twice the stream-only model (a stream slower under load).
  for (int i = 0; i < 20; ++i) placement.ObserveGpu(2048, 48 * 2 * model);
  EXPECT_NEAR(placement.gpu_correction(), 2.0, 0.01);
  EXPECT_NEAR(placement.GpuMs(2048), 2 * model, 0.05 * model);
  EXPECT_EQ(placement.gpu_steps(), 20u);
  // The crossing doubles: 128-token chunks go back to the CPU, 512 stay on the GPU.
  EXPECT_FALSE(placement.OnGpu(128));
  EXPECT_TRUE(placement.OnGpu(512));
  // Noise around the truth does not flip a clear decision.
  for (int i = 0; i < 50; ++i) placement.ObserveGpu(2048, 48 * model * (i % 2 ? 2.6 : 1.4));
  EXPECT_TRUE(placement.OnGpu(512));
  EXPECT_FALSE(placement.OnGpu(64));
  // A report that is not a time teaches nothing (an infinite one held the correction at
  // infinity for good).
  const double correction = placement.gpu_correction();
  const uint64_t steps = placement.gpu_steps();
  for (const double bad : {std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN(), -1.0}) {
    placement.ObserveGpu(2048, bad);
    placement.ObserveCpu(2048, bad);
  }
  EXPECT_EQ(placement.gpu_correction(), correction);
  EXPECT_EQ(placement.gpu_steps(), steps);
  EXPECT_TRUE(placement.OnGpu(512));
}

}  // namespace
}  // namespace writescope::coordinator
