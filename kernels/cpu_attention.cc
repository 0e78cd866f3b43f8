#include "kernels/cpu_attention.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/process.h"
#include "common/status.h"
#include "kernels/attention_state.h"
#include "kernels/bf16.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/mla_amx.h"
#include "kernels/cpu/mla_matmul.h"
#include "kernels/cpu/work_plan.h"

namespace writescope::kernels {
namespace {

using cpu::KernelTable;

absl::StatusOr<const KernelTable*> SelectKernels(CpuIsa requested) {
  const CpuIsa best = DetectCpuIsa();
  const CpuIsa isa = requested == CpuIsa::kAuto ? best : requested;
  if (static_cast<int>(isa) > static_cast<int>(best)) {
    return absl::InvalidArgumentError(absl::StrCat("ISA ", CpuIsaName(isa),
                                                   " not supported by this CPU (best: ",
                                                   CpuIsaName(best), ")"));
  }
  switch (isa) {
    case CpuIsa::kAvx512: return &cpu::Avx512Kernels();
    case CpuIsa::kAvx2: return &cpu::Avx2Kernels();
    default: return &cpu::ScalarKernels();
  }
}

int Threads(const CpuAttentionOptions& options) {
  return options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
}

// Per-thread scratch, reused across calls.
float* ThreadScratch(int64_t floats) {
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < floats) scratch.resize(floats);
  return scratch.data();
}

// A decode call's buffers that live across its OpenMP regions (the items' states, q in the
// kernels' layout), kept by the calling thread and reused across its calls, uninitialized:
// whoever fills a part writes all of it. Run 173 (the H200 host, MLA at 32 sequences) put
// the call's serial part at 0.42-0.56 ms, with fresh zeroed vectors (2 MB of item states
// that the items overwrite anyway) and q's layout built by one thread.
template <typename T>
class CallBuffer {
 public:
  T* Get(int64_t n) {
    if (n > capacity_) {
      data_.reset(new T[n]);  // default-initialized: not zeroed
      capacity_ = n;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<T[]> data_;
  int64_t capacity_ = 0;
};

// The streams' block counts and the guided work plan (kernels/cpu/work_plan.h) of a decode call.
void PlanDecode(const KvBlockList* seqs, int32_t num_seqs, int32_t units, int threads,
                int divisor, cpu::WorkPlan* plan) {
  std::vector<int32_t> num_blocks(num_seqs);
  for (int32_t s = 0; s < num_seqs; ++s) num_blocks[s] = seqs[s].num_blocks;
  cpu::PlanGuided(num_blocks.data(), num_seqs, units, threads, divisor, plan);
}

// Merges unnormalized chunk states (m, l, acc) into a normalized output row.
//   m, l at m_base[i * stride_ml], acc at acc_base[i * stride_acc] for i in [0, count)
void MergeChunks(const float* m_base, const float* l_base, int64_t stride_ml,
                 const float* acc_base, int64_t stride_acc, int64_t count, int32_t dim,
                 float* o, float* lse) {
  float m = kEmptyLse;
  for (int64_t i = 0; i < count; ++i) m = std::max(m, m_base[i * stride_ml]);
  std::fill(o, o + dim, 0.0f);
  if (m == kEmptyLse) {
    *lse = kEmptyLse;
    return;
  }
  float l = 0;
  for (int64_t i = 0; i < count; ++i) {
    const float mi = m_base[i * stride_ml];
    if (mi == kEmptyLse) continue;
    const float w = std::exp(mi - m);
    l += w * l_base[i * stride_ml];
    const float* acc = acc_base + i * stride_acc;
    for (int32_t d = 0; d < dim; ++d) o[d] += w * acc[d];
  }
  const float inv = 1.0f / l;
  for (int32_t d = 0; d < dim; ++d) o[d] *= inv;
  *lse = m + std::log(l);
}

}  // namespace

CpuIsa DetectCpuIsa() {
  static const CpuIsa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
      return CpuIsa::kAvx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::kAvx2;
    return CpuIsa::kScalar;
  }();
  return isa;
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "?";
}

absl::Status CpuGqaDecode(const GqaDecodeArgs& args, const CpuAttentionOptions& options) {
  const uint64_t start_ns = options.phases != nullptr ? MonotonicNanos() : 0;
  const GqaShape& s = args.shape;
  WS_RETURN_IF_ERROR(s.Validate());
  if (args.num_seqs < 0) return absl::InvalidArgumentError("num_seqs < 0");
  for (int32_t i = 0; i < args.num_seqs; ++i) {
    WS_RETURN_IF_ERROR(ValidateBlockList(args.seqs[i], s.block_tokens, false));
  }
  WS_ASSIGN_OR_RETURN(const KernelTable* kernels, SelectKernels(options.isa));
  const int threads = Threads(options);
  const int32_t group = s.group_size();
  const int32_t dim = s.head_dim;

  const bool fast = kernels->gqa_tiles != nullptr && kernels->gqa_tiles_supported(group, dim);
  // Generic path: q in fp32 with the softmax scale folded in: [num_seqs][q_heads][dim].
  // The fast path reads the bf16 q directly and scales the fp32 dot products.
  std::vector<float> q;
  if (!fast) {
    q.resize(int64_t{args.num_seqs} * s.num_q_heads * dim);
    for (size_t i = 0; i < q.size(); ++i) q[i] = Bf16ToFloat(args.q[i]) * s.softmax_scale;
  }

  cpu::WorkPlan plan;
  PlanDecode(args.seqs, args.num_seqs, s.num_kv_heads, threads, options.plan_divisor, &plan);
  const std::vector<cpu::WorkItem>& items = plan.items;
  const std::vector<int64_t>& item_begin = plan.item_begin;
  // Per item: m [group], l [group], acc [group][dim].
  const int64_t state_floats = int64_t{group} * (dim + 2);
  thread_local CallBuffer<float> gqa_states;  // every item's state is written by its kernel
  float* const states = gqa_states.Get(int64_t(items.size()) * state_floats);
  const int64_t scratch_floats =
      fast ? cpu::GqaTilesScratchFloats(group, dim) : cpu::GqaScratchFloats(group, dim);
  const int64_t num_items = items.size();
  const uint64_t prepared_ns = options.phases != nullptr ? MonotonicNanos() : 0;

#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < num_items; ++i) {
    const cpu::WorkItem& item = items[i];
    float* m = states + i * state_floats;
    float* l = m + group;
    float* acc = l + group;
    const KvBlockList& list = args.seqs[item.seq];
    if (fast) {
      cpu::GqaTilesArgs a;
      a.q = args.q + (int64_t{item.seq} * s.num_q_heads + item.unit * group) * dim;
      a.scale = s.softmax_scale;
      a.group = group;
      a.head_dim = dim;
      a.tiles = list.blocks + item.first_block;
      a.num_tiles = item.end_block - item.first_block;
      a.block_tokens = s.block_tokens;
      a.last_tile_tokens = list.BlockTokens(item.end_block - 1, s.block_tokens);
      a.k_offset = s.k_offset(item.unit);
      a.v_offset = s.v_offset(item.unit);
      a.m = m;
      a.l = l;
      a.acc = acc;
      kernels->gqa_tiles(a, ThreadScratch(scratch_floats));
      continue;
    }
    std::fill(m, m + group, kEmptyLse);
    std::fill(l, l + group, 0.0f);
    std::fill(acc, acc + int64_t{group} * dim, 0.0f);
    float* scratch = ThreadScratch(scratch_floats);
    const float* qg = q.data() + (int64_t{item.seq} * s.num_q_heads + item.unit * group) * dim;
    for (int32_t b = item.first_block; b < item.end_block; ++b) {
      const uint16_t* tile = list.blocks[b];
      kernels->gqa_segment(qg, group, dim, tile + s.k_offset(item.unit),
                           tile + s.v_offset(item.unit), list.BlockTokens(b, s.block_tokens), m,
                           l, acc, scratch);
    }
  }

