// Attention kernel benchmark: prints tables, never runs as a test.
//
//   attention_bench [--tokens=8192,32768] [--batch=1,8] [--models=qwen3,mixtral]
//                   [--threads=16] [--iters=3] [--dram-gbps=85] [--hbm-gbps=4300]
//                   [--pool-gb=2] [--gpu-pool-gb=16] [--no-cpu] [--no-mla] [--no-cuda] [--no-gqa]
//                   [--no-merge] [--no-logits] [--no-prefill] [--no-overlap] [--no-floors]
//                   [--gqa-splits] [--timeline] [--flush=stream|cached]
//                   [--clock=wall|cpu]
//                   [--host-memory=malloc|anon|anon-thp|shm|shm-thp|memfd-thp]
//                   [--gap-us=0] [--gpu-warmup-ms=50] [--mla-prefetch=0,1,2]
//                   [--cpu-beside-h2d-gb=0] [--cpu-plan-divisor=1,2]
//
// KV bytes are counted once per step (K and V of every token and kv head read once);
// achieved GB/s = bytes / time, compared with the DRAM (CPU) or HBM (GPU) ceiling.
// Sequences draw their tiles from a pool of --pool-gb unique bytes (far larger than the
// last-level cache), so big grids fit in memory and still stream from DRAM.
//
// GB/s/thr is GB/s divided by the thread count: with --threads=1 it is the per-core rate
// to compare with the DRAM ceiling / cores of the target machine. --clock=cpu times the
// process CPU time divided by the thread count instead of wall time: on a shared, loaded
// machine it leaves out the time the benchmark was descheduled (use it with --threads=1;
// OpenMP threads that spin while waiting count as busy).
//
// --host-memory chooses where the CPU tables' tiles live: malloc (aligned_alloc, the kernel's
// default page choice; the default), anon (private anonymous memory with MADV_NOHUGEPAGE: 4 KiB
// pages), anon-thp (MADV_HUGEPAGE), shm (a /dev/shm object as the KV arena maps it, no hint),
// shm-thp (the same with MADV_HUGEPAGE: granted only where /dev/shm is mounted huge=advise or
// the kernel forces it), memfd-thp (memfd_create with MADV_HUGEPAGE: the kernel's internal
// shared-memory mount, which follows transparent_hugepage/shmem_enabled). Each table's header
// says how many of the pool's bytes huge pages map.
//
// --cpu-beside-h2d-gb=G (CUDA builds with a device): the CPU tables run while a thread keeps
// the copy engine reading G GiB of pinned host memory into the GPU, copy after copy, as the
// ping-pong transfers do beside the CPU's attention in a decode step; the copies' rate is
// printed after the tables.
//
// --mla-prefetch lists the CPU MLA AMX kernel's prefetch distances (MlaAmxArgs::
// prefetch_steps), an amx-pN row each.
//
// --cpu-plan-divisor lists the CPU decodes' work-plan divisors (CpuAttentionOptions::
// plan_divisor, kernels/cpu/work_plan.h); with more than one, a row each, the GQA model
// names and the MLA paths suffixed /dN.
//
// --gpu-warmup-ms: each CUDA timing first runs its call (behind the L2 flush) for at least
// this long, untimed (0: one untimed call, as before session 31, which timed the first
// column of some rows 5-13 % slow: docs/notes/cuda_decode_tuning.md, run 167).
//
// --flush: the CUDA timings' L2 flush (256 MiB read before each timed call) with cached,
// normal-priority loads (the default) or streaming ones (every run before 305). After a
// streaming flush the L2 keeps lines of the call before, and lone calls on bytes under the
// L2's size ran partly warm (Qwen3 8K x 1 on an H100: 12.4 µs against 16.3; run 305).
//
// --gap-us sleeps that long before each timed call (not timed). Back to back, the OpenMP
// threads are still spinning from the call before when the next one starts; in a decode
// step the cpu_worker's attention calls come one layer apart, with the GPU's part of the
// layer between them, and threads that have stopped spinning (GOMP_SPINCOUNT, launch.sh's
// WS_CPU_WORKER_SPINCOUNT) must be woken first. A gap longer than the spin shows that cost
// in the fixed part of each call.
#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernels/attention.h"
#include "kernels/attention_state.h"
#include "kernels/bench/bench_common.h"
#include "kernels/bf16.h"
#include "kernels/cpu/mla_matmul.h"
#include "kernels/cpu_attention.h"

