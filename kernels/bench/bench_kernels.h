// Reference kernels for the attention benchmark (CUDA builds only): a plain streaming
// read, the size-matched ceiling a decode over the same bytes is compared with, and the
// L2 flush between timed runs.
#ifndef WRITESCOPE_KERNELS_BENCH_BENCH_KERNELS_H_
#define WRITESCOPE_KERNELS_BENCH_BENCH_KERNELS_H_

#include <cstddef>

namespace writescope::kernels::bench {

// Reads `bytes` (rounded down to 16) of device memory with 16-byte loads from `blocks`
// CTAs of 256 threads; each CTA writes one word of its XOR to sink[block] (so the loads
// cannot be dropped). Streaming loads (the L2 evicts their lines first), or with `cached`
// loads whose lines the L2 keeps at normal priority. Returns a cudaError_t as int.
int LaunchReadAll(const void* data, size_t bytes, unsigned* sink, int blocks, void* stream,
                  bool cached = false);

// Reads as LaunchReadAll with `ctas` CTAs of 1024 threads, one an SM (8 loads of 16 bytes in
// flight a thread): what n SMs alone can stream.
int LaunchReadFew(const void* data, size_t bytes, unsigned* sink, int ctas, void* stream);

// A single-kernel decode's floor at batch 1: `clusters` clusters of `cluster_size` CTAs of
// 1024 threads (one an SM) read `bytes` of `data`, each cluster its contiguous part and each
// CTA a contiguous slice of it (a (seq, kv head)'s keys and its splits), then merge a
// [8][128] fp32 state a CTA through distributed shared memory into out[clusters][8][128].
// Sizes over 8 are non-portable and may fail to launch.
int LaunchReadClusters(const void* data, size_t bytes, float* out, int clusters, int cluster_size,
                       void* stream);

// The floors of a call's launches (a CTA writes sink[block]: sink holds a word a CTA):
// one empty grid; an empty grid and a programmatic dependent that waits for it (as the
// decode and its split merge); `clusters` clusters of `cluster_size` CTAs that meet at a
// cluster barrier and read each other's shared memory (sizes over 8 are non-portable).
int LaunchEmpty(unsigned* sink, int ctas, int threads, void* stream);
int LaunchEmptyPair(unsigned* sink, int ctas, int threads, void* stream);
int LaunchEmptyClusters(unsigned* sink, int clusters, int cluster_size, int threads, void* stream);

// One thread writes the %globaltimer (ns) to *out: a mark on the stream between two kernels,
// in the decode timeline's clock (cuda_attention.h GqaGpuDecodeArgs::timeline).
int LaunchStamp(unsigned long long* out, void* stream);

}  // namespace writescope::kernels::bench

#endif  // WRITESCOPE_KERNELS_BENCH_BENCH_KERNELS_H_