  const uint64_t blocks_done_ns = options.phases != nullptr ? MonotonicNanos() : 0;
  const int64_t rows = int64_t{args.num_seqs} * s.num_q_heads;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t seq = r / s.num_q_heads;
    const int32_t h = r % s.num_q_heads;
    const int32_t kvh = h / group, hg = h % group;
    const int64_t first = item_begin[seq * s.num_kv_heads + kvh];
    const int64_t count = item_begin[seq * s.num_kv_heads + kvh + 1] - first;
    const float* base = states + first * state_floats;
    MergeChunks(base + hg, base + group + hg, state_floats, base + 2 * group + int64_t{hg} * dim,
                state_floats, count, dim, args.o + r * dim, args.lse + r);
  }
  if (options.phases != nullptr) {
    *options.phases = {start_ns, prepared_ns, blocks_done_ns, MonotonicNanos()};
  }
  return absl::OkStatus();
}

absl::Status CpuGqaPrefill(const GqaPrefillArgs& args, const CpuAttentionOptions& options) {
  const GqaShape& s = args.shape;
  WS_RETURN_IF_ERROR(s.Validate());
  WS_RETURN_IF_ERROR(ValidateBlockList(args.keys, s.block_tokens, true));
  if (args.num_queries < 0) return absl::InvalidArgumentError("num_queries < 0");
  WS_ASSIGN_OR_RETURN(const KernelTable* kernels, SelectKernels(options.isa));
  const int threads = Threads(options);
  const int32_t group = s.group_size();
  const int32_t dim = s.head_dim;
  const KvBlockList& list = args.keys;
  const int64_t items = int64_t{args.num_queries} * s.num_kv_heads;
  const int64_t scratch_floats = cpu::GqaScratchFloats(group, dim) + int64_t{group} * (2 + 2 * dim);

#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < items; ++i) {
    const int32_t query = i / s.num_kv_heads;
    const int32_t kvh = i % s.num_kv_heads;
    const int64_t position = args.query_position0 + query;
    float* scratch = ThreadScratch(scratch_floats);
    float* q = scratch;            // [group][dim]
    float* m = q + group * dim;    // [group]
    float* l = m + group;          // [group]
    float* acc = l + group;        // [group][dim]
    float* kernel_scratch = acc + group * dim;
    const int64_t row0 = int64_t{query} * s.num_q_heads + kvh * group;
    for (int64_t j = 0; j < int64_t{group} * dim; ++j) {
      q[j] = Bf16ToFloat(args.q[row0 * dim + j]) * s.softmax_scale;
    }
    std::fill(m, m + group, kEmptyLse);
    std::fill(l, l + group, 0.0f);
    std::fill(acc, acc + int64_t{group} * dim, 0.0f);
    for (int32_t b = 0; b < list.num_blocks; ++b) {
      // Causal: the visible prefix of the tile (positions inside a tile are consecutive).
      const int64_t visible = std::clamp<int64_t>(position - list.block_positions[b] + 1, 0,
                                                  list.BlockTokens(b, s.block_tokens));
      if (visible == 0) continue;
      const uint16_t* tile = list.blocks[b];
      kernels->gqa_segment(q, group, dim, tile + s.k_offset(kvh), tile + s.v_offset(kvh),
                           static_cast<int32_t>(visible), m, l, acc, kernel_scratch);
    }
    for (int32_t h = 0; h < group; ++h) {
      MergeChunks(m + h, l + h, 0, acc + int64_t{h} * dim, 0, 1, dim,
                  args.o + (row0 + h) * dim, args.lse + row0 + h);
    }
  }
  return absl::OkStatus();
}

