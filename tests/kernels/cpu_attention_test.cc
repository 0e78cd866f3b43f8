// Every CPU kernel (each ISA this machine has) against the double reference, over a
// table of shapes, token counts and splits of the keys into two parts: the merged
// partials must equal single-pass attention to fp32 rounding.
#include "kernels/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/attention_reference.h"
#include "kernels/attention_state.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/mla_amx.h"
#include "tests/common/test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace writescope::kernels {
namespace {

using testing::AssignBlocks;
using testing::BlockSubset;
using testing::Compare;
using testing::ErrorStats;
using testing::GuardedFloats;
using testing::SplitMode;
using testing::TiledSequence;
using testing::TileRegion;

// Within fp32 rounding of attention over up to ~1000 keys (values are O(1)).
constexpr double kOutputTol = 2e-5;
constexpr double kLseRelTol = 4e-6;  // of max(1, |lse|), row by row

std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> isas = {CpuIsa::kScalar};
  if (static_cast<int>(DetectCpuIsa()) >= static_cast<int>(CpuIsa::kAvx2)) isas.push_back(CpuIsa::kAvx2);
  if (DetectCpuIsa() == CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  return isas;
}

// The backend's name, with the kernel table that runs it for AVX-512 ("avx512bf16", or
// "avx512" without vdpbf16ps or with WS_CPU_NO_AVX512BF16 set).
std::string IsaLabel(CpuIsa isa) {
  if (isa != CpuIsa::kAvx512) return CpuIsaName(isa);
  return absl::StrCat(CpuIsaName(isa), "/", cpu::Avx512Kernels().name);
}

// Forcing an ISA above this CPU's best is refused (INVALID_ARGUMENT) by the decodes, never run
// on a lesser kernel. Where the CPU has no AVX-512 the test then skips, saying which kernels this
// host leaves untested: they run only where the CPU has AVX-512 (the GPU machine's host has it).
TEST(CpuIsaTest, AnIsaTheCpuLacksIsRefused) {
  const CpuIsa best = DetectCpuIsa();
  const GqaShape gqa{32, 4, 128, 64, 0.1f};
  const MlaShape mla{16, 512, 64, 64, 0.1f};
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(best)) continue;
    CpuAttentionOptions options;
    options.isa = isa;
    EXPECT_EQ(CpuGqaDecode({gqa, 0, nullptr, nullptr, nullptr, nullptr}, options).code(),
              absl::StatusCode::kInvalidArgument)
        << CpuIsaName(isa);
    EXPECT_EQ(CpuMlaDecode({mla, 0, nullptr, nullptr, nullptr, nullptr}, options).code(),
              absl::StatusCode::kInvalidArgument)
        << CpuIsaName(isa);
  }
  if (best != CpuIsa::kAvx512) {
    GTEST_SKIP() << "best ISA " << CpuIsaName(best)
                 << ": the AVX-512 kernel tables, the fast GQA tile kernel, the bf16 MLA kernel "
                    "and the emulated AMX kernel are not tested on this host";
  }
}

TEST(CpuKernelTableTest, TheEnvironmentTurnsTheBf16TableOff) {
  if (DetectCpuIsa() != CpuIsa::kAvx512) GTEST_SKIP() << "no AVX-512 here";
  if (std::getenv("WS_CPU_NO_AVX512BF16") != nullptr) {
    EXPECT_STREQ(cpu::Avx512Kernels().name, "avx512");
  } else {
    __builtin_cpu_init();
    EXPECT_STREQ(cpu::Avx512Kernels().name,
                 __builtin_cpu_supports("avx512bf16") ? "avx512bf16" : "avx512");
  }
}

// Which kernels each table holds: the fast GQA tile kernel (Qwen3's group 8 and Mixtral's 4 at
// head_dim 128) and the bf16 MLA kernel are the AVX-512 table's only, the latter where the CPU
// has AVX-512 BF16 (and the environment leaves it on). What the decodes run with each table is
// the shape tests' (GqaDecodeTest, MlaDecodeTest); this checks that the fast ones are there to run.
TEST(CpuKernelTableTest, TheFastKernelsAreInTheAvx512TableOnly) {
  for (const cpu::KernelTable* table : {&cpu::ScalarKernels(), &cpu::Avx2Kernels()}) {
    EXPECT_EQ(table->gqa_tiles, nullptr) << table->name;
    EXPECT_EQ(table->mla_segment_bf16, nullptr) << table->name;
    EXPECT_NE(table->gqa_segment, nullptr) << table->name;
    EXPECT_NE(table->mla_segment, nullptr) << table->name;
  }
  if (DetectCpuIsa() != CpuIsa::kAvx512) GTEST_SKIP() << "no AVX-512 here";
  const cpu::KernelTable& avx512 = cpu::Avx512Kernels();
  ASSERT_NE(avx512.gqa_tiles, nullptr);
  ASSERT_NE(avx512.gqa_tiles_supported, nullptr);
  for (const int32_t group : {1, 2, 4, 8, 16})
    EXPECT_TRUE(avx512.gqa_tiles_supported(group, 128)) << group;
  EXPECT_FALSE(avx512.gqa_tiles_supported(3, 128));
  EXPECT_FALSE(avx512.gqa_tiles_supported(8, 72));
  EXPECT_EQ(avx512.mla_segment_bf16 != nullptr, std::string(avx512.name) == "avx512bf16");
}

// Several threads and many work items, so the in-kernel merge of items is exercised too.
CpuAttentionOptions Options(CpuIsa isa) {
  CpuAttentionOptions options;
  options.isa = isa;
  options.num_threads = 3;
  options.plan_divisor = 16;
  return options;
}

// A partial state with guards.
struct Partial {
  Partial(int64_t rows, int32_t dim) : o(rows * dim), lse(rows), rows(rows), dim(dim) {}
  GuardedFloats o, lse;
  int64_t rows;
  int32_t dim;
  ConstAttentionStateView cview() const { return {o.data(), lse.data()}; }
  AttentionStateView view() { return {o.data(), lse.data()}; }
};

// Worst errors seen per backend label, printed when the test program ends.
struct WorstError {
  double o_max_abs = 0, o_nmse = 0, lse_max_abs = 0;
};
std::map<std::string, WorstError>& Worst() {
  static auto* worst = new std::map<std::string, WorstError>;
  return *worst;
}
class PrintWorstErrors : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [label, e] : Worst()) {
      std::printf("worst error %-26s o max_abs=%.3g o nmse=%.3g lse max_abs=%.3g\n",
                  label.c_str(), e.o_max_abs, e.o_nmse, e.lse_max_abs);
    }
  }
};
const auto* const kPrintWorst = ::testing::AddGlobalTestEnvironment(new PrintWorstErrors);

// `scale`: the scores' magnitude over the tests' usual (fp32 rounding of a score grows with
// its terms, so the tolerances do too).
void ExpectClose(const Partial& got, const Partial& want, const std::string& what,
                 double scale = 1.0) {
  EXPECT_TRUE(got.o.GuardsIntact()) << what << ": guard bytes around o overwritten";
  EXPECT_TRUE(got.lse.GuardsIntact()) << what << ": guard bytes around lse overwritten";
  const ErrorStats eo = Compare(got.o.data(), want.o.data(), got.o.size());
  const ErrorStats el = Compare(got.lse.data(), want.lse.data(), got.lse.size());
  EXPECT_EQ(eo.bad, 0) << what << ": NaN/inf mismatches in o";
  EXPECT_EQ(el.bad, 0) << what << ": NaN/inf mismatches in lse";
  EXPECT_LE(eo.max_abs, kOutputTol * scale) << what << " o nmse=" << eo.nmse;
  // Each row's LSE within fp32 rounding of its own size (not the largest row's).
  int64_t lse_far = 0;
  size_t first_far = 0;
  for (size_t i = 0; i < want.lse.size(); ++i) {
    if (!std::isfinite(want.lse[i])) continue;
    const double want_i = want.lse[i];
    if (std::abs(double{got.lse[i]} - want_i) >
        kLseRelTol * scale * std::max(1.0, std::abs(want_i))) {
      if (lse_far++ == 0) first_far = i;
    }
  }
  EXPECT_EQ(lse_far, 0) << what << ": LSE rows beyond " << kLseRelTol
                        << " relative, first row " << first_far << ": " << got.lse[first_far]
                        << " against " << want.lse[first_far];
  // Per backend: the label without its chunking and part ("avx512 AMX emulated, plan
  // divisor 4 part0" counts as "avx512 AMX emulated").
  const size_t end = std::min({what.find(','), what.find(" part"), what.find(" merged")});
  WorstError& worst = Worst()[what.substr(0, end)];
  worst.o_max_abs = std::max(worst.o_max_abs, eo.max_abs);
  worst.o_nmse = std::max(worst.o_nmse, eo.nmse);
  worst.lse_max_abs = std::max(worst.lse_max_abs, el.max_abs);
}

