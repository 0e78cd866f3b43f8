// Helpers shared by the CUDA kernel tests (label gpu): RAII device memory and the skip
// without a device. Test-only; includes the CUDA runtime header.
#ifndef WRITESCOPE_TESTS_KERNELS_CUDA_TEST_UTIL_H_
#define WRITESCOPE_TESTS_KERNELS_CUDA_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_attention.h"

#define SKIP_WITHOUT_GPU() \
  if (!::writescope::kernels::cuda::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device"

namespace writescope::kernels::cuda::testing {

// RAII device memory. kMinBytes > 0 allocates at least that much, also for an empty
// buffer (a valid, non-null pointer); kMinBytes == 0 leaves an empty buffer null.
template <size_t kMinBytes>
class BasicDeviceBuffer {
 public:
  BasicDeviceBuffer() = default;
  explicit BasicDeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0 || kMinBytes > 0) {
      EXPECT_EQ(cudaMalloc(&ptr_, std::max(bytes, kMinBytes)), cudaSuccess);
    }
  }
  ~BasicDeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  BasicDeviceBuffer(const BasicDeviceBuffer&) = delete;
  BasicDeviceBuffer& operator=(const BasicDeviceBuffer&) = delete;
  BasicDeviceBuffer(BasicDeviceBuffer&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
    other.ptr_ = nullptr;
  }
  BasicDeviceBuffer& operator=(BasicDeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  template <typename T>
  static BasicDeviceBuffer From(const std::vector<T>& host) {
    BasicDeviceBuffer buffer(host.size() * sizeof(T));
    if (!host.empty()) {
      EXPECT_EQ(cudaMemcpy(buffer.ptr_, host.data(), buffer.bytes_, cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    return buffer;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  template <typename T>
  std::vector<T> ToHost() const {
    std::vector<T> host(bytes_ / sizeof(T));
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace writescope::kernels::cuda::testing

#endif  // WRITESCOPE_TESTS_KERNELS_CUDA_TEST_UTIL_H_
