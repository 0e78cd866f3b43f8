#include "kernels/cpu/mla_matmul.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "dnnl.hpp"
#include "kernels/cpu/onednn_util.h"

namespace writescope::kernels::cpu {
namespace {

using dnnl::memory;
using Dt = memory::data_type;
using Tag = memory::format_tag;

// One matmul's arguments (the scratchpad last), made once per thread and repointed by
// set_data_handle for each block.
struct MatmulArgs {
  memory src, wei, dst, pad;
};

// Per calling thread: buffers sized for the largest shape it has run.
struct ThreadScratch {
  const void* owner = nullptr;  // the instance `scores` and `pv` were made for
  MatmulArgs scores, pv;
  std::unique_ptr<dnnl::stream> stream;
  std::vector<uint8_t> pad;   // oneDNN's scratchpad (user mode)
  std::vector<float> s;       // [hp][T] scores
  std::vector<uint16_t> p;    // [2 hp][T]: P_hi rows, then P_lo rows
  std::vector<float> o;       // [2 hp][out_dim]
  std::vector<float> alpha;   // [hp]
  std::vector<float> exps;    // [T]
  std::vector<uint16_t> v;    // [T][out_dim]: the block's V, dense
};
thread_local ThreadScratch t_scratch;

class MlaMatmulImpl final : public MlaMatmul {
 public:
  MlaMatmulImpl(int32_t hp, int32_t row_dim, int32_t out_dim, int32_t tokens)
      : hp_(hp), row_dim_(row_dim), out_dim_(out_dim), tokens_(tokens) {}

  absl::Status Init() {
    try {
      SingleThreadScope one_thread;
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      // S = Q K^T: K^T is [row_dim x T] over the rows [T][row_dim] (strides 1, row_dim).
      q_md_ = memory::desc({hp_, row_dim_}, Dt::bf16, Tag::ab);
      k_md_ = memory::desc({row_dim_, tokens_}, Dt::bf16, memory::dims{1, row_dim_});
      s_md_ = memory::desc({hp_, tokens_}, Dt::f32, Tag::ab);
      dnnl::matmul::primitive_desc spd(dnnl::matmul::desc(q_md_, k_md_, s_md_), attr,
                                       CpuEngine());
      // O = P V: V is the first out_dim values of each row (strides row_dim, 1).
      p_md_ = memory::desc({2 * hp_, tokens_}, Dt::bf16, Tag::ab);
      v_md_ = memory::desc({tokens_, out_dim_}, Dt::bf16, Tag::ab);
      o_md_ = memory::desc({2 * hp_, out_dim_}, Dt::f32, Tag::ab);
      dnnl::matmul::primitive_desc opd(dnnl::matmul::desc(p_md_, v_md_, o_md_), attr,
                                       CpuEngine());
      impl_ = absl::StrCat(spd.impl_info_str(), " / ", opd.impl_info_str());
      scratch_bytes_ = std::max(spd.scratchpad_desc().get_size(), opd.scratchpad_desc().get_size());
      s_scratch_md_ = spd.scratchpad_desc();
      o_scratch_md_ = opd.scratchpad_desc();
      scores_ = dnnl::matmul(spd);
      pv_ = dnnl::matmul(opd);
    } catch (const dnnl::error& e) {
      return absl::InternalError(absl::StrCat("MLA matmul [", hp_, " x ", row_dim_, "] x [",
                                              row_dim_, " x ", tokens_, "]: oneDNN: ", e.what()));
    }
    if (impl_.find("ref") != std::string::npos) {
      WS_LOG(WARNING) << "MLA matmul: oneDNN picked a reference implementation (" << impl_
                      << "): slow";
    }
    return absl::OkStatus();
  }

  bool Block(const KernelTable& kernels, const uint16_t* q, float scale, const uint16_t* rows,
             float* m, float* l, float* acc) const override {
    // Runs inside the caller's OpenMP loop: no exception may escape (a bad_alloc of the
    // scratch included).
    try {
      RunOrThrow(kernels, q, scale, rows, m, l, acc);
      return true;
    } catch (const dnnl::error& e) {
      WS_LOG(ERROR) << "MLA matmul: oneDNN failed: " << e.what();
    } catch (const std::exception& e) {
      WS_LOG(ERROR) << "MLA matmul: " << e.what();
    }
    return false;
  }

  std::string impl() const override { return impl_; }

