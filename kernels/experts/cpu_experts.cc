#include "kernels/experts/cpu_experts.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status.h"
#include "dnnl.hpp"
#include "kernels/bf16.h"
#include "kernels/cpu/onednn_util.h"

namespace writescope::kernels::experts {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;
using cpu::CpuEngine;
using cpu::SingleThreadScope;

// Rows of a gathered block: exact up to 8 (decode), then 2^a or 3 * 2^(a-1), so that a
// handful of primitives serve any batch and padding wastes at most a third.
int64_t MBucket(int64_t m) {
  if (m <= 8) return m;
  int64_t p = 8;
  while (true) {
    if (m <= p + p / 2) return p + p / 2;
    if (m <= 2 * p) return 2 * p;
    p *= 2;
  }
}

inline float Silu(float g) { return g / (1.0f + std::exp(-g)); }

absl::Status DnnlError(absl::string_view what, const dnnl::error& e) {
  return absl::InternalError(absl::StrCat("CpuExperts: oneDNN ", what, ": ", e.what()));
}

}  // namespace

std::string OneDnnIsaName() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "unknown";
  }
}

bool OneDnnHasNativeBf16() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

bool OneDnnHasBf16Matmul() {
  static const bool available = [] {
    try {
      const memory::desc a({16, 32}, Dt::bf16, memory::format_tag::ab);
      const memory::desc b({32, 16}, Dt::bf16, memory::format_tag::ab);
      const memory::desc c({16, 16}, Dt::f32, memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), CpuEngine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

struct CpuExperts::Impl {
  // One weight slice of one expert as a matmul's [K, N] operand.
  struct Slice {
    int64_t n = 0;     // output rows of the slice (gate/up: rows of gate plus rows of up)
    int64_t row0 = 0;  // first output row (of I for gate/up, of H for down)
    // Packed (prepack, or f32 widened-and-concatenated): one operand of n columns.
    std::shared_ptr<memory> packed;
    // In place bf16: gate/up as two operands of n/2 columns; down as one.
    const void* plain_a = nullptr;
    const void* plain_b = nullptr;
  };
  struct PrimKey {
    int64_t m, n, k, dst_ld;
    bool packed;
    template <typename H>
    friend H AbslHashValue(H h, const PrimKey& key) {
      return H::combine(std::move(h), key.m, key.n, key.k, key.dst_ld, key.packed);
    }
    bool operator==(const PrimKey& o) const {
      return std::tie(m, n, k, dst_ld, packed) == std::tie(o.m, o.n, o.k, o.dst_ld, o.packed);
    }
  };
  struct Prim {
    dnnl::matmul matmul;
    memory::desc src_md, wei_md, dst_md, scratch_md;
    size_t scratch_bytes = 0;
  };

  int64_t hidden = 0, inter = 0;
  std::vector<ExpertMatrices> experts;
  CpuExpertsOptions options;
  bool use_bf16 = true;
  bool packed = false;  // Slice::packed in use (bf16 prepack or f32)
  Dt act_dt = Dt::bf16;
  uint64_t owned_bytes = 0;
  std::vector<std::vector<Slice>> gate_up;  // [expert][slice]
  std::vector<std::vector<Slice>> down;     // [expert][slice]
  // The packed layout of a (N, K) operand, from the primitive oneDNN picks for M = 1.
  absl::flat_hash_map<std::pair<int64_t, int64_t>, memory::desc> packed_md;
  absl::node_hash_map<PrimKey, Prim> prims;  // pointer-stable: Run holds Prim pointers
  std::string impl_name;

  // Scratch reused across calls.
  std::vector<uint16_t> x_bf16;  // gathered rows [rows, H] (bf16 precision)
  std::vector<float> x_f32;      // gathered rows [rows, H] (f32 precision)
  std::vector<uint16_t> h_bf16;  // SwiGLU products [rows, I]
  std::vector<float> h_f32;
  std::vector<float> out;         // down outputs [rows, H]
  std::vector<int64_t> slot_row;  // [tokens * top_k] -> row of `out`
  struct ThreadScratch {
    std::unique_ptr<dnnl::stream> stream;
    std::vector<uint8_t> pad;  // oneDNN scratchpad
    std::vector<float> gu;     // gate/up outputs [m, n]
  };
  std::vector<ThreadScratch> threads;

  size_t ActBytes() const { return use_bf16 ? 2 : 4; }

  absl::StatusOr<memory::desc> PackedDesc(int64_t n, int64_t k) {
    if (!use_bf16) return memory::desc({k, n}, Dt::f32, Tag::ba);  // PackOperand's widening
    auto it = packed_md.find({n, k});
    if (it != packed_md.end()) return it->second;
    try {
      SingleThreadScope one_thread;
      memory::desc src({1, k}, act_dt, Tag::ab);
      memory::desc wei({k, n}, act_dt, Tag::any);
      memory::desc dst({1, n}, Dt::f32, Tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), CpuEngine());
      memory::desc md = pd.weights_desc();
      packed_md.emplace(std::make_pair(n, k), md);
      return md;
    } catch (const dnnl::error& e) {
      return DnnlError(absl::StrCat("packed layout for [", k, " x ", n, "]"), e);
    }
  }

  absl::StatusOr<const Prim*> GetPrim(const PrimKey& key) {
    auto it = prims.find(key);
    if (it != prims.end()) return &it->second;
    try {
      SingleThreadScope one_thread;
      Prim prim;
      prim.src_md = memory::desc({key.m, key.k}, act_dt, Tag::ab);
      if (key.packed) {
        WS_ASSIGN_OR_RETURN(prim.wei_md, PackedDesc(key.n, key.k));
      } else {
        // A [n, k] row-major weight is the [k, n] operand in "ba" order.
        prim.wei_md = memory::desc({key.k, key.n}, act_dt, Tag::ba);
      }
      prim.dst_md = memory::desc({key.m, key.n}, Dt::f32, memory::dims{key.dst_ld, 1});
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(prim.src_md, prim.wei_md, prim.dst_md),
                                      attr, CpuEngine());
      const std::string name = pd.impl_info_str();
      if (name.find("ref") != std::string::npos) {
        WS_LOG(WARNING) << "CpuExperts: oneDNN picked a reference matmul (" << name << ") for ["
                        << key.m << " x " << key.k << "] x [" << key.k << " x " << key.n
                        << "]: slow";
      }
      if (impl_name.empty()) impl_name = name;
      prim.scratch_md = pd.scratchpad_desc();
      prim.scratch_bytes = prim.scratch_md.get_size();
      prim.matmul = dnnl::matmul(pd);
      return &prims.emplace(key, std::move(prim)).first->second;
    } catch (const dnnl::error& e) {
      return DnnlError(
          absl::StrCat("matmul [", key.m, " x ", key.k, "] x [", key.k, " x ", key.n, "]"), e);
    }
  }

  // Builds one packed operand [K = k, N = rows_a + rows_b] from row blocks of bf16 [*, k]
  // weights (b may be null): f32 widened plain, or bf16 reordered into oneDNN's layout.
  // Runs inside BuildSlices' parallel loop: oneDNN then reorders on the calling thread.
  absl::StatusOr<std::shared_ptr<memory>> PackOperand(const uint16_t* a, int64_t rows_a,
                                                      const uint16_t* b, int64_t rows_b,
                                                      int64_t k) {
    const int64_t n = rows_a + rows_b;
    try {
      if (!use_bf16) {
        memory::desc md({k, n}, Dt::f32, Tag::ba);
        auto mem = std::make_shared<memory>(md, CpuEngine());
        float* dst = static_cast<float*>(mem->get_data_handle());
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n * k; ++i) {
          dst[i] = Bf16ToFloat(i < rows_a * k ? a[i] : b[i - rows_a * k]);
        }
        return mem;
      }
      std::vector<uint16_t> staging;
      const uint16_t* plain = a;
      if (b != nullptr) {
        staging.resize(n * k);
        std::memcpy(staging.data(), a, rows_a * k * 2);
        std::memcpy(staging.data() + rows_a * k, b, rows_b * k * 2);
        plain = staging.data();
      }
      auto found = packed_md.find(std::make_pair(n, k));  // filled before the parallel loop
      if (found == packed_md.end()) {
        return absl::InternalError(
            absl::StrCat("CpuExperts: no packed layout for [", k, " x ", n, "]"));
      }
      const memory::desc& md = found->second;
      memory::desc plain_md({k, n}, Dt::bf16, Tag::ba);
      memory src(plain_md, CpuEngine(), const_cast<uint16_t*>(plain));
      auto mem = std::make_shared<memory>(md, CpuEngine());
      dnnl::stream stream(CpuEngine());
      dnnl::reorder(src, *mem).execute(stream, src, *mem);
      stream.wait();
      return mem;
    } catch (const dnnl::error& e) {
      return DnnlError(absl::StrCat("packing a [", k, " x ", n, "] weight"), e);
    }
  }

  // Slices every expert; packing runs in parallel over experts (one thread per reorder).
  absl::Status BuildSlices() {
    const int64_t num_experts = experts.size();
    gate_up.assign(num_experts, {});
    down.assign(num_experts, {});
    if (packed) {
      // The packed layouts (at most four shapes), looked up read-only by the loop below.
      const int64_t gs = options.gate_up_slice, ds = options.down_slice;
      for (int64_t rows : {std::min(gs, inter), inter - (inter - 1) / gs * gs}) {
        WS_RETURN_IF_ERROR(PackedDesc(2 * rows, hidden).status());
      }
      for (int64_t rows : {std::min(ds, hidden), hidden - (hidden - 1) / ds * ds}) {
        WS_RETURN_IF_ERROR(PackedDesc(rows, inter).status());
      }
    }
    std::vector<absl::Status> status(num_experts);
    std::vector<uint64_t> bytes(num_experts, 0);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t e = 0; e < num_experts; ++e) {
      // A cancelled load skips the experts not yet started (the threads finish their own).
      if (options.cancelled != nullptr && options.cancelled->load(std::memory_order_relaxed)) {
        status[e] = absl::CancelledError("loading the routed experts was cancelled");
        continue;
      }
      status[e] = BuildExpert(e, &bytes[e]);
    }
    for (int64_t e = 0; e < num_experts; ++e) {
      WS_RETURN_IF_ERROR(status[e]);
      owned_bytes += bytes[e];
    }
    return absl::OkStatus();
  }

  absl::Status BuildExpert(int64_t e, uint64_t* bytes) {
    const ExpertMatrices& w = experts[e];
    for (int64_t r0 = 0; r0 < inter; r0 += options.gate_up_slice) {
      const int64_t rows = std::min(options.gate_up_slice, inter - r0);
      Slice slice;
      slice.n = 2 * rows;
      slice.row0 = r0;
      if (packed) {
        WS_ASSIGN_OR_RETURN(slice.packed, PackOperand(w.gate + r0 * hidden, rows,
                                                      w.up + r0 * hidden, rows, hidden));
        *bytes += slice.packed->get_desc().get_size();
      } else {
        slice.plain_a = w.gate + r0 * hidden;
        slice.plain_b = w.up + r0 * hidden;
      }
      gate_up[e].push_back(std::move(slice));
    }
    for (int64_t r0 = 0; r0 < hidden; r0 += options.down_slice) {
      const int64_t rows = std::min(options.down_slice, hidden - r0);
      Slice slice;
      slice.n = rows;
      slice.row0 = r0;
      if (packed) {
        WS_ASSIGN_OR_RETURN(slice.packed,
                            PackOperand(w.down + r0 * inter, rows, nullptr, 0, inter));
        *bytes += slice.packed->get_desc().get_size();
      } else {
        slice.plain_a = w.down + r0 * inter;
      }
      down[e].push_back(std::move(slice));
    }
    return absl::OkStatus();
  }

  // Runs `prim` with user pointers; the weight either `wei_mem` (packed) or `wei_ptr`.
  // Called inside OpenMP loops, so an exception must not escape: false on a oneDNN error.
  bool Execute(const Prim& prim, ThreadScratch& ts, const void* src, const memory* wei_mem,
               const void* wei_ptr, float* dst) {
    try {
      ExecuteOrThrow(prim, ts, src, wei_mem, wei_ptr, dst);
      return true;
    } catch (const dnnl::error& e) {
      WS_LOG(ERROR) << "CpuExperts: oneDNN matmul failed: " << e.what();
      return false;
    }
  }
  void ExecuteOrThrow(const Prim& prim, ThreadScratch& ts, const void* src, const memory* wei_mem,
                      const void* wei_ptr, float* dst) {
    dnnl::engine& engine = CpuEngine();
    memory src_m(prim.src_md, engine, const_cast<void*>(src));
    memory dst_m(prim.dst_md, engine, dst);
    memory wei_m =
        wei_mem != nullptr ? *wei_mem : memory(prim.wei_md, engine, const_cast<void*>(wei_ptr));
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, wei_m}, {DNNL_ARG_DST, dst_m}};
    if (prim.scratch_bytes > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD,
                   memory(prim.scratch_md, engine, static_cast<void*>(ts.pad.data())));
    }
    prim.matmul.execute(*ts.stream, args);
  }

  absl::Status Run(const float* x_f, const uint16_t* x_b, int64_t tokens, int64_t top_k,
                   const int32_t* ids, const float* route_weights, float* y);
};

