// CPU routed experts (kernels/experts/cpu_experts.h) on one layer of synthetic weights of
// the real shapes, against the machine's ceilings and oneDNN's own best.
//
//   cpu_experts_bench [--shapes=qwen3,deepseek,mixtral] [--batch=1,32] [--seconds=0.3]
//                     [--dram-gbps=81] [--matmul-tflops=5.0] [--modes=packed,inplace,threaded]
//
// Modes:
//   packed    CpuExperts, weights reordered once into oneDNN's blocked layout (the default)
//   inplace   CpuExperts on the checkpoint's bf16 [out, in] weights (re-blocked per call)
//   threaded  the obvious alternative: expert after expert, each matmul on all threads
//             (oneDNN's own threading, weights in place) — to pick the threading rule
// Batch 1 streams the weights: consecutive calls route to disjoint experts, so a call reads
// top_k experts' bytes from DRAM; GB/s = those bytes / time (compare with --dram-gbps, the
// probe's triad; given, not measured here), counted as bf16, or as f32 for the packed mode
// where its copy is f32 (oneDNN without native bf16). Larger batches route at random (uniform
// top-k); GB/s counts every expert touched once, TFLOP/s the useful flops (tokens * top_k * 6 * H *
// I), compared with
// --matmul-tflops (oneDNN bf16 matmul peak measured on that machine).
// "dnnl same bytes" is one oneDNN bf16 matmul [batch, H] x [H, N] whose packed weight has
// the bytes the experts touched (N = experts touched * 3 I; copies rotated so that it
// streams too): the best oneDNN does on that much weight at that batch. "dnnl peak" is a
// compute-bound [512, H] x [H, 2I] packed matmul.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/model_config.h"
#include "common/model_weights.h"
#include "dnnl.hpp"
#include "kernels/bf16.h"
#include "kernels/experts/cpu_experts.h"

namespace writescope::kernels::experts {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

struct Options {
  std::vector<std::string> shapes = {"qwen3", "deepseek", "mixtral"};
  std::vector<int64_t> batches = {1, 32};
  std::vector<std::string> modes = {"packed", "inplace", "threaded"};
  double seconds = 0.3;  // timed per point (after a warm-up)
  double dram_gbps = 81;
  double matmul_tflops = 5.0;
};

struct ShapeSpec {
  std::string name, arch;
  int64_t layers, layer;  // synthetic layers to build; the MoE layer used
};
bool FindShape(const std::string& name, ShapeSpec* spec) {
  if (name == "qwen3")
    *spec = {"Qwen3-30B-A3B", "qwen3_moe", 1, 0};
  else if (name == "deepseek")
    *spec = {"DeepSeek-V2-Lite", "deepseek_v2", 2, 1};
  else if (name == "mixtral")
    *spec = {"Mixtral-8x7B", "mixtral", 1, 0};
  else
    return false;
  return true;
}

dnnl::engine& Engine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call of fn(i), i counting calls: 2 warm-up calls, then at least 3 and until
// `seconds` have passed.
double TimePerCall(const std::function<void(int64_t)>& fn, double seconds) {
  int64_t i = 0;
  fn(i++);
  fn(i++);
  const double start = Now();
  int64_t n = 0;
  double elapsed = 0;
  while (n < 3 || elapsed < seconds) {
    fn(i++);
    ++n;
    elapsed = Now() - start;
  }
  return elapsed / n;
}

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  int64_t unique_experts = 0;
};

// Batch 1: call i takes the i-th disjoint set of top_k experts (wrapping), so consecutive
// calls never reuse weights. Batch > 1: uniform random distinct top_k per token.
std::vector<Routing> MakeRoutings(int64_t batch, int64_t experts, int64_t top_k, int count,
                                  uint64_t seed) {
  std::vector<Routing> routings(count);
  std::mt19937_64 rng(seed);
  for (int r = 0; r < count; ++r) {
    Routing& routing = routings[r];
    std::vector<char> used(experts, 0);
    for (int64_t t = 0; t < batch; ++t) {
      std::vector<int32_t> pool(experts);
      for (int64_t e = 0; e < experts; ++e) pool[e] = static_cast<int32_t>(e);
      if (batch == 1) {
        std::rotate(pool.begin(), pool.begin() + (r * top_k) % experts, pool.end());
      } else {
        std::shuffle(pool.begin(), pool.end(), rng);
      }
      for (int64_t k = 0; k < top_k; ++k) {
        routing.ids.push_back(pool[k]);
        routing.weights.push_back(1.0f / top_k);
        used[pool[k]] = 1;
      }
    }
    for (char u : used) routing.unique_experts += u;
  }
  return routings;
}

