#include "kernels/cpu/mla_amx.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels/bf16.h"

// Only this file is compiled for AMX; AmxUsable() guards the hardware path at run time.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,amx-tile,amx-bf16")
// GCC 12's avx512fintrin.h trips these on _mm512_undefined_*() inside inlined intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace writescope::kernels::cpu {
namespace {

namespace amx {
#include "kernels/cpu/cpu_ops_avx512.inc"
}  // namespace amx
using amx::Ops;
using V = Ops::V;

constexpr int kRows = 16;        // rows of every tile
constexpr int kRowBytes = 64;    // bytes of every tile row
constexpr int kHeads = 16;       // heads per group: the N of the score tiles, the M of P V
constexpr int kTokens = kMlaAmxTokens;
static_assert(kTokens == 2 * kRows);

// ldtilecfg's 64-byte operand (palette 1): all eight tiles 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

const TileConfig& Config() {
  static const TileConfig config = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) {
      c.colsb[t] = kRowBytes;
      c.rows[t] = kRows;
    }
    return c;
  }();
  return config;
}

// The tile instructions on the CPU. GCC's intrinsics paste the tile number into the
// instruction's text, so each number the kernel uses is spelled out.
struct HardwareTiles {
  static void Begin() { _tile_loadconfig(&Config()); }
  static void End() { _tile_release(); }
  template <int T>
  static void Zero() {
    static_assert(T == 0 || T == 1);
    if constexpr (T == 0) _tile_zero(0);
    if constexpr (T == 1) _tile_zero(1);
  }
  template <int T>
  static void Load(const void* p, int64_t stride) {
    static_assert(T >= 2 && T <= 6);
    if constexpr (T == 2) _tile_loadd(2, p, stride);
    if constexpr (T == 3) _tile_loadd(3, p, stride);
    if constexpr (T == 4) _tile_loadd(4, p, stride);
    if constexpr (T == 5) _tile_loadd(5, p, stride);
    if constexpr (T == 6) _tile_loadd(6, p, stride);
  }
  template <int T>
  static void Store(void* p, int64_t stride) {
    static_assert(T == 0 || T == 1);
    if constexpr (T == 0) _tile_stored(0, p, stride);
    if constexpr (T == 1) _tile_stored(1, p, stride);
  }
  template <int C, int A, int B>
  static void Dot() {
    constexpr int kKey = C * 100 + A * 10 + B;
    static_assert(kKey == 24 || kKey == 134 || kKey == 52 || kKey == 62 || kKey == 153 ||
                  kKey == 163);
    if constexpr (kKey == 24) _tile_dpbf16ps(0, 2, 4);
    if constexpr (kKey == 134) _tile_dpbf16ps(1, 3, 4);
    if constexpr (kKey == 52) _tile_dpbf16ps(0, 5, 2);
    if constexpr (kKey == 62) _tile_dpbf16ps(0, 6, 2);
    if constexpr (kKey == 153) _tile_dpbf16ps(1, 5, 3);
    if constexpr (kKey == 163) _tile_dpbf16ps(1, 6, 3);
  }
};

// The same instructions in plain code, on per-thread tile registers.
struct EmulatedTiles {
  struct Registers {
    alignas(64) uint8_t tile[8][kRows][kRowBytes];
  };
  static Registers& Regs() {
    static thread_local Registers regs;
    return regs;
  }
  static void Begin() { std::memset(&Regs(), 0, sizeof(Registers)); }
  static void End() {}
  template <int T>
  static void Zero() { std::memset(Regs().tile[T], 0, sizeof(Regs().tile[T])); }
  template <int T>
  static void Load(const void* p, int64_t stride) {
    for (int r = 0; r < kRows; ++r) {
      std::memcpy(Regs().tile[T][r], static_cast<const uint8_t*>(p) + r * stride, kRowBytes);
    }
  }
  template <int T>
  static void Store(void* p, int64_t stride) {
    for (int r = 0; r < kRows; ++r) {
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, Regs().tile[T][r], kRowBytes);
    }
  }
  // C[m][n] += sum over k of A[m][2k] B[k][2n] + A[m][2k + 1] B[k][2n + 1] (bf16 pairs).
  template <int C, int A, int B>
  static void Dot() {
    Registers& regs = Regs();
    for (int m = 0; m < kRows; ++m) {
      for (int n = 0; n < kRowBytes / 4; ++n) {
        float c;
        std::memcpy(&c, &regs.tile[C][m][4 * n], 4);
        for (int k = 0; k < kRowBytes / 4; ++k) {
          uint16_t a[2], b[2];
          std::memcpy(a, &regs.tile[A][m][4 * k], 4);
          std::memcpy(b, &regs.tile[B][k][4 * n], 4);
          c += Bf16ToFloat(a[0]) * Bf16ToFloat(b[0]);
          c += Bf16ToFloat(a[1]) * Bf16ToFloat(b[1]);
        }
        std::memcpy(&regs.tile[C][m][4 * n], &c, 4);
      }
    }
  }
};

