// CUDA backend against the double reference, on the real split of a decode step: the
// CPU partial over CPU-compute tiles (CPU backend), the GPU partial over ping-pong tiles
// + the D-window (CUDA), merged on the GPU. Every region empty in turn, all keys in one
// region, random splits. Skips without a CUDA device. Label: gpu.
#include "kernels/cuda/cuda_attention.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/attention_reference.h"
#include "kernels/attention_state.h"
#include "kernels/cpu_attention.h"
#include "kernels/cuda/launch.h"
#include "tests/common/test_util.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace writescope::kernels::cuda {
namespace {

using kernels::testing::Compare;
using kernels::testing::ErrorStats;
using kernels::testing::FillRandomBf16;

constexpr double kOutputTol = 2e-5;

// Empty buffers stay null.
using DeviceBuffer = testing::BasicDeviceBuffer<0>;

// Where the keys of one token live.
enum class Region { kCpu, kTiles, kWindow };

// Split modes: each region empty in turn, each region holding everything, random.
enum class Split { kCpuEmpty, kTilesEmpty, kWindowEmpty, kAllCpu, kAllTiles, kAllWindow, kRandom };
std::string SplitName(Split s) {
  switch (s) {
    case Split::kCpuEmpty: return "CpuEmpty";
    case Split::kTilesEmpty: return "TilesEmpty";
    case Split::kWindowEmpty: return "WindowEmpty";
    case Split::kAllCpu: return "AllCpu";
    case Split::kAllTiles: return "AllTiles";
    case Split::kAllWindow: return "AllWindow";
    case Split::kRandom: return "Random";
  }
  return "?";
}
constexpr Split kSplits[] = {Split::kCpuEmpty, Split::kTilesEmpty, Split::kWindowEmpty,
                             Split::kAllCpu,   Split::kAllTiles,   Split::kAllWindow,
                             Split::kRandom};
constexpr int64_t kTokenCounts[] = {1, 5, 77, 255, 257, 1000};

// A generic "attention world": per sequence, tokens placed in CPU tiles, ping-pong tiles
// or the window. `token_values` bf16 values per token row group; `write_token(tile,
// capacity, t, rng)` writes one token into a tile of `capacity` tokens, and
// `copy_token(src, src_capacity, src_t, dst, dst_capacity, dst_t)` copies one.
struct TokenCodec {
  int64_t tile_values_per_token;  // values of one token in a tile (all heads, K and V)
  std::function<void(uint16_t*, int32_t, int32_t, std::mt19937_64&)> write;
  std::function<void(const uint16_t*, int32_t, int32_t, uint16_t*, int32_t, int32_t)> copy;
};

struct SeqPlacement {
  std::vector<std::vector<uint16_t>> cpu_tiles, gpu_tiles;  // each: block_tokens capacity
  int32_t cpu_last = 0, gpu_last = 0;                       // tokens in the last tile
  std::vector<uint16_t> window;                             // capacity W
  int32_t window_tokens = 0;
  std::vector<std::vector<uint16_t>> all_tiles;  // every token, for the reference
  int32_t all_last = 0;
};

// Appends token t of `src` (capacity src_cap) to a tile list of capacity `cap`.
void Append(const TokenCodec& codec, const uint16_t* src, int32_t src_cap, int32_t src_t,
            std::vector<std::vector<uint16_t>>& tiles, int32_t& last, int32_t cap) {
  if (tiles.empty() || last == cap) {
    tiles.emplace_back(codec.tile_values_per_token * cap, kernels::testing::kBf16Nan);
    last = 0;
  }
  codec.copy(src, src_cap, src_t, tiles.back().data(), cap, last);
  ++last;
}

// The window holds up to `window_blocks` blocks' worth of the sequence's last tokens (a W of
// several blocks flushes into whole blocks, as KvCacheConfig allows).
SeqPlacement Place(const TokenCodec& codec, int64_t tokens, int32_t block_tokens, Split split,
                   std::mt19937_64& rng, int32_t window_blocks = 1) {
  SeqPlacement s;
  const int32_t w_cap = block_tokens * window_blocks;  // window capacity W
  int32_t window = 0;
  std::uniform_int_distribution<int32_t> pick_w(0, static_cast<int32_t>(std::min<int64_t>(tokens, w_cap)));
  switch (split) {
    case Split::kCpuEmpty: case Split::kTilesEmpty: case Split::kRandom:
      window = pick_w(rng);
      break;
    case Split::kAllWindow: window = static_cast<int32_t>(std::min<int64_t>(tokens, w_cap)); break;
    default: break;
  }
  s.window.assign(codec.tile_values_per_token * w_cap, kernels::testing::kBf16Nan);
  s.window_tokens = window;
  // Block tokens: whole blocks go to one region; the sequence's partial block is last.
  const int64_t block_part = tokens - window;
  std::vector<uint16_t> scratch(codec.tile_values_per_token * block_tokens);
  std::uniform_int_distribution<int> coin(0, 1);
  for (int64_t b0 = 0; b0 < block_part; b0 += block_tokens) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(block_tokens, block_part - b0));
    Region region = Region::kCpu;
    switch (split) {
      case Split::kCpuEmpty: case Split::kAllTiles: region = Region::kTiles; break;
      case Split::kTilesEmpty: case Split::kAllCpu: region = Region::kCpu; break;
      case Split::kAllWindow: region = Region::kTiles; break;  // tokens beyond W
      default: region = coin(rng) ? Region::kTiles : Region::kCpu; break;
    }
    auto& tiles = region == Region::kCpu ? s.cpu_tiles : s.gpu_tiles;
    int32_t& last = region == Region::kCpu ? s.cpu_last : s.gpu_last;
    // A partial block must be the last of its list: it is the last block of the sequence.
    for (int32_t t = 0; t < n; ++t) codec.write(scratch.data(), block_tokens, t, rng);
    tiles.emplace_back(codec.tile_values_per_token * block_tokens, kernels::testing::kBf16Nan);
    for (int32_t t = 0; t < n; ++t) codec.copy(scratch.data(), block_tokens, t, tiles.back().data(), block_tokens, t);
    last = n;
    for (int32_t t = 0; t < n; ++t) Append(codec, scratch.data(), block_tokens, t, s.all_tiles, s.all_last, block_tokens);
  }
  for (int32_t t = 0; t < window; ++t) {
    codec.write(s.window.data(), w_cap, t, rng);
    Append(codec, s.window.data(), w_cap, t, s.all_tiles, s.all_last, block_tokens);
  }
  return s;
}