// The "threaded" mode: per active expert, gate, up and down as whole matmuls on all threads
// (weights in place, "ba"), SwiGLU and the weighted sum in between.
class ThreadedExperts {
 public:
  ThreadedExperts(int64_t hidden, int64_t inter, std::vector<ExpertMatrices> experts)
      : H_(hidden), I_(inter), experts_(std::move(experts)), stream_(Engine()) {}

  void Forward(const float* x, int64_t tokens, int64_t top_k, const int32_t* ids, const float* w,
               float* y) {
    std::fill(y, y + tokens * H_, 0.0f);
    std::vector<std::vector<int64_t>> rows(experts_.size());
    for (int64_t i = 0; i < tokens * top_k; ++i) rows[ids[i]].push_back(i);
    for (size_t e = 0; e < experts_.size(); ++e) {
      const int64_t m = rows[e].size();
      if (m == 0) continue;
      xb_.resize(m * H_);
      g_.resize(m * I_);
      u_.resize(m * I_);
      hb_.resize(m * I_);
      o_.resize(m * H_);
      for (int64_t r = 0; r < m; ++r) {
        const float* src = x + (rows[e][r] / top_k) * H_;
        for (int64_t c = 0; c < H_; ++c) xb_[r * H_ + c] = FloatToBf16(src[c]);
      }
      Matmul(m, I_, H_, xb_.data(), experts_[e].gate, g_.data());
      Matmul(m, I_, H_, xb_.data(), experts_[e].up, u_.data());
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < m * I_; ++i) {
        hb_[i] = FloatToBf16(g_[i] / (1.0f + std::exp(-g_[i])) * u_[i]);
      }
      Matmul(m, H_, I_, hb_.data(), experts_[e].down, o_.data());
      for (int64_t r = 0; r < m; ++r) {
        const float wr = w[rows[e][r]];
        float* yr = y + (rows[e][r] / top_k) * H_;
        for (int64_t c = 0; c < H_; ++c) yr[c] += wr * o_[r * H_ + c];
      }
    }
  }

 private:
  void Matmul(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* w, float* c) {
    auto key = std::make_tuple(m, n, k);
    auto it = prims_.find(key);
    if (it == prims_.end()) {
      memory::desc src({m, k}, Dt::bf16, Tag::ab), wei({k, n}, Dt::bf16, Tag::ba),
          dst({m, n}, Dt::f32, Tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), Engine());
      it = prims_.emplace(key, std::make_pair(pd, dnnl::matmul(pd))).first;
    }
    const dnnl::matmul::primitive_desc& pd = it->second.first;
    memory sm(pd.src_desc(), Engine(), const_cast<uint16_t*>(a));
    memory wm(pd.weights_desc(), Engine(), const_cast<uint16_t*>(w));
    memory dm(pd.dst_desc(), Engine(), c);
    it->second.second.execute(stream_,
                              {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, dm}});
    stream_.wait();
  }

  int64_t H_, I_;
  std::vector<ExpertMatrices> experts_;
  dnnl::stream stream_;
  std::map<std::tuple<int64_t, int64_t, int64_t>,
           std::pair<dnnl::matmul::primitive_desc, dnnl::matmul>>
      prims_;
  std::vector<uint16_t> xb_, hb_;
  std::vector<float> g_, u_, o_;
};

// One oneDNN bf16 matmul [m, k] x [k, n], weights packed (format `any`), on all threads;
// `copies` distinct weights are rotated so that a large one streams from DRAM.
// Returns seconds per call.
double DnnlMatmulSeconds(int64_t m, int64_t n, int64_t k, int copies, double seconds,
                         std::string* impl) {
  memory::desc src({m, k}, Dt::bf16, Tag::ab), wei({k, n}, Dt::bf16, Tag::any),
      dst({m, n}, Dt::f32, Tag::ab);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), Engine());
  } catch (const dnnl::error& e) {  // no bf16 matmul on this CPU
    *impl = absl::StrCat("none: ", e.what());
    return 0;
  }
  *impl = pd.impl_info_str();
  dnnl::matmul matmul(pd);
  std::vector<memory> weights;
  for (int c = 0; c < copies; ++c) {
    weights.emplace_back(pd.weights_desc(), Engine());
    // Values do not matter for timing; small finite bf16 everywhere (padding included).
    uint16_t* data = static_cast<uint16_t*>(weights.back().get_data_handle());
    const int64_t count = pd.weights_desc().get_size() / 2;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) data[i] = FloatToBf16(((i * 2654435761u) % 1000) * 1e-5f);
  }
  std::vector<uint16_t> a(m * k, FloatToBf16(0.01f));
  std::vector<float> c(m * n);
  memory sm(pd.src_desc(), Engine(), a.data()), dm(pd.dst_desc(), Engine(), c.data());
  dnnl::stream stream(Engine());
  return TimePerCall(
      [&](int64_t i) {
        matmul.execute(
            stream,
            {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, weights[i % copies]}, {DNNL_ARG_DST, dm}});
        stream.wait();
      },
      seconds);
}

