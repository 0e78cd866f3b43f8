#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include "common/model_weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/model_test_util.h"
#include "tests/common/test_util.h"

namespace writescope {
namespace {

using weights_internal::Bf16ToFloat;

ModelConfig Config(absl::string_view arch, int64_t layers) {
  auto config = ModelConfig::ForSyntheticArch(arch, layers);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// A small config of real structure (real configs at 2 layers are still ~1 GB).
ModelConfig SmallConfig(absl::string_view arch) {
  auto config = ModelConfig::FromJson(testing::TinyConfigJson(arch).dump(), "tiny");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

class SyntheticArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SyntheticArchTest, ShapesAndWorkerSplit) {
  const ModelConfig config = SmallConfig(GetParam());
  for (SideFilter side : {SideFilter::kAll, SideFilter::kGpu, SideFilter::kCpu}) {
    SyntheticOptions options;
    options.side = side;
    options.seed = 7;
    LoadProgress progress;
    options.progress = &progress;
    auto weights = MakeSyntheticWeights(config, options);
    WS_ASSERT_OK(weights.status());
    size_t held = 0;
    for (const TensorSpec& spec : ExpectedTensors(config)) {
      const Bf16Tensor* tensor = (*weights)->Find(spec.name);
      if (!SideSelected(side, spec.side)) {
        EXPECT_EQ(tensor, nullptr) << spec.name;
        continue;
      }
      ++held;
      ASSERT_NE(tensor, nullptr) << spec.name;
      EXPECT_EQ(tensor->shape, spec.shape);
      EXPECT_EQ(tensor->side, spec.side);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor->data) % 64, 0u) << spec.name;
      EXPECT_EQ(spec.side == WorkerSide::kCpu, spec.is_routed_expert()) << spec.name;
    }
    EXPECT_EQ((*weights)->num_tensors(), held);
    EXPECT_EQ((*weights)->owned_bytes(), (*weights)->total_bytes());
    EXPECT_TRUE(progress.finished.load());
    EXPECT_EQ(progress.tensors_done.load(), held);
    EXPECT_EQ(progress.bytes_done.load(), progress.bytes_total.load());
  }
}

TEST_P(SyntheticArchTest, SameInterfaceAsTheLoader) {
  // The accessors callers use work the same on synthetic weights.
  const ModelConfig config = SmallConfig(GetParam());
  auto weights = MakeSyntheticWeights(config, {});
  WS_ASSERT_OK(weights.status());
  const int64_t moe_layer = config.num_layers - 1;
  ASSERT_TRUE(config.IsMoeLayer(moe_layer));
  const Bf16Tensor& down = (*weights)->RoutedExpert(moe_layer, 1, MlpMatrix::kDown);
  EXPECT_EQ(down.shape, (std::vector<int64_t>{config.hidden_size, config.moe_intermediate_size}));
  EXPECT_EQ((*weights)->Router(moe_layer).shape,
            (std::vector<int64_t>{config.n_routed_experts, config.hidden_size}));
  EXPECT_EQ((*weights)->Get("model.layers.0.nonexistent.weight").status().code(),
            absl::StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Archs, SyntheticArchTest,
                         ::testing::Values("deepseek_v2", "qwen3_moe", "mixtral"));

TEST(SyntheticTest, DeterministicBySeedAndIndependentOfSideAndThreads) {
  const ModelConfig config = SmallConfig("qwen3_moe");
  SyntheticOptions all;
  all.seed = 42;
  auto a = MakeSyntheticWeights(config, all);
  WS_ASSERT_OK(a.status());

  SyntheticOptions cpu = all;
  cpu.side = SideFilter::kCpu;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  auto b = MakeSyntheticWeights(config, cpu);
  omp_set_num_threads(threads);
  WS_ASSERT_OK(b.status());

  SyntheticOptions other = all;
  other.seed = 43;
  auto c = MakeSyntheticWeights(config, other);
  WS_ASSERT_OK(c.status());

  int differing = 0;
  for (const TensorSpec& spec : (*b)->specs()) {
    const Bf16Tensor& x = (*a)->At(spec.name);
    const Bf16Tensor& y = (*b)->At(spec.name);
    ASSERT_EQ(std::memcmp(x.data, y.data, x.bytes()), 0) << spec.name;
    differing += std::memcmp(x.data, (*c)->At(spec.name).data, x.bytes()) != 0;
  }
  EXPECT_EQ(differing, static_cast<int>((*b)->num_tensors()));
}

TEST(SyntheticTest, SensibleScales) {
  // Real Mixtral shapes, one layer, GPU side only (~0.6 GB would be the CPU side).
  const ModelConfig config = Config("mixtral", 1);
  SyntheticOptions options;
  options.side = SideFilter::kGpu;
  auto weights = MakeSyntheticWeights(config, options);
  WS_ASSERT_OK(weights.status());

  auto stats = [](const Bf16Tensor& t) {
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = Bf16ToFloat(t.data[i]);
      sum += v;
      sum_sq += v * v;
    }
    const double mean = sum / t.numel();
    return std::pair<double, double>{mean, std::sqrt(sum_sq / t.numel() - mean * mean)};
  };
  auto [q_mean, q_std] = stats((*weights)->At("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_NEAR(q_mean, 0.0, 1e-3);
  EXPECT_NEAR(q_std, 1.0 / std::sqrt(4096.0), 0.02 / std::sqrt(4096.0) * 10);
  auto [n_mean, n_std] = stats((*weights)->At("model.layers.0.input_layernorm.weight"));
  EXPECT_NEAR(n_mean, 1.0, 0.01);
  EXPECT_NEAR(n_std, 0.05, 0.01);
  auto [e_mean, e_std] = stats((*weights)->At("model.embed_tokens.weight"));
  EXPECT_NEAR(e_mean, 0.0, 1e-2);
  EXPECT_NEAR(e_std, 1.0, 0.02);
}

TEST(SyntheticTest, RealShapesCpuSideOneLayer) {
  // DeepSeek-V2-Lite, 2 layers (layer 0 dense): the CPU side is layer 1's 64 experts.
  const ModelConfig config = Config("deepseek_v2", 2);
  SyntheticOptions options;
  options.side = SideFilter::kCpu;
  auto weights = MakeSyntheticWeights(config, options);
  WS_ASSERT_OK(weights.status());
  EXPECT_EQ((*weights)->num_tensors(), 64u * 3);
  EXPECT_EQ((*weights)->total_bytes(), 64u * 3 * 1408 * 2048 * 2);
}

// A worker that is stopping cancels its load: set before the start, nothing is generated;
// set from another thread while the chunks are being written, it returns CANCELLED soon
// (or OK if it had just finished).
TEST(SyntheticTest, CancelledLoadsReturnCancelled) {
  const ModelConfig config = Config("qwen3_moe", 1);  // the CPU side: ~1.2 GB of experts
  {
    LoadProgress progress;
    progress.cancelled = true;
    SyntheticOptions options;
    options.side = SideFilter::kCpu;
    options.progress = &progress;
    auto weights = MakeSyntheticWeights(config, options);
    EXPECT_EQ(weights.status().code(), absl::StatusCode::kCancelled) << weights.status();
    EXPECT_EQ(progress.bytes_done.load(), 0u);
    EXPECT_FALSE(progress.finished.load());
  }
  LoadProgress progress;
  SyntheticOptions options;
  options.side = SideFilter::kCpu;
  options.progress = &progress;
  uint64_t done_at_cancel = 0, total = 0;
  std::thread canceller([&] {
    while (progress.bytes_done.load() == 0 && !progress.finished.load()) std::this_thread::yield();
    done_at_cancel = progress.bytes_done.load();
    total = progress.bytes_total.load();
    progress.cancelled = true;
  });
  auto weights = MakeSyntheticWeights(config, options);
  canceller.join();
  if (done_at_cancel < total) {
    EXPECT_EQ(weights.status().code(), absl::StatusCode::kCancelled) << weights.status();
    EXPECT_THAT(std::string(weights.status().message()), ::testing::HasSubstr("cancelled"));
    EXPECT_LT(progress.bytes_done.load(), total);
  } else {
    WS_EXPECT_OK(weights.status());
  }
}

// Two loaders of the same side with one shared name (the cpu_worker and the gpu_worker's
// copy for streaming): one generates, the other maps the segment and waits; both see the
// same values as a private generation, and the segment is one copy.
TEST(SyntheticTest, ASharedNameHoldsOneCopyForBothLoaders) {
  const ModelConfig config = SmallConfig("qwen3_moe");
  const std::string name = "/ws-test-" + std::to_string(getpid()) + "-shared";
  shm_unlink(name.c_str());
  SyntheticOptions options;
  options.side = SideFilter::kCpu;
  options.seed = 7;
  auto reference = MakeSyntheticWeights(config, options);
  WS_ASSERT_OK(reference.status());

  options.shared_name = name;
  LoadProgress first_progress, second_progress;
  absl::StatusOr<std::unique_ptr<ModelWeights>> first = absl::UnknownError("not run");
  absl::StatusOr<std::unique_ptr<ModelWeights>> second = absl::UnknownError("not run");
  std::thread a([&] {
    SyntheticOptions o = options;
    o.progress = &first_progress;
    first = MakeSyntheticWeights(config, o);
  });
  std::thread b([&] {
    SyntheticOptions o = options;
    o.progress = &second_progress;
    second = MakeSyntheticWeights(config, o);
  });
  a.join();
  b.join();
  WS_ASSERT_OK(first.status());
  WS_ASSERT_OK(second.status());
  EXPECT_TRUE(first_progress.finished.load() && second_progress.finished.load());
  for (const TensorSpec& spec : (*reference)->specs()) {
    const Bf16Tensor& want = (*reference)->At(spec.name);
    ASSERT_EQ(std::memcmp(want.data, (*first)->At(spec.name).data, want.bytes()), 0) << spec.name;
    ASSERT_EQ(std::memcmp(want.data, (*second)->At(spec.name).data, want.bytes()), 0)
        << spec.name;
  }
  // One segment holds them: a header page plus the weights.
  struct stat st;
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fstat(fd, &st), 0);
  close(fd);
  EXPECT_GE(static_cast<uint64_t>(st.st_size), (*reference)->total_bytes());
  EXPECT_LT(static_cast<uint64_t>(st.st_size), (*reference)->total_bytes() + 64 * 1024 * 1024);
  // A third loader after the fact maps the finished segment without generating.
  LoadProgress third_progress;
  SyntheticOptions o = options;
  o.progress = &third_progress;
  auto third = MakeSyntheticWeights(config, o);
  WS_ASSERT_OK(third.status());
  const TensorSpec& spec = (*reference)->specs().front();
  EXPECT_EQ(std::memcmp((*reference)->At(spec.name).data, (*third)->At(spec.name).data,
                        (*reference)->At(spec.name).bytes()),
            0);
  // One copy: a value written through one loader's mapping reads back through the other's.
  auto* first_data = const_cast<uint16_t*>((*first)->At(spec.name).data);
  const uint16_t saved = first_data[0];
  first_data[0] = static_cast<uint16_t>(saved ^ 0x5a5a);
  EXPECT_EQ((*second)->At(spec.name).data[0], static_cast<uint16_t>(saved ^ 0x5a5a));
  EXPECT_EQ((*third)->At(spec.name).data[0], static_cast<uint16_t>(saved ^ 0x5a5a));
  first_data[0] = saved;
  // The name goes; the mappings stay valid.
  ASSERT_EQ(shm_unlink(name.c_str()), 0);
  EXPECT_EQ(std::memcmp((*reference)->At(spec.name).data, (*first)->At(spec.name).data,
                        (*reference)->At(spec.name).bytes()),
            0);
}

// No room for the segment beside what must stay free (the KV arena): private memory, the
// same values, and no segment left behind.
TEST(SyntheticTest, WithoutRoomTheWeightsGoToPrivateMemory) {
  const ModelConfig config = SmallConfig("qwen3_moe");
  const std::string name = "/ws-test-" + std::to_string(getpid()) + "-full";
  shm_unlink(name.c_str());
  SyntheticOptions options;
  options.side = SideFilter::kCpu;
  auto reference = MakeSyntheticWeights(config, options);
  WS_ASSERT_OK(reference.status());
  options.shared_name = name;
  options.shared_reserve_bytes = uint64_t{1} << 60;
  auto weights = MakeSyntheticWeights(config, options);
  WS_ASSERT_OK(weights.status());
  for (const TensorSpec& spec : (*reference)->specs()) {
    const Bf16Tensor& want = (*reference)->At(spec.name);
    ASSERT_EQ(std::memcmp(want.data, (*weights)->At(spec.name).data, want.bytes()), 0);
  }
  EXPECT_LT(shm_open(name.c_str(), O_RDONLY, 0), 0);
  EXPECT_EQ(errno, ENOENT);
}

// A segment of that name holding something else: left alone, the weights go to private
// memory (sharing saves memory, it is not needed to serve).
TEST(SyntheticTest, ASharedNameOfAnotherSizeFallsBackToPrivateMemory) {
  const std::string name = "/ws-test-" + std::to_string(getpid()) + "-other";
  shm_unlink(name.c_str());
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4097), 0);
  close(fd);
  SyntheticOptions options;
  options.side = SideFilter::kCpu;
  options.shared_name = name;
  auto weights = MakeSyntheticWeights(SmallConfig("mixtral"), options);
  WS_ASSERT_OK(weights.status());
  SyntheticOptions plain;
  plain.side = SideFilter::kCpu;
  auto reference = MakeSyntheticWeights(SmallConfig("mixtral"), plain);
  WS_ASSERT_OK(reference.status());
  for (const TensorSpec& spec : (*reference)->specs()) {
    const Bf16Tensor& want = (*reference)->At(spec.name);
    ASSERT_EQ(std::memcmp(want.data, (*weights)->At(spec.name).data, want.bytes()), 0);
  }
  struct stat st;
  const int check = shm_open(name.c_str(), O_RDONLY, 0);
  ASSERT_GE(check, 0);  // the other segment is still there, untouched
  ASSERT_EQ(fstat(check, &st), 0);
  close(check);
  EXPECT_EQ(st.st_size, 4097);
  shm_unlink(name.c_str());
}

TEST(SyntheticTest, TiedEmbeddings) {
  nlohmann::json json = testing::TinyConfigJson("mixtral");
  json["tie_word_embeddings"] = true;
  auto config = ModelConfig::FromJson(json.dump(), "tied");
  WS_ASSERT_OK(config.status());
  auto weights = MakeSyntheticWeights(*config, {});
  WS_ASSERT_OK(weights.status());
  EXPECT_EQ((*weights)->At("lm_head.weight").data,
            (*weights)->At("model.embed_tokens.weight").data);
}

}  // namespace
}  // namespace writescope