// Merges two partials.
Partial Merge(const Partial& a, const Partial& b) {
  Partial out(a.rows, a.dim);
  MergeStates(a.cview(), b.cview(), out.view(), a.rows, a.dim);
  return out;
}

// ---------------------------------------------------------------- GQA decode ----------

struct GqaCase {
  const char* name;
  int32_t q_heads, kv_heads, head_dim, block_tokens;
};
constexpr GqaCase kGqaCases[] = {
    {"Qwen3", 32, 4, 128, 256},
    {"Mixtral", 32, 8, 128, 64},
    {"Odd6x3d64", 6, 3, 64, 16},
    {"Odd5x1d72", 5, 1, 72, 32},  // head_dim not a multiple of the lanes
    // The fast AVX-512 kernel's other group sizes (1 and 16 query heads per KV head).
    {"Group1x8d128", 8, 8, 128, 16},
    {"Group16x1d128", 16, 1, 128, 48},
};
constexpr int64_t kTokenCounts[] = {1, 5, 77, 255, 257, 1000};
constexpr SplitMode kTwoWaySplits[] = {SplitMode::kAllInPart0, SplitMode::kAllInPart1,
                                       SplitMode::kPrefix, SplitMode::kRandom};

void PrintTo(const GqaCase& c, std::ostream* os) { *os << c.name; }

GqaShape ShapeOf(const GqaCase& c) {
  return {c.q_heads, c.kv_heads, c.head_dim, c.block_tokens,
          1.0f / std::sqrt(static_cast<float>(c.head_dim))};
}

// Per sequence, the blocks `assignment` gives to `part` (subsets) and the block lists the
// kernels read (they point into the subsets' storage, which moves with them).
struct PartLists {
  std::vector<BlockSubset> subsets;
  std::vector<KvBlockList> lists;
};
PartLists ListsOf(const std::vector<TiledSequence>& seqs,
                  const std::vector<std::vector<int>>& assignment, int part) {
  PartLists out;
  for (size_t s = 0; s < seqs.size(); ++s) {
    out.subsets.push_back(testing::Subset(seqs[s], assignment[s], part));
  }
  for (auto& subset : out.subsets) out.lists.push_back(subset.list);
  return out;
}

// A region's slots for `lengths`: twice the blocks of the longest (at least 2000 tokens) per
// sequence, so that the slots the sequences take are spread over it.
int64_t SlotsFor(const std::vector<int64_t>& lengths, int32_t block_tokens) {
  int64_t longest = 2000;
  for (int64_t n : lengths) longest = std::max(longest, n);
  return 8 + 2 * (longest / block_tokens + 2) * static_cast<int64_t>(lengths.size());
}

// Per sequence: every block in part 0 (`whole`), and the blocks assigned to `parts` parts by
// `mode` (`split`; AssignBlocks, drawing from `rng` sequence by sequence).
struct Assignments {
  std::vector<std::vector<int>> whole, split;
};
Assignments Assign(const std::vector<TiledSequence>& seqs, int parts, SplitMode mode,
                   std::mt19937_64& rng) {
  Assignments out;
  for (const TiledSequence& seq : seqs) {
    out.whole.push_back(std::vector<int>(seq.blocks.size(), 0));
    out.split.push_back(AssignBlocks(seq.blocks.size(), parts, mode, rng));
  }
  return out;
}

// Whether a sequence's two-way `assignment` gives blocks to both parts.
bool BothPartsHoldBlocks(const std::vector<int>& assignment) {
  const int64_t in_part1 = std::count(assignment.begin(), assignment.end(), 1);
  return in_part1 > 0 && in_part1 < static_cast<int64_t>(assignment.size());
}

// A backend's two parts of `world` (its Run with `kernel`) against the reference's parts, and
// their merge against the single-pass reference.
template <typename World, typename Kernel>
void ExpectPartsAndMerge(World& world, const std::vector<std::vector<int>>& split,
                         const Partial& ref0, const Partial& ref1, const Partial& reference,
                         const std::string& name, Kernel kernel) {
  const Partial part0 = world.Run(split, 0, kernel);
  const Partial part1 = world.Run(split, 1, kernel);
  ExpectClose(part0, ref0, name + " part0");
  ExpectClose(part1, ref1, name + " part1");
  ExpectClose(Merge(part0, part1), reference, name + " merged");
}

// Random sequences in a shuffled GQA region.
struct GqaWorld {
  GqaWorld(const GqaShape& shape, const std::vector<int64_t>& lengths, uint64_t seed)
      : shape(shape),
        rng(seed),
        region(SlotsFor(lengths, shape.block_tokens),
               int64_t{2} * shape.num_kv_heads * shape.block_tokens * shape.head_dim) {
    for (int64_t n : lengths) {
      seqs.push_back(testing::MakeSequence(region, n, shape.block_tokens, rng,
                                           [&](uint16_t* tile, int32_t t) {
        for (int32_t h = 0; h < shape.num_kv_heads; ++h) {
          testing::FillRandomBf16(tile + shape.k_offset(h) + int64_t{t} * shape.head_dim,
                                  shape.head_dim, rng, 2.0f);
          testing::FillRandomBf16(tile + shape.v_offset(h) + int64_t{t} * shape.head_dim,
                                  shape.head_dim, rng, 1.0f);
        }
      }));
    }
    q.resize(lengths.size() * shape.num_q_heads * shape.head_dim);
    testing::FillRandomBf16(q.data(), q.size(), rng, 2.0f);
  }
  int32_t num_seqs() const { return static_cast<int32_t>(seqs.size()); }

  // Decode over, per sequence, the tiles assigned to `part`.
  Partial Run(const std::vector<std::vector<int>>& assignment, int part,
              const std::function<absl::Status(const GqaDecodeArgs&)>& kernel) {
    const PartLists parts = ListsOf(seqs, assignment, part);
    Partial out(int64_t{num_seqs()} * shape.num_q_heads, shape.head_dim);
    GqaDecodeArgs args{shape,        num_seqs(),    q.data(), parts.lists.data(),
                       out.o.data(), out.lse.data()};
    const absl::Status status = kernel(args);
    EXPECT_TRUE(status.ok()) << status;
    return out;
  }

  GqaShape shape;
  std::mt19937_64 rng;
  TileRegion region;
  std::vector<TiledSequence> seqs;
  std::vector<uint16_t> q;
};

class GqaDecodeTest
    : public ::testing::TestWithParam<std::tuple<GqaCase, int64_t, SplitMode>> {};