bool MlaAmxUsable() {
  static const bool usable = DetectCpuIsa() == CpuIsa::kAvx512 && cpu::AmxUsable();
  return usable;
}

absl::Status CheckMlaMatmulMode(MlaMatmulMode mode) {
  if (mode == MlaMatmulMode::kAmx && !MlaAmxUsable()) {
    return absl::InvalidArgumentError(
        "MLA decode on AMX (mla_matmul amx) requested, but this process cannot use AMX: the "
        "CPU lacks AMX-BF16 or AVX-512, WS_CPU_NO_AMX is set, or the kernel refused the tile "
        "state");
  }
  return absl::OkStatus();
}

absl::Status CpuMlaDecode(const MlaDecodeArgs& args, const CpuAttentionOptions& options) {
  const uint64_t start_ns = options.phases != nullptr ? MonotonicNanos() : 0;
  const MlaShape& s = args.shape;
  WS_RETURN_IF_ERROR(s.Validate());
  if (args.num_seqs < 0) return absl::InvalidArgumentError("num_seqs < 0");
  for (int32_t i = 0; i < args.num_seqs; ++i) {
    WS_RETURN_IF_ERROR(ValidateBlockList(args.seqs[i], s.block_tokens, false));
  }
  WS_ASSIGN_OR_RETURN(const KernelTable* kernels, SelectKernels(options.isa));
  const int threads = Threads(options);
  const int32_t lanes = kernels->lanes;
  const int32_t row_dim = s.row_dim();
  const int32_t out_dim = s.kv_lora_rank;
  // Our AMX tile kernel (kernels/cpu/mla_amx.h) over whole steps of 32 tokens.
  if (options.mla_amx_emulated && DetectCpuIsa() != CpuIsa::kAvx512) {
    return absl::InvalidArgumentError("CPU MLA decode: the emulated AMX kernel needs AVX-512");
  }
  if (options.mla_amx_prefetch_steps < 0 ||
      options.mla_amx_prefetch_steps > kMaxMlaAmxPrefetchSteps) {
    return absl::InvalidArgumentError(absl::StrCat("CPU MLA decode: mla_amx_prefetch_steps ",
                                                   options.mla_amx_prefetch_steps, " (0 to ",
                                                   kMaxMlaAmxPrefetchSteps, ")"));
  }
  const bool amx_usable = MlaAmxUsable();
  if (!options.mla_amx_emulated) WS_RETURN_IF_ERROR(CheckMlaMatmulMode(options.mla_matmul));
  const bool amx_wanted = options.mla_amx_emulated || options.mla_matmul == MlaMatmulMode::kAmx ||
                          (options.mla_matmul == MlaMatmulMode::kAuto && amx_usable);
  // Heads padded to the vector lanes, or to the AMX kernel's 16 (a multiple of every ISA's).
  const int32_t amx_hp = (s.num_heads + 15) / 16 * 16;
  const bool use_amx = amx_wanted && cpu::MlaAmxSupported(amx_hp, row_dim, out_dim);
  const int32_t hp = use_amx ? amx_hp : (s.num_heads + lanes - 1) / lanes * lanes;
  const cpu::AmxTiles amx_tiles =
      options.mla_amx_emulated ? cpu::AmxTiles::kEmulated : cpu::AmxTiles::kHardware;
  // The vector kernels' q.k by bf16 dot products where the CPU has them.
  const bool vector_bf16 = kernels->mla_segment_bf16 != nullptr && row_dim % 2 == 0;
  // Whole blocks through oneDNN: q as bf16 rows [num_seqs][hp][row_dim], padded with 0.
  const cpu::MlaMatmul* matmul = nullptr;
  std::vector<uint16_t> q_rows;
  // oneDNN when asked, or for kAuto where AMX is usable but the AMX kernel does not take the
  // shape (oneDNN runs AMX there).
  const bool use_matmul =
      !use_amx && (options.mla_matmul == MlaMatmulMode::kOneDnn ||
                   (options.mla_matmul == MlaMatmulMode::kAuto && amx_usable));
  if (use_matmul && kernels->mla_softmax_hilo != nullptr) {
    // Where oneDNN has no bf16 matmul for this CPU, the vector kernels take every block.
    absl::StatusOr<const cpu::MlaMatmul*> got =
        cpu::MlaMatmul::Get(hp, row_dim, out_dim, s.block_tokens);
    if (got.ok()) {
      matmul = *got;
    } else {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        WS_LOG(WARNING) << "CPU MLA decode: no oneDNN matmul path (" << got.status()
                        << "); the vector kernels attend every block";
      }
    }
  }
  if (matmul != nullptr) {
    q_rows.assign(int64_t{args.num_seqs} * hp * row_dim, 0);
    for (int32_t seq = 0; seq < args.num_seqs; ++seq) {
      std::copy_n(args.q + int64_t{seq} * s.num_heads * row_dim, int64_t{s.num_heads} * row_dim,
                  q_rows.data() + int64_t{seq} * hp * row_dim);
    }
  }
  std::atomic<bool> matmul_failed{false};
  // The generic vector kernel's q: transposed, scaled, head-padded: [num_seqs][row_dim][hp].
  // The bf16-dot vector kernel's and the AMX kernel's (its B tiles): transposed bf16 pairs,
  // unscaled: [num_seqs][row_dim / 2][hp].
  const bool need_pairs = vector_bf16 || use_amx;
  std::vector<float> q_t;
  thread_local CallBuffer<uint32_t> q_pairs_buffer;
  uint32_t* const q_pairs =
      need_pairs ? q_pairs_buffer.Get(int64_t{args.num_seqs} * (row_dim / 2) * hp) : nullptr;
  if (!vector_bf16) q_t.assign(int64_t{args.num_seqs} * row_dim * hp, 0.0f);
  // A sequence per iteration, each head's row read in order (q may come straight from a
  // channel that the GPU side wrote, not from this CPU's caches), the padded heads' as 0.
  const int32_t pair_seqs = need_pairs ? args.num_seqs : 0;
