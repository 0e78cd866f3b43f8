// ws_probe: measures the machine's ceilings that every later benchmark compares to:
// the GPU's copy bandwidths (pinned shared memory, pageable, on-device HBM), host
// DRAM bandwidth with all cores, a read-only DRAM stream alone and beside the pinned H2D
// copies (the host memory that the CPU's attention and the KV DMA share), and the
// shared-memory channel between two processes.
//
//   ws_probe                         # table on stdout
//   ws_probe --json=/tmp/probe.json  # also the numbers as JSON
//   ws_probe --device=host --pinned_mib=256   # exercise the GPU section with memcpy
//
// Without a GPU (and --device=auto) it measures the host parts, says the GPU is
// absent and exits 0. Copies go through the gpu_worker's Device interface, exactly as
// the worker issues them; each is timed with steady_clock from issue to the stream's
// Synchronize, after one unrecorded warm-up, and the best and median repetitions are
// reported. GB/s means 1e9 bytes per second throughout.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/channel_measure.h"
#include "common/data_plane.h"
#include "common/host_stream.h"
#include "common/log.h"
#include "common/shm_arena.h"
#include "common/status.h"
#include "gpu_worker/device.h"

ABSL_FLAG(std::string, device, "auto",
          "auto (the GPU if one works, else skip the GPU section), cuda (fail without a GPU) "
          "or host (run the GPU section with the host device: memcpy, for testing).");
ABSL_FLAG(int64_t, pinned_mib, 2048,
          "Size of the cudaHostRegister'ed shared-memory transfer region and of each copy.");
ABSL_FLAG(int64_t, pageable_mib, 2048, "Size of the pageable host buffer for pageable copies.");
ABSL_FLAG(int64_t, hbm_mib, 2048, "Bytes per device-to-device copy.");
ABSL_FLAG(int, repetitions, 10, "Timed repetitions of each copy and DRAM kernel.");
ABSL_FLAG(int64_t, dram_mib, 1024, "Size of each of the DRAM kernels' arrays (3 arrays).");
ABSL_FLAG(int, threads, 0,
          "OpenMP threads for the DRAM kernels; 0 = all online CPUs (the read stream, beside "
          "the H2D copies, and alone, runs one fewer).");
ABSL_FLAG(int, channel_round_trips, 20000, "Recorded channel round trips (64 B).");
ABSL_FLAG(int, channel_bandwidth_mib, 1024,
          "Payload MiB streamed per channel bandwidth repetition (1 MiB messages).");
ABSL_FLAG(bool, channel, true, "Measure the shared-memory channel.");
ABSL_FLAG(std::string, json, "", "Also write the numbers as JSON to this path.");