TEST_P(GqaDecodeTest, MergedPartsEqualSinglePassReference) {
  const auto& [c, tokens, mode] = GetParam();
  const GqaShape shape = ShapeOf(c);
  // Two sequences of different lengths, so per-sequence indexing is checked too.
  GqaWorld world(shape, {tokens, (tokens * 7) % 300 + 1},
                 std::hash<std::string>{}(absl::StrCat(c.name, tokens, static_cast<int>(mode))));
  const auto [whole, split] = Assign(world.seqs, 2, mode, world.rng);
  const Partial reference = world.Run(whole, 0, ReferenceGqaDecode);
  const Partial ref0 = world.Run(split, 0, ReferenceGqaDecode);
  const Partial ref1 = world.Run(split, 1, ReferenceGqaDecode);
  ExpectClose(Merge(ref0, ref1), reference, "reference parts");

  for (CpuIsa isa : AvailableIsas()) {
    const std::string name = IsaLabel(isa);
    auto cpu = [&](const GqaDecodeArgs& args) { return CpuGqaDecode(args, Options(isa)); };
    const Partial part0 = world.Run(split, 0, cpu);
    const Partial part1 = world.Run(split, 1, cpu);
    ExpectClose(part0, ref0, name + " part0");
    ExpectClose(part1, ref1, name + " part1");
    ExpectClose(Merge(part0, part1), reference, name + " merged");
    ExpectClose(Merge(part1, part0), reference, name + " merged reversed");
    // Against the reference's other part: a bias both of the backend's parts share would
    // cancel in their merge, not here.
    ExpectClose(Merge(part0, ref1), reference, name + " merged with reference part1");
  }
  // One thread and one work item per (sequence, KV head): every item runs over all its
  // blocks (with plan divisor 16 most items here hold one tile).
  for (CpuIsa isa : AvailableIsas()) {
    const std::string name = absl::StrCat(IsaLabel(isa), " one item");
    CpuAttentionOptions options = Options(isa);
    options.num_threads = 1;
    options.plan_divisor = 1;
    auto cpu = [&](const GqaDecodeArgs& args) { return CpuGqaDecode(args, options); };
    const Partial part0 = world.Run(split, 0, cpu);
    ExpectClose(part0, ref0, name + " part0");
    ExpectClose(Merge(part0, world.Run(split, 1, cpu)), reference, name + " merged");
  }
}