namespace writescope::kernels::bench {
namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool g_cpu_clock = false;  // --clock=cpu
int g_clock_threads = 1;   // CPU time is divided by this

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int64_t g_gap_us = 0;  // --gap-us

// Median of `iters` timed runs after one warm-up, each after --gap-us of sleep.
template <typename Fn>
double TimeIt(int iters, Fn fn) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    if (g_gap_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(g_gap_us));
    if (g_cpu_clock) {
      const double start = ProcessCpuSeconds();
      fn();
      times.push_back((ProcessCpuSeconds() - start) / g_clock_threads);
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(Seconds(start, std::chrono::steady_clock::now()));
  }
  return Median(std::move(times));
}

std::string g_host_memory = "malloc";  // --host-memory

// The CPU tables' line on --gap-us and the OpenMP wait settings it interacts with.
void PrintGap() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  std::printf("calls %s (OMP_WAIT_POLICY=%s, GOMP_SPINCOUNT=%s)\n",
              g_gap_us > 0 ? absl::StrCat(g_gap_us, " us apart").c_str() : "back to back",
              policy != nullptr ? policy : "unset", spin != nullptr ? spin : "unset");
}

// A value in kB of /proc/self/smaps_rollup (e.g. "AnonHugePages:"), or -1.
int64_t SmapsRollupKib(const std::string& key) {
  std::ifstream file("/proc/self/smaps_rollup");
  std::string word;
  int64_t kib = -1;
  while (file >> word) {
    if (word == key) {
      file >> kib;
      return kib;
    }
  }
  return -1;
}

// The bracketed word of a transparent_hugepage sysfs file, or "?".
std::string ThpMode(const char* file_name) {
  std::ifstream file(std::string("/sys/kernel/mm/transparent_hugepage/") + file_name);
  std::string line;
  if (!std::getline(file, line)) return "?";
  const size_t open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos) return "?";
  return line.substr(open + 1, close - open - 1);
}

// Bytes of host memory of the kind --host-memory names (exits on a failure: a bench).
class HostBytes {
 public:
  // Whole 2 MiB pages, so that huge pages can map all of it.
  explicit HostBytes(size_t bytes) : bytes_((bytes + kHugePage - 1) / kHugePage * kHugePage) {
    const std::string& kind = g_host_memory;
    if (kind == "malloc") {
      data_ = std::aligned_alloc(64, bytes_);
      malloced_ = true;
    } else if (kind == "anon" || kind == "anon-thp") {
      data_ = Map(MAP_PRIVATE | MAP_ANONYMOUS, -1);
      Advise(kind == "anon" ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
    } else if (kind == "shm" || kind == "shm-thp") {
      const std::string name = "/ws-attention-bench-" + std::to_string(getpid());
      const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes_)) != 0) Fail("shm_open/ftruncate");
      shm_unlink(name.c_str());
      data_ = Map(MAP_SHARED, fd);
      close(fd);
      if (kind == "shm-thp") Advise(MADV_HUGEPAGE);
    } else if (kind == "memfd-thp") {
      const int fd = memfd_create("ws-attention-bench", 0);
      if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes_)) != 0) Fail("memfd_create/ftruncate");
      data_ = Map(MAP_SHARED, fd);
      close(fd);
      Advise(MADV_HUGEPAGE);
    } else {
      std::fprintf(stderr,
                   "--host-memory=%s: not one of malloc, anon, anon-thp, shm, shm-thp, memfd-thp\n",
                   kind.c_str());
      std::exit(2);
    }
    if (data_ == nullptr) Fail("allocation");
  }
  HostBytes(const HostBytes&) = delete;
  HostBytes& operator=(const HostBytes&) = delete;
  ~HostBytes() {
    if (malloced_) std::free(data_);
    else munmap(data_, bytes_);
  }
  void* data() const { return data_; }

 private:
  void* Map(int flags, int fd) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, flags, fd, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  void Advise(int advice) {
    if (madvise(data_, bytes_, advice) != 0) {
      std::fprintf(stderr, "madvise: %s\n", std::strerror(errno));
    }
  }
  [[noreturn]] static void Fail(const char* what) {
    std::fprintf(stderr, "--host-memory=%s: %s failed: %s\n", g_host_memory.c_str(), what,
                 std::strerror(errno));
    std::exit(1);
  }
  static constexpr size_t kHugePage = size_t{2} << 20;
  size_t bytes_;
  void* data_ = nullptr;
  bool malloced_ = false;
};

