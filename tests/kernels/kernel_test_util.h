// Helpers for the kernel tests: random bf16 tiles laid out as in common/kv_layout.h,
// guarded output buffers, splits of a sequence's tiles into parts, error metrics.
#ifndef WRITESCOPE_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
#define WRITESCOPE_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"

namespace writescope::kernels::testing {

inline constexpr uint16_t kBf16Nan = 0x7fc1;

inline void FillRandomBf16(uint16_t* data, size_t n, std::mt19937_64& rng, float range) {
  std::uniform_real_distribution<float> dist(-range, range);
  for (size_t i = 0; i < n; ++i) data[i] = FloatToBf16(dist(rng));
}

// fp32 values with `guard` sentinel words on each side. The payload starts as NaN so
// any value a kernel forgets to write fails the comparison.
class GuardedFloats {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr uint32_t kSentinel = 0xdeadbeefu;

  explicit GuardedFloats(size_t n) : n_(n), words_(n + 2 * kGuard, kSentinel) {
    std::fill(data(), data() + n_, std::numeric_limits<float>::quiet_NaN());
  }
  float* data() { return reinterpret_cast<float*>(words_.data() + kGuard); }
  const float* data() const { return reinterpret_cast<const float*>(words_.data() + kGuard); }
  size_t size() const { return n_; }
  float operator[](size_t i) const { return data()[i]; }
  bool GuardsIntact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (words_[i] != kSentinel || words_[kGuard + n_ + i] != kSentinel) return false;
    }
    return true;
  }

 private:
  size_t n_;
  std::vector<uint32_t> words_;
};

// A region of tiles: `num_slots` tiles of `tile_values` bf16 each, and one sequence's
// tiles at shuffled slots. Tokens past the end of the partial last tile hold NaN, so a
// kernel reading an invalid token produces NaN and fails.
struct TiledSequence {
  int64_t num_tokens = 0;
  int32_t block_tokens = 0;
  std::vector<const uint16_t*> blocks;  // tile of block i (position i * block_tokens)
  std::vector<int64_t> positions;
  int32_t last_block_tokens = 0;
};

class TileRegion {
 public:
  TileRegion(int64_t num_slots, int64_t tile_values) : tile_values_(tile_values),
      values_(num_slots * tile_values + 2 * kPad, kBf16Nan), next_slots_(num_slots) {
    std::iota(next_slots_.begin(), next_slots_.end(), 0);
  }
  // Reserves a free slot at random.
  uint16_t* TakeSlot(std::mt19937_64& rng) {
    std::uniform_int_distribution<size_t> pick(0, next_slots_.size() - 1);
    const size_t i = pick(rng);
    const int64_t slot = next_slots_[i];
    next_slots_.erase(next_slots_.begin() + i);
    return values_.data() + kPad + slot * tile_values_;
  }

 private:
  static constexpr int64_t kPad = 1024;
  int64_t tile_values_;
  std::vector<uint16_t> values_;
  std::vector<int64_t> next_slots_;
};

// Fills `num_tokens` tokens in fresh tiles. `fill_token(tile, token_in_tile)` writes
// one token's values (all heads / the latent row) into the tile.
template <typename FillToken>
TiledSequence MakeSequence(TileRegion& region, int64_t num_tokens, int32_t block_tokens,
                           std::mt19937_64& rng, FillToken fill_token) {
  TiledSequence seq;
  seq.num_tokens = num_tokens;
  seq.block_tokens = block_tokens;
  const int64_t num_blocks = (num_tokens + block_tokens - 1) / block_tokens;
  for (int64_t b = 0; b < num_blocks; ++b) {
    uint16_t* tile = region.TakeSlot(rng);
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(block_tokens, num_tokens - b * block_tokens));
    for (int32_t t = 0; t < n; ++t) fill_token(tile, t);
    seq.blocks.push_back(tile);
    seq.positions.push_back(b * block_tokens);
    seq.last_block_tokens = n;
  }
  return seq;
}

// A subset of a sequence's tiles as a KvBlockList (owning its arrays). The partial
// tile, if included, is moved last as the contract requires.
struct BlockSubset {
  std::vector<const uint16_t*> blocks;
  std::vector<int64_t> positions;
  KvBlockList list;