// Host block lists over vectors of tiles.
struct HostLists {
  std::vector<std::vector<const uint16_t*>> pointers;
  std::vector<KvBlockList> lists;
  HostLists(const std::vector<const std::vector<std::vector<uint16_t>>*>& per_seq,
            const std::vector<int32_t>& last) {
    pointers.resize(per_seq.size());
    for (size_t s = 0; s < per_seq.size(); ++s) {
      for (const auto& tile : *per_seq[s]) pointers[s].push_back(tile.data());
      KvBlockList list;
      list.blocks = pointers[s].data();
      list.num_blocks = static_cast<int32_t>(pointers[s].size());
      list.last_block_tokens = list.num_blocks > 0 ? last[s] : 0;
      lists.push_back(list);
    }
  }
};

// The device side of the GPU's share: packed ping-pong tiles and window slots.
struct DeviceKv {
  DeviceBuffer tiles, tile_begin, last_tokens, window, window_tokens;
  GpuKvSource source;
  DeviceKv(const std::vector<SeqPlacement>& seqs, int64_t tile_values, int32_t block_tokens,
           int32_t window_capacity) {
    std::vector<uint16_t> packed, windows;
    std::vector<int32_t> begin = {0}, last, wtokens;
    int32_t max_tokens = 0;
    for (const auto& s : seqs) {
      for (const auto& tile : s.gpu_tiles) packed.insert(packed.end(), tile.begin(), tile.end());
      begin.push_back(begin.back() + static_cast<int32_t>(s.gpu_tiles.size()));
      last.push_back(s.gpu_tiles.empty() ? 0 : s.gpu_last);
      windows.insert(windows.end(), s.window.begin(), s.window.end());
      wtokens.push_back(s.window_tokens);
      const int32_t n = s.gpu_tiles.empty() ? 0 : (static_cast<int32_t>(s.gpu_tiles.size()) - 1) * block_tokens + s.gpu_last;
      max_tokens = std::max(max_tokens, n + s.window_tokens);
    }
    packed.resize(std::max<size_t>(packed.size(), tile_values));  // never a null buffer
    tiles = DeviceBuffer::From(packed);
    tile_begin = DeviceBuffer::From(begin);
    last_tokens = DeviceBuffer::From(last);
    window = DeviceBuffer::From(windows);
    window_tokens = DeviceBuffer::From(wtokens);
    host_begin = begin;
    host_last = last;
    host_window_tokens = wtokens;
    source.tiles = tiles.as<const uint16_t>();
    source.seq_tile_begin = tile_begin.as<const int32_t>();
    source.seq_last_tile_tokens = last_tokens.as<const int32_t>();
    source.window = window.as<const uint16_t>();
    source.window_capacity = window_capacity;
    source.seq_window_tokens = window_tokens.as<const int32_t>();
    source.max_seq_tokens = max_tokens;
    // The same tiles in reverse order, named by a pointer list (the gpu_worker's form:
    // tiles wherever they lie).
    const int64_t count = static_cast<int64_t>(packed.size()) / tile_values;
    std::vector<uint16_t> reversed(packed.size());
    for (int64_t i = 0; i < count; ++i) {
      std::copy_n(packed.begin() + i * tile_values, tile_values,
                  reversed.begin() + (count - 1 - i) * tile_values);
    }
    reversed_tiles = DeviceBuffer::From(reversed);
    std::vector<const uint16_t*> ptrs(count);
    for (int64_t i = 0; i < count; ++i) {
      ptrs[i] = reversed_tiles.as<const uint16_t>() + (count - 1 - i) * tile_values;
    }
    tile_ptrs = DeviceBuffer::From(ptrs);
  }
  // `source` with its tiles named by the pointer list instead of packed.
  GpuKvSource PointerList() const {
    GpuKvSource list = source;
    list.tiles = nullptr;
    list.tile_ptrs = tile_ptrs.as<const uint16_t* const>();
    return list;
  }
  // `from` (source or PointerList()) with the host copies of its lists: a launch of at most
  // internal::kInlineSeqs sequences carries them in its parameters.
  GpuKvSource WithHostLists(GpuKvSource from) const {
    from.host.tile_begin = host_begin.data();
    from.host.last_tile_tokens = host_last.data();
    from.host.window_tokens = host_window_tokens.data();
    return from;
  }
  DeviceBuffer reversed_tiles, tile_ptrs;
  std::vector<int32_t> host_begin, host_last, host_window_tokens;
};

void ExpectClose(const std::vector<float>& o, const std::vector<float>& lse,
                 const std::vector<float>& ref_o, const std::vector<float>& ref_lse,
                 const std::string& what) {
  const ErrorStats eo = Compare(o.data(), ref_o.data(), o.size());
  const ErrorStats el = Compare(lse.data(), ref_lse.data(), lse.size());
  EXPECT_EQ(eo.bad, 0) << what;
  EXPECT_EQ(el.bad, 0) << what;
  EXPECT_LE(eo.max_abs, kOutputTol) << what << " nmse=" << eo.nmse;
  EXPECT_LE(el.max_abs, 1e-4) << what;
  std::printf("%s: o max_abs=%.3g nmse=%.3g lse max_abs=%.3g\n", what.c_str(), eo.max_abs,
              eo.nmse, el.max_abs);
}