// Round to nearest even bf16 of finite x, in the low 16 bits of each lane.
inline __m512i Bf16Bits(V x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  return _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)),
                           16);
}
inline V Bf16Value(__m512i low_bits) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(low_bits, 16));
}

// Per-thread scratch, 64-byte aligned (tile loads and stores of whole rows).
struct alignas(64) Scratch {
  float s[kTokens][kHeads];          // S^T, then the scaled scores
  uint32_t pairs[2][kRows][kHeads];  // hi / lo: [token pair j][head] = p[2j] | p[2j + 1] << 16
  uint32_t a[2][kHeads][kRows];      // hi / lo A tiles: [head][token pair], i.e. [head][32 tokens]
  uint16_t v[2][kRows][2 * kHeads];  // B tiles of V: [dims 0-15 / 16-31][token pair][dim][2]
  float o[kHeads][2 * kHeads];       // one 32-dim slice of (P_hi + P_lo) V
  float alpha[kHeads];
};

Scratch& ThreadScratch() {
  static thread_local Scratch scratch;
  return scratch;
}

// permutex2var indices that interleave two rows' 32 values in pairs: dims 0-15, 16-31.
struct Interleave {
  __m512i lo, hi;
  Interleave() {
    alignas(64) uint16_t lo_idx[32], hi_idx[32];
    for (int i = 0; i < 16; ++i) {
      lo_idx[2 * i] = static_cast<uint16_t>(i);
      lo_idx[2 * i + 1] = static_cast<uint16_t>(32 + i);
      hi_idx[2 * i] = static_cast<uint16_t>(16 + i);
      hi_idx[2 * i + 1] = static_cast<uint16_t>(48 + i);
    }
    lo = _mm512_load_si512(lo_idx);
    hi = _mm512_load_si512(hi_idx);
  }
};