namespace writescope {
namespace {

using Clock = std::chrono::steady_clock;

struct Rate {
  uint64_t counted_bytes = 0;  // per repetition
  int repetitions = 0;
  double best_gbps = 0;
  double median_gbps = 0;
};

// One line of the table and one JSON field.
struct Row {
  std::string key;    // JSON name
  std::string what;   // table label
  std::string value;  // table value
  std::string how;    // how it was measured / counted
  std::string json;   // JSON value
};

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string RateJson(const Rate& r) {
  return absl::StrFormat(
      "{\"bytes_per_repetition\": %d, \"repetitions\": %d, \"best_gbps\": %.3f, "
      "\"median_gbps\": %.3f}",
      r.counted_bytes, r.repetitions, r.best_gbps, r.median_gbps);
}

Row RateRow(std::string key, std::string what, const Rate& r, std::string how) {
  return Row{std::move(key), std::move(what),
             absl::StrFormat("%8.1f GB/s (median %.1f)", r.best_gbps, r.median_gbps),
             std::move(how), RateJson(r)};
}

// Runs `op` once unrecorded, then `repetitions` times; `counted_bytes` per run.
absl::StatusOr<Rate> TimeRate(uint64_t counted_bytes, int repetitions,
                              const std::function<absl::Status()>& op) {
  WS_RETURN_IF_ERROR(op());
  std::vector<double> gbps;
  for (int i = 0; i < repetitions; ++i) {
    const Clock::time_point start = Clock::now();
    WS_RETURN_IF_ERROR(op());
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    gbps.push_back(static_cast<double>(counted_bytes) / seconds / 1e9);
  }
  Rate rate;
  rate.counted_bytes = counted_bytes;
  rate.repetitions = repetitions;
  rate.median_gbps = Percentile(gbps, 0.5);
  rate.best_gbps = gbps.back();
  return rate;
}

std::string CpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

// ---- the shared-memory channel (forks: run before any thread exists) ----------

absl::Status ProbeChannel(std::vector<Row>& rows) {
  ChannelMeasureOptions options;
  options.round_trips = absl::GetFlag(FLAGS_channel_round_trips);
  options.warmup_round_trips = std::max(100, options.round_trips / 20);
  options.bandwidth_bytes = uint64_t(absl::GetFlag(FLAGS_channel_bandwidth_mib)) << 20;
  const size_t small[] = {64};
  WS_ASSIGN_OR_RETURN(std::vector<RoundTripResult> hot, MeasureChannelRoundTrips(small, options));

  ChannelMeasureOptions idle = options;
  idle.round_trips = std::max(50, options.round_trips / 40);
  idle.warmup_round_trips = 10;
  idle.idle_before_round_trip = absl::Microseconds(500);
  WS_ASSIGN_OR_RETURN(std::vector<RoundTripResult> woken, MeasureChannelRoundTrips(small, idle));

  const size_t large[] = {size_t{1} << 20};
  WS_ASSIGN_OR_RETURN(std::vector<BandwidthResult> bandwidth,
                      MeasureChannelBandwidth(large, options));

  auto latency_row = [](std::string key, std::string what, const RoundTripResult& r,
                        std::string how) {
    return Row{
        std::move(key), std::move(what),
        absl::StrFormat("%8.2f us (p99 %.2f)", r.median_us, r.p99_us), std::move(how),
        absl::StrFormat("{\"message_bytes\": %d, \"samples\": %d, \"min_us\": %.3f, "
                        "\"median_us\": %.3f, \"p99_us\": %.3f, \"max_us\": %.3f}",
                        r.message_bytes, r.samples, r.min_us, r.median_us, r.p99_us, r.max_us)};
  };
  rows.push_back(latency_row(
      "channel_round_trip_64b", "channel round trip, 64 B (median)", hot.front(),
      absl::StrCat("two processes, echo, ", hot.front().samples, " back-to-back samples")));
  rows.push_back(latency_row("channel_round_trip_64b_after_idle",
                             "channel round trip, 64 B, peer asleep", woken.front(),
                             "500 us idle before each: futex wake-up path"));
  const BandwidthResult& b = bandwidth.front();
  rows.push_back(Row{"channel_bandwidth_1mib", "channel one-way, 1 MiB messages",
                     absl::StrFormat("%8.1f GB/s (median %.1f)", b.best_gbps, b.median_gbps),
                     "Send copies in, peer Receive copies out; payload counted once",
                     absl::StrFormat("{\"message_bytes\": %d, \"messages\": %d, "
                                     "\"best_gbps\": %.3f, \"median_gbps\": %.3f}",
                                     b.message_bytes, b.messages, b.best_gbps, b.median_gbps)});
  return absl::OkStatus();
}

// ---- host DRAM -----------------------------------------------------------------

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using HostBuffer = std::unique_ptr<std::byte[], AlignedFree>;

absl::StatusOr<HostBuffer> AllocateHost(size_t bytes) {
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " host bytes"));
  }
  return HostBuffer(static_cast<std::byte*>(p));
}

// The DRAM kernels' OpenMP threads: --threads, else every online CPU.
int DramThreads() {
  return absl::GetFlag(FLAGS_threads) > 0 ? absl::GetFlag(FLAGS_threads)
                                          : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
}

