// The device a parameterized gpu_worker test runs on: "host" or "cuda" (null when there is no
// CUDA device: the test skips).
#ifndef WRITESCOPE_TESTS_GPU_WORKER_DEVICE_TEST_UTIL_H_
#define WRITESCOPE_TESTS_GPU_WORKER_DEVICE_TEST_UTIL_H_

#include <memory>
#include <string>

#include "gpu_worker/device.h"

namespace writescope::gpu::testing {

inline std::unique_ptr<Device> MakeDevice(const std::string& kind) {
  if (kind == "host") return CreateHostDevice();
  absl::StatusOr<std::unique_ptr<Device>> cuda = CreateCudaDevice(0);
  return cuda.ok() ? *std::move(cuda) : nullptr;
}

}  // namespace writescope::gpu::testing

#endif  // WRITESCOPE_TESTS_GPU_WORKER_DEVICE_TEST_UTIL_H_