template <class Tiles>
void RunRows(const MlaAmxArgs& args) {
  Scratch& sc = ThreadScratch();
  static const Interleave interleave;
  const int64_t row_dim = args.row_dim;
  const int64_t row_bytes = row_dim * 2;
  const int64_t q_stride = int64_t{args.padded_heads} * 4;  // bytes per q_pairs row
  const int32_t chunks = args.row_dim / 32, out_chunks = args.out_dim / 32;
  const V vscale = Ops::Set1(args.scale);
  // [head pair-row][token pair] gather offsets, in dwords: the 16 x 16 transpose of `pairs`.
  const __m512i transpose_idx =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(kHeads));

  Tiles::Begin();
  for (int32_t g = 0; g < args.padded_heads / kHeads; ++g) {
    const uint32_t* q = args.q_pairs + g * kHeads;
    float* acc = args.acc + int64_t{g} * kHeads * args.out_dim;
    V m = Ops::Load(args.m + g * kHeads);
    V l = Ops::Load(args.l + g * kHeads);
    for (int32_t t0 = 0; t0 < args.num_tokens; t0 += kTokens) {
      const uint16_t* rows = args.rows + t0 * row_dim;
      // The rows `distance` steps ahead (past num_tokens: next_rows'), a share of their lines
      // in each chunk from `first_slot` on (S's chunks are slots 0 .., P V's follow them):
      // prefetch_steps >= 1 spreads them over the whole step, into L1 at distance 1 and L2
      // beyond; 0 prefetches the next step's during P V only, into L1.
      const int64_t distance = std::max(1, args.prefetch_steps);
      const int32_t first_slot = args.prefetch_steps == 0 ? chunks : 0;
      const char* ahead = nullptr;
      int64_t ahead_lines = 0, ahead_done = 0;
      {
        const int64_t t = t0 + distance * kTokens;
        int64_t n = 0;
        if (t < args.num_tokens) {
          ahead = reinterpret_cast<const char*>(args.rows + t * row_dim);
          n = std::min<int64_t>(kTokens, args.num_tokens - t);
        } else if (args.next_rows != nullptr && t - args.num_tokens < args.next_tokens) {
          ahead = reinterpret_cast<const char*>(args.next_rows + (t - args.num_tokens) * row_dim);
          n = std::min<int64_t>(kTokens, args.next_tokens - (t - args.num_tokens));
        }
        ahead_lines = (n * row_bytes + 63) / 64;
      }
      const int64_t slots = chunks + out_chunks - first_slot;
      const int64_t ahead_per_slot = (ahead_lines + slots - 1) / slots;
      auto prefetch_ahead = [&](int32_t slot) {
        if (slot < first_slot) return;
        const int64_t end = std::min(ahead_lines, ahead_done + ahead_per_slot);
        if (distance == 1) {
          for (; ahead_done < end; ++ahead_done) _mm_prefetch(ahead + ahead_done * 64, _MM_HINT_T0);
        } else {
          for (; ahead_done < end; ++ahead_done) _mm_prefetch(ahead + ahead_done * 64, _MM_HINT_T1);
        }
      };
      // 1. S^T: tiles 0 (tokens 0-15), 1 (16-31) += rows (2, 3) . q pairs (4).
      Tiles::template Zero<0>();
      Tiles::template Zero<1>();
      for (int32_t c = 0; c < chunks; ++c) {
        prefetch_ahead(c);
        Tiles::template Load<4>(q + int64_t{c} * kRows * args.padded_heads, q_stride);
        Tiles::template Load<2>(rows + c * 32, row_bytes);
        Tiles::template Load<3>(rows + kRows * row_dim + c * 32, row_bytes);
        Tiles::template Dot<0, 2, 4>();
        Tiles::template Dot<1, 3, 4>();
      }
      Tiles::template Store<0>(sc.s[0], kRowBytes);
      Tiles::template Store<1>(sc.s[kRows], kRowBytes);

      // 2. Online softmax, heads in lanes.
      V step_max = Ops::Set1(-std::numeric_limits<float>::infinity());
      for (int t = 0; t < kTokens; ++t) {
        const V x = Ops::Mul(Ops::Load(sc.s[t]), vscale);
        Ops::Store(sc.s[t], x);
        step_max = Ops::Max(step_max, x);
      }
      const V m_new = Ops::Max(m, step_max);  // finite: the scores are
      const V alpha = Ops::Exp(Ops::Sub(m, m_new));  // m = -inf: 0
      V sum = Ops::Zero();
      for (int j = 0; j < kRows; ++j) {
        const V p0 = Ops::Exp(Ops::Sub(Ops::Load(sc.s[2 * j]), m_new));
        const V p1 = Ops::Exp(Ops::Sub(Ops::Load(sc.s[2 * j + 1]), m_new));
        sum = Ops::Add(sum, Ops::Add(p0, p1));
        const __m512i hi0 = Bf16Bits(p0), hi1 = Bf16Bits(p1);
        const __m512i lo0 = Bf16Bits(Ops::Sub(p0, Bf16Value(hi0)));
        const __m512i lo1 = Bf16Bits(Ops::Sub(p1, Bf16Value(hi1)));
        _mm512_store_si512(sc.pairs[0][j], _mm512_or_si512(hi0, _mm512_slli_epi32(hi1, 16)));
        _mm512_store_si512(sc.pairs[1][j], _mm512_or_si512(lo0, _mm512_slli_epi32(lo1, 16)));
      }
      l = Ops::Fma(l, alpha, sum);
      m = m_new;
      Ops::Store(sc.alpha, alpha);
      for (int part = 0; part < 2; ++part) {
        for (int h = 0; h < kHeads; ++h) {
          _mm512_store_si512(sc.a[part][h],
                             _mm512_i32gather_epi32(transpose_idx, &sc.pairs[part][0][h], 4));
        }
      }
      Tiles::template Load<5>(sc.a[0], kRowBytes);
      Tiles::template Load<6>(sc.a[1], kRowBytes);

      // 3. P V per 32 dims: tiles 0 (dims 0-15), 1 (16-31) += P hi (5), lo (6) . V (2, 3).
      for (int32_t c = 0; c < out_chunks; ++c) {
        prefetch_ahead(chunks + c);
        for (int j = 0; j < kRows; ++j) {
          const __m512i x = _mm512_loadu_si512(rows + (2 * j) * row_dim + c * 32);
          const __m512i y = _mm512_loadu_si512(rows + (2 * j + 1) * row_dim + c * 32);
          _mm512_store_si512(sc.v[0][j], _mm512_permutex2var_epi16(x, interleave.lo, y));
          _mm512_store_si512(sc.v[1][j], _mm512_permutex2var_epi16(x, interleave.hi, y));
        }
        Tiles::template Zero<0>();
        Tiles::template Zero<1>();
        Tiles::template Load<2>(sc.v[0], kRowBytes);
        Tiles::template Load<3>(sc.v[1], kRowBytes);
        Tiles::template Dot<0, 5, 2>();
        Tiles::template Dot<0, 6, 2>();
        Tiles::template Dot<1, 5, 3>();
        Tiles::template Dot<1, 6, 3>();
        Tiles::template Store<0>(&sc.o[0][0], 2 * kRowBytes);
        Tiles::template Store<1>(&sc.o[0][kHeads], 2 * kRowBytes);
        for (int h = 0; h < kHeads; ++h) {
          float* dst = acc + int64_t{h} * args.out_dim + c * 32;
          const V a = Ops::Set1(sc.alpha[h]);
          Ops::Store(dst, Ops::Fma(Ops::Load(dst), a, Ops::Load(sc.o[h])));
          Ops::Store(dst + 16, Ops::Fma(Ops::Load(dst + 16), a, Ops::Load(sc.o[h] + 16)));
        }
      }
    }
    Ops::Store(args.m + g * kHeads, m);
    Ops::Store(args.l + g * kHeads, l);
  }
  Tiles::End();
}