// Device outputs o [rows][dim] and lse [rows] with kGuard guard words on both sides.
class GuardedOutputs {
 public:
  static constexpr int64_t kGuard = 64;
  static constexpr float kGuardValue = 12345.0f;
  GuardedOutputs(int64_t rows, int32_t dim)
      : rows_(rows),
        dim_(dim),
        o_d_(DeviceBuffer::From(std::vector<float>(rows * dim + 2 * kGuard, kGuardValue))),
        lse_d_(DeviceBuffer::From(std::vector<float>(rows + 2 * kGuard, kGuardValue))) {}
  float* o() { return o_d_.as<float>() + kGuard; }
  float* lse() { return lse_d_.as<float>() + kGuard; }
  // Host copies of the outputs, guards left out.
  std::vector<float> HostO() const { return Inner(o_d_.ToHost<float>()); }
  std::vector<float> HostLse() const { return Inner(lse_d_.ToHost<float>()); }
  // Fills the outputs (not the guards) with NaN: what a launch leaves unwritten fails.
  void Poison() {
    const std::vector<float> nan_o(rows_ * dim_, std::numeric_limits<float>::quiet_NaN());
    const std::vector<float> nan_lse(rows_, std::numeric_limits<float>::quiet_NaN());
    ASSERT_EQ(cudaMemcpy(o(), nan_o.data(), nan_o.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(lse(), nan_lse.data(), nan_lse.size() * sizeof(float),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  // Asserts that no guard word changed.
  void AssertGuards(const std::string& what) const {
    for (const std::vector<float>& all : {o_d_.ToHost<float>(), lse_d_.ToHost<float>()}) {
      for (int64_t i = 0; i < kGuard; ++i) {
        ASSERT_EQ(all[i], kGuardValue) << what;
        ASSERT_EQ(all[all.size() - 1 - i], kGuardValue) << what;
      }
    }
  }

 private:
  static std::vector<float> Inner(const std::vector<float>& all) {
    return std::vector<float>(all.begin() + kGuard, all.end() - kGuard);
  }
  int64_t rows_;
  int32_t dim_;
  DeviceBuffer o_d_, lse_d_;
};

// A GPU partial before any merge: no NaN, an lse that is finite or -inf, and the empty
// state (o = 0) on every row whose lse is -inf (rows without GPU keys). The merge with the
// CPU partial would hide a bad o on such rows: it gives them weight 0.
void ExpectValidPartial(const std::vector<float>& o, const std::vector<float>& lse,
                        int32_t dim, const std::string& what) {
  ASSERT_EQ(o.size(), lse.size() * dim) << what;
  for (size_t row = 0; row < lse.size(); ++row) {
    ASSERT_FALSE(std::isnan(lse[row]) || lse[row] == std::numeric_limits<float>::infinity())
        << what << " row " << row << " lse " << lse[row];
    for (int32_t d = 0; d < dim; ++d) {
      const float x = o[row * dim + d];
      if (lse[row] == kEmptyLse) {
        ASSERT_EQ(x, 0.0f) << what << " empty row " << row << " dim " << d;
      } else {
        ASSERT_TRUE(std::isfinite(x)) << what << " row " << row << " dim " << d;
      }
    }
  }
}

// ------------------------------------------------------------------ GQA ----------------

struct GqaCase {
  const char* name;
  int32_t q_heads, kv_heads, head_dim, block_tokens;
  int32_t window_blocks = 1;  // the D-window's W in blocks
};
void PrintTo(const GqaCase& c, std::ostream* os) { *os << c.name; }
constexpr GqaCase kGqaCases[] = {
    {"Qwen3", 32, 4, 128, 256},
    {"Mixtral", 32, 8, 128, 64},
    {"Odd6x3d64", 6, 3, 64, 32},
    {"Mha4d128", 4, 4, 128, 64},  // group 1 on the tensor-core path
    {"G2d256", 4, 2, 256, 64},    // head_dim 256: the SIMT path
    {"MixtralW2", 32, 8, 128, 64, 2},  // a D-window of two blocks
};

// Random K (scale 2) and V (scale 1). With `rising`, K's scale grows with the token's
// position in its sequence (Place writes a sequence's tokens in order), from 0.25 by 1 every
// 32 tokens: the scores' running max rises far past its last value again and again, so the
// decode's lazy rescale of O (by more than 2^8 at once) runs mid-sequence, not only at its
// first step.
TokenCodec GqaCodec(const GqaShape& s, bool rising = false) {
  TokenCodec codec;
  codec.tile_values_per_token = int64_t{2} * s.num_kv_heads * s.head_dim;
  auto offset = [s](int32_t cap, int32_t kvh, int32_t t, bool v) {
    return (int64_t{v ? s.num_kv_heads + kvh : kvh} * cap + t) * s.head_dim;
  };
  auto position = std::make_shared<int64_t>(0);
  codec.write = [s, offset, rising, position](uint16_t* tile, int32_t cap, int32_t t,
                                               std::mt19937_64& rng) {
    const float k_scale = rising ? 0.25f + static_cast<float>((*position)++) / 32.0f : 2.0f;
    for (int32_t h = 0; h < s.num_kv_heads; ++h) {
      FillRandomBf16(tile + offset(cap, h, t, false), s.head_dim, rng, k_scale);
      FillRandomBf16(tile + offset(cap, h, t, true), s.head_dim, rng, 1.0f);
    }
  };
  codec.copy = [s, offset](const uint16_t* src, int32_t src_cap, int32_t src_t, uint16_t* dst,
                           int32_t dst_cap, int32_t dst_t) {
    for (int32_t h = 0; h < s.num_kv_heads; ++h) {
      for (bool v : {false, true}) {
        std::copy_n(src + offset(src_cap, h, src_t, v), s.head_dim, dst + offset(dst_cap, h, dst_t, v));
      }
    }
  };
  return codec;
}

// A GQA decode's inputs on the device for `seqs` (windows of `window_blocks` blocks): random
// queries (scale 2, drawn from `rng` after the placements) and the KV. Args() gives the call's
// arguments but its outputs and workspace.
struct GqaDecodeInputs {
  GqaDecodeInputs(const GqaShape& shape, const std::vector<SeqPlacement>& seqs,
                  std::mt19937_64& rng, int32_t window_blocks = 1)
      : shape(shape),
        num_seqs(static_cast<int32_t>(seqs.size())),
        rows(int64_t{num_seqs} * shape.num_q_heads),
        q([&] {
          std::vector<uint16_t> values(rows * shape.head_dim);
          FillRandomBf16(values.data(), values.size(), rng, 2.0f);
          return values;
        }()),
        kv(seqs, int64_t{2} * shape.num_kv_heads * shape.block_tokens * shape.head_dim,
           shape.block_tokens, shape.block_tokens * window_blocks),
        q_d(DeviceBuffer::From(q)) {}
  GqaGpuDecodeArgs Args() const {
    GqaGpuDecodeArgs args;
    args.shape = shape;
    args.num_seqs = num_seqs;
    args.q = q_d.as<const uint16_t>();
    args.kv = kv.source;
    return args;
  }
  GqaShape shape;
  int32_t num_seqs;
  int64_t rows;
  std::vector<uint16_t> q;
  DeviceKv kv;
  DeviceBuffer q_d;
};

// CPU partial (CpuGqaDecode) + GPU partial (GqaGpuDecode at the planned and two fixed
// split sizes) merged on the GPU equals the fp64 reference, for two sequences (tokens and
// a shorter one) placed by `split`; `rising`: GqaCodec's rising scores.
void CheckGqa(const GqaCase& c, int64_t tokens, Split split, bool rising) {
  const GqaShape shape{c.q_heads, c.kv_heads, c.head_dim, c.block_tokens,
                       1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  std::mt19937_64 rng(std::hash<std::string>{}(
      absl::StrCat(c.name, tokens, static_cast<int>(split), rising ? "rising" : "")));
  std::vector<SeqPlacement> seqs;
  for (int64_t n : {tokens, (tokens * 7) % 300 + 1}) {
    // A codec per sequence: the rising scale follows each one's positions.
    seqs.push_back(Place(GqaCodec(shape, rising), n, shape.block_tokens, split, rng,
                         c.window_blocks));
  }
  const GqaDecodeInputs in(shape, seqs, rng, c.window_blocks);
  const int32_t num_seqs = in.num_seqs;
  const int64_t rows = in.rows;
  const std::vector<uint16_t>& q = in.q;

  std::vector<const std::vector<std::vector<uint16_t>>*> all, cpu;
  std::vector<int32_t> all_last, cpu_last;
  for (const auto& s : seqs) {
    all.push_back(&s.all_tiles);
    all_last.push_back(s.all_last);
    cpu.push_back(&s.cpu_tiles);
    cpu_last.push_back(s.cpu_last);
  }
  HostLists all_lists(all, all_last), cpu_lists(cpu, cpu_last);
  std::vector<float> ref_o(rows * shape.head_dim), ref_lse(rows);
  WS_ASSERT_OK(ReferenceGqaDecode({shape, num_seqs, q.data(), all_lists.lists.data(), ref_o.data(), ref_lse.data()}));
  std::vector<float> cpu_o(rows * shape.head_dim), cpu_lse(rows);
  WS_ASSERT_OK(CpuGqaDecode({shape, num_seqs, q.data(), cpu_lists.lists.data(), cpu_o.data(), cpu_lse.data()}));

  const DeviceKv& kv = in.kv;
  GuardedOutputs out(rows, shape.head_dim);
  float* o = out.o();
  float* lse = out.lse();
  GqaGpuDecodeArgs args = in.Args();
  args.o = o;
  args.lse = lse;
  // For each tensor-core kernel: the planned splits and fixed sizes over the packed tiles,
  // and over the pointer list; and the service's default choice once. Splits of 32 and 96 tokens
  // end inside a bulk kernel's 64-token stage; tiles of 32 tokens (Odd6x3d64) and a window of two
  // blocks put several runs of rows in one stage; splits of 1024 wrap the ring. The SIMT shapes run
  // their one kernel whatever the choice.
  // host_lists: the lists in the launch's parameters (two sequences: inline).
  struct Variant {
    int32_t tokens_per_split;
    bool pointer_list;
    GqaDecodeKernel kernel;
    bool host_lists = false;
  };
  const Variant variants[] = {{0, false, GqaDecodeKernel::kRegisters},
                              {32, false, GqaDecodeKernel::kRegisters},
                              {96, false, GqaDecodeKernel::kRegisters},
                              {0, true, GqaDecodeKernel::kRegisters},
                              {0, true, GqaDecodeKernel::kDefault},
                              {0, false, GqaDecodeKernel::kBulk4},
                              {32, false, GqaDecodeKernel::kBulk4},
                              {96, true, GqaDecodeKernel::kBulk4},
                              {0, false, GqaDecodeKernel::kBulk3x2},
                              {96, false, GqaDecodeKernel::kBulk3x2},
                              {32, true, GqaDecodeKernel::kBulk3x2},
                              // Long splits: the ring wraps (16 stages through 4 or 3).
                              {1024, false, GqaDecodeKernel::kBulk4},
                              {1024, true, GqaDecodeKernel::kBulk3x2},
                              {0, true, GqaDecodeKernel::kDefault, true},
                              {32, false, GqaDecodeKernel::kRegisters, true},
                              {96, false, GqaDecodeKernel::kBulk3x2, true}};
  for (const auto& [tokens_per_split, pointer_list, kernel, host_lists] : variants) {
    const std::string what = absl::StrCat(c.name, " T", tokens, " ", SplitName(split), " split",
                                          tokens_per_split, pointer_list ? " pointer list" : "",
                                          host_lists ? " host lists" : "", rising ? " rising" : "",
                                          kernel == GqaDecodeKernel::kBulk4       ? " bulk4"
                                          : kernel == GqaDecodeKernel::kBulk3x2   ? " bulk3x2"
                                          : kernel == GqaDecodeKernel::kRegisters ? " registers"
                                                                                  : " default");
    args.split.tokens_per_split = tokens_per_split;
    args.split.gqa_kernel = kernel;
    args.kv = pointer_list ? kv.PointerList() : kv.source;
    if (host_lists) args.kv = kv.WithHostLists(args.kv);
    DeviceBuffer workspace(GqaGpuDecodeWorkspaceBytes(args));
    args.workspace = workspace.as<void>();
    args.workspace_bytes = GqaGpuDecodeWorkspaceBytes(args);
    ASSERT_NO_FATAL_FAILURE(out.Poison());
    WS_ASSERT_OK(GqaGpuDecode(args, nullptr));
    ExpectValidPartial(out.HostO(), out.HostLse(), shape.head_dim, what + " GPU partial");
    DeviceBuffer cpu_o_d = DeviceBuffer::From(cpu_o), cpu_lse_d = DeviceBuffer::From(cpu_lse);
    WS_ASSERT_OK(GpuMergeStates(o, lse, cpu_o_d.as<float>(), cpu_lse_d.as<float>(), o, lse, rows,
                                shape.head_dim, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_NO_FATAL_FAILURE(out.AssertGuards(what));
    const std::vector<float> got_o = out.HostO(), got_lse = out.HostLse();
    ExpectClose(got_o, got_lse, ref_o, ref_lse, what);
  }
}

class GqaGpuTest : public ::testing::TestWithParam<std::tuple<GqaCase, int64_t, Split>> {};

TEST_P(GqaGpuTest, CpuPlusGpuMergedOnGpuEqualsReference) {
  SKIP_WITHOUT_GPU();
  const auto& [c, tokens, split] = GetParam();
  CheckGqa(c, tokens, split, /*rising=*/false);
}

// GqaGpuDecodeArgs::timeline: each planned CTA of a bulk-copy kernel stamps its start, first
// stage, loop end and end in that order; a CTA with no keys no first stage; nothing past the
// plan's CTAs is written; and the call's output is the same bits as without it.
TEST(GqaGpuTimelineTest, StampsEveryPlannedCtaInOrderAndChangesNothing) {
  SKIP_WITHOUT_GPU();
  const GqaCase& c = kGqaCases[0];  // Qwen3
  const GqaShape shape{c.q_heads, c.kv_heads, c.head_dim, c.block_tokens,
                       1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  std::mt19937_64 rng(7);
  std::vector<SeqPlacement> seqs;
  for (int64_t n : {1000, 90}) {
    seqs.push_back(Place(GqaCodec(shape), n, shape.block_tokens, Split::kAllTiles, rng));
  }
  const GqaDecodeInputs in(shape, seqs, rng);
  const int32_t num_seqs = in.num_seqs;
  const int64_t rows = in.rows;
  DeviceBuffer o_d(rows * shape.head_dim * sizeof(float)), lse_d(rows * sizeof(float));
  for (GqaDecodeKernel kernel : {GqaDecodeKernel::kBulk4, GqaDecodeKernel::kBulk3x2}) {
    SCOPED_TRACE(kernel == GqaDecodeKernel::kBulk4 ? "bulk4" : "bulk3x2");
    GqaGpuDecodeArgs args = in.Args();
    args.o = o_d.as<float>();
    args.lse = lse_d.as<float>();
    args.split.gqa_kernel = kernel;
    args.split.tokens_per_split = 96;  // 11 splits of the long sequence; the short one has 1
    const int32_t splits = (in.kv.source.max_seq_tokens + 95) / 96;
    const int64_t ctas = int64_t{splits} * shape.num_kv_heads * num_seqs;
    DeviceBuffer workspace(GqaGpuDecodeWorkspaceBytes(args));
    args.workspace = workspace.as<void>();
    args.workspace_bytes = GqaGpuDecodeWorkspaceBytes(args);
    WS_ASSERT_OK(GqaGpuDecode(args, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> plain_o = o_d.ToHost<float>(), plain_lse = lse_d.ToHost<float>();

    const int64_t slots = ctas + 8;  // 8 past the plan, to see that they stay untouched
    DeviceBuffer timeline(slots * kGpuTimelineStamps * sizeof(uint64_t));
    ASSERT_EQ(cudaMemset(timeline.as<void>(), 0xff, slots * kGpuTimelineStamps * sizeof(uint64_t)),
              cudaSuccess);
    ASSERT_EQ(cudaMemset(o_d.as<void>(), 0, rows * shape.head_dim * sizeof(float)), cudaSuccess);
    args.timeline = timeline.as<uint64_t>();
    WS_ASSERT_OK(GqaGpuDecode(args, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> o = o_d.ToHost<float>(), lse = lse_d.ToHost<float>();
    ASSERT_EQ(std::memcmp(o.data(), plain_o.data(), o.size() * sizeof(float)), 0);
    ASSERT_EQ(std::memcmp(lse.data(), plain_lse.data(), lse.size() * sizeof(float)), 0);

    const std::vector<uint64_t> stamps = timeline.ToHost<uint64_t>();
    constexpr uint64_t kUntouched = ~uint64_t{0};
    int64_t keyless = 0;
    for (int64_t cta = 0; cta < slots; ++cta) {
      const uint64_t* st = &stamps[cta * kGpuTimelineStamps];
      SCOPED_TRACE(absl::StrCat("CTA ", cta));
      if (cta >= ctas) {
        for (int i = 0; i < kGpuTimelineStamps; ++i) EXPECT_EQ(st[i], kUntouched);
        continue;
      }
      // CTA = split + splits * (kv head + kv heads * seq): the short sequence's keys are all
      // in its first split.
      const int32_t split = static_cast<int32_t>(cta % splits);
      const bool has_keys = cta / (int64_t{splits} * shape.num_kv_heads) == 0 || split == 0;
      EXPECT_NE(st[kStampStart], kUntouched);
      EXPECT_LE(st[kStampStart], st[kStampLoopEnd]);
      EXPECT_LE(st[kStampLoopEnd], st[kStampEnd]);
      EXPECT_NE(st[kStampEnd], kUntouched);
      if (has_keys) {
        EXPECT_LE(st[kStampStart], st[kStampFirstData]);
        EXPECT_LE(st[kStampFirstData], st[kStampLoopEnd]);
      } else {
        EXPECT_EQ(st[kStampFirstData], kUntouched);
        ++keyless;
      }
    }
    EXPECT_EQ(keyless, int64_t{splits - 1} * shape.num_kv_heads);
  }
}

// Scores whose running max keeps rising (GqaCodec's `rising`): O is rescaled in the middle
// of a warp's steps, many times per sequence.
TEST(GqaGpuRisingTest, LateRescalesEqualReference) {
  SKIP_WITHOUT_GPU();
  for (const GqaCase& c : kGqaCases) {
    for (int64_t tokens : {int64_t{257}, int64_t{1000}, int64_t{3000}}) {
      for (Split split : {Split::kAllTiles, Split::kRandom}) {
        CheckGqa(c, tokens, split, /*rising=*/true);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GqaGpuTest,
                         ::testing::Combine(::testing::ValuesIn(kGqaCases),
                                            ::testing::ValuesIn(kTokenCounts),
                                            ::testing::ValuesIn(kSplits)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param).name, "_T",
                                               std::get<1>(info.param), "_",
                                               SplitName(std::get<2>(info.param)));
                         });

// ------------------------------------------------------------------ MLA ----------------

// CPU partial (CpuMlaDecode) + GPU partial (MlaGpuDecode, `tokens_per_split` 0 = the
// planned splits) merged on the GPU equals the fp64 reference, for two sequences (tokens
// and a shorter one) placed by `split`.
void CheckMla(int64_t tokens, Split split, int32_t num_heads, int32_t tokens_per_split,
              bool pointer_list = false, bool rising = false, int32_t window_blocks = 1,
              bool host_lists = false) {
  const MlaShape shape{num_heads, 512, 64, 64, 1.0f / std::sqrt(192.0f)};
  std::mt19937_64 rng(std::hash<std::string>{}(absl::StrCat(
      "mla", tokens, static_cast<int>(split), num_heads, tokens_per_split, rising ? "rising" : "",
      window_blocks)));
  // `rising`: the rope part's scale grows with the token's position in its sequence (Place
  // writes a sequence's tokens in order; `position` restarts with each sequence below), so
  // the scores' running max rises far past its last value again and again; the latent
  // part, which is V too, keeps scale 1 (the tolerance is absolute).
  int64_t position = 0;
  TokenCodec codec;
  codec.tile_values_per_token = shape.row_dim();
  codec.write = [&](uint16_t* tile, int32_t, int32_t t, std::mt19937_64& r) {
    uint16_t* row = tile + int64_t{t} * shape.row_dim();
    const float rope_scale = rising ? 0.25f + static_cast<float>(position++) / 16.0f : 1.0f;
    FillRandomBf16(row, shape.kv_lora_rank, r, 1.0f);
    FillRandomBf16(row + shape.kv_lora_rank, shape.rope_dim, r, rope_scale);
  };
  codec.copy = [&](const uint16_t* src, int32_t, int32_t st, uint16_t* dst, int32_t, int32_t dt) {
    std::copy_n(src + int64_t{st} * shape.row_dim(), shape.row_dim(), dst + int64_t{dt} * shape.row_dim());
  };
  std::vector<SeqPlacement> seqs;
  for (int64_t n : {tokens, (tokens * 5) % 200 + 1}) {
    position = 0;
    seqs.push_back(Place(codec, n, shape.block_tokens, split, rng, window_blocks));
  }
  const int32_t num_seqs = static_cast<int32_t>(seqs.size());
  std::vector<uint16_t> q(int64_t{num_seqs} * shape.num_heads * shape.row_dim());
  FillRandomBf16(q.data(), q.size(), rng, 2.0f);
  const int64_t rows = int64_t{num_seqs} * shape.num_heads;
  std::vector<const std::vector<std::vector<uint16_t>>*> all, cpu;
  std::vector<int32_t> all_last, cpu_last;
  for (const auto& s : seqs) {
    all.push_back(&s.all_tiles);
    all_last.push_back(s.all_last);
    cpu.push_back(&s.cpu_tiles);
    cpu_last.push_back(s.cpu_last);
  }
  HostLists all_lists(all, all_last), cpu_lists(cpu, cpu_last);
  std::vector<float> ref_o(rows * shape.kv_lora_rank), ref_lse(rows);
  WS_ASSERT_OK(ReferenceMlaDecode({shape, num_seqs, q.data(), all_lists.lists.data(), ref_o.data(), ref_lse.data()}));
  std::vector<float> cpu_o(rows * shape.kv_lora_rank), cpu_lse(rows);
  WS_ASSERT_OK(CpuMlaDecode({shape, num_seqs, q.data(), cpu_lists.lists.data(), cpu_o.data(), cpu_lse.data()}));

  DeviceKv kv(seqs, int64_t{shape.block_tokens} * shape.row_dim(), shape.block_tokens,
              shape.block_tokens * window_blocks);
  DeviceBuffer q_d = DeviceBuffer::From(q);
  GuardedOutputs out(rows, shape.kv_lora_rank);
  MlaGpuDecodeArgs args;
  args.shape = shape;
  args.num_seqs = num_seqs;
  args.q = q_d.as<const uint16_t>();
  args.kv = pointer_list ? kv.PointerList() : kv.source;
  if (host_lists) args.kv = kv.WithHostLists(args.kv);
  args.o = out.o();
  args.lse = out.lse();
  args.split.tokens_per_split = tokens_per_split;
  DeviceBuffer workspace(MlaGpuDecodeWorkspaceBytes(args));
  args.workspace = workspace.as<void>();
  args.workspace_bytes = MlaGpuDecodeWorkspaceBytes(args);
  WS_ASSERT_OK(MlaGpuDecode(args, nullptr));
  const std::string what = absl::StrCat(
      "MLA T", tokens, " ", SplitName(split), " heads ", num_heads, " split ", tokens_per_split,
      pointer_list ? " pointer list" : "", host_lists ? " host lists" : "", rising ? " rising" : "",
      " window blocks ", window_blocks);
  ExpectValidPartial(out.HostO(), out.HostLse(), shape.kv_lora_rank, what + " GPU partial");
  DeviceBuffer cpu_o_d = DeviceBuffer::From(cpu_o), cpu_lse_d = DeviceBuffer::From(cpu_lse);
  WS_ASSERT_OK(GpuMergeStates(cpu_o_d.as<float>(), cpu_lse_d.as<float>(), args.o, args.lse,
                              args.o, args.lse, rows, shape.kv_lora_rank, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_NO_FATAL_FAILURE(out.AssertGuards(what));
  ExpectClose(out.HostO(), out.HostLse(), ref_o, ref_lse, what);
}

class MlaGpuTest : public ::testing::TestWithParam<std::tuple<int64_t, Split>> {};

TEST_P(MlaGpuTest, CpuPlusGpuMergedOnGpuEqualsReference) {
  SKIP_WITHOUT_GPU();
  const auto& [tokens, split] = GetParam();
  CheckMla(tokens, split, 16, 0);
}

// Fixed split sizes (one chunk of 32 rows, several, a partial last chunk, more splits
// than tokens) and fewer heads than the 16 the kernel pads to; the 64-token splits over a
// tile pointer list, the 96-token ones with the lists in the launch's parameters.
TEST(MlaGpuSplitsTest, EverySplitSizeAndFewerHeads) {
  SKIP_WITHOUT_GPU();
  for (int32_t heads : {16, 12, 1}) {
    for (int32_t per : {32, 64, 96, 256}) {
      for (int64_t tokens : {int64_t{77}, int64_t{1000}}) {
        CheckMla(tokens, Split::kRandom, heads, per, /*pointer_list=*/per == 64,
                 /*rising=*/false, /*window_blocks=*/1, /*host_lists=*/per == 96);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// Scores whose running max keeps rising: O is rescaled between chunks, many times per
// sequence, and most chunks of a warp's heads skip it.
TEST(MlaGpuRisingTest, LateRescalesEqualReference) {
  SKIP_WITHOUT_GPU();
  for (int64_t tokens : {int64_t{257}, int64_t{1000}, int64_t{3000}}) {
    for (Split split : {Split::kAllTiles, Split::kRandom}) {
      for (int32_t per : {0, 64}) {
        CheckMla(tokens, split, 16, per, /*pointer_list=*/false, /*rising=*/true);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// A D-window of two blocks (KvCacheConfig's W may be any multiple of the block size): the
// window's tokens past the first block, every split, the planned and a fixed split size (the
// planned one with the lists in the launch's parameters).
TEST(MlaGpuWindowTest, WindowOfTwoBlocks) {
  SKIP_WITHOUT_GPU();
  for (int64_t tokens : kTokenCounts) {
    for (Split split : kSplits) {
      for (int32_t per : {0, 64}) {
        CheckMla(tokens, split, 16, per, /*pointer_list=*/per == 64, /*rising=*/false,
                 /*window_blocks=*/2, /*host_lists=*/per == 0);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DeepSeekV2Lite, MlaGpuTest,
                         ::testing::Combine(::testing::ValuesIn(kTokenCounts),
                                            ::testing::ValuesIn(kSplits)),
                         [](const auto& info) {
                           return absl::StrCat("T", std::get<0>(info.param), "_",
                                               SplitName(std::get<1>(info.param)));
                         });

// The split merge (the decodes' second kernel) against MergeStatesN on the host, for dims
// that fill one 128-dim CTA, several, a partial last one (200, 1000), fewer than a CTA's
// width (4, 40), and no multiple of 4 (the generic kernel: 130); 1 to 300 parts (more than
// a thread preloads at 128 dims: 16 x 8 groups), some of them empty (o = 0, lse = -inf),
// and rows whose every part is empty; 5 rows (the preloading kernel) and 300 rows (the
// other one, a grid of more than two CTAs per SM).
TEST(GpuMergeTest, SplitMergeOverEveryDimShape) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f), lse_value(-5.0f, 5.0f);
  struct Shape {
    int64_t rows;
    int32_t dim, parts;
  };
  std::vector<Shape> shapes;
  for (int32_t dim : {4, 40, 128, 130, 200, 512, 1000}) {
    for (int32_t parts : {1, 3, 77, 300}) shapes.push_back({5, dim, parts});
  }
  // Grids of more than two CTAs per SM: the merge without preloads (LaunchMergeSplits).
  for (int32_t dim : {128, 512}) {
    for (int32_t parts : {3, 77}) shapes.push_back({300, dim, parts});
  }
  for (const Shape& shape : shapes) {
    const int64_t rows = shape.rows;
    const int32_t dim = shape.dim, parts = shape.parts;
    std::vector<float> part_o(int64_t{parts} * rows * dim), part_lse(int64_t{parts} * rows);
    for (int32_t p = 0; p < parts; ++p) {
      for (int64_t r = 0; r < rows; ++r) {
        // Row 4: every part empty; otherwise every third part empty.
        const bool empty = r == 4 || (p % 3 == 1);
        part_lse[p * rows + r] = empty ? kEmptyLse : lse_value(rng);
        for (int32_t d = 0; d < dim; ++d) {
          part_o[(p * rows + r) * dim + d] = empty ? 0.0f : value(rng);
        }
      }
    }
    std::vector<ConstAttentionStateView> views;
    for (int32_t p = 0; p < parts; ++p) {
      views.push_back({part_o.data() + int64_t{p} * rows * dim, part_lse.data() + p * rows});
    }
    std::vector<float> ref_o(rows * dim), ref_lse(rows);
    MergeStatesN(views, {ref_o.data(), ref_lse.data()}, rows, dim);
    DeviceBuffer part_o_d = DeviceBuffer::From(part_o), part_lse_d = DeviceBuffer::From(part_lse);
    std::vector<float> nan_o(rows * dim, NAN), nan_lse(rows, NAN);
    DeviceBuffer o_d = DeviceBuffer::From(nan_o), lse_d = DeviceBuffer::From(nan_lse);
    ASSERT_EQ(internal::LaunchMergeSplits(part_o_d.as<float>(), part_lse_d.as<float>(), parts,
                                          rows, dim, o_d.as<float>(), lse_d.as<float>(),
                                          nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::string what = absl::StrCat("rows ", rows, " dim ", dim, " parts ", parts);
    const std::vector<float> o = o_d.ToHost<float>(), lse = lse_d.ToHost<float>();
    for (int32_t d = 0; d < dim; ++d) ASSERT_EQ(o[4 * dim + d], 0.0f) << what;
    ASSERT_EQ(lse[4], kEmptyLse) << what;
    ExpectClose(o, lse, ref_o, ref_lse, what);
  }
}

TEST(GpuMergeTest, EmptyPlusEmptyStaysEmptyWithoutNan) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kRows = 7;
  constexpr int32_t kDim = 40;
  std::vector<float> o(kRows * kDim, 0.0f), lse(kRows, kEmptyLse);
  DeviceBuffer o_a = DeviceBuffer::From(o), l_a = DeviceBuffer::From(lse);
  DeviceBuffer o_b = DeviceBuffer::From(o), l_b = DeviceBuffer::From(lse);
  WS_ASSERT_OK(GpuMergeStates(o_a.as<float>(), l_a.as<float>(), o_b.as<float>(), l_b.as<float>(),
                              o_a.as<float>(), l_a.as<float>(), kRows, kDim, nullptr));
  for (float x : o_a.ToHost<float>()) EXPECT_EQ(x, 0.0f);
  for (float x : l_a.ToHost<float>()) EXPECT_EQ(x, kEmptyLse);
}

TEST(GpuDecodeTest, RejectsSmallWorkspaceAndUnsupportedShapes) {
  SKIP_WITHOUT_GPU();
  GqaGpuDecodeArgs args;
  args.shape = {32, 4, 96, 64, 0.1f};
  args.num_seqs = 1;
  EXPECT_EQ(GqaGpuDecode(args, nullptr).code(), absl::StatusCode::kUnimplemented);
  args.shape.head_dim = 128;
  args.kv.max_seq_tokens = 1000;
  EXPECT_EQ(GqaGpuDecode(args, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

// A launch of at most internal::kInlineSeqs sequences reads the lists in its parameters, a
// larger one reads the device lists: host lists that say "no window tokens" where the device
// lists hold windows give, for 2 and 4 sequences, bit for bit the decode whose device lists hold
// no window, and for 5 the decode with the windows. Window slots in reverse order (the windows
// laid out so) give the same decode as slot s for sequence s, inline or not. Host lists given
// apart from their device lists are refused.
TEST(GpuDecodeTest, HostListsAreReadInlineUpToFourSequences) {
  SKIP_WITHOUT_GPU();
  const GqaShape shape{32, 4, 128, 64, 1.0f / std::sqrt(128.0f)};
  for (int32_t num_seqs : {2, internal::kInlineSeqs, internal::kInlineSeqs + 1}) {
    std::mt19937_64 rng(num_seqs);
    std::vector<SeqPlacement> seqs;
    for (int32_t s = 0; s < num_seqs; ++s) {  // 64 window tokens each, the rest in tiles
      seqs.push_back(
          Place(GqaCodec(shape), 300 + 37 * s, shape.block_tokens, Split::kAllWindow, rng));
    }
    const GqaDecodeInputs in(shape, seqs, rng);
    const int64_t rows = in.rows;
    const DeviceKv& kv = in.kv;
    GqaGpuDecodeArgs args = in.Args();
    DeviceBuffer workspace(GqaGpuDecodeWorkspaceBytes(args));
    args.workspace = workspace.as<void>();
    args.workspace_bytes = GqaGpuDecodeWorkspaceBytes(args);
    // o then lse of one decode over `source` (the same split plan each time: max_seq_tokens
    // stays).
    auto decode = [&](const GpuKvSource& source) {
      GuardedOutputs out(rows, shape.head_dim);
      out.Poison();
      GqaGpuDecodeArgs call = args;
      call.kv = source;
      call.o = out.o();
      call.lse = out.lse();
      EXPECT_TRUE(GqaGpuDecode(call, nullptr).ok());
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      out.AssertGuards("host lists");
      std::vector<float> all = out.HostO();
      const std::vector<float> lse = out.HostLse();
      all.insert(all.end(), lse.begin(), lse.end());
      return all;
    };
    GpuKvSource no_window = kv.source;
    no_window.seq_window_tokens = nullptr;
    const std::vector<int32_t> zeros(num_seqs, 0);
    GpuKvSource host_no_window = kv.WithHostLists(kv.source);
    host_no_window.host.window_tokens = zeros.data();
    const std::vector<float> with = decode(kv.source), without = decode(no_window),
                             inlined = decode(host_no_window);
    ASSERT_FALSE(::testing::Test::HasFailure());
    ASSERT_NE(with, without) << "the windows must count";
    if (num_seqs <= internal::kInlineSeqs) {
      EXPECT_TRUE(inlined == without) << num_seqs << " sequences: the inline lists were not read";
    } else {
      EXPECT_TRUE(inlined == with) << num_seqs << " sequences: inline lists past the limit";
    }
    // Sequence s's window in slot num_seqs - 1 - s.
    const size_t slot_values = seqs[0].window.size();
    std::vector<uint16_t> reversed_windows(slot_values * num_seqs);
    std::vector<int32_t> slots(num_seqs);
    for (int32_t seq = 0; seq < num_seqs; ++seq) {
      slots[seq] = num_seqs - 1 - seq;
      std::copy(seqs[seq].window.begin(), seqs[seq].window.end(),
                reversed_windows.begin() + slots[seq] * slot_values);
    }
    DeviceBuffer reversed_d = DeviceBuffer::From(reversed_windows);
    DeviceBuffer slots_d = DeviceBuffer::From(slots);
    GpuKvSource reversed = kv.source;
    reversed.window = reversed_d.as<const uint16_t>();
    reversed.seq_window_slot = slots_d.as<const int32_t>();
    GpuKvSource reversed_inline = kv.WithHostLists(reversed);
    reversed_inline.host.window_slot = slots.data();
    EXPECT_TRUE(decode(reversed) == with) << num_seqs << " sequences: device window slots";
    EXPECT_TRUE(decode(reversed_inline) == with) << num_seqs << " sequences: inline window slots";
  }
  // Given apart from their device lists: refused before any launch.
  GqaGpuDecodeArgs args;
  args.shape = shape;
  args.num_seqs = 1;
  const int32_t one[2] = {0, 1};
  args.kv.tiles = reinterpret_cast<const uint16_t*>(one);  // never read
  args.kv.seq_tile_begin = one;
  args.kv.seq_last_tile_tokens = one + 1;
  args.kv.max_seq_tokens = 1;
  args.kv.host.tile_begin = one;  // without host.last_tile_tokens
  // (The workspace is missing too: the message tells which check refused the call.)
  auto refused_for_host_lists = [&] {
    const absl::Status status = GqaGpuDecode(args, nullptr);
    return status.code() == absl::StatusCode::kInvalidArgument &&
           absl::StrContains(status.message(), "host lists");
  };
  EXPECT_TRUE(refused_for_host_lists());
  args.kv.host.last_tile_tokens = one + 1;
  args.kv.host.window_slot = one;  // without a device window slot list
  EXPECT_TRUE(refused_for_host_lists());
  args.kv.host.window_slot = nullptr;  // given where their device lists are: past that check
  EXPECT_FALSE(refused_for_host_lists());
}

}  // namespace
}  // namespace writescope::kernels::cuda
