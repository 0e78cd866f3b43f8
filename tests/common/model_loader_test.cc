#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/model_weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/model_test_util.h"
#include "tests/common/test_util.h"

namespace writescope {
namespace {

using testing::FolderOptions;
using ::testing::HasSubstr;
using testing::MakeTempDir;
using testing::TestValue;
using testing::TinyConfigJson;
using testing::WriteModelFolder;

// Every tensor of the side is held, has its spec's shape, and holds the values the
// folder was written with.
void ExpectAllValues(const ModelWeights& weights, SideFilter side) {
  size_t expected_count = 0;
  for (const TensorSpec& spec : ExpectedTensors(weights.config())) {
    const Bf16Tensor* tensor = weights.Find(spec.name);
    if (!SideSelected(side, spec.side)) {
      EXPECT_EQ(tensor, nullptr) << spec.name << " should not be held on side "
                                 << SideFilterName(side);
      continue;
    }
    ++expected_count;
    ASSERT_NE(tensor, nullptr) << spec.name;
    EXPECT_EQ(tensor->shape, spec.shape) << spec.name;
    EXPECT_EQ(tensor->side, spec.side) << spec.name;
    for (int64_t i = 0; i < spec.numel(); ++i) {
      ASSERT_EQ(weights_internal::Bf16ToFloat(tensor->data[i]), TestValue(spec.name, i))
          << spec.name << " element " << i << " from " << tensor->origin;
    }
  }
  EXPECT_EQ(weights.num_tensors(), expected_count);
}

class LoaderArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LoaderArchTest, SingleFileAllSides) {
  const std::string dir = MakeTempDir(GetParam());
  WriteModelFolder(dir, TinyConfigJson(GetParam()));
  for (SideFilter side : {SideFilter::kAll, SideFilter::kGpu, SideFilter::kCpu}) {
    LoadProgress progress;
    int callbacks = 0;
    LoadOptions options;
    options.side = side;
    options.populate = true;
    options.progress = &progress;
    options.on_progress = [&](const LoadProgressSnapshot&) { ++callbacks; };
    auto weights = LoadModelFolder(dir, options);
    WS_ASSERT_OK(weights.status());
    ExpectAllValues(**weights, side);
    EXPECT_EQ((*weights)->owned_bytes(), 0u) << "bf16 tensors must be views of the mapping";
    EXPECT_TRUE((*weights)->unused_checkpoint_tensors().empty());
    EXPECT_TRUE(progress.finished.load());
    EXPECT_EQ(progress.tensors_done.load(), (*weights)->num_tensors());
    EXPECT_EQ(progress.bytes_done.load(), progress.bytes_total.load());
    EXPECT_EQ(progress.bytes_done.load(), (*weights)->total_bytes());
    EXPECT_GE(callbacks, 1);
  }
}

TEST_P(LoaderArchTest, FusedTransformers5Layout) {
  const std::string dir = MakeTempDir(GetParam());
  FolderOptions options;
  options.fused_experts = true;
  WriteModelFolder(dir, TinyConfigJson(GetParam()), options);
  auto weights = LoadModelFolder(dir);
  WS_ASSERT_OK(weights.status());
  ExpectAllValues(**weights, SideFilter::kAll);
  EXPECT_EQ((*weights)->owned_bytes(), 0u);
  const Bf16Tensor& gate = (*weights)->RoutedExpert(1, 2, MlpMatrix::kGate);
  EXPECT_THAT(gate.origin, HasSubstr("mlp.experts.gate_up_proj[elements"));
}

TEST_P(LoaderArchTest, ShardedWithIndex) {
  const std::string dir = MakeTempDir(GetParam());
  FolderOptions options;
  options.shards = 3;
  WriteModelFolder(dir, TinyConfigJson(GetParam()), options);
  LoadOptions load;
  load.side = SideFilter::kCpu;
  auto weights = LoadModelFolder(dir, load);
  WS_ASSERT_OK(weights.status());
  ExpectAllValues(**weights, SideFilter::kCpu);
}

TEST_P(LoaderArchTest, ShardedWithoutIndex) {
  const std::string dir = MakeTempDir(GetParam());
  FolderOptions options;
  options.shards = 2;
  options.write_index = false;
  WriteModelFolder(dir, TinyConfigJson(GetParam()), options);
  auto weights = LoadModelFolder(dir);
  WS_ASSERT_OK(weights.status());
  ExpectAllValues(**weights, SideFilter::kAll);
}

TEST_P(LoaderArchTest, Float32AndFloat16AreConvertedOnce) {
  for (SafetensorsDtype dtype : {SafetensorsDtype::kF32, SafetensorsDtype::kF16}) {
    const std::string dir = MakeTempDir(GetParam());
    FolderOptions options;
    options.dtype = dtype;
    options.fused_experts = dtype == SafetensorsDtype::kF16;
    WriteModelFolder(dir, TinyConfigJson(GetParam()), options);
    LoadOptions load;
    load.side = SideFilter::kGpu;
    auto weights = LoadModelFolder(dir, load);
    WS_ASSERT_OK(weights.status());
    ExpectAllValues(**weights, SideFilter::kGpu);
    EXPECT_EQ((*weights)->owned_bytes(), (*weights)->total_bytes());
    EXPECT_THAT((*weights)->At("model.norm.weight").origin, HasSubstr("->BF16"));
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, LoaderArchTest,
                         ::testing::Values("deepseek_v2", "qwen3_moe", "mixtral"));

// A header length that is not a multiple of 2 leaves bf16 data misaligned in the
// mapping: the loader copies instead of handing out unaligned uint16_t pointers.
TEST(LoaderTest, MisalignedDataIsCopied) {
  const std::string dir = MakeTempDir("misaligned");
  WriteModelFolder(dir, TinyConfigJson("mixtral"));
  const std::string path = dir + "/model.safetensors";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  bytes.insert(8 + n, " ");
  ++n;
  std::memcpy(bytes.data(), &n, 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;

  auto weights = LoadModelFolder(dir);
  WS_ASSERT_OK(weights.status());
  ExpectAllValues(**weights, SideFilter::kAll);
  EXPECT_EQ((*weights)->owned_bytes(), (*weights)->total_bytes());
  for (const TensorSpec& spec : (*weights)->specs()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*weights)->At(spec.name).data) % 2, 0u);
  }
}

