// CUDA causal prefill against the double reference, on the real split of a chunked
// prefill step: the CPU partial over the CPU-region blocks of earlier chunks
// (CpuGqaPrefill / CpuMlaPrefill), the GPU partial over the ping-pong tiles of earlier
// chunks plus the chunk's own tiles (GqaGpuPrefill / MlaGpuPrefill, tiles listed in
// shuffled order from two buffers), merged on the GPU (GpuMergeStates). Skips without a
// CUDA device. Label: gpu.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/attention_reference.h"
#include "kernels/attention_state.h"
#include "kernels/cpu_attention.h"
#include "kernels/cuda/cuda_attention.h"
#include "tests/common/test_util.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace writescope::kernels::cuda {
namespace {

using kernels::testing::Compare;
using kernels::testing::ErrorStats;
using kernels::testing::FillRandomBf16;
using kernels::testing::kBf16Nan;

// Same contract as the decode (P split into bf16 hi + lo): measured max |o - ref| is
// ~2.4e-6 on these shapes (docs/notes/cuda_prefill.md).
constexpr double kOutputTol = 2e-5;
constexpr double kLseTol = 1e-4;
constexpr float kGuardValue = 12345.0f;
constexpr int64_t kGuard = 64;

// Every buffer, an empty one too, is a valid device pointer of at least 256 bytes.
using DeviceBuffer = testing::BasicDeviceBuffer<256>;

// A device float buffer of n values between kGuard guard words on each side; the payload
// starts as NaN so a value the kernel forgets to write fails the comparison.
class GuardedDeviceFloats {
 public:
  explicit GuardedDeviceFloats(size_t n) : n_(n) {
    std::vector<float> host(n + 2 * kGuard, kGuardValue);
    std::fill(host.begin() + kGuard, host.end() - kGuard, std::nanf(""));
    buffer_ = DeviceBuffer::From(host);
  }
  float* data() const { return buffer_.as<float>() + kGuard; }
  // Payload; fails the test if a guard word changed.
  std::vector<float> Payload() const {
    const std::vector<float> all = buffer_.ToHost<float>();
    for (int64_t i = 0; i < kGuard; ++i) {
      EXPECT_EQ(all[i], kGuardValue) << "guard before, word " << i;
      EXPECT_EQ(all[all.size() - 1 - i], kGuardValue) << "guard after, word " << i;
    }
    return std::vector<float>(all.begin() + kGuard, all.end() - kGuard);
  }

 private:
  size_t n_;
  DeviceBuffer buffer_;
};

struct PrefillCase {
  const char* name;
  int32_t q_heads, kv_heads, head_dim, block_tokens;
};
void PrintTo(const PrefillCase& c, std::ostream* os) { *os << c.name; }
constexpr PrefillCase kCases[] = {
    {"Qwen3", 32, 4, 128, 256},
    {"Mixtral", 32, 8, 128, 64},
    {"Odd6x3d64", 6, 3, 64, 32},
    {"Group3", 12, 4, 128, 64},   // 128 rows a CTA hold 42 queries and 2 unused rows
    {"Group16", 32, 2, 64, 32},   // 8 queries a CTA
};
constexpr int32_t kChunkLengths[] = {1, 5, 77, 255, 257};
constexpr int64_t kPriorTokens[] = {0, 100, 1000};

// Where the whole blocks of earlier chunks sit.
enum class PriorSplit { kAllCpu, kAllGpu, kRandom };
std::string SplitName(PriorSplit s) {
  switch (s) {
    case PriorSplit::kAllCpu: return "AllCpu";
    case PriorSplit::kAllGpu: return "AllGpu";
    case PriorSplit::kRandom: return "Random";
  }
  return "?";
}
constexpr PriorSplit kSplits[] = {PriorSplit::kAllCpu, PriorSplit::kAllGpu, PriorSplit::kRandom};

GqaShape ShapeOf(const PrefillCase& c) {
  return {c.q_heads, c.kv_heads, c.head_dim, c.block_tokens,
          1.0f / std::sqrt(static_cast<float>(c.head_dim))};
}

// One sequence of prior + chunk tokens in blocks of block_tokens (block b holds positions
// [b * block_tokens, ...)). Blocks wholly before the chunk go to the CPU or the ping-pong
// buffer; the blocks the chunk touches (also holding the prior tokens of a shared block)
// are the chunk's own GPU tiles. Slots past a block's tokens hold NaN.
struct Sequence {
  std::vector<std::vector<uint16_t>> blocks;
  std::vector<int64_t> positions;
  std::vector<int32_t> tokens;
  std::vector<bool> on_cpu;
  std::vector<bool> chunk_own;
};

// `fill(tile, n)` writes the first n tokens of a fresh tile (the rest stay NaN).
template <typename Fill>
Sequence MakeSequence(int32_t block_tokens, int64_t tile_values, int64_t prior, int32_t chunk,
                      PriorSplit split, std::mt19937_64& rng, Fill fill) {
  Sequence seq;
  const int64_t total = prior + chunk;
  std::uniform_int_distribution<int> coin(0, 1);
  for (int64_t b0 = 0; b0 < total; b0 += block_tokens) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(block_tokens, total - b0));
    std::vector<uint16_t> tile(tile_values, kBf16Nan);
    fill(tile.data(), n);
    const bool own = b0 + n > prior;
    seq.blocks.push_back(std::move(tile));
    seq.positions.push_back(b0);
    seq.tokens.push_back(n);
    seq.chunk_own.push_back(own);
    seq.on_cpu.push_back(!own && (split == PriorSplit::kAllCpu ||
                                  (split == PriorSplit::kRandom && coin(rng) == 1)));
  }
  return seq;
}

