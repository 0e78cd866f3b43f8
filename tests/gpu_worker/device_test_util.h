// The device a parameterized gpu_worker test runs on: "host" or "cuda" (null when there is no
// CUDA device: the test skips).
#ifndef WRITESCOPE_TESTS_GPU_WORKER_DEVICE_TEST_UTIL_H_
#define WRITESCOPE_TESTS_GPU_WORKER_DEVICE_TEST_UTIL_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gpu_worker/device.h"
#include "gtest/gtest.h"

namespace writescope::gpu::testing {

// Null only where there is no CUDA device (UNAVAILABLE: no device, no driver, or a build
// without CUDA); a device that is there but fails to start is a test failure, not a skip.
inline std::unique_ptr<Device> MakeDevice(const std::string& kind) {
  if (kind == "host") return CreateHostDevice();
  absl::StatusOr<std::unique_ptr<Device>> cuda = CreateCudaDevice(0);
  if (!cuda.ok() && !absl::IsUnavailable(cuda.status())) {
    ADD_FAILURE() << "the CUDA device did not start: " << cuda.status();
  }
  return cuda.ok() ? *std::move(cuda) : nullptr;
}

// In a test or SetUp: skips where `device` (a CreateCudaDevice result) says there is no CUDA
// device, fails where the device is there but did not start.
#define WS_SKIP_WITHOUT_CUDA(device)                                        \
  if (!(device).ok()) {                                                     \
    if (absl::IsUnavailable((device).status())) {                           \
      GTEST_SKIP() << "no CUDA device: " << (device).status();              \
    }                                                                       \
    FAIL() << "the CUDA device did not start: " << (device).status();      \
  }

}  // namespace writescope::gpu::testing

#endif  // WRITESCOPE_TESTS_GPU_WORKER_DEVICE_TEST_UTIL_H_