TEST(LoaderTest, ACancelledLoadReturnsCancelled) {
  const std::string dir = MakeTempDir("cancelled");
  WriteModelFolder(dir, TinyConfigJson("qwen3_moe"));
  LoadProgress progress;
  progress.cancelled = true;
  LoadOptions options;
  options.progress = &progress;
  auto weights = LoadModelFolder(dir, options);
  EXPECT_EQ(weights.status().code(), absl::StatusCode::kCancelled) << weights.status();
  EXPECT_EQ(progress.bytes_done.load(), 0u);
}

TEST(LoaderTest, MissingTensorsAreNamed) {
  const std::string dir = MakeTempDir("missing");
  FolderOptions options;
  options.omit = {"model.layers.1.self_attn.q_norm.weight",
                  "model.layers.0.mlp.experts.3.down_proj.weight"};
  WriteModelFolder(dir, TinyConfigJson("qwen3_moe"), options);
  auto weights = LoadModelFolder(dir);
  ASSERT_FALSE(weights.ok());
  EXPECT_EQ(weights.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(weights.status().message(), HasSubstr("2 expected tensor(s) missing"));
  EXPECT_THAT(weights.status().message(), HasSubstr("model.layers.1.self_attn.q_norm.weight"));
  EXPECT_THAT(weights.status().message(),
              HasSubstr("model.layers.0.mlp.experts.3.down_proj.weight"));
  EXPECT_THAT(weights.status().message(), HasSubstr(dir));

  // The GPU worker refuses the broken checkpoint too, though it would not hold experts.
  LoadOptions gpu;
  gpu.side = SideFilter::kGpu;
  EXPECT_FALSE(LoadModelFolder(dir, gpu).ok());
}

TEST(LoaderTest, WrongShapeIsNamedWithFile) {
  const std::string dir = MakeTempDir("shape");
  FolderOptions options;
  options.reshape = {{"model.layers.0.self_attn.kv_b_proj.weight", {32, 16}}};
  WriteModelFolder(dir, TinyConfigJson("deepseek_v2"), options);
  auto weights = LoadModelFolder(dir);
  ASSERT_FALSE(weights.ok());
  EXPECT_THAT(weights.status().message(),
              HasSubstr("tensor model.layers.0.self_attn.kv_b_proj.weight in " + dir +
                        "/model.safetensors has shape [32, 16], expected [64, 16]"));
}

TEST(LoaderTest, WrongFusedShapeNamesTheCanonicalTensor) {
  const std::string dir = MakeTempDir("fused-shape");
  FolderOptions options;
  options.fused_experts = true;
  options.reshape = {{"model.layers.1.mlp.experts.down_proj", {4, 16, 32}}};
  WriteModelFolder(dir, TinyConfigJson("mixtral"), options);
  auto weights = LoadModelFolder(dir);
  ASSERT_FALSE(weights.ok());
  EXPECT_THAT(weights.status().message(),
              HasSubstr("tensor model.layers.1.mlp.experts.down_proj in "));
  EXPECT_THAT(weights.status().message(), HasSubstr("has shape [4, 16, 32], expected [4, 32, 16]"));
  EXPECT_THAT(weights.status().message(),
              HasSubstr("(holding model.layers.1.block_sparse_moe.experts.0.w2.weight)"));
}

TEST(LoaderTest, ExtraTensorsWarnOrFail) {
  const std::string dir = MakeTempDir("extra");
  FolderOptions options;
  options.extra = {"model.layers.0.self_attn.rotary_emb.inv_freq"};
  WriteModelFolder(dir, TinyConfigJson("mixtral"), options);
  auto weights = LoadModelFolder(dir);
  WS_ASSERT_OK(weights.status());
  ASSERT_EQ((*weights)->unused_checkpoint_tensors().size(), 1u);
  EXPECT_THAT((*weights)->unused_checkpoint_tensors()[0],
              HasSubstr("model.layers.0.self_attn.rotary_emb.inv_freq"));

  LoadOptions strict;
  strict.strict_unused = true;
  auto refused = LoadModelFolder(dir, strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("1 checkpoint tensor(s) not part of the mixtral model: "
                        "model.layers.0.self_attn.rotary_emb.inv_freq"));
}

TEST(LoaderTest, TiedEmbeddingsShareTheEmbedding) {
  const std::string dir = MakeTempDir("tied");
  nlohmann::json config = TinyConfigJson("qwen3_moe");
  config["tie_word_embeddings"] = true;
  FolderOptions options;
  options.omit = {"lm_head.weight"};
  WriteModelFolder(dir, config, options);
  LoadOptions gpu;
  gpu.side = SideFilter::kGpu;
  auto weights = LoadModelFolder(dir, gpu);
  WS_ASSERT_OK(weights.status());
  EXPECT_EQ((*weights)->At("lm_head.weight").data,
            (*weights)->At("model.embed_tokens.weight").data);
}

TEST(LoaderTest, FolderProblems) {
  auto missing = LoadModelFolder("/nonexistent/model");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  const std::string no_config = MakeTempDir("noconfig");
  auto result = LoadModelFolder(no_config);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("has no config.json"));

  const std::string no_weights = MakeTempDir("noweights");
  std::ofstream(no_weights + "/config.json") << TinyConfigJson("mixtral").dump();
  result = LoadModelFolder(no_weights);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("has no *.safetensors file"));

  const std::string llama = MakeTempDir("llama");
  nlohmann::json config = TinyConfigJson("mixtral");
  config["model_type"] = "llama";
  std::ofstream(llama + "/config.json") << config.dump();
  result = LoadModelFolder(llama);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("unsupported model_type 'llama'"));
  EXPECT_THAT(result.status().message(), HasSubstr(llama + "/config.json"));
}