Sequence MakeSequence(const GqaShape& s, int64_t prior, int32_t chunk, PriorSplit split,
                      std::mt19937_64& rng) {
  const int64_t tile_values = int64_t{2} * s.num_kv_heads * s.block_tokens * s.head_dim;
  return MakeSequence(s.block_tokens, tile_values, prior, chunk, split, rng,
                      [&](uint16_t* tile, int32_t n) {
    for (int32_t h = 0; h < 2 * s.num_kv_heads; ++h) {
      FillRandomBf16(tile + int64_t{h} * s.block_tokens * s.head_dim, int64_t{n} * s.head_dim,
                     rng, h < s.num_kv_heads ? 2.0f : 1.0f);
    }
  });
}

Sequence MakeSequence(const MlaShape& s, int64_t prior, int32_t chunk, PriorSplit split,
                      std::mt19937_64& rng) {
  return MakeSequence(s.block_tokens, int64_t{s.block_tokens} * s.row_dim(), prior, chunk, split,
                      rng, [&](uint16_t* tile, int32_t n) {
    FillRandomBf16(tile, int64_t{n} * s.row_dim(), rng, 1.0f);
  });
}

// Host block list (in sequence order) over a subset of blocks; all but the last are full.
struct HostList {
  std::vector<const uint16_t*> pointers;
  std::vector<int64_t> positions;
  KvBlockList list;
  HostList(const Sequence& seq, const std::function<bool(size_t)>& take) {
    int32_t last = 0;
    for (size_t b = 0; b < seq.blocks.size(); ++b) {
      if (!take(b)) continue;
      pointers.push_back(seq.blocks[b].data());
      positions.push_back(seq.positions[b]);
      last = seq.tokens[b];
    }
    list.blocks = pointers.data();
    list.num_blocks = static_cast<int32_t>(pointers.size());
    list.last_block_tokens = last;
    list.block_positions = positions.data();
  }
};