absl::Status ProbeDram(std::vector<Row>& rows) {
  const int threads = DramThreads();
  const size_t n = (size_t(absl::GetFlag(FLAGS_dram_mib)) << 20) / sizeof(double);
  WS_ASSIGN_OR_RETURN(HostBuffer a_bytes, AllocateHost(n * sizeof(double)));
  WS_ASSIGN_OR_RETURN(HostBuffer b_bytes, AllocateHost(n * sizeof(double)));
  WS_ASSIGN_OR_RETURN(HostBuffer c_bytes, AllocateHost(n * sizeof(double)));
  double* a = reinterpret_cast<double*>(a_bytes.get());
  double* b = reinterpret_cast<double*>(b_bytes.get());
  double* c = reinterpret_cast<double*>(c_bytes.get());
  // First touch by the thread that later streams each chunk (static schedule).
#pragma omp parallel for schedule(static) num_threads(threads)
  for (size_t i = 0; i < n; ++i) {
    a[i] = 0.0;
    b[i] = 1.0;
    c[i] = 2.0;
  }
  const double scalar = 3.0;
  const int reps = absl::GetFlag(FLAGS_repetitions);
  // Pragmas cannot sit inside a macro argument, so the kernels are named first.
  auto copy_kernel = [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; ++i) a[i] = b[i];
    return absl::OkStatus();
  };
  auto triad_kernel = [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + scalar * c[i];
    return absl::OkStatus();
  };
  WS_ASSIGN_OR_RETURN(Rate copy, TimeRate(2 * n * sizeof(double), reps, copy_kernel));
  WS_ASSIGN_OR_RETURN(Rate triad, TimeRate(3 * n * sizeof(double), reps, triad_kernel));
  if (a[n / 2] != 1.0 + scalar * 2.0) return absl::InternalError("DRAM triad computed garbage");
  const std::string arrays = FormatBytes(n * sizeof(double));
  rows.push_back(RateRow("dram_triad",
                         absl::StrCat("host DRAM, OpenMP triad, ", threads, " threads"), triad,
                         absl::StrCat("a=b+s*c on 3 x ", arrays,
                                      " doubles; 24 B/element (STREAM: no write-allocate)")));
  rows.push_back(RateRow(
      "dram_copy", absl::StrCat("host DRAM, OpenMP copy, ", threads, " threads"), copy,
      absl::StrCat("a=b on ", arrays, " arrays; 16 B/element (STREAM: no write-allocate)")));
  return absl::OkStatus();
}