TEST(LoaderTest, IndexProblems) {
  const std::string dir = MakeTempDir("index");
  FolderOptions options;
  options.shards = 2;
  WriteModelFolder(dir, TinyConfigJson("mixtral"), options);
  const std::string index_path = dir + "/model.safetensors.index.json";
  nlohmann::json index;
  std::ifstream(index_path) >> index;

  // A shard the index names but that is gone.
  std::filesystem::remove(dir + "/model-00002-of-00002.safetensors");
  auto result = LoadModelFolder(dir);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr("shard model-00002-of-00002.safetensors named by "
                        "model.safetensors.index.json does not exist"));

  // An index entry pointing at the wrong shard.
  const std::string dir2 = MakeTempDir("index2");
  WriteModelFolder(dir2, TinyConfigJson("mixtral"), options);
  index["weight_map"]["model.norm.weight"] =
      index["weight_map"]["model.norm.weight"] == "model-00001-of-00002.safetensors"
          ? "model-00002-of-00002.safetensors"
          : "model-00001-of-00002.safetensors";
  std::ofstream(dir2 + "/model.safetensors.index.json") << index.dump();
  result = LoadModelFolder(dir2);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("tensor model.norm.weight is listed in"));

  // Path traversal in the index.
  index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  std::ofstream(dir2 + "/model.safetensors.index.json") << index.dump();
  result = LoadModelFolder(dir2);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("names an invalid shard"));
}

