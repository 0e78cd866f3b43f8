// Whether host memory is registered with CUDA (page-locked): copies to and from it run
// asynchronously at the DMA rate, where pageable memory goes through the driver's staging.
// The gpu_worker's CUDA sources only.
#ifndef WRITESCOPE_GPU_WORKER_CUDA_PINNED_HOST_H_
#define WRITESCOPE_GPU_WORKER_CUDA_PINNED_HOST_H_

#include <cuda_runtime.h>

namespace writescope::gpu {

inline bool IsPinnedHost(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // clear it: a plain pointer is not an error here
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

}  // namespace writescope::gpu

#endif  // WRITESCOPE_GPU_WORKER_CUDA_PINNED_HOST_H_