// A pool of random bf16 tiles, first-touched by the OpenMP threads that will read them.
class TilePool {
 public:
  TilePool(int64_t tile_values, double pool_gb, int64_t tiles_needed) : tile_values_(tile_values) {
    const int64_t max_tiles = std::max<int64_t>(1, static_cast<int64_t>(pool_gb * 1e9 / (tile_values * 2)));
    num_tiles_ = std::min(tiles_needed, max_tiles);
    const int64_t anon_before = SmapsRollupKib("AnonHugePages:");
    const int64_t shmem_before = SmapsRollupKib("ShmemPmdMapped:");
    memory_ = std::make_unique<HostBytes>(static_cast<size_t>(num_tiles_ * tile_values * 2));
    auto* data = static_cast<uint16_t*>(memory_->data());
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < num_tiles_; ++t) {
      uint64_t state = 0x9e3779b97f4a7c15ull * (t + 1);  // xorshift: cheap, good enough
      uint16_t* tile = data + t * tile_values_;
      for (int64_t i = 0; i < tile_values_; ++i) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        tile[i] = FloatToBf16(static_cast<float>(static_cast<int32_t>(state >> 40) - (1 << 23)) / (1 << 23));
      }
    }
    data_ = data;
    const int64_t huge_kib = (SmapsRollupKib("AnonHugePages:") - anon_before) +
                             (SmapsRollupKib("ShmemPmdMapped:") - shmem_before);
    std::printf("tile pool: %.2f GB, host memory %s, %.2f GB of it in huge pages (THP enabled=%s, "
                "shmem_enabled=%s)\n",
                num_tiles_ * tile_values * 2 / 1e9, g_host_memory.c_str(), huge_kib * 1024 / 1e9,
                ThpMode("enabled").c_str(), ThpMode("shmem_enabled").c_str());
  }
  const uint16_t* tile(int64_t i) const { return data_ + (i % num_tiles_) * tile_values_; }
  int64_t num_tiles() const { return num_tiles_; }

 private:
  int64_t tile_values_;
  int64_t num_tiles_ = 0;
  std::unique_ptr<HostBytes> memory_;
  const uint16_t* data_ = nullptr;
};

constexpr int32_t kBlockTokens = 256;

// The most tiles any point of the tables reads (batch x blocks of its tokens).
int64_t MaxTiles(const BenchOptions& options) {
  int64_t max_tiles = 0;
  for (int64_t t : options.tokens) {
    for (int32_t b : options.batches) {
      max_tiles = std::max(max_tiles, b * ((t + kBlockTokens - 1) / kBlockTokens));
    }
  }
  return max_tiles;
}

// `batch` sequences of `tokens` keys each, on consecutive tiles of the pool (sequence s on
// tiles s * blocks ...; the pool repeats its tiles past its size).
struct PoolSequences {
  PoolSequences(const TilePool& pool, int32_t batch, int64_t tokens)
      : pointers(batch), lists(batch) {
    const int64_t blocks = (tokens + kBlockTokens - 1) / kBlockTokens;
    for (int32_t s = 0; s < batch; ++s) {
      for (int64_t b = 0; b < blocks; ++b) pointers[s].push_back(pool.tile(s * blocks + b));
      lists[s].blocks = pointers[s].data();
      lists[s].num_blocks = static_cast<int32_t>(blocks);
      lists[s].last_block_tokens = static_cast<int32_t>(tokens - (blocks - 1) * kBlockTokens);
    }
  }
  std::vector<std::vector<const uint16_t*>> pointers;
  std::vector<KvBlockList> lists;
};