// The host memory that a split step's two paths share: the CPU's attention reads its KV
// blocks in place while the copy engine streams the others' to the device. A read-only
// OpenMP stream over two host arrays (--threads or all CPUs, less one: one issues the
// copies, as the gpu_worker's thread does beside the cpu_worker's) is timed alone, then
// --repetitions times back to back while the pinned region streams to the device in 64 MiB
// copies; both rates are taken over that window (the copies' from their first completion in
// it to their last). Rows: the stream alone, each beside the other,
// and their sum (what the roofline bound can take as the joint ceiling:
// bench_report.py --host-read-gbps).
absl::Status ProbeSharedHostMemory(gpu::Device& device, absl::Span<const std::byte> region,
                                   void* device_dst, std::vector<Row>& rows) {
  const int threads = std::max(1, DramThreads() - 1);
  const size_t n = (size_t(absl::GetFlag(FLAGS_dram_mib)) << 20) / sizeof(double);
  const int reps = absl::GetFlag(FLAGS_repetitions);
  const uint64_t chunk = std::min<uint64_t>(uint64_t{64} << 20, region.size());
  if (n == 0 || chunk == 0 || reps <= 0) {
    return absl::InvalidArgumentError("--dram_mib, --pinned_mib and --repetitions must be > 0");
  }
  WS_ASSIGN_OR_RETURN(HostBuffer a_bytes, AllocateHost(n * sizeof(double)));
  WS_ASSIGN_OR_RETURN(HostBuffer b_bytes, AllocateHost(n * sizeof(double)));
  double* a = reinterpret_cast<double*>(a_bytes.get());
  double* b = reinterpret_cast<double*>(b_bytes.get());
#pragma omp parallel for schedule(static) num_threads(threads)
  for (size_t i = 0; i < n; ++i) {
    a[i] = 1.0;
    b[i] = 2.0;
  }
  auto read_kernel = [&] {
    const double sum = SumOfTwoArrays(a, b, n, threads);
    if (sum != 3.0 * static_cast<double>(n)) {
      return absl::InternalError("the DRAM read stream computed garbage");
    }
    return absl::OkStatus();
  };
  const uint64_t read_bytes = 2 * n * sizeof(double);
  WS_ASSIGN_OR_RETURN(Rate alone, TimeRate(read_bytes, reps, read_kernel));

  // The copies run on their own thread until told to stop; each completion is timed.
  std::atomic<bool> stop{false}, copying{false}, copier_done{false};
  std::vector<Clock::time_point> completions;
  completions.reserve(1 << 16);
  absl::Status copy_status;
  std::thread copier([&] {
    uint64_t offset = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      copy_status = device.CopyToDevice(static_cast<std::byte*>(device_dst) + offset,
                                        region.data() + offset, chunk,
                                        gpu::Stream::kCopyIn);
      if (copy_status.ok()) copy_status = device.Synchronize(gpu::Stream::kCopyIn);
      if (!copy_status.ok()) break;
      completions.push_back(Clock::now());
      copying.store(true, std::memory_order_release);
      offset += chunk;
      if (offset + chunk > region.size()) offset = 0;
    }
    copier_done.store(true, std::memory_order_release);
  });
  while (!copying.load(std::memory_order_acquire) &&
         !copier_done.load(std::memory_order_acquire)) {
    std::this_thread::yield();
  }
  const Clock::time_point window_start = Clock::now();
  absl::Status read_status = absl::OkStatus();
  int streamed = 0;
  for (; streamed < reps && read_status.ok() && !copier_done.load(); ++streamed) {
    read_status = read_kernel();
  }
  const Clock::time_point window_end = Clock::now();
  stop.store(true);
  copier.join();
  WS_RETURN_IF_ERROR(copy_status);
  WS_RETURN_IF_ERROR(read_status);
  if (streamed != reps) {
    return absl::InternalError("the copies stopped before the DRAM stream ended");
  }
  const double read_gbps = static_cast<double>(read_bytes) * reps /
                           std::chrono::duration<double>(window_end - window_start).count() / 1e9;
  // The copies that both began and completed within the window: from the first completion
  // in it to the last.
  std::optional<Clock::time_point> from, to;
  uint64_t copied = 0;
  for (const Clock::time_point at : completions) {
    if (at <= window_start || at > window_end) continue;
    if (from.has_value()) {
      copied += chunk;
      to = at;
    } else {
      from = at;
    }
  }
  if (!to.has_value()) {
    return absl::InternalError(
        "fewer than two copies completed within the DRAM stream's window: raise --dram_mib or "
        "--repetitions");
  }
  const double copy_gbps =
      static_cast<double>(copied) / std::chrono::duration<double>(*to - *from).count() / 1e9;
  const std::string how = absl::StrCat("sum over 2 x ", FormatBytes(n * sizeof(double)),
                                       " doubles, ", threads, " threads; read bytes counted");
  rows.push_back(RateRow("dram_read", absl::StrCat("host DRAM read stream, ", threads, " threads"),
                         alone, how));
  rows.push_back(Row{"dram_read_beside_h2d", "  the same beside pinned H2D copies",
                     absl::StrFormat("%8.1f GB/s", read_gbps),
                     absl::StrCat(reps, " streams back to back while the copy engine streams"),
                     absl::StrFormat("%.3f", read_gbps)});
  rows.push_back(Row{"h2d_beside_dram_read", "  pinned H2D beside that stream",
                     absl::StrFormat("%8.1f GB/s", copy_gbps),
                     absl::StrCat(FormatBytes(chunk), " copies completed in its window"),
                     absl::StrFormat("%.3f", copy_gbps)});
  rows.push_back(Row{"host_read_shared", "  host memory read by both at once",
                     absl::StrFormat("%8.1f GB/s", read_gbps + copy_gbps),
                     "the two rates above added (bench_report.py --host-read-gbps)",
                     absl::StrFormat("%.3f", read_gbps + copy_gbps)});
  return absl::OkStatus();
}