#pragma omp parallel for schedule(static) num_threads(threads) if (pair_seqs >= 4)
  for (int32_t seq = 0; seq < pair_seqs; ++seq) {
    uint32_t* const seq_pairs = q_pairs + int64_t{seq} * (row_dim / 2) * hp;
    for (int32_t h = 0; h < s.num_heads; ++h) {
      const uint16_t* qh = args.q + (int64_t{seq} * s.num_heads + h) * row_dim;
      for (int32_t k = 0; k < row_dim / 2; ++k) {
        seq_pairs[int64_t{k} * hp + h] = uint32_t{qh[2 * k]} | (uint32_t{qh[2 * k + 1]} << 16);
      }
    }
    if (hp > s.num_heads) {
      for (int32_t k = 0; k < row_dim / 2; ++k) {
        std::fill(seq_pairs + int64_t{k} * hp + s.num_heads, seq_pairs + int64_t{k + 1} * hp, 0u);
      }
    }
  }
  if (!vector_bf16) {
    for (int32_t seq = 0; seq < args.num_seqs; ++seq) {
      for (int32_t h = 0; h < s.num_heads; ++h) {
        const uint16_t* qh = args.q + (int64_t{seq} * s.num_heads + h) * row_dim;
        float* dst = q_t.data() + int64_t{seq} * row_dim * hp + h;
        for (int32_t k = 0; k < row_dim; ++k) dst[int64_t{k} * hp] = Bf16ToFloat(qh[k]) * s.softmax_scale;
      }
    }
  }

  cpu::WorkPlan plan;
  PlanDecode(args.seqs, args.num_seqs, 1, threads, options.plan_divisor, &plan);
  const std::vector<cpu::WorkItem>& items = plan.items;
  const std::vector<int64_t>& item_begin = plan.item_begin;
  const int64_t state_floats = int64_t{hp} * (out_dim + 2);
  thread_local CallBuffer<float> mla_states;  // every item fills its state first
  float* const states = mla_states.Get(int64_t(items.size()) * state_floats);
  const int64_t scratch_floats = cpu::MlaScratchFloats(hp, row_dim);
  const int64_t num_items = items.size();
  const uint64_t prepared_ns = options.phases != nullptr ? MonotonicNanos() : 0;

