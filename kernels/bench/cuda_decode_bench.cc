// CUDA part of the attention benchmark: split-KV decode over a packed ping-pong buffer
// plus a half-full D-window, the overlap of the next layer's H2D copy with it, and the
// CPU+GPU partial merge; causal chunked prefill, GQA and MLA (FLOP/s against the dense bf16
// rate).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/bench/bench_common.h"
#include "kernels/bench/bench_kernels.h"
#include "kernels/bf16.h"
#include "kernels/cuda/cuda_attention.h"
#include "kernels/cuda/cuda_logits.h"
#include "kernels/cuda/launch.h"

namespace writescope::kernels::bench {
namespace {

constexpr int32_t kBlockTokens = 256;
constexpr int32_t kWindow = 256;
constexpr int32_t kWindowTokens = 128;

#define BENCH_CUDA(expr)                                                              \
  do {                                                                                \
    const cudaError_t err_ = (expr);                                                  \
    if (err_ != cudaSuccess) {                                                        \
      std::printf("CUDA error %s at %s\n", cudaGetErrorString(err_), #expr);          \
      return;                                                                         \
    }                                                                                 \
  } while (0)

struct DeviceMemory {
  void* ptr = nullptr;
  explicit DeviceMemory(size_t bytes) {
    if (cudaMalloc(&ptr, std::max<size_t>(bytes, 256)) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceMemory() {
    if (ptr) cudaFree(ptr);
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr); }
};

// 256 MiB read between timed runs: evicts the L2 (50 MB on the H100 and H200) with clean
// lines (a write would leave it dirty, and the timed run would pay the write-back), so every
// timed run reads its K/V from HBM; it also keeps the stream busy while the host enqueues
// `fn`.
constexpr size_t kFlushBytes = size_t{256} << 20;
constexpr int kReadBlocks = 132 * 8;
void* g_flush = nullptr;
unsigned* g_sink = nullptr;  // [kReadBlocks]

// The flush's loads keep their lines at normal priority unless --flush=stream (see
// attention_bench.cc): streaming loads let the L2 keep lines of the timed call before.
bool g_flush_cached = true;
void FlushL2() {
  if (g_flush != nullptr) {
    (void)LaunchReadAll(g_flush, kFlushBytes, g_sink, kReadBlocks, nullptr, g_flush_cached);
  }
}

// The GPU time of `fn`'s work (which enqueues on the default stream): median of iters,
// each with a cold L2 and queued behind the flush, so the host's launch latency is not
// counted (as in the gpu_worker, whose decode launches are queued behind the wait for
// their layer's tiles). Kernel-to-kernel gaps inside `fn` are counted. With
// `from_idle_stream` the stream is drained first: one call as a caller that waits for
// each call sees it, the host's launch latency included.
// Before the timed runs, `fn` runs (each behind a flush) for at least g_warmup_ms and at
// least once. With one untimed call only (--gpu-warmup-ms=0), the first column of a row,
// timed right after the row's buffers were allocated and filled, read 5-13 % slow at 7 of
// 24 GQA points (run 167; the SM clock read 1980 MHz throughout, the cause is not found).
double g_warmup_ms = 50;  // --gpu-warmup-ms
template <typename Fn>
double TimeGpu(int iters, Fn fn, bool from_idle_stream = false) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const auto warmup_end =
      std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(g_warmup_ms);
  do {
    if (g_warmup_ms > 0) FlushL2();
    fn();
    cudaDeviceSynchronize();
  } while (std::chrono::steady_clock::now() < warmup_end);
  std::vector<double> times;
  for (int i = 0; i < std::max(iters, 5); ++i) {
    FlushL2();
    if (from_idle_stream) cudaDeviceSynchronize();
    cudaEventRecord(start);
    fn();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return Median(std::move(times));
}

// TimeGpu of one `decode()` call (returning absl::Status), or 0 where a first, checked call
// fails (its status in *failure, if given): the timed calls' statuses are not read, and a call
// that fails at once would read as a fast kernel.
template <typename Decode>
double TimeCheckedDecode(int iters, Decode decode, absl::Status* failure) {
  absl::Status status = decode();
  if (status.ok() && cudaDeviceSynchronize() != cudaSuccess) {
    status = absl::InternalError(cudaGetErrorString(cudaGetLastError()));
  }
  if (!status.ok()) {
    if (failure != nullptr) *failure = status;
    return 0;
  }
  return TimeGpu(iters, [&] { (void)decode(); });
}
double TimeGqaDecode(int iters, const cuda::GqaGpuDecodeArgs& args,
                     absl::Status* failure = nullptr) {
  return TimeCheckedDecode(
      iters, [&] { return cuda::GqaGpuDecode(args, nullptr); }, failure);
}
double TimeMlaDecode(int iters, const cuda::MlaGpuDecodeArgs& args,
                     absl::Status* failure = nullptr) {
  return TimeCheckedDecode(
      iters, [&] { return cuda::MlaGpuDecode(args, nullptr); }, failure);
}

// In a row: kRowLayers calls queued back to back behind one flush, call l over its own copy of
// the bytes (`layer(l)` enqueues it and returns its status), timed as one and divided by
// kRowLayers. A step's layers run so: each layer's decode follows the layer's other kernels on
// the stream, with no event pair around it, and reads its own layer's K/V from HBM. 0 where a
// first, checked pass fails.
constexpr int kRowLayers = 8;
template <typename Layer>
double TimeInARow(int iters, Layer layer) {
  for (int l = 0; l < kRowLayers; ++l) {
    if (!layer(l).ok()) return 0;
  }
  if (cudaDeviceSynchronize() != cudaSuccess) return 0;
  return TimeGpu(iters,
                 [&] {
                   for (int l = 0; l < kRowLayers; ++l) (void)layer(l);
                 }) /
         kRowLayers;
}

// The host's time to enqueue one call of a row (`layer(l)` as in TimeInARow), median of iters:
// where it is as long as the row's GPU time per call, the GPU waited for the host and the row
// timed the launches, not the kernels.
template <typename Layer>
double HostTimeInARow(int iters, Layer layer) {
  std::vector<double> times;
  for (int i = 0; i < std::max(iters, 5); ++i) {
    FlushL2();
    const auto start = std::chrono::steady_clock::now();
    for (int l = 0; l < kRowLayers; ++l) (void)layer(l);
    const auto stop = std::chrono::steady_clock::now();
    cudaDeviceSynchronize();
    times.push_back(std::chrono::duration<double>(stop - start).count() / kRowLayers);
  }
  return Median(std::move(times));
}

// kRowLayers copies of a point's tiles and window, each filled as the point's (0x3c), for
// TimeInARow; `ok` false where they do not fit the GPU (the columns then print "-").
struct RowCopies {
  RowCopies(size_t tile_bytes, size_t window_bytes)
      : tile_bytes(tile_bytes),
        window_bytes(window_bytes),
        tiles(kRowLayers * tile_bytes),
        window(kRowLayers * window_bytes) {
    ok = tiles.ptr != nullptr && window.ptr != nullptr;
    if (!ok) {
      (void)cudaGetLastError();  // the failed allocation's error, not a later call's
      return;
    }
    BENCH_CUDA(cudaMemset(tiles.ptr, 0x3c, kRowLayers * tile_bytes));
    BENCH_CUDA(cudaMemset(window.ptr, 0x3c, kRowLayers * window_bytes));
  }
  const uint16_t* tiles_of(int layer) const {
    return reinterpret_cast<const uint16_t*>(tiles.as<const char>() + layer * tile_bytes);
  }
  const uint16_t* window_of(int layer) const {
    return reinterpret_cast<const uint16_t*>(window.as<const char>() + layer * window_bytes);
  }
  size_t tile_bytes, window_bytes;
  DeviceMemory tiles, window;
  bool ok = false;
};

// Where a batch-1 call's time goes, from the stamps of bulk4's CTAs (cuda_attention.h
// GqaGpuDecodeArgs::timeline) and of a one-thread kernel before and after the call, all
// µs after the mark before; medians over the iterations of each figure.
struct Timeline {
  std::string model;
  int64_t tokens = 0;
  int ctas = 0;
  double granularity_ns = 0;               // the smallest step seen between two different stamps
  double read = 0;                         // a plain read of the tiles between the two marks
  double marks = 0;                        // the two marks back to back
  double start_first = 0, start_last = 0;  // the CTAs' starts
  double first_data = 0;                   // a CTA's start to its first stage, median
  double loop_min = 0, loop_med = 0, loop_max = 0;  // the CTAs' loop ends
  double end_max = 0;                               // the last CTA's end
  double epilogue = 0;                              // a CTA's loop end to its end, median
  double after = 0;  // the mark after the call (the split merge ran between)
  bool ok = false;
};

// `args` a bulk-copy decode of one sequence over `tiles` (tile_bytes of them).
Timeline TimelineOf(const std::string& model, int64_t tokens, const DeviceMemory& tiles,
                    size_t tile_bytes, cuda::GqaGpuDecodeArgs args, int iters) {
  Timeline t;
  t.model = model;
  t.tokens = tokens;
  // Room for the widest plan: 64-token splits.
  const int64_t slots = (tokens / 64 + 2) * args.shape.num_kv_heads * args.num_seqs;
  const size_t stamp_bytes = slots * cuda::kGpuTimelineStamps * sizeof(uint64_t);
  DeviceMemory timeline(stamp_bytes), marks(2 * sizeof(unsigned long long));
  if (!timeline.ptr || !marks.ptr) return t;
  args.timeline = timeline.as<uint64_t>();
  unsigned long long* const mark = marks.as<unsigned long long>();
  std::vector<uint64_t> stamps(slots * cuda::kGpuTimelineStamps);
  unsigned long long host_marks[2];
  std::vector<double> read, back_to_back, start_first, start_last, first_data, loop_min, loop_med,
      loop_max, end_max, epilogue, after;
  uint64_t granularity = UINT64_MAX;
  constexpr int kWarmup = 3;
  // Behind a flush: a mark, `enqueue()`'s work (false: it failed), a mark; host_marks then hold
  // the two marks. False where any step failed.
  auto between_marks = [&](auto enqueue) {
    FlushL2();
    (void)LaunchStamp(mark, nullptr);
    if (!enqueue()) return false;
    (void)LaunchStamp(mark + 1, nullptr);
    return cudaMemcpy(host_marks, mark, sizeof(host_marks), cudaMemcpyDeviceToHost) == cudaSuccess;
  };
  auto marks_us = [&] { return (host_marks[1] - host_marks[0]) * 1e-3; };
  for (int i = 0; i < kWarmup + std::max(iters, 5); ++i) {
    // The two marks alone, and around a plain read of the same bytes.
    if (!between_marks([] { return true; })) return t;
    const double alone_us = marks_us();
    if (!between_marks([&] {
          (void)LaunchReadAll(tiles.ptr, tile_bytes, g_sink, kReadBlocks, nullptr);
          return true;
        })) {
      return t;
    }
    const double read_us = marks_us();
    // The call.
    if (cudaMemset(timeline.ptr, 0, stamp_bytes) != cudaSuccess ||
        !between_marks([&] { return cuda::GqaGpuDecode(args, nullptr).ok(); }) ||
        cudaMemcpy(stamps.data(), timeline.ptr, stamp_bytes, cudaMemcpyDeviceToHost) !=
            cudaSuccess) {
      return t;
    }
    if (i < kWarmup) continue;
    const uint64_t t0 = host_marks[0];
    auto us = [&](uint64_t stamp) { return (double(stamp) - double(t0)) * 1e-3; };
    std::vector<double> starts, loops, ends, data, epis;
    std::vector<uint64_t> all = {host_marks[0], host_marks[1]};
    for (int64_t c = 0; c < slots; ++c) {
      const uint64_t* s = &stamps[c * cuda::kGpuTimelineStamps];
      if (s[cuda::kStampStart] == 0) continue;  // not a CTA of this plan
      starts.push_back(us(s[cuda::kStampStart]));
      loops.push_back(us(s[cuda::kStampLoopEnd]));
      ends.push_back(us(s[cuda::kStampEnd]));
      if (s[cuda::kStampFirstData] != 0) {
        data.push_back((double(s[cuda::kStampFirstData]) - double(s[cuda::kStampStart])) * 1e-3);
      }
      epis.push_back((double(s[cuda::kStampEnd]) - double(s[cuda::kStampLoopEnd])) * 1e-3);
      all.insert(all.end(), s, s + cuda::kGpuTimelineStamps);
    }
    if (starts.empty()) return t;
    t.ctas = static_cast<int>(starts.size());
    std::sort(all.begin(), all.end());
    for (size_t j = 1; j < all.size(); ++j) {
      if (all[j] > all[j - 1] && all[j - 1] != 0)
        granularity = std::min(granularity, all[j] - all[j - 1]);
    }
    back_to_back.push_back(alone_us);
    read.push_back(read_us);
    start_first.push_back(*std::min_element(starts.begin(), starts.end()));
    start_last.push_back(*std::max_element(starts.begin(), starts.end()));
    first_data.push_back(Median(data));
    loop_min.push_back(*std::min_element(loops.begin(), loops.end()));
    loop_med.push_back(Median(loops));
    loop_max.push_back(*std::max_element(loops.begin(), loops.end()));
    end_max.push_back(*std::max_element(ends.begin(), ends.end()));
    epilogue.push_back(Median(epis));
    after.push_back(us(host_marks[1]));
  }
  t.granularity_ns = granularity == UINT64_MAX ? 0 : double(granularity);
  t.read = Median(read);
  t.marks = Median(back_to_back);
  t.start_first = Median(start_first);
  t.start_last = Median(start_last);
  t.first_data = Median(first_data);
  t.loop_min = Median(loop_min);
  t.loop_med = Median(loop_med);
  t.loop_max = Median(loop_max);
  t.end_max = Median(end_max);
  t.epilogue = Median(epilogue);
  t.after = Median(after);
  t.ok = true;
  return t;
}

void PrintTimelines(const std::vector<Timeline>& timelines) {
  std::printf(
      "\n== CUDA GQA decode at batch 1: bulk4's CTAs on a timeline (us after a mark) ==\n"
      "A one-thread kernel stamps %%globaltimer before and after each call, and every CTA of\n"
      "b4_inl's decode stamps its start, its first stage landed, its loop's end and its end\n"
      "(cuda_attention.h GqaGpuDecodeArgs::timeline); medians over the iterations. res_ns: the\n"
      "smallest step seen between two different stamps; marks: the two marks back to back;\n"
      "read: a plain read of the tiles between them; data: a CTA's start to its first stage\n"
      "(median over CTAs); epi: a CTA's loop end to its end (median); tail: after - end_max,\n"
      "the split merge and the next kernel's start\n");
  std::printf("%-8s %8s %5s %6s %6s %6s %7s %7s %6s %7s %7s %7s %7s %6s %7s %6s\n", "model",
              "tokens", "ctas", "res_ns", "marks", "read", "start0", "start1", "data", "loop0",
              "loop50", "loop1", "end_max", "epi", "after", "tail");
  for (const Timeline& t : timelines) {
    if (!t.ok) {
      std::printf("%-8s %8lld failed\n", t.model.c_str(), static_cast<long long>(t.tokens));
      continue;
    }
    std::printf(
        "%-8s %8lld %5d %6.0f %6.1f %6.1f %7.2f %7.2f %6.2f %7.1f %7.1f %7.1f %7.1f %6.2f %7.1f "
        "%6.1f\n",
        t.model.c_str(), static_cast<long long>(t.tokens), t.ctas, t.granularity_ns, t.marks,
        t.read, t.start_first, t.start_last, t.first_data, t.loop_min, t.loop_med, t.loop_max,
        t.end_max, t.epilogue, t.after, t.after - t.end_max);
  }
}

// " %8.4f" of `seconds` in ms, or " %8s" of "failed" where it is 0 (a call that failed).
void PrintMsOrFailed(double seconds) {
  if (seconds > 0) {
    std::printf(" %8.4f", seconds * 1e3);
  } else {
    std::printf(" %8s", "failed");
  }
}

// The benches' KV: `num_seqs` sequences of `tokens` keys each, the last kWindowTokens of
// them in the window (slot s for sequence s), the rest in ceil(/ kBlockTokens) packed tiles
// each: sequence s owns tiles [s * blocks, (s + 1) * blocks) of `tiles`. Uploads the
// per-sequence tables; `source` points at them. `host_lists` are their host copies
// (cuda_attention.h HostSeqLists), which `source` leaves out.
class PackedKv {
 public:
  PackedKv(const DeviceMemory& tiles, const DeviceMemory& window, int32_t num_seqs, int64_t tokens)
      : begin_((num_seqs + 1) * 4), last_(num_seqs * 4), window_tokens_(num_seqs * 4) {
    const int64_t tile_tokens = tokens - kWindowTokens;
    const int64_t blocks = (tile_tokens + kBlockTokens - 1) / kBlockTokens;
    begin_host_.resize(num_seqs + 1);
    window_tokens_host_.assign(num_seqs, kWindowTokens);
    last_host_.assign(num_seqs, static_cast<int32_t>(tile_tokens - (blocks - 1) * kBlockTokens));
    for (int32_t s = 0; s <= num_seqs; ++s) begin_host_[s] = static_cast<int32_t>(s * blocks);
    BENCH_CUDA(
        cudaMemcpy(begin_.ptr, begin_host_.data(), (num_seqs + 1) * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(last_.ptr, last_host_.data(), num_seqs * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(window_tokens_.ptr, window_tokens_host_.data(), num_seqs * 4,
                          cudaMemcpyHostToDevice));
    host_lists.tile_begin = begin_host_.data();
    host_lists.last_tile_tokens = last_host_.data();
    host_lists.window_tokens = window_tokens_host_.data();
    source.tiles = tiles.as<const uint16_t>();
    source.seq_tile_begin = begin_.as<const int32_t>();
    source.seq_last_tile_tokens = last_.as<const int32_t>();
    source.window = window.as<const uint16_t>();
    source.window_capacity = kWindow;
    source.seq_window_tokens = window_tokens_.as<const int32_t>();
    source.max_seq_tokens = static_cast<int32_t>(tokens);
  }

  cuda::GpuKvSource source;
  cuda::HostSeqLists host_lists;

 private:
  DeviceMemory begin_, last_, window_tokens_;
  std::vector<int32_t> begin_host_, last_host_, window_tokens_host_;
};

// Where a small-batch decode's time goes (batch 1, the sizes of --tokens): a plain read of
// the same bytes (the size-matched ceiling: one launch, the same ramp and tail), the
// decode as planned, the same with only a 128-token window (what a call costs besides
// reading K/V), the split merge alone, and fixed split sizes; bulk4's two calls again with
// the lists in the launch's parameters. GPU time, queued, cold L2.
void RunGqaAnatomy(const BenchOptions& options) {
  std::printf("\n== CUDA GQA decode at batch 1: where the time goes (us) ==\n");
  std::printf(
      "decode, window, s256-s4096: the register kernel; bulk4, b4_window: decode and\n"
      "window as the bulk-copy kernel (the service's default) with its own splits;\n"
      "b4_inl, b4w_inl: the same two with the sequence's lists in the kernel's parameters\n"
      "(cuda_attention.h HostSeqLists) instead of device memory; read_row, b4_row: read and\n"
      "b4_inl per call of %d queued back to back, each over its own copy of the bytes (a\n"
      "step's layers: no event pair around each call), and b4_row's GB/s; gap_row: a one-CTA\n"
      "empty kernel in a row; b4_gap: that kernel, then b4_row's call (as a step's decode\n"
      "follows other kernels, not the last layer's split merge); host_row: the host's time to\n"
      "enqueue one of b4_row's calls\n",
      kRowLayers);
  std::printf(
      "%-8s %8s %7s %8s %9s %8s %8s %8s %8s %8s %8s %8s %8s %8s %9s %8s %8s %8s %8s %9s %8s %8s "
      "%8s\n",
      "model", "tokens", "splits", "read", "read_GB/s", "decode", "window", "merge", "s256", "s512",
      "s1024", "s2048", "s4096", "bulk4", "b4_window", "b4_inl", "b4w_inl", "read_row", "b4_row",
      "row_GB/s", "gap_row", "b4_gap", "host_row");
  std::vector<Timeline> timelines;  // --timeline's, printed after the table
  for (const std::string& name : options.models) {
    GqaModel model;
    if (!FindModel(name, &model)) continue;
    const GqaShape shape = BenchShape(model, kBlockTokens);
    const int64_t tile_values = TileValues(shape);
    for (int64_t tokens : options.tokens) {
      const int64_t tile_tokens = tokens - kWindowTokens;
      const int64_t blocks = (tile_tokens + kBlockTokens - 1) / kBlockTokens;
      const size_t tile_bytes = static_cast<size_t>(blocks * tile_values * 2);
      DeviceMemory tiles(tile_bytes), window(2 * shape.num_kv_heads * kWindow * shape.head_dim * 2);
      const int64_t rows = shape.num_q_heads;
      DeviceMemory q(rows * shape.head_dim * 2), o(rows * shape.head_dim * 4), lse(rows * 4);
      if (!tiles.ptr || !window.ptr) continue;
      BENCH_CUDA(cudaMemset(tiles.ptr, 0x3c, tile_bytes));
      BENCH_CUDA(cudaMemset(window.ptr, 0x3c, 2 * shape.num_kv_heads * kWindow * shape.head_dim * 2));
      BENCH_CUDA(cudaMemset(q.ptr, 0x3c, rows * shape.head_dim * 2));
      const PackedKv kv(tiles, window, 1, tokens);
      cuda::GqaGpuDecodeArgs args;
      args.shape = shape;
      args.num_seqs = 1;
      args.q = q.as<const uint16_t>();
      args.kv = kv.source;
      args.o = o.as<float>();
      args.lse = lse.as<float>();
      args.split.gqa_kernel = cuda::GqaDecodeKernel::kRegisters;
      // The largest workspace of the variants below: 64-token splits, the shortest any of them
      // plans (bulk4 at short contexts) or is given (s256 and up).
      cuda::GqaGpuDecodeArgs widest = args;
      widest.split.tokens_per_split = 64;
      DeviceMemory workspace(cuda::GqaGpuDecodeWorkspaceBytes(widest));
      args.workspace = workspace.ptr;
      args.workspace_bytes = cuda::GqaGpuDecodeWorkspaceBytes(widest);
      auto us = [&](auto fn) { return TimeGpu(options.iters, fn) * 1e6; };
      const double read = us([&] {
        (void)LaunchReadAll(tiles.ptr, tile_bytes, g_sink, kReadBlocks, nullptr);
      });
      const double decode = us([&] { (void)cuda::GqaGpuDecode(args, nullptr); });
      const int32_t per_auto = cuda::internal::SplitTokens(
          cuda::internal::kGqaTensorCoreSplits, static_cast<int32_t>(tokens), shape.num_kv_heads,
          cuda::internal::SmCount(), 1024);
      const int32_t splits_auto = (static_cast<int32_t>(tokens) + per_auto - 1) / per_auto;
      const double merge = us([&] {
        (void)cuda::internal::LaunchMergeSplits(
            static_cast<const float*>(workspace.ptr),
            static_cast<const float*>(workspace.ptr) + int64_t{splits_auto} * rows * shape.head_dim,
            splits_auto, rows, shape.head_dim, o.as<float>(), lse.as<float>(), nullptr);
      });
      cuda::GqaGpuDecodeArgs window_only = args;
      window_only.kv.seq_tile_begin = nullptr;
      window_only.kv.max_seq_tokens = kWindowTokens;
      const double window_us = us([&] { (void)cuda::GqaGpuDecode(window_only, nullptr); });
      std::printf("%-8s %8lld %7d %8.1f %9.0f %8.1f %8.1f %8.1f", model.name.c_str(),
                  static_cast<long long>(tokens), splits_auto, read, tile_bytes / read / 1e3,
                  decode, window_us, merge);
      for (int32_t per : {256, 512, 1024, 2048, 4096}) {
        cuda::GqaGpuDecodeArgs fixed = args;
        fixed.split.tokens_per_split = per;
        std::printf(" %8.1f", us([&] { (void)cuda::GqaGpuDecode(fixed, nullptr); }));
      }
      // A decode's and a window-only call's µs, both "failed" where either call fails.
      auto print_pair = [&](const cuda::GqaGpuDecodeArgs& decode,
                            const cuda::GqaGpuDecodeArgs& window, int window_width) {
        const double decode_us = TimeGqaDecode(options.iters, decode) * 1e6;
        const double window_call_us = TimeGqaDecode(options.iters, window) * 1e6;
        if (decode_us > 0 && window_call_us > 0) {
          std::printf(" %8.1f %*.1f", decode_us, window_width, window_call_us);
        } else {
          std::printf(" %8s %*s", "failed", window_width, "failed");
        }
      };
      // The bulk kernel plans its own splits (1 CTA per SM): the widest workspace above holds
      // them.
      cuda::GqaGpuDecodeArgs bulk = args, bulk_window = window_only;
      bulk.split.gqa_kernel = bulk_window.split.gqa_kernel = cuda::GqaDecodeKernel::kBulk4;
      print_pair(bulk, bulk_window, 9);
      cuda::GqaGpuDecodeArgs bulk_inline = bulk, bulk_window_inline = bulk_window;
      bulk_inline.kv.host = bulk_window_inline.kv.host = kv.host_lists;
      bulk_window_inline.kv.host.tile_begin = bulk_window_inline.kv.host.last_tile_tokens = nullptr;
      bulk_window_inline.kv.seq_last_tile_tokens = nullptr;
      print_pair(bulk_inline, bulk_window_inline, 8);
      const size_t window_bytes = 2 * shape.num_kv_heads * kWindow * shape.head_dim * 2;
      const RowCopies copies(tile_bytes, window_bytes);
      const double read_row = copies.ok
                                  ? TimeInARow(options.iters,
                                               [&](int l) {
                                                 (void)LaunchReadAll(copies.tiles_of(l), tile_bytes,
                                                                     g_sink, kReadBlocks, nullptr);
                                                 return absl::OkStatus();
                                               })
                                  : 0;
      auto b4_layer = [&](int l) {
        cuda::GqaGpuDecodeArgs layer = bulk_inline;
        layer.kv.tiles = copies.tiles_of(l);
        layer.kv.window = copies.window_of(l);
        return cuda::GqaGpuDecode(layer, nullptr);
      };
      const double b4_row = copies.ok ? TimeInARow(options.iters, b4_layer) : 0;
      auto print_row = [&](double row) {
        if (row > 0) {
          std::printf(" %8.1f", row * 1e6);
        } else {
          std::printf(" %8s", copies.ok ? "failed" : "-");
        }
      };
      print_row(read_row);
      print_row(b4_row);
      // The bytes a decode reads: the tiles and the window's 128 tokens.
      const double kv_bytes = double(tokens) * 2 * shape.num_kv_heads * shape.head_dim * 2;
      if (b4_row > 0) {
        std::printf(" %9.0f", kv_bytes / b4_row / 1e9);
      } else {
        std::printf(" %9s", "-");
      }
      // A step's decode follows the layer's other kernels, not the last layer's split merge:
      // gap_row is a one-CTA empty kernel in a row, b4_gap the same kernel then b4_row's call.
      auto gap = [] {
        return LaunchEmpty(g_sink, 1, 32, nullptr) == 0
                   ? absl::OkStatus()
                   : absl::InternalError("the empty kernel's launch failed");
      };
      const double gap_row = TimeInARow(options.iters, [&](int) { return gap(); });
      const double b4_gap = copies.ok ? TimeInARow(options.iters,
                                                   [&](int l) {
                                                     const absl::Status launched = gap();
                                                     if (!launched.ok()) return launched;
                                                     return b4_layer(l);
                                                   })
                                      : 0;
      const double host_row = copies.ok ? HostTimeInARow(options.iters, b4_layer) : 0;
      print_row(gap_row);
      print_row(b4_gap);
      print_row(host_row);
      std::printf("\n");
      BENCH_CUDA(cudaGetLastError());
      if (options.timeline) {
        timelines.push_back(
            TimelineOf(model.name, tokens, tiles, tile_bytes, bulk_inline, options.iters));
      }
    }
  }
  if (options.timeline) PrintTimelines(timelines);
}

void RunGqa(const BenchOptions& options) {
  std::printf("\n== CUDA GQA decode: ping-pong tiles + %d-token D-window (ceiling %.0f GB/s) ==\n",
              kWindowTokens, options.hbm_gbps);
  std::printf(
      "ms: the register kernel's GPU time, queued, cold L2; call_ms: one call from an\n"
      "idle stream (the host's launch latency included); bulk4 (the service's default),\n"
      "bulk3x2: as ms, for the kernels that stage K/V by bulk copies (kernels/cuda/launch.h\n"
      "GqaKernel), each with its own planned splits, and their %%ceil%s\n",
      options.gqa_splits ? ";\nb4_s64..b4_s2048 (--gqa-splits): bulk4 at fixed split sizes" : "");
  std::printf("%-8s %8s %6s %10s %10s %8s %10s %10s %6s %10s %6s", "model", "tokens", "batch", "ms",
              "GB/s", "%ceil", "call_ms", "bulk4", "%ceil", "bulk3x2", "%ceil");
  constexpr int32_t kBulkSplits[] = {64, 128, 256, 512, 1024, 2048};  // --gqa-splits' columns
  if (options.gqa_splits) {
    for (int32_t per : kBulkSplits) std::printf(" %7s%-4d", "b4_s", per);
  }
  std::printf("\n");
  for (const std::string& name : options.models) {
    GqaModel model;
    if (!FindModel(name, &model)) continue;
    const GqaShape shape = BenchShape(model, kBlockTokens);
    const int64_t tile_values = TileValues(shape);
    for (int64_t tokens : options.tokens) {
      for (int32_t batch : options.batches) {
        const int64_t tile_tokens = tokens - kWindowTokens;
        const int64_t blocks = (tile_tokens + kBlockTokens - 1) / kBlockTokens;
        // Sequences own disjoint tile ranges of the packed buffer when the pool holds the
        // whole batch; otherwise each sequence runs alone on a staggered range.
        const int64_t want_tiles = int64_t{batch} * blocks;
        const int64_t pool_tiles = std::max<int64_t>(
            blocks, std::min<int64_t>(want_tiles, static_cast<int64_t>(options.gpu_pool_gb * 1e9 / (tile_values * 2))));
        DeviceMemory tiles(pool_tiles * tile_values * 2);
        DeviceMemory window(int64_t{batch} * 2 * shape.num_kv_heads * kWindow * shape.head_dim * 2);
        if (!tiles.ptr || !window.ptr) {
          std::printf("%-8s %8lld %6d   out of GPU memory\n", model.name.c_str(), static_cast<long long>(tokens), batch);
          continue;
        }
        BENCH_CUDA(cudaMemset(tiles.ptr, 0x3c, pool_tiles * tile_values * 2));
        BENCH_CUDA(cudaMemset(window.ptr, 0x3c, int64_t{batch} * 2 * shape.num_kv_heads * kWindow * shape.head_dim * 2));
        const bool disjoint = int64_t{batch} * blocks <= pool_tiles;
        // Disjoint: the batch in one launch; else one sequence at a time (below).
        const PackedKv kv(tiles, window, disjoint ? batch : 1, tokens);
        DeviceMemory q(int64_t{batch} * shape.num_q_heads * shape.head_dim * 2);
        BENCH_CUDA(cudaMemset(q.ptr, 0x3c, int64_t{batch} * shape.num_q_heads * shape.head_dim * 2));
        DeviceMemory o(int64_t{batch} * shape.num_q_heads * shape.head_dim * 4), lse(int64_t{batch} * shape.num_q_heads * 4);
        cuda::GqaGpuDecodeArgs args;
        args.shape = shape;
        args.q = q.as<const uint16_t>();
        args.o = o.as<float>();
        args.lse = lse.as<float>();
        args.split.gqa_kernel = cuda::GqaDecodeKernel::kRegisters;
        double seconds, call_seconds;
        double bulk_seconds[2] = {0, 0};  // 0: not timed (per-seq launches), -1: failed
        // bulk4 at kBulkSplits' sizes; 0: not timed (per-seq launches, or more splits than a
        // planned call may have), -1: failed.
        double bulk_split_seconds[std::size(kBulkSplits)] = {};
        if (disjoint) {
          args.num_seqs = batch;
          args.kv = kv.source;
          DeviceMemory workspace(cuda::GqaGpuDecodeWorkspaceBytes(args));
          args.workspace = workspace.ptr;
          args.workspace_bytes = cuda::GqaGpuDecodeWorkspaceBytes(args);
          auto decode = [&] { (void)cuda::GqaGpuDecode(args, nullptr); };
          seconds = TimeGpu(options.iters, decode);
          call_seconds = TimeGpu(options.iters, decode, /*from_idle_stream=*/true);
          // A bulk kernel's seconds at `per`-token splits (0: its plan) with a workspace of its
          // own, or -1 where it fails (said on a line of its own).
          auto time_bulk = [&](cuda::GqaDecodeKernel kernel, int32_t per) {
            cuda::GqaGpuDecodeArgs bulk = args;
            bulk.split.gqa_kernel = kernel;
            bulk.split.tokens_per_split = per;
            bulk.workspace_bytes = cuda::GqaGpuDecodeWorkspaceBytes(bulk);
            DeviceMemory bulk_workspace(bulk.workspace_bytes);
            bulk.workspace = bulk_workspace.ptr;
            absl::Status failure;
            const double timed = TimeGqaDecode(options.iters, bulk, &failure);
            if (failure.ok()) return timed;
            std::printf("bulk kernel %d at split %d: %s\n", static_cast<int>(kernel), per,
                        failure.ToString().c_str());
            return -1.0;
          };
          bulk_seconds[0] = time_bulk(cuda::GqaDecodeKernel::kBulk4, 0);
          bulk_seconds[1] = time_bulk(cuda::GqaDecodeKernel::kBulk3x2, 0);
          for (size_t i = 0; options.gqa_splits && i < std::size(kBulkSplits); ++i) {
            if (tokens > 1024 * int64_t{kBulkSplits[i]}) continue;
            bulk_split_seconds[i] = time_bulk(cuda::GqaDecodeKernel::kBulk4, kBulkSplits[i]);
          }
        } else {
          // Pool smaller than the batch's KV: sequences at staggered starts, one launch each
          // (launch overhead included; rarely hit with the default 16 GB pool).
          args.num_seqs = 1;
          args.kv = kv.source;
          DeviceMemory workspace(cuda::GqaGpuDecodeWorkspaceBytes(args));
          args.workspace = workspace.ptr;
          args.workspace_bytes = cuda::GqaGpuDecodeWorkspaceBytes(args);
          auto decode = [&] {
            for (int32_t s = 0; s < batch; ++s) {
              args.kv.tiles = tiles.as<const uint16_t>() +
                              ((int64_t{s} * 7919) % (pool_tiles - blocks + 1)) * tile_values;
              (void)cuda::GqaGpuDecode(args, nullptr);
            }
          };
          seconds = TimeGpu(options.iters, decode);
          call_seconds = TimeGpu(options.iters, decode, /*from_idle_stream=*/true);
        }
        BENCH_CUDA(cudaGetLastError());
        const double bytes = double(batch) * tokens * 2 * shape.num_kv_heads * shape.head_dim * 2;
        const double gbps = bytes / seconds / 1e9;
        std::printf("%-8s %8lld %6d %10.4f %10.1f %7.0f%% %10.4f", model.name.c_str(),
                    static_cast<long long>(tokens), batch, seconds * 1e3, gbps,
                    100 * gbps / options.hbm_gbps, call_seconds * 1e3);
        for (double bulk : bulk_seconds) {
          if (bulk > 0) {
            std::printf(" %10.4f %5.0f%%", bulk * 1e3, 100 * bytes / bulk / 1e9 / options.hbm_gbps);
          } else {
            std::printf(" %10s %6s", bulk < 0 ? "failed" : "-", "-");
          }
        }
        for (size_t i = 0; options.gqa_splits && i < std::size(kBulkSplits); ++i) {
          if (bulk_split_seconds[i] > 0) {
            std::printf(" %11.4f", bulk_split_seconds[i] * 1e3);
          } else {
            std::printf(" %11s", bulk_split_seconds[i] < 0 ? "failed" : "-");
          }
        }
        std::printf("%s\n", disjoint ? "" : "  (per-seq launches)");
      }
    }
  }
}

void RunMla(const BenchOptions& options) {
  std::printf("\n== CUDA MLA decode, DeepSeek-V2-Lite (ceiling %.0f GB/s) ==\n", options.hbm_gbps);
  std::printf(
      "ms: planned splits; s32..s2048: ms with fixed split sizes (GPU time, queued, cold L2);\n"
      "inline: ms with the lists in the kernel's parameters (batch <= %d; cuda_attention.h\n"
      "HostSeqLists); sm1: ms with splits for about one CTA per SM (split_tokens); row: inline\n"
      "per call of %d queued back to back, each over its own copy of the rows (a step's\n"
      "layers: no event pair around each call), and its %%ceil\n",
      cuda::internal::kInlineSeqs, kRowLayers);
  std::printf("%8s %6s %10s %10s %8s %10s %10s %8s %8s %8s %8s %8s %8s %8s %8s %8s %12s %8s %8s\n",
              "tokens", "batch", "ms", "GB/s", "%ceil", "GFLOP/s", "call_ms", "s32", "s64", "s128",
              "s256", "s512", "s1024", "s2048", "inline", "sm1", "split_tokens", "row", "%ceil");
  const MlaShape shape{16, 512, 64, kBlockTokens, 1.0f / std::sqrt(192.0f)};
  const int64_t tile_values = int64_t{kBlockTokens} * shape.row_dim();
  const int sms = cuda::internal::SmCount();
  for (int64_t tokens : options.tokens) {
    for (int32_t batch : options.batches) {
      const int64_t tile_tokens = tokens - kWindowTokens;
      const int64_t blocks = (tile_tokens + kBlockTokens - 1) / kBlockTokens;
      const int64_t total = int64_t{batch} * blocks;
      if (total * tile_values * 2 > options.gpu_pool_gb * 1e9) {
        std::printf("%8lld %6d   skipped (> --gpu-pool-gb)\n", static_cast<long long>(tokens), batch);
        continue;
      }
      DeviceMemory tiles(total * tile_values * 2), window(int64_t{batch} * kWindow * shape.row_dim() * 2);
      if (!tiles.ptr || !window.ptr) continue;
      BENCH_CUDA(cudaMemset(tiles.ptr, 0x3c, total * tile_values * 2));
      BENCH_CUDA(cudaMemset(window.ptr, 0x3c, int64_t{batch} * kWindow * shape.row_dim() * 2));
      const PackedKv kv(tiles, window, batch, tokens);
      DeviceMemory q(int64_t{batch} * shape.num_heads * shape.row_dim() * 2);
      BENCH_CUDA(cudaMemset(q.ptr, 0x3c, int64_t{batch} * shape.num_heads * shape.row_dim() * 2));
      DeviceMemory o(int64_t{batch} * shape.num_heads * shape.kv_lora_rank * 4), lse(int64_t{batch} * shape.num_heads * 4);
      cuda::MlaGpuDecodeArgs args;
      args.shape = shape;
      args.num_seqs = batch;
      args.q = q.as<const uint16_t>();
      args.kv = kv.source;
      args.o = o.as<float>();
      args.lse = lse.as<float>();
      // Sized for the most splits of the variants below.
      cuda::MlaGpuDecodeArgs widest = args;
      widest.split.tokens_per_split = tokens > 1024 * 32 ? (tokens > 1024 * 64 ? 128 : 64) : 32;
      const size_t workspace_bytes = std::max(cuda::MlaGpuDecodeWorkspaceBytes(args),
                                              cuda::MlaGpuDecodeWorkspaceBytes(widest));
      DeviceMemory workspace(workspace_bytes);
      args.workspace = workspace.ptr;
      args.workspace_bytes = workspace_bytes;
      absl::Status failure;
      const double seconds = TimeMlaDecode(options.iters, args, &failure);
      if (seconds == 0) {
        std::printf("%8lld %6d   failed: %s\n", static_cast<long long>(tokens), batch,
                    failure.ToString().c_str());
        continue;
      }
      const double call_seconds = TimeGpu(
          options.iters, [&] { (void)cuda::MlaGpuDecode(args, nullptr); },
          /*from_idle_stream=*/true);
      BENCH_CUDA(cudaGetLastError());
      const double bytes = double(batch) * tokens * shape.row_dim() * 2;
      const double flops = 2.0 * batch * tokens * shape.num_heads * (shape.row_dim() + shape.kv_lora_rank);
      const double gbps = bytes / seconds / 1e9;
      std::printf("%8lld %6d %10.4f %10.1f %7.0f%% %10.1f %10.4f", static_cast<long long>(tokens),
                  batch, seconds * 1e3, gbps, 100 * gbps / options.hbm_gbps, flops / seconds / 1e9,
                  call_seconds * 1e3);
      for (int32_t per : {32, 64, 128, 256, 512, 1024, 2048}) {
        if (tokens > 1024 * int64_t{per}) {  // more splits than a planned call may have
          std::printf(" %8s", "-");
          continue;
        }
        cuda::MlaGpuDecodeArgs fixed = args;
        fixed.split.tokens_per_split = per;
        PrintMsOrFailed(TimeMlaDecode(options.iters, fixed));
      }
      if (batch <= cuda::internal::kInlineSeqs) {
        cuda::MlaGpuDecodeArgs inline_lists = args;
        inline_lists.kv.host = kv.host_lists;
        PrintMsOrFailed(TimeMlaDecode(options.iters, inline_lists));
      } else {
        std::printf(" %8s", "-");
      }
      const int64_t sm1_splits = std::max<int64_t>(1, sms / batch);
      cuda::MlaGpuDecodeArgs sm1 = args;
      sm1.split.tokens_per_split = static_cast<int32_t>(
          std::max<int64_t>(32, ((tokens + sm1_splits - 1) / sm1_splits + 31) / 32 * 32));
      if (cuda::MlaGpuDecodeWorkspaceBytes(sm1) <= workspace_bytes) {
        PrintMsOrFailed(TimeMlaDecode(options.iters, sm1));
      } else {
        std::printf(" %8s", "-");
      }
      std::printf(" %12d", sm1.split.tokens_per_split);
      double row = 0;
      bool row_copies = false;
      if (batch <= cuda::internal::kInlineSeqs) {
        const RowCopies copies(total * tile_values * 2,
                               int64_t{batch} * kWindow * shape.row_dim() * 2);
        row_copies = copies.ok;
        cuda::MlaGpuDecodeArgs inline_lists = args;
        inline_lists.kv.host = kv.host_lists;
        if (copies.ok) {
          row = TimeInARow(options.iters, [&](int l) {
            cuda::MlaGpuDecodeArgs layer = inline_lists;
            layer.kv.tiles = copies.tiles_of(l);
            layer.kv.window = copies.window_of(l);
            return cuda::MlaGpuDecode(layer, nullptr);
          });
        }
      }
      if (row > 0) {
        std::printf(" %8.4f %7.0f%%", row * 1e3, 100 * bytes / row / 1e9 / options.hbm_gbps);
      } else {
        std::printf(" %8s %8s", row_copies ? "failed" : "-", "-");
      }
      std::printf("\n");
      BENCH_CUDA(cudaGetLastError());
    }
  }
}

// Overlap of the next layer's DMA with this layer's attention: the copy engine moves
// the next layer's tiles host (pinned) -> the other half of the ping-pong buffer on a
// copy stream while the decode runs on the compute stream. Rows: the copy of a whole
// layer's tiles (capped at 1 GiB of pinned memory), and a copy sized to take about as
// long as the attention (where contention would show most). Columns: each alone, the
// attention's own time while the copy runs, both together (copy start to last end), and
// the ideal max(attention, copy).
void RunOverlap(const BenchOptions& options) {
  std::printf("\n== CUDA overlap: H2D copy (pinned, copy stream) || GQA decode (compute stream) ==\n");
  std::printf("%-8s %8s %6s %-8s %9s %9s %9s %10s %9s %9s\n", "model", "tokens", "batch", "copy",
              "copy_MB", "attn_ms", "copy_ms", "attn||copy", "both_ms", "ideal_ms");
  constexpr size_t kPinnedBytes = size_t{1} << 30;
  void* host = nullptr;
  if (cudaMallocHost(&host, kPinnedBytes) != cudaSuccess) {
    std::printf("no pinned memory, skipped\n");
    return;
  }
  std::memset(host, 0x3c, kPinnedBytes);
  DeviceMemory landing(kPinnedBytes);  // the other half of the ping-pong buffer
  cudaStream_t compute = nullptr, copy = nullptr;
  cudaEvent_t e0, e1, e2, e3;
  BENCH_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  BENCH_CUDA(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  for (cudaEvent_t* e : {&e0, &e1, &e2, &e3}) BENCH_CUDA(cudaEventCreate(e));
  auto elapsed = [](cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return static_cast<double>(ms);
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const int iters = std::max(options.iters, 5);
  for (const std::string& name : options.models) {
    GqaModel model;
    if (!FindModel(name, &model)) continue;
    const GqaShape shape = BenchShape(model, kBlockTokens);
    const int64_t tile_values = TileValues(shape);
    for (int64_t tokens : options.tokens) {
      for (int32_t batch : options.batches) {
        const int64_t tile_tokens = tokens - kWindowTokens;
        const int64_t blocks = (tile_tokens + kBlockTokens - 1) / kBlockTokens;
        const int64_t total_tiles = int64_t{batch} * blocks;
        const double layer_bytes = double(total_tiles) * tile_values * 2;
        if (layer_bytes > options.gpu_pool_gb * 1e9) {
          std::printf("%-8s %8lld %6d   skipped (> --gpu-pool-gb)\n", model.name.c_str(),
                      static_cast<long long>(tokens), batch);
          continue;
        }
        const int64_t window_values = int64_t{batch} * 2 * shape.num_kv_heads * kWindow * shape.head_dim;
        DeviceMemory tiles(total_tiles * tile_values * 2), window(window_values * 2);
        if (!tiles.ptr || !window.ptr) continue;
        BENCH_CUDA(cudaMemset(tiles.ptr, 0x3c, total_tiles * tile_values * 2));
        BENCH_CUDA(cudaMemset(window.ptr, 0x3c, window_values * 2));
        const PackedKv kv(tiles, window, batch, tokens);
        const int64_t q_values = int64_t{batch} * shape.num_q_heads * shape.head_dim;
        DeviceMemory q(q_values * 2), o(q_values * 4), lse(int64_t{batch} * shape.num_q_heads * 4);
        BENCH_CUDA(cudaMemset(q.ptr, 0x3c, q_values * 2));
        cuda::GqaGpuDecodeArgs args;
        args.shape = shape;
        args.num_seqs = batch;
        args.q = q.as<const uint16_t>();
        args.kv = kv.source;
        args.o = o.as<float>();
        args.lse = lse.as<float>();
        DeviceMemory workspace(cuda::GqaGpuDecodeWorkspaceBytes(args));
        args.workspace = workspace.ptr;
        args.workspace_bytes = cuda::GqaGpuDecodeWorkspaceBytes(args);
        auto attention = [&] { (void)cuda::GqaGpuDecode(args, compute); };
        attention();
        BENCH_CUDA(cudaStreamSynchronize(compute));
        std::vector<double> attn_times;
        for (int i = 0; i < iters; ++i) {
          BENCH_CUDA(cudaEventRecord(e0, compute));
          attention();
          BENCH_CUDA(cudaEventRecord(e1, compute));
          BENCH_CUDA(cudaEventSynchronize(e1));
          attn_times.push_back(elapsed(e0, e1));
        }
        const double attn_ms = median(attn_times);
        // Host -> device at ~55 GB/s: bytes that take about as long as the attention.
        const size_t matched = static_cast<size_t>(attn_ms * 1e-3 * 55e9);
        for (const auto& [label, want] :
             {std::pair<const char*, size_t>{"layer", static_cast<size_t>(layer_bytes)},
              std::pair<const char*, size_t>{"matched", matched}}) {
          const size_t bytes = std::max<size_t>(256, std::min(want, kPinnedBytes) / 256 * 256);
          std::vector<double> copy_alone, attn_during, both;
          for (int i = 0; i < iters; ++i) {
            BENCH_CUDA(cudaEventRecord(e0, copy));
            BENCH_CUDA(cudaMemcpyAsync(landing.ptr, host, bytes, cudaMemcpyHostToDevice, copy));
            BENCH_CUDA(cudaEventRecord(e1, copy));
            BENCH_CUDA(cudaEventSynchronize(e1));
            copy_alone.push_back(elapsed(e0, e1));
            // Both: the copy is queued first, the attention starts behind its start event.
            BENCH_CUDA(cudaEventRecord(e0, copy));
            BENCH_CUDA(cudaMemcpyAsync(landing.ptr, host, bytes, cudaMemcpyHostToDevice, copy));
            BENCH_CUDA(cudaStreamWaitEvent(compute, e0));
            BENCH_CUDA(cudaEventRecord(e2, compute));
            attention();
            BENCH_CUDA(cudaEventRecord(e3, compute));
            BENCH_CUDA(cudaStreamWaitEvent(copy, e3));
            BENCH_CUDA(cudaEventRecord(e1, copy));
            BENCH_CUDA(cudaEventSynchronize(e1));
            both.push_back(elapsed(e0, e1));
            attn_during.push_back(elapsed(e2, e3));
          }
          BENCH_CUDA(cudaGetLastError());
          const double copy_ms = median(copy_alone);
          std::printf("%-8s %8lld %6d %-8s %9.1f %9.3f %9.3f %10.3f %9.3f %9.3f\n", model.name.c_str(),
                      static_cast<long long>(tokens), batch, label, bytes / 1e6, attn_ms, copy_ms,
                      median(attn_during), median(both), std::max(attn_ms, copy_ms));
        }
      }
    }
  }
  cudaStreamDestroy(compute);
  cudaStreamDestroy(copy);
  for (cudaEvent_t e : {e0, e1, e2, e3}) cudaEventDestroy(e);
  cudaFreeHost(host);
}

void RunMerge(const BenchOptions& options) {
  std::printf("\n== CUDA merge of the CPU partial into the GPU partial ==\n");
  std::printf("%6s %6s %6s %10s\n", "batch", "heads", "dim", "us");
  for (int32_t batch : options.batches) {
    for (auto [heads, dim] : {std::pair{32, 128}, std::pair{16, 512}}) {
      const int64_t rows = int64_t{batch} * heads;
      DeviceMemory oa(rows * dim * 4), ob(rows * dim * 4), la(rows * 4), lb(rows * 4);
      BENCH_CUDA(cudaMemset(oa.ptr, 0, rows * dim * 4));
      BENCH_CUDA(cudaMemset(ob.ptr, 0, rows * dim * 4));
      BENCH_CUDA(cudaMemset(la.ptr, 0, rows * 4));
      BENCH_CUDA(cudaMemset(lb.ptr, 0, rows * 4));
      const double seconds = TimeGpu(std::max(options.iters, 20), [&] {
        (void)cuda::GpuMergeStates(oa.as<float>(), la.as<float>(), ob.as<float>(), lb.as<float>(),
                                   oa.as<float>(), la.as<float>(), rows, dim, nullptr);
      });
      std::printf("%6d %6d %6d %10.2f\n", batch, heads, dim, seconds * 1e6);
    }
  }
}

// lm_head's per-row stats (the greedy step's reduction, kernels/cuda/cuda_logits.h) at the
// three vocabularies and the grid's batches: the rows read twice from a cold L2 (the first
// pass from HBM, the second mostly from L2 for rows that fit), GB/s counted once per row.
void RunLogitStats(const BenchOptions& options) {
  std::printf("\n== CUDA lm_head row stats (max, argmax, sum of exps; one block a row) ==\n");
  std::printf("%-12s %6s %8s %10s %10s %8s\n", "vocab", "rows", "MB", "us", "GB/s", "%HBM");
  for (auto [name, vocab] : {std::pair{"deepseek_v2", 102400}, std::pair{"qwen3_moe", 151936},
                             std::pair{"mixtral", 32000}}) {
    for (int32_t rows : {1, 4, 16, 32, 64}) {
      const int64_t bytes = int64_t{rows} * vocab * 4;
      DeviceMemory logits(bytes), stats(int64_t{rows} * sizeof(LogitRowStats));
      if (!logits.ptr || !stats.ptr) {
        std::printf("(no memory)\n");
        return;
      }
      BENCH_CUDA(cudaMemset(logits.ptr, 0x3c, bytes));
      const double seconds = TimeGpu(std::max(options.iters, 20), [&] {
        (void)cuda::LogitRowStatsOnDevice(logits.as<float>(), rows, vocab,
                                          stats.as<LogitRowStats>(), nullptr);
      });
      const double gbps = static_cast<double>(bytes) / seconds * 1e-9;
      std::printf("%-12s %6d %8.1f %10.2f %10.1f %7.1f%%\n", name, rows, bytes / 1e6,
                  seconds * 1e6, gbps, 100.0 * gbps / options.hbm_gbps);
    }
  }
}

// A prefill's keys on the device: `total` tokens in tiles of kBlockTokens (`tile_values`
// bf16 each, every byte 0x3c), listed in position order; `ok` false when memory or a copy
// failed.
struct PrefillTiles {
  int32_t num_tiles;
  DeviceMemory tiles, pointers_d, positions_d, tokens_d;
  std::vector<const uint16_t*> pointers;  // host copy of the list
  cuda::GpuKvTileList list{};
  bool ok = false;
  PrefillTiles(int64_t total, int64_t tile_values)
      : num_tiles(static_cast<int32_t>((total + kBlockTokens - 1) / kBlockTokens)),
        tiles(num_tiles * tile_values * 2),
        pointers_d(num_tiles * sizeof(void*)),
        positions_d(num_tiles * 8),
        tokens_d(num_tiles * 4),
        pointers(num_tiles) {
    if (!tiles.ptr || !pointers_d.ptr || !positions_d.ptr || !tokens_d.ptr) return;
    std::vector<int64_t> positions(num_tiles);
    std::vector<int32_t> tokens(num_tiles);
    for (int32_t i = 0; i < num_tiles; ++i) {
      pointers[i] = tiles.as<const uint16_t>() + int64_t{i} * tile_values;
      positions[i] = int64_t{i} * kBlockTokens;
      tokens[i] = static_cast<int32_t>(std::min<int64_t>(kBlockTokens, total - positions[i]));
    }
    if (cudaMemset(tiles.ptr, 0x3c, num_tiles * tile_values * 2) != cudaSuccess ||
        cudaMemcpy(pointers_d.ptr, pointers.data(), num_tiles * sizeof(void*), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(positions_d.ptr, positions.data(), num_tiles * 8, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(tokens_d.ptr, tokens.data(), num_tiles * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
      return;
    }
    list = {pointers_d.as<const uint16_t* const>(), positions_d.as<const int64_t>(),
            tokens_d.as<const int32_t>(), num_tiles};
    ok = true;
  }
};

// Causal prefill of a 2048-token chunk after `prior` tokens, every key on the GPU (tiles
// of 256 tokens). FLOP = 4 * q_heads * head_dim per (query, attended key): the QK^T and
// PV products, not the extra P_lo V of the hi+lo split.
constexpr double kDenseBf16Tflops = 790;  // measured on the H200 (device KINDS.md)
void RunPrefill(const BenchOptions& options) {
  constexpr int32_t kChunk = 2048;
  std::printf("\n== CUDA GQA causal prefill: chunk %d (ceiling %.0f TFLOP/s dense bf16) ==\n",
              kChunk, kDenseBf16Tflops);
  std::printf("%-8s %8s %8s %10s %10s %8s\n", "model", "prior", "chunk", "ms", "TFLOP/s", "%ceil");
  for (const std::string& name : options.models) {
    GqaModel model;
    if (!FindModel(name, &model)) continue;
    const GqaShape shape = BenchShape(model, kBlockTokens);
    const int64_t tile_values = TileValues(shape);
    for (int64_t prior : {int64_t{0}, int64_t{8192}, int64_t{32768}}) {
      const PrefillTiles tiles(prior + kChunk, tile_values);
      DeviceMemory q(int64_t{kChunk} * shape.num_q_heads * shape.head_dim * 2);
      DeviceMemory o(int64_t{kChunk} * shape.num_q_heads * shape.head_dim * 4);
      DeviceMemory lse(int64_t{kChunk} * shape.num_q_heads * 4);
      if (!tiles.ok || !q.ptr || !o.ptr || !lse.ptr) {
        std::printf("%-8s %8lld   out of GPU memory\n", model.name.c_str(), static_cast<long long>(prior));
        continue;
      }
      BENCH_CUDA(cudaMemset(q.ptr, 0x3c, int64_t{kChunk} * shape.num_q_heads * shape.head_dim * 2));
      cuda::GqaGpuPrefillArgs args;
      args.shape = shape;
      args.num_queries = kChunk;
      args.query_position0 = prior;
      args.q = q.as<const uint16_t>();
      args.keys = tiles.list;
      args.o = o.as<float>();
      args.lse = lse.as<float>();
      const absl::Status status = cuda::GqaGpuPrefill(args, nullptr);
      if (!status.ok()) {
        std::printf("%-8s %8lld   %s\n", model.name.c_str(), static_cast<long long>(prior),
                    std::string(status.message()).c_str());
        continue;
      }
      const double seconds = TimeGpu(options.iters, [&] { (void)cuda::GqaGpuPrefill(args, nullptr); });
      BENCH_CUDA(cudaGetLastError());
      // Query i attends prior + i + 1 keys.
      const double keys = double(kChunk) * prior + double(kChunk) * (kChunk + 1) / 2;
      const double tflops = 4.0 * shape.num_q_heads * shape.head_dim * keys / seconds / 1e12;
      std::printf("%-8s %8lld %8d %10.3f %10.1f %7.1f%%\n", model.name.c_str(),
                  static_cast<long long>(prior), kChunk, seconds * 1e3, tflops,
                  100 * tflops / kDenseBf16Tflops);
    }
  }
}

// Causal MLA prefill (DeepSeek-V2-Lite) of a chunk after `prior` tokens, every key on the
// GPU (tiles of 256 tokens): MlaGpuPrefill with its default launch bounds (2 CTAs per SM),
// the 1-CTA variant, and what ran before the prefill kernel, the decode with one row per
// query over its visible prefix. FLOP = 2 * heads * (576 + 512) per (query, attended key),
// not the extra P_lo V of the hi+lo split.
void RunMlaPrefill(const BenchOptions& options) {
  std::printf("\n== CUDA MLA causal prefill, DeepSeek-V2-Lite (ceiling %.0f TFLOP/s dense bf16) ==\n",
              kDenseBf16Tflops);
  std::printf("ms: MlaGpuPrefill; ms_1cta: its 1-CTA-per-SM variant; ms_rows: the MLA decode, one row per query\n");
  std::printf("%8s %8s %10s %10s %8s %10s %10s %8s\n", "prior", "chunk", "ms", "TFLOP/s", "%ceil",
              "ms_1cta", "ms_rows", "rows/ms");
  const MlaShape shape{16, 512, 64, kBlockTokens, 1.0f / std::sqrt(192.0f)};
  const int64_t tile_values = int64_t{kBlockTokens} * shape.row_dim();
  for (int32_t chunk : {512, 2048}) {
    for (int64_t prior : {int64_t{0}, int64_t{8192}, int64_t{32768}}) {
      const int64_t total = prior + chunk;
      const PrefillTiles tiles(total, tile_values);
      DeviceMemory q(int64_t{chunk} * shape.num_heads * shape.row_dim() * 2);
      DeviceMemory o(int64_t{chunk} * shape.num_heads * shape.kv_lora_rank * 4);
      DeviceMemory lse(int64_t{chunk} * shape.num_heads * 4);
      if (!tiles.ok || !q.ptr || !o.ptr || !lse.ptr) {
        std::printf("%8lld   out of GPU memory\n", static_cast<long long>(prior));
        continue;
      }
      BENCH_CUDA(cudaMemset(q.ptr, 0x3c, int64_t{chunk} * shape.num_heads * shape.row_dim() * 2));
      cuda::MlaGpuPrefillArgs args;
      args.shape = shape;
      args.num_queries = chunk;
      args.query_position0 = prior;
      args.q = q.as<const uint16_t>();
      args.keys = tiles.list;
      args.o = o.as<float>();
      args.lse = lse.as<float>();
      const absl::Status status = cuda::MlaGpuPrefill(args, nullptr);
      if (!status.ok()) {
        std::printf("%8lld   %s\n", static_cast<long long>(prior), std::string(status.message()).c_str());
        continue;
      }
      const double seconds = TimeGpu(options.iters, [&] { (void)cuda::MlaGpuPrefill(args, nullptr); });
      BENCH_CUDA(cudaGetLastError());
      // The same launch with 1 CTA per SM (174 registers, no spill, against 128 with spills).
      const double seconds_1cta =
          TimeGpu(options.iters, [&] { (void)cuda::MlaGpuPrefill(args, nullptr, /*ctas_per_sm=*/1); });
      BENCH_CUDA(cudaGetLastError());
      // The decode, one row per query: row i sees tiles [0, (prior + i) / bt] in part.
      std::vector<const uint16_t*> row_ptrs;
      std::vector<int32_t> begin(chunk + 1), last(chunk);
      for (int32_t i = 0; i < chunk; ++i) {
        const int64_t seen = prior + i + 1;
        const int32_t n = static_cast<int32_t>((seen + kBlockTokens - 1) / kBlockTokens);
        begin[i] = static_cast<int32_t>(row_ptrs.size());
        row_ptrs.insert(row_ptrs.end(), tiles.pointers.begin(), tiles.pointers.begin() + n);
        last[i] = static_cast<int32_t>(seen - int64_t{n - 1} * kBlockTokens);
      }
      begin[chunk] = static_cast<int32_t>(row_ptrs.size());
      DeviceMemory row_ptrs_d(row_ptrs.size() * sizeof(void*)), begin_d(begin.size() * 4), last_d(last.size() * 4);
      BENCH_CUDA(cudaMemcpy(row_ptrs_d.ptr, row_ptrs.data(), row_ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice));
      BENCH_CUDA(cudaMemcpy(begin_d.ptr, begin.data(), begin.size() * 4, cudaMemcpyHostToDevice));
      BENCH_CUDA(cudaMemcpy(last_d.ptr, last.data(), last.size() * 4, cudaMemcpyHostToDevice));
      cuda::MlaGpuDecodeArgs rows;
      rows.shape = shape;
      rows.num_seqs = chunk;
      rows.q = args.q;
      rows.kv.tile_ptrs = row_ptrs_d.as<const uint16_t* const>();
      rows.kv.seq_tile_begin = begin_d.as<const int32_t>();
      rows.kv.seq_last_tile_tokens = last_d.as<const int32_t>();
      rows.kv.max_seq_tokens = static_cast<int32_t>(total);
      rows.o = args.o;
      rows.lse = args.lse;
      const size_t workspace_bytes = cuda::MlaGpuDecodeWorkspaceBytes(rows);
      DeviceMemory workspace(workspace_bytes);
      rows.workspace = workspace.ptr;
      rows.workspace_bytes = workspace_bytes;
      double seconds_rows = NAN;
      if (workspace.ptr != nullptr && cuda::MlaGpuDecode(rows, nullptr).ok()) {
        seconds_rows = TimeGpu(options.iters, [&] { (void)cuda::MlaGpuDecode(rows, nullptr); });
      }
      BENCH_CUDA(cudaGetLastError());
      const double keys = double(chunk) * prior + double(chunk) * (chunk + 1) / 2;
      const double tflops = 2.0 * shape.num_heads * (shape.row_dim() + shape.kv_lora_rank) * keys / seconds / 1e12;
      std::printf("%8lld %8d %10.3f %10.1f %7.1f%% %10.3f %10.3f %8.1f\n", static_cast<long long>(prior),
                  chunk, seconds * 1e3, tflops, 100 * tflops / kDenseBf16Tflops, seconds_1cta * 1e3,
                  seconds_rows * 1e3, chunk / (seconds * 1e3));
    }
  }
}

class CudaHostCopyLoad : public HostCopyLoad {
 public:
  CudaHostCopyLoad(void* host, void* device, size_t bytes, cudaStream_t stream)
      : host_(host), device_(device), bytes_(bytes), stream_(stream) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~CudaHostCopyLoad() override {
    Stop();
    cudaStreamDestroy(stream_);
    cudaFree(device_);
    cudaFreeHost(host_);
  }
  double Stop() override {
    if (thread_.joinable()) {
      stop_.store(true);
      thread_.join();
    }
    return seconds_ > 0 ? copied_ / seconds_ / 1e9 : 0.0;
  }

 private:
  void Loop() {
    const auto start = std::chrono::steady_clock::now();
    while (!stop_.load()) {
      if (cudaMemcpyAsync(device_, host_, bytes_, cudaMemcpyHostToDevice, stream_) != cudaSuccess ||
          cudaStreamSynchronize(stream_) != cudaSuccess) {
        break;
      }
      copied_ += static_cast<double>(bytes_);
    }
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  void* host_;
  void* device_;
  size_t bytes_;
  cudaStream_t stream_;
  std::atomic<bool> stop_{false};
  double copied_ = 0, seconds_ = 0;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<HostCopyLoad> HostCopyLoad::Start(size_t bytes) {
  if (!cuda::CudaDeviceAvailable() || bytes == 0) return nullptr;
  void* host = nullptr;
  void* device = nullptr;
  cudaStream_t stream = nullptr;
  if (cudaMallocHost(&host, bytes) != cudaSuccess) return nullptr;
  std::memset(host, 0x3c, bytes);
  if (cudaMalloc(&device, bytes) != cudaSuccess ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    if (device != nullptr) cudaFree(device);
    cudaFreeHost(host);
    return nullptr;
  }
  return std::make_unique<CudaHostCopyLoad>(host, device, bytes, stream);
}

// What one kernel could reach at batch 1 (session 60): the decode's floor there is a chain of
// launches, dependent loads and the split merge (docs/notes/cuda_decode_tuning.md). Two
// numbers a single-kernel design would stand on: how fast n SMs alone stream a decode's bytes
// (a merge inside clusters of 16 holds 16 CTAs a (seq, kv head): 64 SMs at Qwen3 batch 1),
// and what a call's launches cost with nothing in them.
void RunFloors(const BenchOptions& options) {
  if (g_sink == nullptr) {
    std::printf("\n== CUDA floors: skipped (no memory for the reads' sink) ==\n");
    return;
  }
  const int sms = cuda::internal::SmCount();
  std::printf("\n== CUDA floors at batch 1: reads by n SMs, and empty launches (us) ==\n");
  std::printf(
      "wide: the anatomy's read (%d CTAs of 256 threads); nNNN: n CTAs of 1024 threads, one an\n"
      "SM; c8, c16: a cluster of 8 or 16 such CTAs a (seq, kv head) at batch 1 (pairs of them),\n"
      "each reading its pair's bytes in slices, then a merge of a [8][128] fp32 state a CTA\n"
      "through distributed shared memory (what one decode kernel without a split merge would\n"
      "stand on); each column's GB/s in brackets; queued behind the L2 flush as every decode\n",
      kReadBlocks);
  const std::vector<int> few = {16, 32, 48, 64, 96, 128, sms};
  std::printf("%-8s %8s %5s %9s %16s", "shape", "tokens", "pairs", "MB", "wide");
  for (int n : few) std::printf(" %12s%-4d", "n", n);
  std::printf(" %16s %16s\n", "c8", "c16");
  struct Row {
    std::string name;
    double bytes_per_token;
    int pairs;  // (seq, kv head) pairs at batch 1
  };
  std::vector<Row> rows;
  for (const std::string& name : options.models) {
    GqaModel model;
    if (FindModel(name, &model)) {
      rows.push_back({model.name, 2.0 * 2 * model.kv_heads * model.head_dim, model.kv_heads});
    }
  }
  rows.push_back({"mla", 2.0 * (512 + 64), 1});  // DeepSeek-V2-Lite's latent rows
  DeviceMemory merged(size_t{16} * 8 * 128 * sizeof(float));
  if (!merged.ptr) return;
  for (const Row& row : rows) {
    for (int64_t tokens : options.tokens) {
      const size_t bytes = static_cast<size_t>(row.bytes_per_token * tokens);
      DeviceMemory data(bytes);
      if (!data.ptr) continue;
      BENCH_CUDA(cudaMemset(data.ptr, 0x3c, bytes));
      auto cell = [&](auto fn) {
        const double us = TimeGpu(options.iters, fn) * 1e6;
        std::printf(" %8.1f (%5.0f)", us, bytes / us / 1e3);
      };
      std::printf("%-8s %8lld %5d %9.1f", row.name.c_str(), static_cast<long long>(tokens),
                  row.pairs, bytes / 1e6);
      cell([&] { (void)LaunchReadAll(data.ptr, bytes, g_sink, kReadBlocks, nullptr); });
      for (int n : few) cell([&] { (void)LaunchReadFew(data.ptr, bytes, g_sink, n, nullptr); });
      for (int size : {8, 16}) {
        const int err =
            LaunchReadClusters(data.ptr, bytes, merged.as<float>(), row.pairs, size, nullptr);
        if (err != 0 || cudaDeviceSynchronize() != cudaSuccess) {
          std::printf(" %16s", "failed");
          (void)cudaGetLastError();
          continue;
        }
        cell([&] {
          (void)LaunchReadClusters(data.ptr, bytes, merged.as<float>(), row.pairs, size, nullptr);
        });
      }
      std::printf("\n");
      BENCH_CUDA(cudaGetLastError());
    }
  }
  std::printf("%-34s %8s\n", "empty launch (128 threads a CTA)", "us");
  auto empty_row = [&](const char* what, auto fn) {
    const int err = fn();
    BENCH_CUDA(cudaDeviceSynchronize());
    if (err != 0) {
      std::printf("%-34s %8s (%s)\n", what, "failed",
                  cudaGetErrorString(static_cast<cudaError_t>(err)));
      (void)cudaGetLastError();
      return;
    }
    std::printf("%-34s %8.2f\n", what, TimeGpu(options.iters, [&] { (void)fn(); }) * 1e6);
  };
  char what[64];
  for (int ctas : {1, sms, 4 * sms}) {
    std::snprintf(what, sizeof(what), "one grid of %d", ctas);
    empty_row(what, [&] { return LaunchEmpty(g_sink, ctas, 128, nullptr); });
    std::snprintf(what, sizeof(what), "a programmatic pair of %d", ctas);
    empty_row(what, [&] { return LaunchEmptyPair(g_sink, ctas, 128, nullptr); });
  }
  for (int size : {8, 16}) {
    for (int clusters : {1, 4, 8}) {
      std::snprintf(what, sizeof(what), "%d clusters of %d", clusters, size);
      empty_row(what, [&] { return LaunchEmptyClusters(g_sink, clusters, size, 128, nullptr); });
    }
  }
}

void RunCudaBenchmarks(const BenchOptions& options) {
  if (!cuda::CudaDeviceAvailable()) {
    std::printf("\n== CUDA: no device, skipped ==\n");
    return;
  }
  g_warmup_ms = options.gpu_warmup_ms;
  g_flush_cached = options.flush_cached;
  std::printf("\n(the L2 flush between timed runs: %s loads)\n",
              g_flush_cached ? "cached (normal priority)" : "streaming");
  if (cudaMalloc(&g_flush, kFlushBytes) != cudaSuccess ||
      cudaMemset(g_flush, 0x3c, kFlushBytes) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&g_sink), kReadBlocks * sizeof(unsigned)) != cudaSuccess) {
    g_flush = nullptr;
    std::printf("(no memory for the L2 flush: timings may read from a warm L2)\n");
  }

  if (options.floors) RunFloors(options);
  if (options.gqa) {
    RunGqaAnatomy(options);
    RunGqa(options);
    if (options.overlap) RunOverlap(options);
    if (options.prefill) RunPrefill(options);
  }
  if (options.mla) {
    RunMla(options);
    if (options.prefill) RunMlaPrefill(options);
  }
  if (options.merge) RunMerge(options);
  if (options.logits) RunLogitStats(options);
  if (g_flush != nullptr) cudaFree(g_flush);
  if (g_sink != nullptr) cudaFree(g_sink);
  g_flush = nullptr;
  g_sink = nullptr;
}

}  // namespace writescope::kernels::bench