// ---- the GPU -------------------------------------------------------------------

// Undoes RegisterHost when the probe leaves, whatever the path.
class Registration {
 public:
  Registration(gpu::Device* device, void* ptr) : device_(device), ptr_(ptr) {}
  ~Registration() {
    absl::Status status = device_->UnregisterHost(ptr_);
    if (!status.ok()) WS_LOG(WARNING) << "unregistering the transfer region: " << status;
  }

 private:
  gpu::Device* device_;
  void* ptr_;
};

absl::Status ProbeGpu(gpu::Device& device, std::vector<Row>& rows) {
  using gpu::Stream;
  const uint64_t pinned_bytes = uint64_t(absl::GetFlag(FLAGS_pinned_mib)) << 20;
  const uint64_t pageable_bytes = uint64_t(absl::GetFlag(FLAGS_pageable_mib)) << 20;
  const uint64_t hbm_bytes = uint64_t(absl::GetFlag(FLAGS_hbm_mib)) << 20;
  const int reps = absl::GetFlag(FLAGS_repetitions);
  if (pinned_bytes == 0 || pageable_bytes == 0 || hbm_bytes == 0) {
    return absl::InvalidArgumentError("--pinned_mib, --pageable_mib and --hbm_mib must be > 0");
  }

  absl::StatusOr<std::pair<uint64_t, uint64_t>> memory = device.MemoryInfo();
  if (memory.ok() && memory->first > 0) {
    rows.push_back(
        Row{"gpu_memory_bytes", "GPU memory (total, free)",
            absl::StrFormat("%s, %s", FormatBytes(memory->first), FormatBytes(memory->second)),
            "cudaMemGetInfo", absl::StrCat(memory->first)});
  }

  // The transfer region lives in a shared-memory arena, as the gpu_worker's does.
  ArenaSizes sizes;
  sizes.channel_bytes = uint64_t{1} << 20;
  sizes.gpu_transfer_bytes = pinned_bytes;
  WS_ASSIGN_OR_RETURN(std::unique_ptr<ShmArena> arena,
                      ShmArena::Create(absl::StrCat("/ws-probe-", getpid()), ArenaRegions(sizes)));
  WS_RETURN_IF_ERROR(arena->Unlink());  // the mapping is all we need
  WS_ASSIGN_OR_RETURN(absl::Span<std::byte> region, arena->Region(kGpuTransferRegion));
  std::memset(region.data(), 1, region.size());  // fault in before pinning
  const Clock::time_point register_start = Clock::now();
  WS_RETURN_IF_ERROR(device.RegisterHost(region.data(), region.size()));
  const double register_s = std::chrono::duration<double>(Clock::now() - register_start).count();
  Registration registration(&device, region.data());
  rows.push_back(Row{"register_seconds",
                     absl::StrCat("RegisterHost (cudaHostRegister) ", FormatBytes(pinned_bytes)),
                     absl::StrFormat("%8.3f s", register_s), "shm arena region, faulted in first",
                     absl::StrFormat("%.4f", register_s)});

  const uint64_t device_bytes = std::max({pinned_bytes, pageable_bytes, hbm_bytes});
  WS_ASSIGN_OR_RETURN(gpu::DeviceBuffer first, gpu::DeviceBuffer::Allocate(&device, device_bytes));
  WS_ASSIGN_OR_RETURN(gpu::DeviceBuffer second, gpu::DeviceBuffer::Allocate(&device, device_bytes));
  WS_RETURN_IF_ERROR(device.Fill(first.data(), 0, device_bytes, Stream::kCompute));
  WS_RETURN_IF_ERROR(device.Fill(second.data(), 0, device_bytes, Stream::kCompute));
  WS_RETURN_IF_ERROR(device.Synchronize(Stream::kCompute));

  const std::string pinned_size = FormatBytes(pinned_bytes);
  WS_ASSIGN_OR_RETURN(Rate h2d, TimeRate(pinned_bytes, reps, [&] {
                        WS_RETURN_IF_ERROR(device.CopyToDevice(first.data(), region.data(),
                                                               pinned_bytes, Stream::kCopyIn));
                        return device.Synchronize(Stream::kCopyIn);
                      }));
  rows.push_back(RateRow("h2d_pinned", "H2D pinned (registered shm)", h2d,
                         absl::StrCat(pinned_size, " per copy, kCopyIn stream")));
  WS_RETURN_IF_ERROR(ProbeSharedHostMemory(device, region, first.data(), rows));
  WS_ASSIGN_OR_RETURN(Rate d2h, TimeRate(pinned_bytes, reps, [&] {
                        WS_RETURN_IF_ERROR(device.CopyToHost(region.data(), first.data(),
                                                             pinned_bytes, Stream::kCopyOut));
                        return device.Synchronize(Stream::kCopyOut);
                      }));
  rows.push_back(RateRow("d2h_pinned", "D2H pinned (registered shm)", d2h,
                         absl::StrCat(pinned_size, " per copy, kCopyOut stream")));
  // Both directions at once, as KV copy-in overlaps D-window flushes; half each way.
  const uint64_t half = pinned_bytes / 2;
  WS_ASSIGN_OR_RETURN(
      Rate both, TimeRate(2 * half, reps, [&] {
        WS_RETURN_IF_ERROR(device.CopyToDevice(first.data(), region.data(), half, Stream::kCopyIn));
        WS_RETURN_IF_ERROR(
            device.CopyToHost(region.data() + half, second.data(), half, Stream::kCopyOut));
        WS_RETURN_IF_ERROR(device.Synchronize(Stream::kCopyIn));
        return device.Synchronize(Stream::kCopyOut);
      }));
  rows.push_back(RateRow("h2d_d2h_concurrent_pinned", "H2D + D2H at once, pinned", both,
                         absl::StrCat(FormatBytes(half), " each way, both directions counted")));

  WS_ASSIGN_OR_RETURN(HostBuffer pageable, AllocateHost(pageable_bytes));
  std::memset(pageable.get(), 1, pageable_bytes);
  const std::string pageable_size = FormatBytes(pageable_bytes);
  WS_ASSIGN_OR_RETURN(Rate h2d_pageable, TimeRate(pageable_bytes, reps, [&] {
                        WS_RETURN_IF_ERROR(device.CopyToDevice(first.data(), pageable.get(),
                                                               pageable_bytes, Stream::kCopyIn));
                        return device.Synchronize(Stream::kCopyIn);
                      }));
  rows.push_back(RateRow("h2d_pageable", "H2D pageable", h2d_pageable,
                         absl::StrCat(pageable_size, " malloc'ed, faulted in")));
  WS_ASSIGN_OR_RETURN(Rate d2h_pageable, TimeRate(pageable_bytes, reps, [&] {
                        WS_RETURN_IF_ERROR(device.CopyToHost(pageable.get(), first.data(),
                                                             pageable_bytes, Stream::kCopyOut));
                        return device.Synchronize(Stream::kCopyOut);
                      }));
  rows.push_back(RateRow("d2h_pageable", "D2H pageable", d2h_pageable,
                         absl::StrCat(pageable_size, " malloc'ed, faulted in")));

  WS_ASSIGN_OR_RETURN(Rate hbm, TimeRate(2 * hbm_bytes, reps, [&] {
                        WS_RETURN_IF_ERROR(device.CopyOnDevice(second.data(), first.data(),
                                                               hbm_bytes, Stream::kCompute));
                        return device.Synchronize(Stream::kCompute);
                      }));
  rows.push_back(
      RateRow("hbm_copy", "HBM device-to-device copy", hbm,
              absl::StrCat(FormatBytes(hbm_bytes), " cudaMemcpy D2D; read + write counted (2x)")));
  return absl::OkStatus();
}