  BlockSubset() = default;
  BlockSubset(const BlockSubset&) = delete;
  BlockSubset& operator=(const BlockSubset&) = delete;
  BlockSubset(BlockSubset&& other) noexcept { *this = std::move(other); }
  BlockSubset& operator=(BlockSubset&& other) noexcept {
    blocks = std::move(other.blocks);
    positions = std::move(other.positions);
    list = other.list;
    Fix();
    return *this;
  }
  void Fix() {
    list.blocks = blocks.data();
    list.block_positions = positions.data();
    list.num_blocks = static_cast<int32_t>(blocks.size());
  }
};

inline BlockSubset Subset(const TiledSequence& seq, const std::vector<int>& part_of_block,
                          int part) {
  BlockSubset subset;
  const int nb = static_cast<int>(seq.blocks.size());
  for (int b = 0; b < nb; ++b) {
    if (part_of_block[b] == part && b + 1 != nb) {
      subset.blocks.push_back(seq.blocks[b]);
      subset.positions.push_back(seq.positions[b]);
    }
  }
  subset.list.last_block_tokens = seq.block_tokens;
  if (nb > 0 && part_of_block[nb - 1] == part) {
    subset.blocks.push_back(seq.blocks[nb - 1]);
    subset.positions.push_back(seq.positions[nb - 1]);
    subset.list.last_block_tokens = seq.last_block_tokens;
  }
  if (subset.blocks.empty()) subset.list.last_block_tokens = 0;
  subset.Fix();
  return subset;
}

// How the tiles of a sequence are assigned to `parts` parts.
enum class SplitMode { kAllInPart0, kAllInPart1, kPrefix, kRandom };
inline std::string SplitName(SplitMode mode) {
  switch (mode) {
    case SplitMode::kAllInPart0: return "AllPart0";
    case SplitMode::kAllInPart1: return "AllPart1";
    case SplitMode::kPrefix: return "Prefix";
    case SplitMode::kRandom: return "Random";
  }
  return "?";
}
inline std::vector<int> AssignBlocks(int num_blocks, int parts, SplitMode mode,
                                     std::mt19937_64& rng) {
  std::vector<int> part(num_blocks, 0);
  std::uniform_int_distribution<int> pick(0, parts - 1);
  switch (mode) {
    case SplitMode::kAllInPart0: break;
    case SplitMode::kAllInPart1: std::fill(part.begin(), part.end(), 1 % parts); break;
    case SplitMode::kPrefix: {
      // Consecutive runs: part 0, then part 1, ... with random cut points.
      std::vector<int> cuts(parts - 1);
      std::uniform_int_distribution<int> cut(0, num_blocks);
      for (int& c : cuts) c = cut(rng);
      std::sort(cuts.begin(), cuts.end());
      for (int b = 0; b < num_blocks; ++b) {
        part[b] = static_cast<int>(std::upper_bound(cuts.begin(), cuts.end(), b) - cuts.begin());
      }
      break;
    }
    case SplitMode::kRandom:
      for (int& p : part) p = pick(rng);
      break;
  }
  return part;
}

// Error of `got` against `want`: max abs difference, NMSE, and NaN/inf mismatches.
struct ErrorStats {
  double max_abs = 0;
  double nmse = 0;
  int64_t bad = 0;  // NaN, or a non-finite value where the other is finite/different
};
inline ErrorStats Compare(const float* got, const float* want, size_t n) {
  ErrorStats e;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) {
      ++e.bad;
      continue;
    }
    if (std::isinf(got[i]) || std::isinf(want[i])) {
      if (got[i] != want[i]) ++e.bad;
      continue;
    }
    const double d = double{got[i]} - double{want[i]};
    e.max_abs = std::max(e.max_abs, std::abs(d));
    err2 += d * d;
    ref2 += double{want[i]} * want[i];
  }
  e.nmse = ref2 > 0 ? err2 / ref2 : err2;
  return e;
}

}  // namespace writescope::kernels::testing

#endif  // WRITESCOPE_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
