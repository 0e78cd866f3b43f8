// PinnedArray: sizes, capacity reuse, swap; on the host device nothing is pinned. (With
// CUDA, the gpu_worker's step buffers are pinned: e2e_generate and the prefill runs on
// the GPU machine exercise that.)
#include "gpu_worker/pinned_array.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace writescope::gpu {
namespace {

TEST(PinnedArrayTest, ResizeKeepsTheBufferWhileItFitsAndSwapExchanges) {
  std::unique_ptr<Device> host = CreateHostDevice();
  PinnedArray<float> a(host.get());
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(a.data(), nullptr);
  a.Resize(1000);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 4096, 0u);  // page-aligned
  EXPECT_FALSE(a.pinned());  // the host device pins nothing
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
  float* before = a.data();
  a.Resize(10);    // smaller: same buffer, contents kept
  a.Resize(1200);  // within the 1.5x capacity: same buffer
  EXPECT_EQ(a.data(), before);
  EXPECT_EQ(a[999], 999.0f);
  EXPECT_EQ(a.end() - a.begin(), 1200);
  a.Resize(100000);  // grows: a new buffer
  EXPECT_EQ(a.size(), 100000u);
  a[99999] = 1.0f;

  PinnedArray<float> b(host.get());
  b.Resize(3);
  b[0] = 7.0f;
  float* a_data = a.data();
  float* b_data = b.data();
  swap(a, b);
  EXPECT_EQ(a.data(), b_data);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0], 7.0f);
  EXPECT_EQ(b.data(), a_data);
  EXPECT_EQ(b.size(), 100000u);
  EXPECT_EQ(b.span().size(), 100000u);
}

TEST(PinnedArrayTest, WorksWithoutADevice) {
  PinnedArray<uint16_t> a;
  a.Resize(5);
  a[4] = 3;
  EXPECT_EQ(a.span()[4], 3);
  EXPECT_FALSE(a.pinned());
}

}  // namespace
}  // namespace writescope::gpu
