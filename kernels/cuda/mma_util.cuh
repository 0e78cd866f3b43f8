// Tensor-core and async-copy helpers shared by the attention kernels (CUDA only; sm_80+
// instructions, built for sm_90): mma.sync m16n8k16 bf16 -> fp32, ldmatrix, cp.async,
// and the bf16 hi + lo split that keeps P at ~16 mantissa bits for P V.
// The asm statements carry no "memory" clobber: the kernels hand shared memory between
// cp.async, plain stores and ldmatrix only across __syncthreads(), which orders them.
#ifndef WRITESCOPE_KERNELS_CUDA_MMA_UTIL_CUH_
#define WRITESCOPE_KERNELS_CUDA_MMA_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"

namespace writescope::kernels::cuda::internal {

// d += A B: A 16x16 row-major (a0..a3 in the m16n8k16 fragment order), B 16x8 col-major.
__device__ __forceinline__ void MmaBf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  MmaBf16(d, a[0], a[1], a[2], a[3], b0, b1);
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Lanes 0-15 address the two matrices (the others' addresses are ignored but must be
// valid shared addresses).
__device__ __forceinline__ void LdMatrixX2(uint32_t (&r)[2], const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16 bytes global -> shared; src_bytes 0 zero-fills without reading.
__device__ __forceinline__ void CpAsync16(void* smem, const void* global, int src_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(global),
               "r"(src_bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n"); }
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// p0, p1 -> bf16 pairs hi and lo with hi + lo == p to ~2^-17 relative.
__device__ __forceinline__ void SplitBf16(float p0, float p1, uint32_t& hi, uint32_t& lo) {
  hi = PackBf16(p0, p1);
  lo = PackBf16(p0 - Bf16Lo(hi), p1 - Bf16Hi(hi));
}

// ---- Bulk copies and transaction barriers (sm_90): a producer thread moves whole runs of
// rows global -> shared with one instruction each (cp.async.bulk, the copy engine of the SM,
// no registers held while in flight); an mbarrier counts the bytes that have landed. Unlike
// the helpers above these carry a "memory" clobber: the consumers' plain shared-memory loads
// must stay between their wait and their release.

__device__ __forceinline__ uint32_t SharedAddress(const void* smem) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(smem));
}

__device__ __forceinline__ void MbarInit(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SharedAddress(bar)), "r"(arrivals)
               : "memory");
}
// Makes the initialized barriers visible to the async proxy (the bulk copies that complete
// on them); the CTA's threads see them after the __syncthreads() that follows.
__device__ __forceinline__ void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SharedAddress(bar)) : "memory");
}
// One arrival that also expects `bytes` more bytes of bulk copies before the phase completes.
__device__ __forceinline__ void MbarArriveExpectBytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SharedAddress(bar)),
               "r"(bytes)
               : "memory");
}
// Waits until the barrier's phase of parity `parity` (0 for its first phase, 1 for its
// second, 0 again ...) has completed.
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = SharedAddress(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (done == 0);
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) global -> shared, counted on
// `bar` as they land.
__device__ __forceinline__ void BulkCopyToShared(void* smem, const void* global, uint32_t bytes,
                                                 uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(SharedAddress(smem)),
      "l"(global), "r"(bytes), "r"(SharedAddress(bar))
      : "memory");
}
// Orders this CTA's earlier generic-proxy accesses to shared memory (the consumers' reads of
// a stage, seen through its `empty` barrier) before the async-proxy writes that follow (the
// bulk copies that refill it).
__device__ __forceinline__ void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// bar.sync on a named barrier (1..15) for kThreads threads (a multiple of 32): a subset of
// the CTA's warps meets without the others.
template <int kId, int kThreads>
__device__ __forceinline__ void NamedBarrierSync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

}  // namespace writescope::kernels::cuda::internal

#endif  // WRITESCOPE_KERNELS_CUDA_MMA_UTIL_CUH_