// ---- output --------------------------------------------------------------------

void PrintTable(const std::vector<Row>& rows) {
  size_t what_width = 0, value_width = 0;
  for (const Row& row : rows) {
    what_width = std::max(what_width, row.what.size());
    value_width = std::max(value_width, row.value.size());
  }
  for (const Row& row : rows) {
    if (row.what.empty()) continue;  // JSON only
    absl::PrintF("%-*s  %-*s  %s\n", static_cast<int>(what_width), row.what,
                 static_cast<int>(value_width), row.value, row.how);
  }
}

absl::Status WriteJson(const std::string& path, const std::vector<Row>& rows) {
  std::vector<std::string> fields;
  for (const Row& row : rows)
    fields.push_back(absl::StrCat("  ", JsonString(row.key), ": ", row.json));
  const std::string text = absl::StrCat("{\n", absl::StrJoin(fields, ",\n"), "\n}\n");
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

int Run() {
  std::vector<Row> rows;
  const std::string cpu = CpuModel();
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  rows.push_back(Row{"cpu", "CPU", cpu, "", JsonString(cpu)});
  rows.push_back(Row{"online_cpus", "CPUs online", absl::StrCat(cpus), "", absl::StrCat(cpus)});

  // The channel measurement forks, so it runs before OpenMP or CUDA start threads.
  if (absl::GetFlag(FLAGS_channel)) {
    absl::Status status = ProbeChannel(rows);
    if (!status.ok()) {
      absl::FPrintF(stderr, "ws_probe: channel: %s\n", status.ToString());
      return 1;
    }
  }
  const std::string kind = absl::GetFlag(FLAGS_device);
  std::unique_ptr<gpu::Device> device;
  std::string absent_reason;
  if (kind == "auto") {
    absl::StatusOr<std::unique_ptr<gpu::Device>> cuda = gpu::CreateCudaDevice(0);
    if (cuda.ok()) {
      device = *std::move(cuda);
    } else {
      absent_reason = std::string(cuda.status().message());
    }
  } else {
    absl::StatusOr<std::unique_ptr<gpu::Device>> chosen = gpu::CreateDevice(kind);
    if (!chosen.ok()) {
      absl::FPrintF(stderr, "ws_probe: --device=%s: %s\n", kind, chosen.status().ToString());
      return 1;
    }
    device = *std::move(chosen);
  }
  // After the device exists (a bad --device fails fast), before the GPU copies.
  if (absl::Status status = ProbeDram(rows); !status.ok()) {
    absl::FPrintF(stderr, "ws_probe: DRAM: %s\n", status.ToString());
    return 1;
  }
  if (device == nullptr) {
    rows.push_back(Row{"gpu", "GPU", "none", absl::StrCat("absent: ", absent_reason), "null"});
    rows.push_back(Row{"gpu_absent_reason", "", "", "", JsonString(absent_reason)});
  } else {
    const std::string name = device->is_cuda() ? device->name() : "host (memcpy stand-in)";
    rows.push_back(Row{"gpu", "GPU", name, device->is_cuda() ? "CUDA device 0" : "--device=host",
                       JsonString(name)});
    if (absl::Status status = ProbeGpu(*device, rows); !status.ok()) {
      absl::FPrintF(stderr, "ws_probe: GPU: %s\n", status.ToString());
      return 1;
    }
  }

  absl::PrintF(
      "WriteScope probe: the machine's ceilings (best of runs; median in parentheses; "
      "GB/s = 1e9 B/s)\n\n");
  PrintTable(rows);
  if (device == nullptr) absl::PrintF("\nGPU absent: the GPU rows were skipped.\n");
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    if (absl::Status status = WriteJson(json_path, rows); !status.ok()) {
      absl::FPrintF(stderr, "ws_probe: %s\n", status.ToString());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace writescope

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  writescope::SetLogProcessName("ws_probe");
  return writescope::Run();
}