// The GPU's tiles: prior ping-pong tiles packed in one buffer, the chunk's own tiles in
// another, listed in shuffled order.
struct DeviceTiles {
  DeviceBuffer ping_pong, own, pointers, positions, tokens;
  GpuKvTileList list;
  DeviceTiles(const Sequence& seq, std::mt19937_64& rng) {
    std::vector<uint16_t> packed_prior, packed_own;
    std::vector<std::pair<bool, size_t>> where;  // (own, index in its buffer)
    std::vector<size_t> gpu_blocks;
    for (size_t b = 0; b < seq.blocks.size(); ++b) {
      if (seq.on_cpu[b]) continue;
      auto& packed = seq.chunk_own[b] ? packed_own : packed_prior;
      where.emplace_back(seq.chunk_own[b], packed.size());
      packed.insert(packed.end(), seq.blocks[b].begin(), seq.blocks[b].end());
      gpu_blocks.push_back(b);
    }
    ping_pong = DeviceBuffer::From(packed_prior);
    own = DeviceBuffer::From(packed_own);
    std::vector<size_t> order(gpu_blocks.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<const uint16_t*> ptrs;
    std::vector<int64_t> pos;
    std::vector<int32_t> toks;
    for (size_t i : order) {
      const uint16_t* base = where[i].first ? own.as<const uint16_t>() : ping_pong.as<const uint16_t>();
      ptrs.push_back(base + where[i].second);
      pos.push_back(seq.positions[gpu_blocks[i]]);
      toks.push_back(seq.tokens[gpu_blocks[i]]);
    }
    pointers = DeviceBuffer::From(ptrs);
    positions = DeviceBuffer::From(pos);
    tokens = DeviceBuffer::From(toks);
    list.tiles = pointers.as<const uint16_t* const>();
    list.positions = positions.as<const int64_t>();
    list.tokens = tokens.as<const int32_t>();
    list.num_tiles = static_cast<int32_t>(ptrs.size());
  }
};

void ExpectClose(const std::vector<float>& o, const std::vector<float>& lse,
                 const std::vector<float>& ref_o, const std::vector<float>& ref_lse,
                 const std::string& what) {
  const ErrorStats eo = Compare(o.data(), ref_o.data(), o.size());
  const ErrorStats el = Compare(lse.data(), ref_lse.data(), lse.size());
  EXPECT_EQ(eo.bad, 0) << what;
  EXPECT_EQ(el.bad, 0) << what;
  EXPECT_LE(eo.max_abs, kOutputTol) << what << " nmse=" << eo.nmse;
  EXPECT_LE(el.max_abs, kLseTol) << what;
  std::printf("%s: o max_abs=%.3g nmse=%.3g lse max_abs=%.3g\n", what.c_str(), eo.max_abs,
              eo.nmse, el.max_abs);
}

class GqaGpuPrefillTest
    : public ::testing::TestWithParam<std::tuple<PrefillCase, int32_t, int64_t, PriorSplit>> {};

TEST_P(GqaGpuPrefillTest, CpuPlusGpuMergedOnGpuEqualsReference) {
  SKIP_WITHOUT_GPU();
  const auto& [c, chunk, prior, split] = GetParam();
  const GqaShape shape = ShapeOf(c);
  std::mt19937_64 rng(std::hash<std::string>{}(
      absl::StrCat(c.name, chunk, "/", prior, static_cast<int>(split))));
  const Sequence seq = MakeSequence(shape, prior, chunk, split, rng);
  std::vector<uint16_t> q(int64_t{chunk} * shape.num_q_heads * shape.head_dim);
  FillRandomBf16(q.data(), q.size(), rng, 2.0f);
  const int64_t rows = int64_t{chunk} * shape.num_q_heads;

  HostList all(seq, [](size_t) { return true; });
  HostList cpu(seq, [&seq](size_t b) { return bool{seq.on_cpu[b]}; });
  std::vector<float> ref_o(rows * shape.head_dim), ref_lse(rows);
  WS_ASSERT_OK(ReferenceGqaPrefill({shape, chunk, prior, q.data(), all.list, ref_o.data(), ref_lse.data()}));
  std::vector<float> cpu_o(rows * shape.head_dim), cpu_lse(rows);
  WS_ASSERT_OK(CpuGqaPrefill({shape, chunk, prior, q.data(), cpu.list, cpu_o.data(), cpu_lse.data()}));

  DeviceTiles tiles(seq, rng);
  DeviceBuffer q_d = DeviceBuffer::From(q);
  GuardedDeviceFloats o(rows * shape.head_dim), lse(rows);
  GqaGpuPrefillArgs args;
  args.shape = shape;
  args.num_queries = chunk;
  args.query_position0 = prior;
  args.q = q_d.as<const uint16_t>();
  args.keys = tiles.list;
  args.o = o.data();
  args.lse = lse.data();
  WS_ASSERT_OK(GqaGpuPrefill(args, nullptr));
  DeviceBuffer cpu_o_d = DeviceBuffer::From(cpu_o), cpu_lse_d = DeviceBuffer::From(cpu_lse);
  WS_ASSERT_OK(GpuMergeStates(o.data(), lse.data(), cpu_o_d.as<float>(), cpu_lse_d.as<float>(),
                              o.data(), lse.data(), rows, shape.head_dim, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectClose(o.Payload(), lse.Payload(), ref_o, ref_lse,
              absl::StrCat(c.name, " chunk", chunk, " prior", prior, " ", SplitName(split),
                           " gpu_tiles", tiles.list.num_tiles));
}

INSTANTIATE_TEST_SUITE_P(Shapes, GqaGpuPrefillTest,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::ValuesIn(kChunkLengths),
                                            ::testing::ValuesIn(kPriorTokens),
                                            ::testing::ValuesIn(kSplits)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param).name, "_C",
                                               std::get<1>(info.param), "_P",
                                               std::get<2>(info.param), "_",
                                               SplitName(std::get<3>(info.param)));
                         });