void RunCpuGqa(const BenchOptions& options) {
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  std::printf("\n== CPU GQA decode (%s, %d threads, ceiling %.0f GB/s) ==\n",
              CpuIsaName(DetectCpuIsa()), threads, options.dram_gbps);
  PrintGap();
  std::printf("%-8s %8s %6s %10s %10s %8s %9s\n", "model", "tokens", "batch", "ms", "GB/s", "%ceil",
              "GB/s/thr");
  g_clock_threads = threads;
  for (const std::string& name : options.models) {
    GqaModel model;
    if (!FindModel(name, &model)) {
      std::printf("unknown model %s\n", name.c_str());
      continue;
    }
    const GqaShape shape = BenchShape(model, kBlockTokens);
    const int64_t tile_values = TileValues(shape);
    const TilePool pool(tile_values, options.pool_gb, MaxTiles(options));
    for (int64_t tokens : options.tokens) {
      for (int32_t batch : options.batches) {
        const PoolSequences seqs(pool, batch, tokens);
        const std::vector<KvBlockList>& lists = seqs.lists;
        std::vector<uint16_t> q(int64_t{batch} * shape.num_q_heads * shape.head_dim, FloatToBf16(0.5f));
        std::vector<float> o(q.size()), lse(int64_t{batch} * shape.num_q_heads);
        const GqaDecodeArgs args{shape, batch, q.data(), lists.data(), o.data(), lse.data()};
        for (int32_t divisor : options.plan_divisors) {
          CpuAttentionOptions cpu_options;
          cpu_options.num_threads = threads;
          cpu_options.plan_divisor = divisor;
          const std::string label = options.plan_divisors.size() == 1
                                        ? model.name
                                        : absl::StrCat(model.name, "/d", divisor);
          // A call that fails at once would read as a fast kernel: the first is checked.
          if (const absl::Status status = CpuGqaDecode(args, cpu_options); !status.ok()) {
            std::printf("%-8s %8lld %6d   failed: %s\n", label.c_str(),
                        static_cast<long long>(tokens), batch, status.ToString().c_str());
            continue;
          }
          const double seconds =
              TimeIt(options.iters, [&] { (void)CpuGqaDecode(args, cpu_options); });
          const double bytes = double(batch) * tokens * 2 * shape.num_kv_heads * shape.head_dim * 2;
          const double gbps = bytes / seconds / 1e9;
          std::printf("%-8s %8lld %6d %10.3f %10.1f %7.0f%% %9.2f\n", label.c_str(),
                      static_cast<long long>(tokens), batch, seconds * 1e3, gbps,
                      100 * gbps / options.dram_gbps, gbps / threads);
        }
      }
    }
  }
}