absl::Status CpuExperts::Impl::Run(const float* x_f, const uint16_t* x_b, int64_t tokens,
                                   int64_t top_k, const int32_t* ids, const float* route_weights,
                                   float* y) {
  const int64_t num_experts = experts.size();
  if (tokens < 0 || top_k <= 0 || top_k > num_experts) {
    return absl::InvalidArgumentError(absl::StrCat("CpuExperts: tokens ", tokens, ", top_k ", top_k,
                                                   " with ", num_experts, " experts"));
  }
  if (tokens == 0) return absl::OkStatus();
  if (ids == nullptr || route_weights == nullptr || y == nullptr ||
      (x_f == nullptr && x_b == nullptr)) {
    return absl::InvalidArgumentError("CpuExperts: null input or output");
  }
  // Validate and count rows per expert.
  std::vector<int64_t> count(num_experts, 0);
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t* row = ids + t * top_k;
    for (int64_t k = 0; k < top_k; ++k) {
      if (row[k] == kSkippedExpert) continue;  // another device's pair: contributes 0
      if (row[k] < 0 || row[k] >= num_experts) {
        return absl::InvalidArgumentError(absl::StrCat("CpuExperts: token ", t, " slot ", k,
                                                       ": expert ", row[k], " outside [0, ",
                                                       num_experts, ") and not ",
                                                       kSkippedExpert, " (skipped)"));
      }
      for (int64_t j = 0; j < k; ++j) {
        if (row[j] == row[k]) {
          return absl::InvalidArgumentError(absl::StrCat("CpuExperts: token ", t,
                                                         " routed to expert ", row[k],
                                                         " twice (slots ", j, " and ", k, ")"));
        }
      }
      ++count[row[k]];
    }
  }
  // Row blocks per active expert, each padded to its M bucket.
  std::vector<int32_t> active;
  std::vector<int64_t> row0(num_experts, 0), bucket(num_experts, 0);
  int64_t rows = 0, max_bucket = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    if (count[e] == 0) continue;
    active.push_back(static_cast<int32_t>(e));
    bucket[e] = MBucket(count[e]);
    row0[e] = rows;
    rows += bucket[e];
    max_bucket = std::max(max_bucket, bucket[e]);
  }
  slot_row.resize(tokens * top_k);
  {
    std::vector<int64_t> fill(num_experts, 0);
    for (int64_t i = 0; i < tokens * top_k; ++i) {
      const int32_t e = ids[i];
      slot_row[i] = e == kSkippedExpert ? -1 : row0[e] + fill[e]++;
    }
  }
  // Primitives (created here, outside the parallel loops) and per-thread scratch.
  std::vector<const Prim*> gu_prim(num_experts * 2, nullptr), down_prim(num_experts * 2, nullptr);
  size_t max_pad = 0;
  for (int32_t e : active) {
    // Slices of one expert share a shape except possibly the last.
    const std::vector<Slice>& gs = gate_up[e];
    const std::vector<Slice>& ds = down[e];
    for (int which = 0; which < 2; ++which) {
      const Slice& g = which == 0 ? gs.front() : gs.back();
      const Slice& d = which == 0 ? ds.front() : ds.back();
      const int64_t gn = packed ? g.n : g.n / 2;
      WS_ASSIGN_OR_RETURN(gu_prim[2 * e + which], GetPrim({bucket[e], gn, hidden, g.n, packed}));
      WS_ASSIGN_OR_RETURN(down_prim[2 * e + which], GetPrim({bucket[e], d.n, inter, d.n, packed}));
      max_pad = std::max({max_pad, gu_prim[2 * e + which]->scratch_bytes,
                          down_prim[2 * e + which]->scratch_bytes});
    }
  }
  const int num_threads = omp_get_max_threads();
  if (static_cast<int>(threads.size()) < num_threads) threads.resize(num_threads);
  const size_t gu_floats = max_bucket * std::max(2 * options.gate_up_slice, options.down_slice);
  for (ThreadScratch& ts : threads) {
    if (!ts.stream) ts.stream = std::make_unique<dnnl::stream>(CpuEngine());
    if (ts.pad.size() < std::max<size_t>(max_pad, 64)) ts.pad.resize(std::max<size_t>(max_pad, 64));
    if (ts.gu.size() < gu_floats) ts.gu.resize(gu_floats);
  }
  if (use_bf16) {
    x_bf16.resize(rows * hidden);
    h_bf16.resize(rows * inter);
  } else {
    x_f32.resize(rows * hidden);
    h_f32.resize(rows * inter);
  }
  out.resize(rows * hidden);

  // Gather (converting), and zero the padding rows so that they stay finite.
  const int64_t H = hidden, I = inter;
  const bool bf16_path = use_bf16;
  uint16_t* xb = x_bf16.data();
  float* xf = x_f32.data();
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < tokens * top_k; ++i) {
      const int64_t t = i / top_k, r = slot_row[i];
      if (r < 0) continue;  // skipped
      if (bf16_path) {
        uint16_t* dst = xb + r * H;
        if (x_b != nullptr) {
          std::memcpy(dst, x_b + t * H, H * 2);
        } else {
          for (int64_t c = 0; c < H; ++c) dst[c] = FloatToBf16(x_f[t * H + c]);
        }
      } else {
        float* dst = xf + r * H;
        if (x_f != nullptr) {
          std::memcpy(dst, x_f + t * H, H * 4);
        } else {
          for (int64_t c = 0; c < H; ++c) dst[c] = Bf16ToFloat(x_b[t * H + c]);
        }
      }
    }