TEST(LoaderTest, DuplicateTensorAcrossShards) {
  const std::string dir = MakeTempDir("dup");
  WriteModelFolder(dir, TinyConfigJson("mixtral"));
  WS_ASSERT_OK(WriteSafetensors(
      dir + "/more.safetensors",
      {{"model.norm.weight", SafetensorsDtype::kBF16, {32}, std::string(64, '\0')}}));
  auto result = LoadModelFolder(dir);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("tensor model.norm.weight is in both"));
}

TEST(LoaderTest, UnsupportedDtypeIsNamed) {
  const std::string dir = MakeTempDir("dtype");
  FolderOptions options;
  options.omit = {"model.norm.weight"};
  WriteModelFolder(dir, TinyConfigJson("mixtral"), options);
  WS_ASSERT_OK(WriteSafetensors(
      dir + "/norm.safetensors",
      {{"model.norm.weight", SafetensorsDtype::kI64, {32}, std::string(256, '\0')}}));
  auto result = LoadModelFolder(dir);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(),
              HasSubstr("tensor model.norm.weight in " + dir +
                        "/norm.safetensors has dtype I64 (supported: BF16, F16, F32)"));
}

TEST(LoaderTest, CorruptShardIsNamed) {
  const std::string dir = MakeTempDir("corrupt");
  WriteModelFolder(dir, TinyConfigJson("mixtral"));
  std::filesystem::resize_file(dir + "/model.safetensors",
                               std::filesystem::file_size(dir + "/model.safetensors") - 10);
  auto result = LoadModelFolder(dir);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr(dir + "/model.safetensors"));
  EXPECT_THAT(result.status().message(), HasSubstr("truncated file?"));
}

TEST(Bf16ConversionTest, Conversions) {
  using weights_internal::Bf16ToFloat;
  using weights_internal::FloatToBf16;
  using weights_internal::HalfToBf16;
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  // Round to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(FloatToBf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_EQ(HalfToBf16(0x3c00), 0x3f80);  // 1.0
  EXPECT_EQ(HalfToBf16(0xc000), 0xc000);  // -2.0
  EXPECT_EQ(HalfToBf16(0x0000), 0x0000);
  EXPECT_EQ(HalfToBf16(0x7c00), 0x7f80);                              // +inf
  EXPECT_EQ(Bf16ToFloat(HalfToBf16(0x0001)), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(Bf16ToFloat(HalfToBf16(0x0200)), std::ldexp(1.0f, -15));  // subnormal
  EXPECT_EQ(Bf16ToFloat(HalfToBf16(0x7bff)), 65536.0f);  // 65504 rounds to 2^16 in bf16
  EXPECT_TRUE(std::isnan(Bf16ToFloat(HalfToBf16(0x7e00))));
}

}  // namespace
}  // namespace writescope