#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < num_items; ++i) {
    const cpu::WorkItem& item = items[i];
    float* m = states + i * state_floats;
    float* l = m + hp;
    float* acc = l + hp;
    std::fill(m, m + hp, kEmptyLse);
    std::fill(l, l + hp, 0.0f);
    std::fill(acc, acc + int64_t{hp} * out_dim, 0.0f);
    float* scratch = ThreadScratch(scratch_floats);
    const KvBlockList& list = args.seqs[item.seq];
    // The vector kernels over `n` rows of block b from row `first`.
    auto vector_rows = [&](int32_t b, int32_t first, int32_t n) {
      const uint16_t* rows = list.blocks[b] + int64_t{first} * row_dim;
      if (vector_bf16) {
        const bool has_next = b + 1 < item.end_block;
        kernels->mla_segment_bf16(q_pairs + int64_t{item.seq} * (row_dim / 2) * hp,
                                  s.softmax_scale, hp, row_dim, out_dim, rows, n,
                                  has_next ? list.blocks[b + 1] : nullptr,
                                  has_next ? list.BlockTokens(b + 1, s.block_tokens) : 0, m, l,
                                  acc, scratch);
      } else {
        kernels->mla_segment(q_t.data() + int64_t{item.seq} * row_dim * hp, hp, row_dim, out_dim,
                             rows, n, m, l, acc, scratch);
      }
    };
    for (int32_t b = item.first_block; b < item.end_block; ++b) {
      const int32_t n = list.BlockTokens(b, s.block_tokens);
      if (use_amx) {
        const int32_t whole = n / cpu::kMlaAmxTokens * cpu::kMlaAmxTokens;
        cpu::MlaAmxArgs a;
        a.q_pairs = q_pairs + int64_t{item.seq} * (row_dim / 2) * hp;
        a.scale = s.softmax_scale;
        a.padded_heads = hp;
        a.row_dim = row_dim;
        a.out_dim = out_dim;
        a.rows = list.blocks[b];
        a.num_tokens = whole;
        if (n > whole) {  // the vector kernel reads the block's last rows next
          a.next_rows = list.blocks[b] + int64_t{whole} * row_dim;
          a.next_tokens = n - whole;
        } else if (b + 1 < item.end_block) {
          a.next_rows = list.blocks[b + 1];
          a.next_tokens = list.BlockTokens(b + 1, s.block_tokens);
        }
        a.prefetch_steps = options.mla_amx_prefetch_steps;
        a.m = m;
        a.l = l;
        a.acc = acc;
        cpu::MlaAmxRows(a, amx_tiles);
        if (n > whole) vector_rows(b, whole, n - whole);
      } else if (matmul != nullptr && n == s.block_tokens) {
        if (!matmul->Block(*kernels, q_rows.data() + int64_t{item.seq} * hp * row_dim,
                           s.softmax_scale, list.blocks[b], m, l, acc)) {
          matmul_failed.store(true, std::memory_order_relaxed);
        }
      } else {
        vector_rows(b, 0, n);
      }
    }
  }

  if (matmul_failed.load()) {
    return absl::InternalError("CPU MLA decode: a oneDNN matmul failed (see the log)");
  }
  const uint64_t blocks_done_ns = options.phases != nullptr ? MonotonicNanos() : 0;
  const int64_t rows = int64_t{args.num_seqs} * s.num_heads;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t seq = r / s.num_heads;
    const int32_t h = r % s.num_heads;
    const int64_t first = item_begin[seq];
    const int64_t count = item_begin[seq + 1] - first;
    const float* base = states + first * state_floats;
    MergeChunks(base + h, base + hp + h, state_floats, base + 2 * hp + int64_t{h} * out_dim,
                state_floats, count, out_dim, args.o + r * out_dim, args.lse + r);
  }
  if (options.phases != nullptr) {
    *options.phases = {start_ns, prepared_ns, blocks_done_ns, MonotonicNanos()};
  }
  return absl::OkStatus();
}