std::atomic<uint64_t> g_steps_run{0};

bool AskForAmx() {
  if (std::getenv("WS_CPU_NO_AMX") != nullptr) return false;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_bf16 = (edx >> 22) & 1u, amx_tile = (edx >> 24) & 1u;
  if (!amx_bf16 || !amx_tile) return false;
  // Linux hands the tile data state (8 KB of registers) only to processes that ask.
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

bool AmxUsable() {
  static const bool usable = AskForAmx();
  return usable;
}

bool MlaAmxSupported(int32_t padded_heads, int32_t row_dim, int32_t out_dim) {
  return padded_heads > 0 && padded_heads % kHeads == 0 && row_dim > 0 && row_dim % 32 == 0 &&
         out_dim > 0 && out_dim % 32 == 0 && out_dim <= row_dim;
}

uint64_t MlaAmxStepsRun() { return g_steps_run.load(std::memory_order_relaxed); }

void MlaAmxRows(const MlaAmxArgs& args, AmxTiles tiles) {
  if (args.num_tokens <= 0) return;
  const uint64_t steps = static_cast<uint64_t>(args.num_tokens / kTokens) *
                         static_cast<uint64_t>(args.padded_heads / kHeads);
  g_steps_run.fetch_add(steps, std::memory_order_relaxed);
  if (tiles == AmxTiles::kHardware) {
    RunRows<HardwareTiles>(args);
  } else {
    RunRows<EmulatedTiles>(args);
  }
}

}  // namespace writescope::kernels::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