void RunCpuMla(const BenchOptions& options) {
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  const MlaShape shape{16, 512, 64, kBlockTokens, 1.0f / std::sqrt(192.0f)};
  std::printf("\n== CPU MLA decode, DeepSeek-V2-Lite (16 heads, 512+64), %d threads ==\n", threads);
  PrintGap();
  std::printf("path: vector = our vector kernels; onednn = whole blocks through oneDNN bf16\n"
              "matmuls (AMX where the CPU has it); amx = our AMX tile kernel (where this process\n"
              "can use AMX; CpuAttentionOptions::mla_matmul)\n");
  // Without oneDNN's bf16 matmul the onednn path runs the vector kernels: no row of its own.
  const auto mm = cpu::MlaMatmul::Get(16, shape.row_dim(), shape.kv_lora_rank, kBlockTokens);
  if (mm.ok()) {
    std::printf("onednn's matmuls (scores / P V): %s\n", (*mm)->impl().c_str());
  } else {
    std::printf("onednn: no row (%s)\n", mm.status().ToString().c_str());
  }
  std::printf("%-7s %8s %6s %10s %10s %8s %10s %9s\n", "path", "tokens", "batch", "ms", "GB/s",
              "%ceil", "GFLOP/s", "GB/s/thr");
  g_clock_threads = threads;
  const int64_t tile_values = int64_t{kBlockTokens} * shape.row_dim();
  const TilePool pool(tile_values, options.pool_gb, MaxTiles(options));
  for (int64_t tokens : options.tokens) {
    for (int32_t batch : options.batches) {
      const PoolSequences seqs(pool, batch, tokens);
      const std::vector<KvBlockList>& lists = seqs.lists;
      std::vector<uint16_t> q(int64_t{batch} * shape.num_heads * shape.row_dim(), FloatToBf16(0.25f));
      std::vector<float> o(int64_t{batch} * shape.num_heads * shape.kv_lora_rank),
          lse(int64_t{batch} * shape.num_heads);
      const MlaDecodeArgs args{shape, batch, q.data(), lists.data(), o.data(), lse.data()};
      struct Path {
        std::string name;
        MlaMatmulMode mode;
        int32_t prefetch;
        int32_t divisor;
      };
      std::vector<Path> paths;
      for (int32_t divisor : options.plan_divisors) {
        const std::string suffix =
            options.plan_divisors.size() == 1 ? "" : absl::StrCat("/d", divisor);
        paths.push_back({"vector" + suffix, MlaMatmulMode::kOff, 0, divisor});
        if (mm.ok()) paths.push_back({"onednn" + suffix, MlaMatmulMode::kOneDnn, 0, divisor});
        if (!MlaAmxUsable()) continue;
        for (int32_t prefetch : options.mla_prefetch) {
          paths.push_back({(options.mla_prefetch.size() == 1 ? std::string("amx")
                                                             : absl::StrCat("amx-p", prefetch)) +
                               suffix,
                           MlaMatmulMode::kAmx, prefetch, divisor});
        }
      }
      for (const Path& path_entry : paths) {
        const char* path = path_entry.name.c_str();
        CpuAttentionOptions cpu_options;
        cpu_options.num_threads = threads;
        cpu_options.mla_matmul = path_entry.mode;
        cpu_options.mla_amx_prefetch_steps = path_entry.prefetch;
        cpu_options.plan_divisor = path_entry.divisor;
        if (const absl::Status status = CpuMlaDecode(args, cpu_options); !status.ok()) {
          std::printf("%-7s %8lld %6d   failed: %s\n", path, static_cast<long long>(tokens), batch,
                      status.ToString().c_str());
          continue;
        }
        const double seconds =
            TimeIt(options.iters, [&] { (void)CpuMlaDecode(args, cpu_options); });
        const double bytes = double(batch) * tokens * shape.row_dim() * 2;
        const double flops =
            2.0 * batch * tokens * shape.num_heads * (shape.row_dim() + shape.kv_lora_rank);
        const double gbps = bytes / seconds / 1e9;
        std::printf("%-7s %8lld %6d %10.3f %10.1f %7.0f%% %10.1f %9.2f\n",
                    path, static_cast<long long>(tokens), batch,
                    seconds * 1e3, gbps, 100 * gbps / options.dram_gbps, flops / seconds / 1e9,
                    gbps / threads);
      }
    }
  }
}

void RunCpuMerge(const BenchOptions& options) {
  std::printf("\n== CPU merge of two partials (per layer step) ==\n");
  std::printf("%6s %6s %6s %10s\n", "batch", "heads", "dim", "us");
  for (int32_t batch : options.batches) {
    for (auto [heads, dim] : {std::pair{32, 128}, std::pair{16, 512}}) {
      const int64_t rows = int64_t{batch} * heads;
      std::vector<float> oa(rows * dim, 0.1f), ob(rows * dim, 0.2f), la(rows, 1.0f), lb(rows, 2.0f);
      const double seconds = TimeIt(std::max(options.iters, 20), [&] {
        MergeStates({oa.data(), la.data()}, {ob.data(), lb.data()}, {oa.data(), la.data()}, rows, dim);
      });
      std::printf("%6d %6d %6d %10.2f\n", batch, heads, dim, seconds * 1e6);
    }
  }
}

template <typename T>
bool ParseList(const char* text, std::vector<T>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t value;
    if (!absl::SimpleAtoi(part, &value)) return false;
    out->push_back(static_cast<T>(value));
  }
  return !out->empty();
}