template <typename Case>
std::string CaseName(const ::testing::TestParamInfo<std::tuple<Case, int64_t, SplitMode>>& info) {
  return absl::StrCat(std::get<0>(info.param).name, "_T", std::get<1>(info.param), "_",
                      testing::SplitName(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, GqaDecodeTest,
                         ::testing::Combine(::testing::ValuesIn(kGqaCases),
                                            ::testing::ValuesIn(kTokenCounts),
                                            ::testing::ValuesIn(kTwoWaySplits)),
                         CaseName<GqaCase>);

// Scores over a wide range and keys split into more than two parts. Q scaled 16x makes the
// scores' spread ~20 per standard deviation: 5-28 % of a row's keys fall more than 87 below its
// max (exp's clamp), and in 3 of the 24 cases (Qwen3 T257 with 3 and 5 parts, Mixtral T257 with
// 5) a whole part's weight underflows and merges in as zero. These seeds never raise a row's
// running max by more than 87 between blocks (alpha = 0); MlaAmxTest builds such rows on
// purpose. The parts (3 or 5, at random blocks) merge in one pass (MergeStatesN) and pairwise in
// order, both to the single-pass reference.
// The tolerances grow 16x with the scores (kWideScale): a score's fp32 rounding is relative to
// its terms (a row whose LSE is near 0 has scores of magnitude ~50 in it); a clamp or a
// rescale gone wrong is off by O(1).
constexpr double kWideScale = 16;
class GqaDecodeManyPartsTest : public ::testing::TestWithParam<std::tuple<GqaCase, int64_t, int>> {
};

TEST_P(GqaDecodeManyPartsTest, WideScoresInManyPartsMergeToTheReference) {
  const auto& [c, tokens, parts] = GetParam();
  const GqaShape shape = ShapeOf(c);
  GqaWorld world(shape, {tokens, (tokens * 3) % 500 + 1},
                 std::hash<std::string>{}(absl::StrCat("wide", c.name, tokens, parts)));
  for (uint16_t& value : world.q) value = FloatToBf16(16.0f * Bf16ToFloat(value));
  const auto [whole, split] = Assign(world.seqs, parts, SplitMode::kRandom, world.rng);
  const Partial reference = world.Run(whole, 0, ReferenceGqaDecode);
  // The scores do span the range: some row's LSE is far above what the unscaled q gives.
  double lse_max = 0;
  for (size_t i = 0; i < reference.lse.size(); ++i) {
    lse_max = std::max(lse_max, std::abs(double{reference.lse[i]}));
  }
  EXPECT_GT(lse_max, 20.0);
  auto check = [&](const std::vector<Partial>& got, const std::string& name) {
    std::vector<ConstAttentionStateView> views;
    for (const Partial& p : got) views.push_back(p.cview());
    Partial merged(reference.rows, reference.dim);
    MergeStatesN(views, merged.view(), reference.rows, reference.dim);
    ExpectClose(merged, reference, name + " merged in one pass", kWideScale);
    Partial pairwise = got[0];
    for (size_t i = 1; i < got.size(); ++i) pairwise = Merge(pairwise, got[i]);
    ExpectClose(pairwise, reference, name + " merged pairwise", kWideScale);
  };
  std::vector<Partial> ref_parts;
  for (int part = 0; part < parts; ++part) {
    ref_parts.push_back(world.Run(split, part, ReferenceGqaDecode));
  }
  check(ref_parts, "reference");
  for (CpuIsa isa : AvailableIsas()) {
    for (const int divisor : {16, 1}) {
      CpuAttentionOptions options = Options(isa);
      options.plan_divisor = divisor;
      auto cpu = [&](const GqaDecodeArgs& args) { return CpuGqaDecode(args, options); };
      std::vector<Partial> got;
      for (int part = 0; part < parts; ++part) {
        got.push_back(world.Run(split, part, cpu));
        ExpectClose(got.back(), ref_parts[part],
                    absl::StrCat(IsaLabel(isa), " wide, plan divisor ", divisor, " part", part),
                    kWideScale);
      }
      check(got, absl::StrCat(IsaLabel(isa), " wide, plan divisor ", divisor));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GqaDecodeManyPartsTest,
    ::testing::Combine(::testing::ValuesIn(kGqaCases),
                       ::testing::Values(int64_t{257}, int64_t{1000}), ::testing::Values(3, 5)),
    [](const ::testing::TestParamInfo<std::tuple<GqaCase, int64_t, int>>& info) {
      return absl::StrCat(std::get<0>(info.param).name, "_T", std::get<1>(info.param), "_parts",
                          std::get<2>(info.param));
    });

// Long sequences: the real shapes at 16K keys (the tables above stop at 1000), split two ways at
// random blocks and at a cut, beside a 3-token sequence. Every ISA runs with the workers' options
// (OpenMP's threads, plan divisor 1: an item spans many blocks) and with many small items
// (Options: 3 threads, divisor 16), against the fp64 reference, at the short tests' tolerances.
constexpr int64_t kLongTokens = 16411;  // 64 blocks of 256 and 27 tokens; 256 blocks of 64 and 27
constexpr GqaCase kLongGqaCases[] = {kGqaCases[0], kGqaCases[1]};  // Qwen3, Mixtral

class GqaDecodeLongTest : public ::testing::TestWithParam<std::tuple<GqaCase, int64_t, SplitMode>> {
};

TEST_P(GqaDecodeLongTest, MergedPartsEqualSinglePassReference) {
  const auto& [c, tokens, mode] = GetParam();
  const GqaShape shape = ShapeOf(c);
  GqaWorld world(
      shape, {tokens, 3},
      std::hash<std::string>{}(absl::StrCat("long", c.name, tokens, static_cast<int>(mode))));
  const auto [whole, split] = Assign(world.seqs, 2, mode, world.rng);
  ASSERT_TRUE(BothPartsHoldBlocks(split[0])) << "the long sequence's keys in one part only";
  const Partial reference = world.Run(whole, 0, ReferenceGqaDecode);
  const Partial ref0 = world.Run(split, 0, ReferenceGqaDecode);
  const Partial ref1 = world.Run(split, 1, ReferenceGqaDecode);
  ExpectClose(Merge(ref0, ref1), reference, "reference parts long");
  for (CpuIsa isa : AvailableIsas()) {
    CpuAttentionOptions workers;
    workers.isa = isa;
    for (const auto& [label, options] :
         {std::pair{"workers' options", workers}, std::pair{"small items", Options(isa)}}) {
      ExpectPartsAndMerge(world, split, ref0, ref1, reference,
                          absl::StrCat(IsaLabel(isa), " long, ", label),
                          [&](const GqaDecodeArgs& args) { return CpuGqaDecode(args, options); });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GqaDecodeLongTest,
    ::testing::Combine(::testing::ValuesIn(kLongGqaCases), ::testing::Values(kLongTokens),
                       ::testing::Values(SplitMode::kPrefix, SplitMode::kRandom)),
    CaseName<GqaCase>);

TEST(GqaDecodeEdgeTest, EmptyBatchAndEmptySequencesAreFinite) {
  const GqaShape shape = ShapeOf(kGqaCases[0]);
  std::vector<uint16_t> q(2 * shape.num_q_heads * shape.head_dim, FloatToBf16(1.0f));
  KvBlockList empty[2];
  for (CpuIsa isa : AvailableIsas()) {
    // A fresh output per ISA (NaN-filled): each backend must write the empty state itself.
    Partial out(2 * shape.num_q_heads, shape.head_dim);
    GqaDecodeArgs args{shape, 2, q.data(), empty, out.o.data(), out.lse.data()};
    WS_ASSERT_OK(CpuGqaDecode(args, Options(isa)));
    for (size_t i = 0; i < out.lse.size(); ++i) EXPECT_EQ(out.lse[i], kEmptyLse) << CpuIsaName(isa);
    for (size_t i = 0; i < out.o.size(); ++i) EXPECT_EQ(out.o[i], 0.0f) << CpuIsaName(isa);
    const Partial merged = Merge(out, out);
    for (size_t i = 0; i < merged.o.size(); ++i) ASSERT_EQ(merged.o[i], 0.0f);
    for (size_t i = 0; i < merged.lse.size(); ++i) ASSERT_EQ(merged.lse[i], kEmptyLse);
    args.num_seqs = 0;
    WS_ASSERT_OK(CpuGqaDecode(args, Options(isa)));
    EXPECT_TRUE(out.o.GuardsIntact() && out.lse.GuardsIntact()) << CpuIsaName(isa);
  }
}

// Both decodes report their phases, in order and inside the call, where asked; a failed call
// leaves them as they were.
TEST(DecodePhasesTest, RecordedInOrderInsideTheCall) {
  std::mt19937_64 rng(11);
  auto expect_ordered = [](const CpuAttentionPhases& p, uint64_t before, uint64_t after,
                           const char* what) {
    EXPECT_LE(before, p.start_ns) << what;
    EXPECT_LE(p.start_ns, p.prepared_ns) << what;
    EXPECT_LE(p.prepared_ns, p.blocks_done_ns) << what;
    EXPECT_LE(p.blocks_done_ns, p.end_ns) << what;
    EXPECT_LE(p.end_ns, after) << what;
  };
  {
    GqaWorld world(ShapeOf(kGqaCases[0]), {300, 40}, 11);
    CpuAttentionPhases phases;
    CpuAttentionOptions options;
    options.phases = &phases;
    std::vector<std::vector<int>> all;  // every block of both sequences
    for (const TiledSequence& seq : world.seqs) all.emplace_back(seq.blocks.size(), 0);
    const uint64_t before = MonotonicNanos();
    world.Run(all, 0, [&](const GqaDecodeArgs& args) { return CpuGqaDecode(args, options); });
    expect_ordered(phases, before, MonotonicNanos(), "GQA");
    const CpuAttentionPhases kept = phases;
    world.shape.head_dim = 0;  // refused: the phases stay
    std::vector<float> o(64), lse(64);
    EXPECT_FALSE(CpuGqaDecode({world.shape, 0, world.q.data(), nullptr, o.data(), lse.data()},
                              options)
                     .ok());
    EXPECT_EQ(phases.end_ns, kept.end_ns);
  }
  {
    const MlaShape shape{16, 512, 64, 256, 1.0f / std::sqrt(192.0f)};
    TileRegion region(4, int64_t{shape.block_tokens} * shape.row_dim());
    const TiledSequence seq = testing::MakeSequence(
        region, 300, shape.block_tokens, rng, [&](uint16_t* tile, int32_t t) {
          testing::FillRandomBf16(tile + int64_t{t} * shape.row_dim(), shape.row_dim(), rng, 1.0f);
        });
    const BlockSubset subset =
        testing::Subset(seq, std::vector<int>(seq.blocks.size(), 0), 0);
    std::vector<uint16_t> q(shape.num_heads * shape.row_dim());
    testing::FillRandomBf16(q.data(), q.size(), rng, 1.0f);
    Partial out(shape.num_heads, shape.kv_lora_rank);
    CpuAttentionPhases phases;
    CpuAttentionOptions options;
    options.phases = &phases;
    const uint64_t before = MonotonicNanos();
    WS_ASSERT_OK(CpuMlaDecode({shape, 1, q.data(), &subset.list, out.o.data(), out.lse.data()},
                              options));
    expect_ordered(phases, before, MonotonicNanos(), "MLA");
  }
}

TEST(GqaDecodeEdgeTest, RejectsBadShapes) {
  GqaShape shape = ShapeOf(kGqaCases[0]);
  shape.num_kv_heads = 5;
  GqaDecodeArgs args{shape, 0, nullptr, nullptr, nullptr, nullptr};
  EXPECT_EQ(CpuGqaDecode(args).code(), absl::StatusCode::kInvalidArgument);
  args.shape = ShapeOf(kGqaCases[0]);
  KvBlockList bad;
  bad.num_blocks = 1;
  const uint16_t* tile = nullptr;
  bad.blocks = &tile;
  bad.last_block_tokens = 0;
  args.num_seqs = 1;
  args.seqs = &bad;
  EXPECT_EQ(CpuGqaDecode(args).code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- MLA decode ----------

struct MlaCase {
  const char* name;
  int32_t heads, kv_lora_rank, rope_dim, block_tokens;
};
constexpr MlaCase kMlaCases[] = {
    {"DeepSeekV2Lite", 16, 512, 64, 256},
    {"DeepSeekV2LiteBt64", 16, 512, 64, 64},
    {"Odd5h_r72_p8", 5, 72, 8, 16},
    // Shapes the AMX kernel takes beside DeepSeek's: 5 heads padded to 16, a block of 48 (a
    // 32-token step, then 16 tokens on the vector kernels); 20 heads in two groups of 16.
    {"Amx5h_r96_p32_bt48", 5, 96, 32, 48},
    {"Amx20h_r32_p32_bt64", 20, 32, 32, 64},
    // An odd row (73 + 8): the generic vector kernels, not the paired-bf16 one.
    {"Odd3h_r73_p8", 3, 73, 8, 16},
};

void PrintTo(const MlaCase& c, std::ostream* os) { *os << c.name; }

MlaShape ShapeOf(const MlaCase& c) {
  return {c.heads, c.kv_lora_rank, c.rope_dim, c.block_tokens,
          1.0f / std::sqrt(192.0f)};  // DeepSeek-V2: 1/sqrt(128 + 64)
}

// Random sequences of latent rows in a shuffled MLA region, and q at `q_scale` (the values
// drawn in this order from `rng`: the rows, then q).
struct MlaWorld {
  MlaWorld(const MlaShape& shape, const std::vector<int64_t>& lengths, uint64_t seed, float q_scale)
      : shape(shape),
        rng(seed),
        region(SlotsFor(lengths, shape.block_tokens),
               int64_t{shape.block_tokens} * shape.row_dim()) {
    for (int64_t n : lengths) {
      seqs.push_back(
          testing::MakeSequence(region, n, shape.block_tokens, rng, [&](uint16_t* tile, int32_t t) {
            testing::FillRandomBf16(tile + int64_t{t} * shape.row_dim(), shape.row_dim(), rng,
                                    1.0f);
          }));
    }
    q.resize(lengths.size() * shape.num_heads * shape.row_dim());
    testing::FillRandomBf16(q.data(), q.size(), rng, q_scale);
  }
  int32_t num_seqs() const { return static_cast<int32_t>(seqs.size()); }
  int64_t rows() const { return int64_t{num_seqs()} * shape.num_heads; }

  // Decode over, per sequence, the tiles assigned to `part`.
  Partial Run(const std::vector<std::vector<int>>& assignment, int part,
              const std::function<absl::Status(const MlaDecodeArgs&)>& kernel) {
    const PartLists parts = ListsOf(seqs, assignment, part);
    Partial out(rows(), shape.kv_lora_rank);
    MlaDecodeArgs args{shape,        num_seqs(),    q.data(), parts.lists.data(),
                       out.o.data(), out.lse.data()};
    const absl::Status status = kernel(args);
    EXPECT_TRUE(status.ok()) << status;
    return out;
  }

  MlaShape shape;
  std::mt19937_64 rng;
  TileRegion region;
  std::vector<TiledSequence> seqs;
  std::vector<uint16_t> q;
};

class MlaDecodeTest
    : public ::testing::TestWithParam<std::tuple<MlaCase, int64_t, SplitMode>> {};

TEST_P(MlaDecodeTest, MergedPartsEqualSinglePassReference) {
  const auto& [c, tokens, mode] = GetParam();
  const MlaShape shape = ShapeOf(c);
  // Four sequences or more: q's layout is built by the threads from there.
  const std::vector<int64_t> lengths = {tokens, (tokens * 5) % 200 + 1, 1, (tokens * 3) % 97 + 1};
  MlaWorld world(shape, lengths,
                 std::hash<std::string>{}(absl::StrCat(c.name, tokens, static_cast<int>(mode))),
                 2.0f);
  const std::vector<TiledSequence>& seqs = world.seqs;
  const auto [whole, split] = Assign(seqs, 2, mode, world.rng);
  auto run = [&](const std::vector<std::vector<int>>& assignment, int part,
                 const std::function<absl::Status(const MlaDecodeArgs&)>& kernel) {
    return world.Run(assignment, part, kernel);
  };
  const Partial reference = run(whole, 0, ReferenceMlaDecode);
  const Partial ref0 = run(split, 0, ReferenceMlaDecode);
  const Partial ref1 = run(split, 1, ReferenceMlaDecode);
  for (CpuIsa isa : AvailableIsas()) {
    const std::string name = CpuIsaName(isa);
    // The vector kernels; whole blocks through oneDNN (where it has a bf16 matmul, else the
    // same vector kernels); our AMX kernel, with its tiles emulated (on the AVX-512 ISA:
    // the emulation needs it) and on the CPU's AMX where this process can use it. The matrix
    // paths also with the plan's largest items (divisor 1), so that their blocks follow each
    // other on one running state (not only the first block of an item). The AMX kernel also
    // with its prefetch of the next step's rows only (0) and of the rows 1 step ahead (into
    // the next block at a block's end): the same values, as a prefetch changes none.
    struct Path {
      MlaMatmulMode mode;
      bool emulated;
      int divisor;  // CpuAttentionOptions::plan_divisor
      int prefetch_steps = CpuAttentionOptions{}.mla_amx_prefetch_steps;
    };
    std::vector<Path> paths = {{MlaMatmulMode::kOff, false, 4},
                               {MlaMatmulMode::kOneDnn, false, 4},
                               {MlaMatmulMode::kOneDnn, false, 1}};
    if (isa == CpuIsa::kAvx512) {
      paths.push_back({MlaMatmulMode::kAmx, true, 4});
      paths.push_back({MlaMatmulMode::kAmx, true, 1});
      paths.push_back({MlaMatmulMode::kAmx, true, 1, 0});
    }
    if (MlaAmxUsable()) {
      paths.push_back({MlaMatmulMode::kAmx, false, 4});
      paths.push_back({MlaMatmulMode::kAmx, false, 1});
      paths.push_back({MlaMatmulMode::kAmx, false, 4, 1});
      paths.push_back({MlaMatmulMode::kAmx, false, 1, 0});
    }
    // The AMX kernel takes this shape (its rows and V in whole 32-value chunks; any heads,
    // padded to 16), and some block has a 32-token step.
    const bool amx_shape = shape.row_dim() % 32 == 0 && shape.kv_lora_rank % 32 == 0;
    EXPECT_EQ(cpu::MlaAmxSupported((c.heads + 15) / 16 * 16, shape.row_dim(), shape.kv_lora_rank),
              amx_shape);
    const bool amx_runs = amx_shape && c.block_tokens >= cpu::kMlaAmxTokens &&
                          *std::max_element(lengths.begin(), lengths.end()) >= cpu::kMlaAmxTokens;
    for (const Path& path : paths) {
      CpuAttentionOptions options = Options(isa);
      options.mla_matmul = path.mode;
      options.mla_amx_emulated = path.emulated;
      options.plan_divisor = path.divisor;
      options.mla_amx_prefetch_steps = path.prefetch_steps;
      const uint64_t amx_steps = cpu::MlaAmxStepsRun();
      const char* label = path.mode == MlaMatmulMode::kOff      ? ""
                          : path.mode == MlaMatmulMode::kOneDnn ? " oneDNN"
                          : path.emulated                       ? " AMX emulated"
                                                                : " AMX";
      const std::string what =
          path.mode == MlaMatmulMode::kOff
              ? name
              : absl::StrCat(name, label, ", plan divisor ", path.divisor,
                             path.mode == MlaMatmulMode::kAmx
                                 ? absl::StrCat(", prefetch ", path.prefetch_steps)
                                 : "");
      auto cpu = [&](const MlaDecodeArgs& args) { return CpuMlaDecode(args, options); };
      const Partial part0 = run(split, 0, cpu);
      const Partial part1 = run(split, 1, cpu);
      ExpectClose(part0, ref0, what + " part0");
      ExpectClose(part1, ref1, what + " part1");
      ExpectClose(Merge(part0, part1), reference, what + " merged");
      if (path.mode == MlaMatmulMode::kAmx) {
        EXPECT_EQ(cpu::MlaAmxStepsRun() > amx_steps, amx_runs) << what;
      }
    }
    // kAuto takes our AMX kernel where this process can use AMX (oneDNN at a shape the kernel
    // does not take), else the vector kernels: the same bits as the mode it stands for.
    CpuAttentionOptions chosen = Options(isa), autod = Options(isa);
    chosen.mla_matmul = !MlaAmxUsable() ? MlaMatmulMode::kOff
                        : cpu::MlaAmxSupported((c.heads + 15) / 16 * 16, shape.row_dim(),
                                               shape.kv_lora_rank)
                            ? MlaMatmulMode::kAmx
                            : MlaMatmulMode::kOneDnn;
    autod.mla_matmul = MlaMatmulMode::kAuto;
    const Partial want = run(split, 0, [&](const MlaDecodeArgs& a) { return CpuMlaDecode(a, chosen); });
    const Partial got = run(split, 0, [&](const MlaDecodeArgs& a) { return CpuMlaDecode(a, autod); });
    ASSERT_EQ(got.o.size(), want.o.size());
    for (size_t i = 0; i < got.o.size(); ++i) ASSERT_EQ(got.o[i], want.o[i]) << name << " auto o " << i;
    for (size_t i = 0; i < got.lse.size(); ++i) ASSERT_EQ(got.lse[i], want.lse[i]) << name << " auto lse " << i;
  }
}

// The AMX kernel rescales its running state when a later step's scores are higher (the
// online softmax's alpha): rows whose scores grow by ~1 per 32-token step, against the
// reference; and kAmx is refused, not silently replaced, where AMX cannot run.
TEST(MlaAmxTest, RescalesAcrossStepsAndRefusesWithoutAmx) {
  const MlaShape shape{16, 512, 64, 256, 1.0f / std::sqrt(192.0f)};
  std::mt19937_64 rng(7);
  TileRegion region(8, int64_t{shape.block_tokens} * shape.row_dim());
  std::vector<uint16_t> q(shape.num_heads * shape.row_dim());
  testing::FillRandomBf16(q.data(), q.size(), rng, 1.0f);
  int32_t position = 0;  // rows are filled in order
  const TiledSequence seq = testing::MakeSequence(region, 600, shape.block_tokens, rng,
                                                  [&](uint16_t* tile, int32_t t) {
    uint16_t* row = tile + int64_t{t} * shape.row_dim();
    // The row is q's head 0 times a growing factor, plus noise: scores rise along the rows.
    std::vector<uint16_t> noise(shape.row_dim());
    testing::FillRandomBf16(noise.data(), noise.size(), rng, 0.1f);
    const float factor = 0.002f * static_cast<float>(position++);
    for (int32_t d = 0; d < shape.row_dim(); ++d) {
      row[d] = FloatToBf16(Bf16ToFloat(q[d]) * factor + Bf16ToFloat(noise[d]));
    }
  });
  const std::vector<int> all(seq.blocks.size(), 0);
  const BlockSubset subset = testing::Subset(seq, all, 0);
  auto run = [&](auto kernel) {
    Partial out(shape.num_heads, shape.kv_lora_rank);
    MlaDecodeArgs args{shape, 1, q.data(), &subset.list, out.o.data(), out.lse.data()};
    const absl::Status status = kernel(args);
    EXPECT_TRUE(status.ok()) << status;
    return out;
  };
  const Partial reference = run(ReferenceMlaDecode);
  // Head 0's scores rise to ~1.2 |q|^2 / sqrt(192) ~ 17 (|q|^2 ~ 576 / 3).
  EXPECT_GT(reference.lse[0], 10.0f);
  std::vector<CpuAttentionOptions> amx;
  if (DetectCpuIsa() == CpuIsa::kAvx512) {
    CpuAttentionOptions emulated = Options(CpuIsa::kAvx512);
    emulated.mla_matmul = MlaMatmulMode::kAmx;
    emulated.mla_amx_emulated = true;
    amx.push_back(emulated);
  }
  if (MlaAmxUsable()) {
    CpuAttentionOptions hardware = Options(CpuIsa::kAuto);
    hardware.mla_matmul = MlaMatmulMode::kAmx;
    amx.push_back(hardware);
  } else {
    CpuAttentionOptions hardware = Options(CpuIsa::kAuto);
    hardware.mla_matmul = MlaMatmulMode::kAmx;
    Partial out(shape.num_heads, shape.kv_lora_rank);
    MlaDecodeArgs args{shape, 1, q.data(), &subset.list, out.o.data(), out.lse.data()};
    EXPECT_EQ(CpuMlaDecode(args, hardware).code(), absl::StatusCode::kInvalidArgument);
  }
  for (int bad : {-1, kMaxMlaAmxPrefetchSteps + 1}) {  // out of range, whatever the path
    CpuAttentionOptions options = Options(CpuIsa::kAuto);
    options.mla_amx_prefetch_steps = bad;
    Partial out(shape.num_heads, shape.kv_lora_rank);
    MlaDecodeArgs args{shape, 1, q.data(), &subset.list, out.o.data(), out.lse.data()};
    EXPECT_EQ(CpuMlaDecode(args, options).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  if (amx.empty()) GTEST_SKIP() << "neither AMX nor AVX-512 (for the emulation) on this CPU";
  for (const CpuAttentionOptions& options : amx) {
    const Partial got = run([&](const MlaDecodeArgs& a) { return CpuMlaDecode(a, options); });
    ExpectClose(got, reference, options.mla_amx_emulated ? "AMX emulated rising" : "AMX rising");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaDecodeTest,
                         ::testing::Combine(::testing::ValuesIn(kMlaCases),
                                            ::testing::ValuesIn(kTokenCounts),
                                            ::testing::ValuesIn(kTwoWaySplits)),
                         CaseName<MlaCase>);

// The MLA decode the same way as GqaDecodeManyPartsTest (and its tolerances): q scaled 16x
// (scores spread ~18 per standard deviation at DeepSeek's shape), 3 parts at random blocks, merged
// in one pass and pairwise; the vector kernels, our AMX kernel emulated (on AVX-512) and on the
// CPU's AMX where usable.
class MlaDecodeManyPartsTest : public ::testing::TestWithParam<std::tuple<MlaCase, int64_t>> {};

TEST_P(MlaDecodeManyPartsTest, WideScoresInManyPartsMergeToTheReference) {
  const auto& [c, tokens] = GetParam();
  constexpr int kParts = 3;
  const MlaShape shape = ShapeOf(c);
  MlaWorld world(shape, {tokens, (tokens * 5) % 200 + 1},
                 std::hash<std::string>{}(absl::StrCat("wide", c.name, tokens)), 32.0f);
  const auto [whole, split] = Assign(world.seqs, kParts, SplitMode::kRandom, world.rng);
  const int64_t rows = world.rows();
  auto run = [&](const std::vector<std::vector<int>>& assignment, int part,
                 const std::function<absl::Status(const MlaDecodeArgs&)>& kernel) {
    return world.Run(assignment, part, kernel);
  };
  const Partial reference = run(whole, 0, ReferenceMlaDecode);
  double lse_max = 0;
  for (size_t i = 0; i < reference.lse.size(); ++i) {
    lse_max = std::max(lse_max, std::abs(double{reference.lse[i]}));
  }
  EXPECT_GT(lse_max, 20.0);
  std::vector<Partial> ref_parts;
  for (int part = 0; part < kParts; ++part)
    ref_parts.push_back(run(split, part, ReferenceMlaDecode));
  struct Path {
    MlaMatmulMode mode;
    bool emulated;
  };
  for (CpuIsa isa : AvailableIsas()) {
    std::vector<Path> paths = {{MlaMatmulMode::kOff, false}};
    if (isa == CpuIsa::kAvx512) paths.push_back({MlaMatmulMode::kAmx, true});
    if (MlaAmxUsable()) paths.push_back({MlaMatmulMode::kAmx, false});
    for (const Path& path : paths) {
      CpuAttentionOptions options = Options(isa);
      options.mla_matmul = path.mode;
      options.mla_amx_emulated = path.emulated;
      const std::string name = absl::StrCat(CpuIsaName(isa),
                                            path.mode == MlaMatmulMode::kOff ? ""
                                            : path.emulated                  ? " AMX emulated"
                                                                             : " AMX",
                                            " wide");
      auto cpu = [&](const MlaDecodeArgs& args) { return CpuMlaDecode(args, options); };
      std::vector<Partial> got;
      std::vector<ConstAttentionStateView> views;
      for (int part = 0; part < kParts; ++part) {
        got.push_back(run(split, part, cpu));
        ExpectClose(got.back(), ref_parts[part], absl::StrCat(name, " part", part), kWideScale);
      }
      for (const Partial& p : got) views.push_back(p.cview());
      Partial merged(rows, shape.kv_lora_rank);
      MergeStatesN(views, merged.view(), rows, shape.kv_lora_rank);
      ExpectClose(merged, reference, name + " merged in one pass", kWideScale);
      Partial pairwise = got[0];
      for (int part = 1; part < kParts; ++part) pairwise = Merge(pairwise, got[part]);
      ExpectClose(pairwise, reference, name + " merged pairwise", kWideScale);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaDecodeManyPartsTest,
                         ::testing::Combine(::testing::ValuesIn(kMlaCases),
                                            ::testing::Values(int64_t{257}, int64_t{1000})),
                         [](const ::testing::TestParamInfo<std::tuple<MlaCase, int64_t>>& info) {
                           return absl::StrCat(std::get<0>(info.param).name, "_T",
                                               std::get<1>(info.param));
                         });

// MLA the same way as GqaDecodeLongTest: DeepSeek-V2-Lite's shape at 16K keys beside a 3-token
// sequence, on the vector kernels, whole blocks through oneDNN, and our AMX kernel (emulated on
// AVX-512; on the CPU's AMX where usable), with the workers' plan and with small items.
class MlaDecodeLongTest : public ::testing::TestWithParam<std::tuple<MlaCase, int64_t, SplitMode>> {
};

TEST_P(MlaDecodeLongTest, MergedPartsEqualSinglePassReference) {
  const auto& [c, tokens, mode] = GetParam();
  const MlaShape shape = ShapeOf(c);
  MlaWorld world(
      shape, {tokens, 3},
      std::hash<std::string>{}(absl::StrCat("long", c.name, tokens, static_cast<int>(mode))), 2.0f);
  const auto [whole, split] = Assign(world.seqs, 2, mode, world.rng);
  ASSERT_TRUE(BothPartsHoldBlocks(split[0])) << "the long sequence's keys in one part only";
  const Partial reference = world.Run(whole, 0, ReferenceMlaDecode);
  const Partial ref0 = world.Run(split, 0, ReferenceMlaDecode);
  const Partial ref1 = world.Run(split, 1, ReferenceMlaDecode);
  for (CpuIsa isa : AvailableIsas()) {
    struct Path {
      const char* label;
      MlaMatmulMode mode;
      bool emulated;
    };
    std::vector<Path> paths = {{"", MlaMatmulMode::kOff, false},
                               {" oneDNN", MlaMatmulMode::kOneDnn, false}};
    if (isa == CpuIsa::kAvx512) paths.push_back({" AMX emulated", MlaMatmulMode::kAmx, true});
    if (MlaAmxUsable()) paths.push_back({" AMX", MlaMatmulMode::kAmx, false});
    for (const Path& path : paths) {
      CpuAttentionOptions workers;
      workers.isa = isa;
      for (auto [label, options] :
           {std::pair{"workers' options", workers}, std::pair{"small items", Options(isa)}}) {
        options.mla_matmul = path.mode;
        options.mla_amx_emulated = path.emulated;
        ExpectPartsAndMerge(world, split, ref0, ref1, reference,
                            absl::StrCat(CpuIsaName(isa), path.label, " long, ", label),
                            [&](const MlaDecodeArgs& args) { return CpuMlaDecode(args, options); });
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaDecodeLongTest,
    ::testing::Combine(::testing::Values(kMlaCases[0]), ::testing::Values(kLongTokens),
                       ::testing::Values(SplitMode::kPrefix, SplitMode::kRandom)),
    CaseName<MlaCase>);

// kAuto runs this CPU's best ISA: the same bits as that ISA forced, GQA and MLA (the tables'
// kernels; CpuKernelTableTest checks what each table holds). The scalar kernels give other bits
// at these shapes, so the check can tell the two apart where the best is not scalar.
TEST(CpuIsaTest, AutoRunsTheBestIsa) {
  GqaWorld gqa(ShapeOf(kGqaCases[0]), {300}, 5);
  MlaWorld mla(ShapeOf(kMlaCases[1]), {300}, 6, 2.0f);
  const std::vector<std::vector<int>> gqa_all = {std::vector<int>(gqa.seqs[0].blocks.size(), 0)};
  const std::vector<std::vector<int>> mla_all = {std::vector<int>(mla.seqs[0].blocks.size(), 0)};
  auto run_gqa = [&](CpuIsa isa) {
    return gqa.Run(gqa_all, 0,
                   [&](const GqaDecodeArgs& a) { return CpuGqaDecode(a, Options(isa)); });
  };
  auto run_mla = [&](CpuIsa isa) {
    return mla.Run(mla_all, 0,
                   [&](const MlaDecodeArgs& a) { return CpuMlaDecode(a, Options(isa)); });
  };
  auto same_bits = [](const Partial& a, const Partial& b) {
    return std::memcmp(a.o.data(), b.o.data(), a.o.size() * sizeof(float)) == 0 &&
           std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0;
  };
  const CpuIsa best = DetectCpuIsa();
  const Partial gqa_best = run_gqa(best), mla_best = run_mla(best);
  EXPECT_TRUE(same_bits(run_gqa(CpuIsa::kAuto), gqa_best)) << "GQA, best " << CpuIsaName(best);
  EXPECT_TRUE(same_bits(run_mla(CpuIsa::kAuto), mla_best)) << "MLA, best " << CpuIsaName(best);
  if (best != CpuIsa::kScalar) {
    EXPECT_FALSE(same_bits(run_gqa(CpuIsa::kScalar), gqa_best)) << "GQA";
    EXPECT_FALSE(same_bits(run_mla(CpuIsa::kScalar), mla_best)) << "MLA";
  }
}

// ---------------------------------------------------------------- GQA prefill ---------

// (prior tokens already placed, chunk length): sequences of every length of kTokenCounts
// (1, 5, 77, 255, 257, 1000) and a few more, chunks from 1 to 64 queries.
constexpr std::pair<int64_t, int32_t> kPrefillChunks[] = {
    {0, 1}, {0, 5}, {0, 77}, {5, 5}, {77, 33}, {250, 5}, {255, 2}, {300, 64}, {984, 16}};

// The whole blocks of a subset shuffled (the partial block stays last, as KvBlockList
// requires): the kernels must not rely on position order.
void ShuffleWholeBlocks(BlockSubset& subset, std::mt19937_64& rng) {
  const size_t n = subset.blocks.size();
  if (n < 3) return;
  std::vector<size_t> order(n - 1);
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), rng);
  BlockSubset shuffled;
  for (size_t i : order) {
    shuffled.blocks.push_back(subset.blocks[i]);
    shuffled.positions.push_back(subset.positions[i]);
  }
  shuffled.blocks.push_back(subset.blocks.back());
  shuffled.positions.push_back(subset.positions.back());
  shuffled.list.last_block_tokens = subset.list.last_block_tokens;
  shuffled.Fix();
  subset = std::move(shuffled);
}


class GqaPrefillTest : public ::testing::TestWithParam<
                           std::tuple<GqaCase, std::pair<int64_t, int32_t>, SplitMode>> {};

TEST_P(GqaPrefillTest, CausalChunkOverSplitBlocksEqualsReference) {
  const auto& [c, chunk, mode] = GetParam();
  const auto [prior, chunk_len] = chunk;
  const GqaShape shape = ShapeOf(c);
  // The chunk's own keys are already in their blocks, after the prior tokens.
  GqaWorld world(shape, {prior + chunk_len},
                 std::hash<std::string>{}(absl::StrCat("prefill", c.name, prior, chunk_len)));
  std::vector<uint16_t> q(int64_t{chunk_len} * shape.num_q_heads * shape.head_dim);
  testing::FillRandomBf16(q.data(), q.size(), world.rng, 2.0f);
  const TiledSequence& seq = world.seqs[0];
  const std::vector<int> whole(seq.blocks.size(), 0);
  const std::vector<int> split = AssignBlocks(seq.blocks.size(), 2, mode, world.rng);
  auto run = [&](const std::vector<int>& assignment, int part, auto kernel) {
    BlockSubset subset = testing::Subset(seq, assignment, part);
    ShuffleWholeBlocks(subset, world.rng);
    Partial out(int64_t{chunk_len} * shape.num_q_heads, shape.head_dim);
    GqaPrefillArgs args{shape, chunk_len, prior, q.data(), subset.list, out.o.data(),
                        out.lse.data()};
    const absl::Status status = kernel(args);
    EXPECT_TRUE(status.ok()) << status;
    return out;
  };
  const Partial reference = run(whole, 0, ReferenceGqaPrefill);
  const Partial ref0 = run(split, 0, ReferenceGqaPrefill);
  const Partial ref1 = run(split, 1, ReferenceGqaPrefill);
  ExpectClose(Merge(ref0, ref1), reference, "reference parts");
  for (CpuIsa isa : AvailableIsas()) {
    const std::string name = CpuIsaName(isa);
    auto cpu = [&](const GqaPrefillArgs& args) { return CpuGqaPrefill(args, Options(isa)); };
    const Partial part0 = run(split, 0, cpu);
    const Partial part1 = run(split, 1, cpu);
    ExpectClose(part0, ref0, name + " part0");
    ExpectClose(part1, ref1, name + " part1");
    ExpectClose(Merge(part0, part1), reference, name + " merged");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GqaPrefillTest,
    ::testing::Combine(::testing::ValuesIn(kGqaCases), ::testing::ValuesIn(kPrefillChunks),
                       ::testing::ValuesIn(kTwoWaySplits)),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param).name, "_P", std::get<1>(info.param).first,
                          "_N", std::get<1>(info.param).second, "_",
                          testing::SplitName(std::get<2>(info.param)));
    });

// ---------------------------------------------------------------- MLA prefill ---------

class MlaPrefillTest : public ::testing::TestWithParam<
                           std::tuple<MlaCase, std::pair<int64_t, int32_t>, SplitMode>> {};

TEST_P(MlaPrefillTest, CausalChunkOverSplitBlocksEqualsReference) {
  const auto& [c, chunk, mode] = GetParam();
  const auto [prior, chunk_len] = chunk;
  const MlaShape shape = ShapeOf(c);
  std::mt19937_64 rng(std::hash<std::string>{}(absl::StrCat("mla prefill", c.name, prior, chunk_len,
                                                            static_cast<int>(mode))));
  const int64_t total = prior + chunk_len;
  TileRegion region(8 + 2 * (total / shape.block_tokens + 2), int64_t{shape.block_tokens} * shape.row_dim());
  // The chunk's own keys are already in their blocks, after the prior tokens.
  const TiledSequence seq = testing::MakeSequence(region, total, shape.block_tokens, rng,
                                                  [&](uint16_t* tile, int32_t t) {
    testing::FillRandomBf16(tile + int64_t{t} * shape.row_dim(), shape.row_dim(), rng, 1.0f);
  });
  std::vector<uint16_t> q(int64_t{chunk_len} * shape.num_heads * shape.row_dim());
  testing::FillRandomBf16(q.data(), q.size(), rng, 2.0f);
  const std::vector<int> whole(seq.blocks.size(), 0);
  const std::vector<int> split = AssignBlocks(seq.blocks.size(), 2, mode, rng);
  auto run = [&](const std::vector<int>& assignment, int part, auto kernel) {
    BlockSubset subset = testing::Subset(seq, assignment, part);
    ShuffleWholeBlocks(subset, rng);
    Partial out(int64_t{chunk_len} * shape.num_heads, shape.kv_lora_rank);
    MlaPrefillArgs args{shape, chunk_len, prior, q.data(), subset.list, out.o.data(), out.lse.data()};
    const absl::Status status = kernel(args);
    EXPECT_TRUE(status.ok()) << status;
    return out;
  };
  const Partial reference = run(whole, 0, ReferenceMlaPrefill);
  const Partial ref0 = run(split, 0, ReferenceMlaPrefill);
  const Partial ref1 = run(split, 1, ReferenceMlaPrefill);
  ExpectClose(Merge(ref0, ref1), reference, "reference parts");
  for (CpuIsa isa : AvailableIsas()) {
    const std::string name = CpuIsaName(isa);
    for (MlaMatmulMode matmul : {MlaMatmulMode::kOff, MlaMatmulMode::kAuto}) {
      CpuAttentionOptions options = Options(isa);
      options.mla_matmul = matmul;
      const std::string what = absl::StrCat(name, matmul == MlaMatmulMode::kOff ? " vector" : " auto");
      auto cpu = [&](const MlaPrefillArgs& args) { return CpuMlaPrefill(args, options); };
      const Partial part0 = run(split, 0, cpu);
      const Partial part1 = run(split, 1, cpu);
      ExpectClose(part0, ref0, what + " part0");
      ExpectClose(part1, ref1, what + " part1");
      ExpectClose(Merge(part0, part1), reference, what + " merged");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaPrefillTest,
    ::testing::Combine(::testing::ValuesIn(kMlaCases), ::testing::ValuesIn(kPrefillChunks),
                       ::testing::ValuesIn(kTwoWaySplits)),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param).name, "_P", std::get<1>(info.param).first,
                          "_N", std::get<1>(info.param).second, "_",
                          testing::SplitName(std::get<2>(info.param)));
    });

// The last query of a chunk sees every key: its prefill row is the decode over the sequence.
TEST(MlaPrefillEdgeTest, LastQueryEqualsDecodeOverTheSequence) {
  const MlaShape shape = ShapeOf(kMlaCases[2]);
  std::mt19937_64 rng(5);
  TileRegion region(16, int64_t{shape.block_tokens} * shape.row_dim());
  const TiledSequence seq = testing::MakeSequence(region, 70, shape.block_tokens, rng,
                                                  [&](uint16_t* tile, int32_t t) {
    testing::FillRandomBf16(tile + int64_t{t} * shape.row_dim(), shape.row_dim(), rng, 1.0f);
  });
  const BlockSubset all = testing::Subset(seq, std::vector<int>(seq.blocks.size(), 0), 0);
  constexpr int32_t kChunk = 9;
  std::vector<uint16_t> q(kChunk * shape.num_heads * shape.row_dim());
  testing::FillRandomBf16(q.data(), q.size(), rng, 2.0f);
  Partial prefill(kChunk * shape.num_heads, shape.kv_lora_rank);
  WS_ASSERT_OK(CpuMlaPrefill({shape, kChunk, 70 - kChunk, q.data(), all.list, prefill.o.data(),
                              prefill.lse.data()}));
  Partial decode(shape.num_heads, shape.kv_lora_rank);
  const uint16_t* last_q = q.data() + (kChunk - 1) * shape.num_heads * shape.row_dim();
  WS_ASSERT_OK(ReferenceMlaDecode({shape, 1, last_q, &all.list, decode.o.data(), decode.lse.data()}));
  const int64_t row = (kChunk - 1) * shape.num_heads;
  for (int32_t h = 0; h < shape.num_heads; ++h) {
    EXPECT_NEAR(prefill.lse[row + h], decode.lse[h], 1e-4) << "head " << h;
    for (int32_t d = 0; d < shape.kv_lora_rank; ++d) {
      EXPECT_NEAR(prefill.o[(row + h) * shape.kv_lora_rank + d], decode.o[h * shape.kv_lora_rank + d], 2e-5);
    }
  }
}

TEST(MlaPrefillEdgeTest, EmptyChunkAndKeysBeforeNoQuery) {
  const MlaShape shape = ShapeOf(kMlaCases[2]);
  std::mt19937_64 rng(6);
  TileRegion region(8, int64_t{shape.block_tokens} * shape.row_dim());
  const TiledSequence seq = testing::MakeSequence(region, 20, shape.block_tokens, rng,
                                                  [&](uint16_t* tile, int32_t t) {
    testing::FillRandomBf16(tile + int64_t{t} * shape.row_dim(), shape.row_dim(), rng, 1.0f);
  });
  const BlockSubset all = testing::Subset(seq, std::vector<int>(seq.blocks.size(), 0), 0);
  std::vector<uint16_t> q(2 * shape.num_heads * shape.row_dim());
  testing::FillRandomBf16(q.data(), q.size(), rng, 2.0f);
  Partial none(1, 1);
  WS_EXPECT_OK(CpuMlaPrefill({shape, 0, 0, q.data(), all.list, none.o.data(), none.lse.data()}));
  EXPECT_TRUE(std::isnan(none.o[0]));  // nothing written
  // Queries at positions -2 and -1 see none of the keys: the empty state, no NaN.
  Partial out(2 * shape.num_heads, shape.kv_lora_rank);
  WS_ASSERT_OK(CpuMlaPrefill({shape, 2, -2, q.data(), all.list, out.o.data(), out.lse.data()}));
  for (int64_t r = 0; r < 2 * shape.num_heads; ++r) {
    EXPECT_EQ(out.lse[r], kEmptyLse);
    for (int32_t d = 0; d < shape.kv_lora_rank; ++d) EXPECT_EQ(out.o[r * shape.kv_lora_rank + d], 0.0f);
  }
  EXPECT_TRUE(out.o.GuardsIntact() && out.lse.GuardsIntact());
}

TEST(MlaPrefillEdgeTest, RejectsOverlappingBlocksAndAPartialBlockBeforeAnother) {
  const MlaShape shape = ShapeOf(kMlaCases[2]);
  std::mt19937_64 rng(7);
  TileRegion region(8, int64_t{shape.block_tokens} * shape.row_dim());
  const TiledSequence seq = testing::MakeSequence(region, 40, shape.block_tokens, rng,
                                                  [&](uint16_t* tile, int32_t t) {
    testing::FillRandomBf16(tile + int64_t{t} * shape.row_dim(), shape.row_dim(), rng, 1.0f);
  });
  std::vector<uint16_t> q(shape.num_heads * shape.row_dim());
  Partial out(shape.num_heads, shape.kv_lora_rank);
  BlockSubset all = testing::Subset(seq, std::vector<int>(seq.blocks.size(), 0), 0);
  all.positions[1] = all.positions[0] + 3;  // overlaps block 0
  EXPECT_THAT(CpuMlaPrefill({shape, 1, 100, q.data(), all.list, out.o.data(), out.lse.data()}).message(),
              ::testing::HasSubstr("overlaps"));
  BlockSubset partial_first = testing::Subset(seq, std::vector<int>(seq.blocks.size(), 0), 0);
  partial_first.positions.back() = -1000;  // the partial block sorts first
  EXPECT_THAT(CpuMlaPrefill({shape, 1, 100, q.data(), partial_first.list, out.o.data(),
                             out.lse.data()}).message(),
              ::testing::HasSubstr("not the last by position"));
  KvBlockList no_positions = all.list;
  no_positions.block_positions = nullptr;
  EXPECT_FALSE(CpuMlaPrefill({shape, 1, 100, q.data(), no_positions, out.o.data(), out.lse.data()}).ok());
  EXPECT_FALSE(ReferenceMlaPrefill({shape, 1, 100, q.data(), no_positions, out.o.data(), out.lse.data()}).ok());
}

}  // namespace
}  // namespace writescope::kernels