TEST(GqaGpuPrefillEdgeTest, EmptyChunkWritesNothing) {
  SKIP_WITHOUT_GPU();
  GuardedDeviceFloats o(0), lse(0);
  GqaGpuPrefillArgs args;
  args.shape = ShapeOf(kCases[0]);
  args.num_queries = 0;
  args.o = o.data();
  args.lse = lse.data();
  WS_ASSERT_OK(GqaGpuPrefill(args, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(o.Payload().empty());
  EXPECT_TRUE(lse.Payload().empty());
}

// No tile, or only keys after every query: the empty state (o 0, lse -inf), no NaN.
TEST(GqaGpuPrefillEdgeTest, NoVisibleKeyGivesEmptyState) {
  SKIP_WITHOUT_GPU();
  const GqaShape shape = ShapeOf(kCases[2]);
  std::mt19937_64 rng(7);
  constexpr int32_t kChunk = 9;
  // A sequence of 2 * block_tokens tokens; the queries sit at positions 0..8 but only
  // the second block (positions >= block_tokens) is listed.
  Sequence seq = MakeSequence(shape, 0, 2 * shape.block_tokens, PriorSplit::kAllGpu, rng);
  seq.on_cpu[0] = true;
  std::vector<uint16_t> q(int64_t{kChunk} * shape.num_q_heads * shape.head_dim);
  FillRandomBf16(q.data(), q.size(), rng, 2.0f);
  DeviceBuffer q_d = DeviceBuffer::From(q);
  const int64_t rows = int64_t{kChunk} * shape.num_q_heads;
  for (bool with_tiles : {false, true}) {
    DeviceTiles tiles(seq, rng);
    GuardedDeviceFloats o(rows * shape.head_dim), lse(rows);
    GqaGpuPrefillArgs args;
    args.shape = shape;
    args.num_queries = kChunk;
    args.query_position0 = 0;
    args.q = q_d.as<const uint16_t>();
    if (with_tiles) args.keys = tiles.list;
    args.o = o.data();
    args.lse = lse.data();
    WS_ASSERT_OK(GqaGpuPrefill(args, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (float x : o.Payload()) ASSERT_EQ(x, 0.0f);
    for (float x : lse.Payload()) ASSERT_EQ(x, kEmptyLse);
  }
}

TEST(GqaGpuPrefillEdgeTest, RejectsBadArgsAndUncompiledShapes) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer scratch(4096);
  GqaGpuPrefillArgs args;
  args.shape = {32, 4, 96, 64, 0.1f};
  args.num_queries = 1;
  args.q = scratch.as<const uint16_t>();
  args.o = scratch.as<float>();
  args.lse = scratch.as<float>();
  EXPECT_EQ(GqaGpuPrefill(args, nullptr).code(), absl::StatusCode::kUnimplemented);
  args.shape.head_dim = 128;
  args.keys.num_tiles = 3;  // no tile arrays
  EXPECT_EQ(GqaGpuPrefill(args, nullptr).code(), absl::StatusCode::kInvalidArgument);
  args.keys.num_tiles = 0;
  args.num_queries = -1;
  EXPECT_EQ(GqaGpuPrefill(args, nullptr).code(), absl::StatusCode::kInvalidArgument);
  args.num_queries = 1;
  args.shape.num_kv_heads = 3;  // 32 % 3 != 0
  EXPECT_EQ(GqaGpuPrefill(args, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- MLA prefill ---------

struct MlaPrefillCase {
  const char* name;
  int32_t heads, block_tokens;
};
void PrintTo(const MlaPrefillCase& c, std::ostream* os) { *os << c.name; }
constexpr MlaPrefillCase kMlaCases[] = {
    {"DeepSeekV2Lite", 16, 256},
    {"DeepSeekV2LiteBt64", 16, 64},
    {"Heads5Bt16", 5, 16},  // padded heads; tiles smaller than a 32-key step
};
// (chunk, prior): odd chunks, one past a CTA's pair of queries, chunks inside one block and
// across several, after no prior tokens and after many. The double reference bounds the sizes.
constexpr std::pair<int32_t, int64_t> kMlaChunks[] = {{1, 0},   {5, 0},    {77, 0},    {257, 0},
                                                      {1, 1000}, {33, 1000}, {130, 300}, {255, 1}};

MlaShape MlaShapeOf(const MlaPrefillCase& c) {
  return {c.heads, 512, 64, c.block_tokens, 1.0f / std::sqrt(192.0f)};
}

class MlaGpuPrefillTest
    : public ::testing::TestWithParam<std::tuple<MlaPrefillCase, std::pair<int32_t, int64_t>, PriorSplit>> {};

TEST_P(MlaGpuPrefillTest, CpuPlusGpuMergedOnGpuEqualsReference) {
  SKIP_WITHOUT_GPU();
  const auto& [c, chunk_prior, split] = GetParam();
  const auto [chunk, prior] = chunk_prior;
  const MlaShape shape = MlaShapeOf(c);
  std::mt19937_64 rng(std::hash<std::string>{}(
      absl::StrCat("mla", c.name, chunk, "/", prior, static_cast<int>(split))));
  const Sequence seq = MakeSequence(shape, prior, chunk, split, rng);
  std::vector<uint16_t> q(int64_t{chunk} * shape.num_heads * shape.row_dim());
  FillRandomBf16(q.data(), q.size(), rng, 2.0f);
  const int64_t rows = int64_t{chunk} * shape.num_heads;
  const int32_t dim = shape.kv_lora_rank;

  HostList all(seq, [](size_t) { return true; });
  HostList cpu(seq, [&seq](size_t b) { return bool{seq.on_cpu[b]}; });
  std::vector<float> ref_o(rows * dim), ref_lse(rows);
  WS_ASSERT_OK(ReferenceMlaPrefill({shape, chunk, prior, q.data(), all.list, ref_o.data(), ref_lse.data()}));
  std::vector<float> cpu_o(rows * dim), cpu_lse(rows);
  WS_ASSERT_OK(CpuMlaPrefill({shape, chunk, prior, q.data(), cpu.list, cpu_o.data(), cpu_lse.data()}));

  DeviceTiles tiles(seq, rng);
  DeviceBuffer q_d = DeviceBuffer::From(q);
  GuardedDeviceFloats o(rows * dim), lse(rows);
  MlaGpuPrefillArgs args;
  args.shape = shape;
  args.num_queries = chunk;
  args.query_position0 = prior;
  args.q = q_d.as<const uint16_t>();
  args.keys = tiles.list;
  args.o = o.data();
  args.lse = lse.data();
  WS_ASSERT_OK(MlaGpuPrefill(args, nullptr));
  // The GPU partial alone against the reference over the GPU's blocks.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  {
    HostList gpu(seq, [&seq](size_t b) { return !seq.on_cpu[b]; });
    std::vector<float> gpu_ref_o(rows * dim), gpu_ref_lse(rows);
    WS_ASSERT_OK(ReferenceMlaPrefill({shape, chunk, prior, q.data(), gpu.list, gpu_ref_o.data(),
                                      gpu_ref_lse.data()}));
    ExpectClose(o.Payload(), lse.Payload(), gpu_ref_o, gpu_ref_lse,
                absl::StrCat(c.name, " chunk", chunk, " prior", prior, " ", SplitName(split), " gpu part"));
  }
  DeviceBuffer cpu_o_d = DeviceBuffer::From(cpu_o), cpu_lse_d = DeviceBuffer::From(cpu_lse);
  WS_ASSERT_OK(GpuMergeStates(o.data(), lse.data(), cpu_o_d.as<float>(), cpu_lse_d.as<float>(),
                              o.data(), lse.data(), rows, dim, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectClose(o.Payload(), lse.Payload(), ref_o, ref_lse,
              absl::StrCat(c.name, " chunk", chunk, " prior", prior, " ", SplitName(split),
                           " gpu_tiles", tiles.list.num_tiles));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaGpuPrefillTest,
                         ::testing::Combine(::testing::ValuesIn(kMlaCases),
                                            ::testing::ValuesIn(kMlaChunks),
                                            ::testing::ValuesIn(kSplits)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param).name, "_C",
                                               std::get<1>(info.param).first, "_P",
                                               std::get<1>(info.param).second, "_",
                                               SplitName(std::get<2>(info.param)));
                         });

// No tile, or only keys after every query: the empty state (o 0, lse -inf), no NaN; an
// empty chunk writes nothing.
TEST(MlaGpuPrefillEdgeTest, NoVisibleKeyGivesEmptyStateAndAnEmptyChunkNothing) {
  SKIP_WITHOUT_GPU();
  const MlaShape shape = MlaShapeOf(kMlaCases[2]);
  std::mt19937_64 rng(8);
  constexpr int32_t kChunk = 9;
  Sequence seq = MakeSequence(shape, 0, 2 * shape.block_tokens, PriorSplit::kAllGpu, rng);
  seq.on_cpu[0] = true;  // only positions >= block_tokens listed; the queries sit at 0..8
  std::vector<uint16_t> q(int64_t{kChunk} * shape.num_heads * shape.row_dim());
  FillRandomBf16(q.data(), q.size(), rng, 2.0f);
  DeviceBuffer q_d = DeviceBuffer::From(q);
  const int64_t rows = int64_t{kChunk} * shape.num_heads;
  for (bool with_tiles : {false, true}) {
    DeviceTiles tiles(seq, rng);
    GuardedDeviceFloats o(rows * shape.kv_lora_rank), lse(rows);
    MlaGpuPrefillArgs args;
    args.shape = shape;
    args.num_queries = kChunk;
    args.q = q_d.as<const uint16_t>();
    if (with_tiles) args.keys = tiles.list;
    args.o = o.data();
    args.lse = lse.data();
    WS_ASSERT_OK(MlaGpuPrefill(args, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (float x : o.Payload()) ASSERT_EQ(x, 0.0f);
    for (float x : lse.Payload()) ASSERT_EQ(x, kEmptyLse);
  }
  GuardedDeviceFloats o(0), lse(0);
  MlaGpuPrefillArgs empty;
  empty.shape = shape;
  empty.o = o.data();
  empty.lse = lse.data();
  WS_ASSERT_OK(MlaGpuPrefill(empty, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(o.Payload().empty());
}

TEST(MlaGpuPrefillEdgeTest, RejectsBadArgsAndUncompiledShapes) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer scratch(4096);
  MlaGpuPrefillArgs args;
  args.shape = {16, 256, 64, 64, 0.1f};  // rank 256: no kernel
  args.num_queries = 1;
  args.q = scratch.as<const uint16_t>();
  args.o = scratch.as<float>();
  args.lse = scratch.as<float>();
  EXPECT_EQ(MlaGpuPrefill(args, nullptr).code(), absl::StatusCode::kUnimplemented);
  args.shape = {17, 512, 64, 64, 0.1f};  // 17 heads
  EXPECT_EQ(MlaGpuPrefill(args, nullptr).code(), absl::StatusCode::kUnimplemented);
  args.shape.num_heads = 16;
  args.keys.num_tiles = 3;  // no tile arrays
  EXPECT_EQ(MlaGpuPrefill(args, nullptr).code(), absl::StatusCode::kInvalidArgument);
  args.keys.num_tiles = 0;
  args.num_queries = -1;
  EXPECT_EQ(MlaGpuPrefill(args, nullptr).code(), absl::StatusCode::kInvalidArgument);
  args.num_queries = 1;
  args.q = nullptr;
  EXPECT_EQ(MlaGpuPrefill(args, nullptr).code(), absl::StatusCode::kInvalidArgument);
  args.q = scratch.as<const uint16_t>();
  EXPECT_EQ(MlaGpuPrefill(args, nullptr, /*ctas_per_sm=*/3).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace writescope::kernels::cuda