int Main(int argc, char** argv) {
  BenchOptions options;
  double cpu_beside_h2d_gb = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* prefix) -> const char* {
      const size_t n = std::strlen(prefix);
      return arg.compare(0, n, prefix) == 0 ? argv[i] + n : nullptr;
    };
    bool ok = true;
    if (const char* v = value("--tokens=")) ok = ParseList(v, &options.tokens);
    else if (const char* v = value("--batch=")) ok = ParseList(v, &options.batches);
    else if (const char* v = value("--models=")) options.models = absl::StrSplit(v, ',');
    else if (const char* v = value("--threads=")) ok = absl::SimpleAtoi(v, &options.threads);
    else if (const char* v = value("--iters=")) ok = absl::SimpleAtoi(v, &options.iters);
    else if (const char* v = value("--dram-gbps=")) ok = absl::SimpleAtod(v, &options.dram_gbps);
    else if (const char* v = value("--hbm-gbps=")) ok = absl::SimpleAtod(v, &options.hbm_gbps);
    else if (const char* v = value("--pool-gb=")) ok = absl::SimpleAtod(v, &options.pool_gb);
    else if (const char* v = value("--gpu-pool-gb=")) ok = absl::SimpleAtod(v, &options.gpu_pool_gb);
    else if (const char* v = value("--gpu-warmup-ms=")) {
      ok = absl::SimpleAtod(v, &options.gpu_warmup_ms) && options.gpu_warmup_ms >= 0;
    }
    else if (const char* v = value("--mla-prefetch=")) ok = ParseList(v, &options.mla_prefetch);
    else if (const char* v = value("--cpu-plan-divisor=")) {
      ok = ParseList(v, &options.plan_divisors) &&
           std::all_of(options.plan_divisors.begin(), options.plan_divisors.end(),
                       [](int32_t d) { return d >= 1; });
    }
    else if (const char* v = value("--gap-us=")) ok = absl::SimpleAtoi(v, &g_gap_us) && g_gap_us >= 0;
    else if (const char* v = value("--host-memory=")) {
      g_host_memory = v;
      ok = g_host_memory == "malloc" || g_host_memory == "anon" || g_host_memory == "anon-thp" ||
           g_host_memory == "shm" || g_host_memory == "shm-thp" || g_host_memory == "memfd-thp";
    }
    else if (arg == "--clock=cpu") g_cpu_clock = true;
    else if (arg == "--clock=wall") g_cpu_clock = false;
    else if (const char* v = value("--cpu-beside-h2d-gb=")) {
      ok = absl::SimpleAtod(v, &cpu_beside_h2d_gb) && cpu_beside_h2d_gb >= 0;
    }
    else if (arg == "--no-cpu") options.cpu = false;
    else if (arg == "--no-mla") options.mla = false;
    else if (arg == "--no-cuda") options.cuda = false;
    else if (arg == "--no-gqa") options.gqa = false;
    else if (arg == "--no-merge") options.merge = false;
    else if (arg == "--no-logits") options.logits = false;
    else if (arg == "--no-prefill") options.prefill = false;
    else if (arg == "--no-overlap") options.overlap = false;
    else if (arg == "--no-floors") options.floors = false;
    else if (arg == "--gqa-splits") options.gqa_splits = true;
    else if (arg == "--timeline") options.timeline = true;
    else if (arg == "--flush=stream") options.flush_cached = false;
    else if (arg == "--flush=cached") options.flush_cached = true;
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "bad argument %s (see the comment at the top of attention_bench.cc)\n", argv[i]);
      return 2;
    }
  }
  {
    // --cpu-beside-h2d-gb: the CPU tables with the copy engine reading host memory meanwhile.
    std::unique_ptr<HostCopyLoad> load;
    if (options.cpu && cpu_beside_h2d_gb > 0) {
      load = HostCopyLoad::Start(static_cast<size_t>(cpu_beside_h2d_gb * (1 << 30)));
      std::printf("\n== the CPU tables beside pinned H2D copies of %.2f GiB back to back: %s ==\n",
                  cpu_beside_h2d_gb, load ? "running" : "not available (no CUDA device)");
    }
    if (options.cpu && options.gqa) RunCpuGqa(options);
    if (options.cpu && options.mla) RunCpuMla(options);
    if (load) std::printf("\n(the copies beside the CPU tables ran at %.1f GB/s)\n", load->Stop());
  }
  if (options.cpu && options.merge) RunCpuMerge(options);
  if (options.cuda) RunCudaBenchmarks(options);
  return 0;
}

}  // namespace
}  // namespace writescope::kernels::bench

int main(int argc, char** argv) { return writescope::kernels::bench::Main(argc, argv); }