#pragma omp for schedule(static)
    for (size_t a = 0; a < active.size(); ++a) {
      const int32_t e = active[a];
      const int64_t pad0 = row0[e] + count[e], pad_rows = bucket[e] - count[e];
      if (bf16_path) {
        std::memset(xb + pad0 * H, 0, pad_rows * H * 2);
      } else {
        std::memset(xf + pad0 * H, 0, pad_rows * H * 4);
      }
    }
  }

  // Phase 1: gate and up per (expert, slice of I), SwiGLU fused.
  std::atomic<bool> failed{false};
  std::vector<std::pair<int32_t, int32_t>> tasks;
  for (int32_t e : active) {
    for (size_t s = 0; s < gate_up[e].size(); ++s) tasks.emplace_back(e, static_cast<int32_t>(s));
  }
  const size_t act_bytes = ActBytes();
  const uint8_t* x_act =
      bf16_path ? reinterpret_cast<const uint8_t*>(xb) : reinterpret_cast<const uint8_t*>(xf);
  uint16_t* hb = h_bf16.data();
  float* hf = h_f32.data();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto [e, s] = tasks[i];
    ThreadScratch& ts = threads[omp_get_thread_num()];
    const Slice& slice = gate_up[e][s];
    const bool last = static_cast<size_t>(s) + 1 == gate_up[e].size();
    const Prim& prim = *gu_prim[2 * e + (last ? 1 : 0)];
    const void* src = x_act + row0[e] * H * act_bytes;
    const int64_t m = bucket[e], half = slice.n / 2;
    float* gu = ts.gu.data();  // [m, 2 * half]: gate columns, then up columns
    bool ok;
    if (packed) {
      ok = Execute(prim, ts, src, slice.packed.get(), nullptr, gu);
    } else {
      ok = Execute(prim, ts, src, nullptr, slice.plain_a, gu) &&
           Execute(prim, ts, src, nullptr, slice.plain_b, gu + half);
    }
    if (!ok) failed.store(true, std::memory_order_relaxed);
    const int64_t real_m = count[e];
    for (int64_t r = 0; r < m; ++r) {
      const float* g = gu + r * slice.n;
      const float* u = g + half;
      const int64_t h_off = (row0[e] + r) * I + slice.row0;
      if (r >= real_m) {
        // Padding rows: zero (their x is zero), kept finite for the down matmul.
        if (bf16_path)
          std::memset(hb + h_off, 0, half * 2);
        else
          std::memset(hf + h_off, 0, half * 4);
        continue;
      }
      if (bf16_path) {
        for (int64_t c = 0; c < half; ++c) hb[h_off + c] = FloatToBf16(Silu(g[c]) * u[c]);
      } else {
        for (int64_t c = 0; c < half; ++c) hf[h_off + c] = Silu(g[c]) * u[c];
      }
    }
  }

  // Phase 2: down per (expert, slice of H) into the rows of `out`.
  tasks.clear();
  for (int32_t e : active) {
    for (size_t s = 0; s < down[e].size(); ++s) tasks.emplace_back(e, static_cast<int32_t>(s));
  }
  const uint8_t* h_act =
      bf16_path ? reinterpret_cast<const uint8_t*>(hb) : reinterpret_cast<const uint8_t*>(hf);
  float* out_rows = out.data();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto [e, s] = tasks[i];
    ThreadScratch& ts = threads[omp_get_thread_num()];
    const Slice& slice = down[e][s];
    const bool last = static_cast<size_t>(s) + 1 == down[e].size();
    const Prim& prim = *down_prim[2 * e + (last ? 1 : 0)];
    const void* src = h_act + row0[e] * I * act_bytes;
    // oneDNN's brgemm matmul wants a dense dst (a strided one falls back to its reference
    // implementation), so the slice lands in thread scratch and is copied into `out`.
    float* tmp = ts.gu.data();
    if (!Execute(prim, ts, src, packed ? slice.packed.get() : nullptr, slice.plain_a, tmp)) {
      failed.store(true, std::memory_order_relaxed);
    }
    for (int64_t r = 0; r < count[e]; ++r) {
      std::memcpy(out_rows + (row0[e] + r) * H + slice.row0, tmp + r * slice.n, slice.n * 4);
    }
  }
  if (failed.load()) return absl::InternalError("CpuExperts: a oneDNN matmul failed (logged)");

  // Combine: y[t] = sum_k w[t,k] out[slot(t,k)], k in order.
  constexpr int64_t kCols = 512;
  const int64_t col_blocks = (H + kCols - 1) / kCols;
  const int64_t* slots = slot_row.data();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t b = 0; b < col_blocks; ++b) {
      const int64_t c0 = b * kCols, c1 = std::min(H, c0 + kCols);
      float* yr = y + t * H;
      // The first pair not skipped sets the row (all skipped: zero), the rest add in order.
      int64_t first = 0;
      while (first < top_k && slots[t * top_k + first] < 0) ++first;
      if (first == top_k) {
        std::fill(yr + c0, yr + c1, 0.0f);
        continue;
      }
      const float w0 = route_weights[t * top_k + first];
      const float* o0 = out_rows + slots[t * top_k + first] * H;
      for (int64_t c = c0; c < c1; ++c) yr[c] = w0 * o0[c];
      for (int64_t k = first + 1; k < top_k; ++k) {
        if (slots[t * top_k + k] < 0) continue;
        const float w = route_weights[t * top_k + k];
        const float* o = out_rows + slots[t * top_k + k] * H;
        for (int64_t c = c0; c < c1; ++c) yr[c] += w * o[c];
      }
    }
  }
  return absl::OkStatus();
}