int Main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* prefix) -> const char* {
      const size_t n = std::string(prefix).size();
      return arg.compare(0, n, prefix) == 0 ? argv[i] + n : nullptr;
    };
    bool ok = true;
    if (const char* v = value("--shapes=")) {
      options.shapes = absl::StrSplit(v, ',');
    } else if (const char* v = value("--modes=")) {
      options.modes = absl::StrSplit(v, ',');
    } else if (const char* v = value("--batch=")) {
      options.batches.clear();
      for (absl::string_view part : absl::StrSplit(v, ',')) {
        int64_t b = 0;
        ok = ok && absl::SimpleAtoi(part, &b) && b > 0;
        options.batches.push_back(b);
      }
    } else if (const char* v = value("--seconds=")) {
      ok = absl::SimpleAtod(v, &options.seconds);
    } else if (const char* v = value("--dram-gbps=")) {
      ok = absl::SimpleAtod(v, &options.dram_gbps);
    } else if (const char* v = value("--matmul-tflops=")) {
      ok = absl::SimpleAtod(v, &options.matmul_tflops);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad argument %s (see the comment at the top of %s)\n", argv[i],
                   __FILE__);
      return 2;
    }
  }
  std::printf("oneDNN %d.%d.%d, effective ISA %s (native bf16: %s), %d OpenMP threads\n",
              dnnl::version()->major, dnnl::version()->minor, dnnl::version()->patch,
              OneDnnIsaName().c_str(), OneDnnHasNativeBf16() ? "yes" : "no", omp_get_max_threads());
  std::printf(
      "ceilings: DRAM %.1f GB/s (--dram-gbps), bf16 matmul %.2f TFLOP/s "
      "(--matmul-tflops)\n\n",
      options.dram_gbps, options.matmul_tflops);
  std::printf("%-17s %5s %-8s %10s %10s %8s %6s %8s %6s | %-15s %8s %8s\n", "shape", "batch",
              "mode", "us/call", "tokens/s", "GB/s", "%DRAM", "TFLOP/s", "%peak", "dnnl same bytes",
              "GB/s", "TFLOP/s");

  for (const std::string& shape_name : options.shapes) {
    ShapeSpec spec;
    if (!FindShape(shape_name, &spec)) {
      std::fprintf(stderr, "unknown shape %s (qwen3, deepseek, mixtral)\n", shape_name.c_str());
      return 2;
    }
    auto config = ModelConfig::ForSyntheticArch(spec.arch, spec.layers);
    if (!config.ok()) {
      std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
      return 1;
    }
    SyntheticOptions synthetic;
    synthetic.side = SideFilter::kCpu;
    synthetic.seed = 1;
    const double gen_start = Now();
    auto weights = MakeSyntheticWeights(*config, synthetic);
    if (!weights.ok()) {
      std::fprintf(stderr, "%s\n", weights.status().ToString().c_str());
      return 1;
    }
    const int64_t H = config->hidden_size, I = config->moe_intermediate_size,
                  E = config->n_routed_experts, K = config->num_experts_per_tok;
    const double expert_bytes = 3.0 * H * I * 2;
    std::vector<ExpertMatrices> matrices;
    for (int64_t e = 0; e < E; ++e) {
      matrices.push_back({(*weights)->RoutedExpert(spec.layer, e, MlpMatrix::kGate).data,
                          (*weights)->RoutedExpert(spec.layer, e, MlpMatrix::kUp).data,
                          (*weights)->RoutedExpert(spec.layer, e, MlpMatrix::kDown).data});
    }
    const double gen_s = Now() - gen_start;

    std::unique_ptr<CpuExperts> packed, inplace;
    std::unique_ptr<ThreadedExperts> threaded;
    double pack_s = 0;
    for (const std::string& mode : options.modes) {
      CpuExpertsOptions eo;
      eo.prepack = mode == "packed";
      if (mode == "threaded") {
        threaded = std::make_unique<ThreadedExperts>(H, I, matrices);
        continue;
      }
      if (mode != "packed" && mode != "inplace") {
        std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
        return 2;
      }
      const double start = Now();
      auto made = CpuExperts::Create(H, I, matrices, eo);
      if (!made.ok()) {
        std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
        return 1;
      }
      (mode == "packed" ? packed : inplace) = std::move(*made);
      if (mode == "packed") pack_s = Now() - start;
    }
    const CpuExperts* any = packed ? packed.get() : inplace.get();
    std::printf(
        "# %s: H %ld, I %ld, %ld experts top-%ld, %.1f MiB per expert; weights %.1f s, "
        "prepack %.1f s; %s, matmul %s\n",
        spec.name.c_str(), H, I, E, K, expert_bytes / (1 << 20), gen_s, pack_s,
        any ? (any->bf16() ? "bf16" : "f32") : "-", any ? any->matmul_impl().c_str() : "-");

    for (int64_t batch : options.batches) {
      const int num_routings = batch == 1 ? static_cast<int>(std::max<int64_t>(1, E / K)) : 8;
      const std::vector<Routing> routings = MakeRoutings(batch, E, K, num_routings, batch);
      double unique = 0;
      for (const Routing& r : routings) unique += r.unique_experts;
      unique /= routings.size();
      std::vector<float> x(batch * H), y(batch * H);
      std::mt19937_64 rng(3);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& v : x) v = normal(rng);
      const double bytes = unique * expert_bytes;
      const double flops = 6.0 * batch * K * H * I;

      // oneDNN on the same bytes: copies rotated over >= ~1 GiB when they fit in 3 GiB.
      const int64_t n_eq = static_cast<int64_t>(std::llround(unique)) * 3 * I;
      const double eq_bytes = 2.0 * H * n_eq;
      const int copies = static_cast<int>(std::clamp(std::ceil((1 << 30) / eq_bytes), 1.0,
                                                     std::max(1.0, 3.0 * (1 << 30) / eq_bytes)));
      std::string eq_impl;
      const double eq_s = DnnlMatmulSeconds(batch, n_eq, H, copies, options.seconds, &eq_impl);

      for (const std::string& mode : options.modes) {
        std::function<void(int64_t)> call;
        if (mode == "threaded") {
          call = [&](int64_t i) {
            const Routing& r = routings[i % routings.size()];
            threaded->Forward(x.data(), batch, K, r.ids.data(), r.weights.data(), y.data());
          };
        } else {
          CpuExperts* experts = mode == "packed" ? packed.get() : inplace.get();
          call = [&, experts](int64_t i) {
            const Routing& r = routings[i % routings.size()];
            absl::Status s =
                experts->Forward(x.data(), batch, K, r.ids.data(), r.weights.data(), y.data());
            if (!s.ok()) {
              std::fprintf(stderr, "%s\n", s.ToString().c_str());
              std::exit(1);
            }
          };
        }
        double s = 0;
        try {
          s = TimePerCall(call, options.seconds);
        } catch (const dnnl::error& e) {  // "threaded": no bf16 matmul on this CPU
          std::printf("%-17s %5ld %-8s   unavailable: %s\n", spec.name.c_str(), batch, mode.c_str(),
                      e.what());
          continue;
        }
        // The packed copy is f32 (4 bytes a weight) where oneDNN has no native bf16: what a
        // call reads is twice the bf16 bytes then.
        const double read_bytes = mode == "packed" && packed && !packed->bf16() ? 2 * bytes : bytes;
        const double gbps = read_bytes / s / 1e9, tflops = flops / s / 1e12;
        std::printf("%-17s %5ld %-8s %10.1f %10.1f %8.1f %5.0f%% %8.3f %5.1f%% | N=%-13ld",
                    spec.name.c_str(), batch, mode.c_str(), s * 1e6, batch / s, gbps,
                    100 * gbps / options.dram_gbps, tflops, 100 * tflops / options.matmul_tflops,
                    n_eq);
        if (eq_s > 0) {
          std::printf(" %8.1f %8.3f\n", eq_bytes / eq_s / 1e9,
                      2.0 * batch * H * n_eq / eq_s / 1e12);
        } else {
          std::printf(" %8s %8s\n", "-", "-");
        }
      }
      std::printf(
          "%-17s %5ld   (experts touched per call %.1f = %.1f MiB; dnnl same bytes: %s, "
          "%d copies)\n",
          "", batch, unique, bytes / (1 << 20), eq_impl.c_str(), copies);
    }
    std::string peak_impl;
    const double peak_s = DnnlMatmulSeconds(512, 2 * I, H, 1, options.seconds, &peak_impl);
    if (peak_s > 0) {
      std::printf("%-17s dnnl peak [512 x %ld] x [%ld x %ld] packed: %.3f TFLOP/s (%s)\n\n",
                  spec.name.c_str(), H, H, 2 * I, 2.0 * 512 * H * 2 * I / peak_s / 1e12,
                  peak_impl.c_str());
    } else {
      std::printf("%-17s dnnl peak: %s\n\n", spec.name.c_str(), peak_impl.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace writescope::kernels::experts

int main(int argc, char** argv) { return writescope::kernels::experts::Main(argc, argv); }