absl::Status CpuMlaPrefill(const MlaPrefillArgs& args, const CpuAttentionOptions& options) {
  const MlaShape& s = args.shape;
  WS_RETURN_IF_ERROR(s.Validate());
  WS_RETURN_IF_ERROR(ValidateBlockList(args.keys, s.block_tokens, true));
  if (args.num_queries < 0) return absl::InvalidArgumentError("num_queries < 0");
  if (args.num_queries == 0) return absl::OkStatus();
  const KvBlockList& list = args.keys;
  // The blocks in position order; with disjoint ranges a query sees a prefix of them, all
  // whole but the last (the one that holds its own position, or the list's partial block).
  std::vector<int32_t> order(list.num_blocks);
  for (int32_t i = 0; i < list.num_blocks; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return list.block_positions[a] < list.block_positions[b];
  });
  std::vector<const uint16_t*> blocks(list.num_blocks);
  std::vector<int64_t> starts(list.num_blocks);
  for (int32_t k = 0; k < list.num_blocks; ++k) {
    const int32_t b = order[k];
    blocks[k] = list.blocks[b];
    starts[k] = list.block_positions[b];
    if (k + 1 == list.num_blocks) break;
    if (list.BlockTokens(b, s.block_tokens) != s.block_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("MLA prefill: the partial block ", b, " is not the last by position"));
    }
    if (starts[k] + s.block_tokens > list.block_positions[order[k + 1]]) {
      return absl::InvalidArgumentError(absl::StrCat("MLA prefill: block ", b, " (positions ",
                                                     starts[k], "..) overlaps block ", order[k + 1]));
    }
  }
  const int32_t last_tokens = list.num_blocks == 0 ? 0 : list.BlockTokens(order.back(), s.block_tokens);
  std::vector<KvBlockList> rows(args.num_queries);
  for (int32_t i = 0; i < args.num_queries; ++i) {
    const int64_t position = args.query_position0 + i;
    // Blocks starting at or before the query's position.
    const int32_t seen = static_cast<int32_t>(
        std::upper_bound(starts.begin(), starts.end(), position) - starts.begin());
    if (seen == 0) continue;  // no key: the empty state
    const int32_t whole = seen == list.num_blocks ? last_tokens : s.block_tokens;
    rows[i].blocks = blocks.data();
    rows[i].num_blocks = seen;
    rows[i].last_block_tokens =
        static_cast<int32_t>(std::min<int64_t>(whole, position - starts[seen - 1] + 1));
  }
  MlaDecodeArgs decode;
  decode.shape = s;
  decode.num_seqs = args.num_queries;
  decode.q = args.q;
  decode.seqs = rows.data();
  decode.o = args.o;
  decode.lse = args.lse;
  return CpuMlaDecode(decode, options);
}

}  // namespace writescope::kernels