 private:
  void RunOrThrow(const KernelTable& kernels, const uint16_t* q, float scale,
                  const uint16_t* rows, float* m, float* l, float* acc) const {
    ThreadScratch& ts = t_scratch;
    const int64_t hp = hp_, n = tokens_, out = out_dim_;
    if (ts.s.size() < static_cast<size_t>(hp * n)) ts.s.resize(hp * n);
    if (ts.p.size() < static_cast<size_t>(2 * hp * n)) ts.p.resize(2 * hp * n);
    if (ts.o.size() < static_cast<size_t>(2 * hp * out)) ts.o.resize(2 * hp * out);
    if (ts.alpha.size() < static_cast<size_t>(hp)) ts.alpha.resize(hp);
    if (ts.exps.size() < static_cast<size_t>(n)) ts.exps.resize(n);
    if (ts.pad.size() < scratch_bytes_) ts.pad.resize(scratch_bytes_);
    if (ts.v.size() < static_cast<size_t>(n * out)) ts.v.resize(n * out);
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(rows + t * row_dim_, out, ts.v.data() + t * out);
    }
    if (ts.stream == nullptr) ts.stream = std::make_unique<dnnl::stream>(CpuEngine());
    if (ts.owner != this) {
      ts.scores = Args(q_md_, k_md_, s_md_, s_scratch_md_);
      ts.pv = Args(p_md_, v_md_, o_md_, o_scratch_md_);
      ts.owner = this;
    }
    Execute(scores_, ts.scores, *ts.stream, q, rows, ts.s.data(), ts.pad.data());
    kernels.mla_softmax_hilo(ts.s.data(), tokens_, hp_, tokens_, scale, m, l, ts.alpha.data(),
                             ts.p.data(), ts.p.data() + hp * n, tokens_, ts.exps.data());
    Execute(pv_, ts.pv, *ts.stream, ts.p.data(), ts.v.data(), ts.o.data(), ts.pad.data());
    for (int64_t h = 0; h < hp; ++h) {
      const float a = ts.alpha[h];
      float* dst = acc + h * out;
      const float* hi = ts.o.data() + h * out;
      const float* lo = ts.o.data() + (hp + h) * out;
      for (int64_t d = 0; d < out; ++d) dst[d] = dst[d] * a + (hi[d] + lo[d]);
    }
  }

  static MatmulArgs Args(const memory::desc& src, const memory::desc& wei,
                         const memory::desc& dst, const memory::desc& pad) {
    dnnl::engine& engine = CpuEngine();
    return {memory(src, engine, nullptr), memory(wei, engine, nullptr),
            memory(dst, engine, nullptr), memory(pad, engine, nullptr)};
  }

  // Runs one matmul on these buffers and waits (the caller reads dst on this thread).
  static void Execute(const dnnl::matmul& matmul, MatmulArgs& args, dnnl::stream& stream,
                      const void* src, const void* wei, void* dst, void* pad) {
    args.src.set_data_handle(const_cast<void*>(src));
    args.wei.set_data_handle(const_cast<void*>(wei));
    args.dst.set_data_handle(dst);
    args.pad.set_data_handle(pad);
    matmul.execute(stream, {{DNNL_ARG_SRC, args.src},
                            {DNNL_ARG_WEIGHTS, args.wei},
                            {DNNL_ARG_DST, args.dst},
                            {DNNL_ARG_SCRATCHPAD, args.pad}});
    stream.wait();
  }

  const int32_t hp_, row_dim_, out_dim_, tokens_;
  memory::desc q_md_, k_md_, s_md_, p_md_, v_md_, o_md_, s_scratch_md_, o_scratch_md_;
  dnnl::matmul scores_, pv_;
  size_t scratch_bytes_ = 0;
  std::string impl_;
};

}  // namespace

absl::StatusOr<const MlaMatmul*> MlaMatmul::Get(int32_t padded_heads, int32_t row_dim,
                                                int32_t out_dim, int32_t block_tokens) {
  if (padded_heads <= 0 || row_dim <= 0 || out_dim <= 0 || out_dim > row_dim ||
      block_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("MLA matmul shape: heads ", padded_heads,
                                                   ", row ", row_dim, ", out ", out_dim,
                                                   ", block ", block_tokens));
  }
  static std::mutex mu;
  // Failures are kept too (a CPU without oneDNN's bf16 matmul fails the same way each time).
  static auto* cache = new std::map<std::tuple<int32_t, int32_t, int32_t, int32_t>,
                                    absl::StatusOr<std::unique_ptr<MlaMatmulImpl>>>;
  const std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_tuple(padded_heads, row_dim, out_dim, block_tokens);
  auto it = cache->find(key);
  if (it == cache->end()) {
    auto impl = std::make_unique<MlaMatmulImpl>(padded_heads, row_dim, out_dim, block_tokens);
    absl::Status status = impl->Init();
    if (status.ok()) {
      WS_LOG(INFO) << "MLA matmul [" << padded_heads << " heads, rows of " << row_dim
                   << ", blocks of " << block_tokens << "]: oneDNN " << impl->impl();
      it = cache->emplace(key, std::move(impl)).first;
    } else {
      it = cache->emplace(key, std::move(status)).first;
    }
  }
  if (!it->second.ok()) return it->second.status();
  return it->second->get();
}

}  // namespace writescope::kernels::cpu