CpuExperts::CpuExperts(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuExperts::~CpuExperts() = default;

absl::StatusOr<std::unique_ptr<CpuExperts>> CpuExperts::Create(int64_t hidden, int64_t intermediate,
                                                               std::vector<ExpertMatrices> experts,
                                                               const CpuExpertsOptions& options) {
  if (hidden <= 0 || intermediate <= 0 || experts.empty() || options.gate_up_slice <= 0 ||
      options.down_slice <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CpuExperts: hidden ", hidden, ", intermediate ", intermediate, ", ", experts.size(),
        " experts, slices ", options.gate_up_slice, "/", options.down_slice));
  }
  for (size_t e = 0; e < experts.size(); ++e) {
    if (experts[e].gate == nullptr || experts[e].up == nullptr || experts[e].down == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("CpuExperts: expert ", e, " lacks a matrix"));
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->hidden = hidden;
  impl->inter = intermediate;
  impl->experts = std::move(experts);
  impl->options = options;
  switch (options.precision) {
    case ExpertPrecision::kAuto:
      impl->use_bf16 = OneDnnHasNativeBf16();
      break;
    case ExpertPrecision::kBf16:
      if (!OneDnnHasBf16Matmul()) {
        return absl::UnimplementedError(absl::StrCat(
            "CpuExperts: oneDNN has no bf16 matmul on this CPU (ISA ", OneDnnIsaName(),
            "); use ExpertPrecision::kF32 or kAuto"));
      }
      impl->use_bf16 = true;
      break;
    case ExpertPrecision::kF32:
      impl->use_bf16 = false;
      break;
  }
  impl->act_dt = impl->use_bf16 ? Dt::bf16 : Dt::f32;
  impl->packed = !impl->use_bf16 || options.prepack;
  WS_RETURN_IF_ERROR(impl->BuildSlices());
  // Names the implementation for a decode-sized gate/up slice (and warms the cache).
  const Impl::Slice& first = impl->gate_up[0][0];
  WS_RETURN_IF_ERROR(
      impl->GetPrim({1, impl->packed ? first.n : first.n / 2, hidden, first.n, impl->packed})
          .status());
  return std::unique_ptr<CpuExperts>(new CpuExperts(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<CpuExperts>> CpuExperts::ForLayer(const ModelWeights& weights,
                                                                 int64_t layer,
                                                                 const CpuExpertsOptions& options) {
  const ModelConfig& config = weights.config();
  if (!config.IsMoeLayer(layer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CpuExperts: layer ", layer, " of ", config.source, " has no routed experts"));
  }
  std::vector<ExpertMatrices> experts;
  const int64_t H = config.hidden_size, I = config.moe_intermediate_size;
  for (int64_t e = 0; e < config.n_routed_experts; ++e) {
    ExpertMatrices m;
    const MlpMatrix kinds[3] = {MlpMatrix::kGate, MlpMatrix::kUp, MlpMatrix::kDown};
    const uint16_t** ptrs[3] = {&m.gate, &m.up, &m.down};
    for (int j = 0; j < 3; ++j) {
      const std::string name = RoutedExpertTensorName(config, layer, e, kinds[j]);
      WS_ASSIGN_OR_RETURN(const Bf16Tensor* t, weights.Get(name));
      const std::vector<int64_t> want =
          j < 2 ? std::vector<int64_t>{I, H} : std::vector<int64_t>{H, I};
      if (t->shape != want) {
        return absl::InvalidArgumentError(absl::StrCat(
            "CpuExperts: ", name, " is ", ShapeString(t->shape), ", expected ", ShapeString(want)));
      }
      *ptrs[j] = t->data;
    }
    experts.push_back(m);
  }
  return Create(H, I, std::move(experts), options);
}

absl::Status CpuExperts::Forward(const float* x, int64_t tokens, int64_t top_k,
                                 const int32_t* expert_ids, const float* route_weights, float* y) {
  if (x == nullptr && tokens > 0) return absl::InvalidArgumentError("CpuExperts: null x");
  return impl_->Run(x, nullptr, tokens, top_k, expert_ids, route_weights, y);
}

absl::Status CpuExperts::ForwardBf16(const uint16_t* x, int64_t tokens, int64_t top_k,
                                     const int32_t* expert_ids, const float* route_weights,
                                     float* y) {
  if (x == nullptr && tokens > 0) return absl::InvalidArgumentError("CpuExperts: null x");
  return impl_->Run(nullptr, x, tokens, top_k, expert_ids, route_weights, y);
}

int64_t CpuExperts::hidden() const { return impl_->hidden; }
int64_t CpuExperts::intermediate() const { return impl_->inter; }
int64_t CpuExperts::num_experts() const { return impl_->experts.size(); }
bool CpuExperts::bf16() const { return impl_->use_bf16; }
bool CpuExperts::prepacked() const { return impl_->packed; }
uint64_t CpuExperts::owned_weight_bytes() const { return impl_->owned_bytes; }
std::string CpuExperts::isa() const { return OneDnnIsaName(); }
std::string CpuExperts::matmul_impl() const { return impl_->impl_name; }

}  // namespace writescope::kernels::experts
