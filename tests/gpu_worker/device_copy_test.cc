// Device::CopyToDevice on every path: the host device; on CUDA the copy engine (large copies,
// the transfer stream), the SM copy of a registered (pinned) source read where it lies, and
// the SM copy of a pageable source through the mapped staging slots (more copies than slots
// in a row, the source overwritten right after the call). Odd sizes and misaligned ends.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_worker/device.h"
#include "gpu_worker/pinned_array.h"
#include "gtest/gtest.h"
#include "tests/common/test_util.h"
#include "tests/gpu_worker/device_test_util.h"

namespace writescope::gpu {
namespace {

using testing::MakeDevice;

class DeviceCopyTest : public ::testing::TestWithParam<std::tuple<std::string, Stream>> {};

TEST_P(DeviceCopyTest, EverySizeAndSourceArrivesIntact) {
  const auto& [kind, stream] = GetParam();
  std::unique_ptr<Device> device = MakeDevice(kind);
  if (device == nullptr) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(5);
  const size_t kMax = (size_t{1} << 20) + 4099;
  absl::StatusOr<DeviceBuffer> dst = DeviceBuffer::Allocate(device.get(), kMax + 64);
  WS_ASSERT_OK(dst.status());
  PinnedArray<unsigned char> pinned(device.get());
  pinned.Resize(kMax + 64);
  if (kind == "cuda") {
    ASSERT_TRUE(pinned.pinned());  // else the "pinned" cases test nothing
  }
  std::vector<unsigned char> back(kMax + 64);
  for (size_t bytes : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{4099},
                       size_t{1} << 20, kMax}) {
    // Source and destination offsets: both aligned, both misaligned alike, one of each.
    for (auto [offset, dst_offset] : {std::pair<size_t, size_t>{0, 0}, {3, 3}, {16, 16}, {0, 5},
                                      {7, 0}}) {
      for (bool from_pinned : {false, true}) {
        std::vector<unsigned char> pageable(bytes + offset);
        unsigned char* src = from_pinned ? pinned.data() : pageable.data();
        for (size_t i = 0; i < bytes + offset; ++i) src[i] = static_cast<unsigned char>(rng());
        const std::vector<unsigned char> want(src + offset, src + offset + bytes);
        auto* out = static_cast<unsigned char*>(dst->data()) + dst_offset;
        WS_ASSERT_OK(device->CopyToDevice(out, src + offset, bytes, stream));
        // A pageable source may be reused at once (cudaMemcpyAsync's contract).
        if (!from_pinned) std::memset(pageable.data(), 0xAB, pageable.size());
        WS_ASSERT_OK(device->Synchronize(stream));
        WS_ASSERT_OK(device->CopyToHost(back.data(), out, bytes, stream));
        WS_ASSERT_OK(device->Synchronize(stream));
        ASSERT_EQ(0, std::memcmp(back.data(), want.data(), bytes))
            << bytes << " bytes from offset " << offset << " to offset " << dst_offset
            << (from_pinned ? " pinned" : " pageable");
      }
    }
  }
  // More pageable copies in a row than there are staging slots, nothing synchronized in
  // between: each lands whole.
  constexpr int kCopies = 40;
  constexpr size_t kPiece = 20000;
  std::vector<unsigned char> all(kCopies * kPiece);
  std::vector<unsigned char> piece(kPiece);
  for (int c = 0; c < kCopies; ++c) {
    for (unsigned char& v : piece) v = static_cast<unsigned char>(rng());
    std::memcpy(all.data() + c * kPiece, piece.data(), kPiece);
    WS_ASSERT_OK(device->CopyToDevice(static_cast<unsigned char*>(dst->data()) + c * kPiece % kMax,
                                      piece.data(), kPiece, stream));
    if ((c + 1) * kPiece > kMax / 2) {  // keep the destinations apart
      WS_ASSERT_OK(device->Synchronize(stream));
      WS_ASSERT_OK(device->CopyToHost(back.data(), dst->data(), (c + 1) * kPiece, stream));
      WS_ASSERT_OK(device->Synchronize(stream));
      ASSERT_EQ(0, std::memcmp(back.data(), all.data(), (c + 1) * kPiece)) << "copy " << c;
      break;
    }
  }
  WS_ASSERT_OK(device->Synchronize(stream));
  WS_ASSERT_OK(device->CopyToHost(back.data(), dst->data(), kPiece, stream));
  WS_ASSERT_OK(device->Synchronize(stream));
  EXPECT_EQ(0, std::memcmp(back.data(), all.data(), kPiece));
}

INSTANTIATE_TEST_SUITE_P(
    Paths, DeviceCopyTest,
    ::testing::Combine(::testing::Values("host", "cuda"),
                       ::testing::Values(Stream::kCompute, Stream::kCopyIn, Stream::kCopyOut)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_stream" +
             std::to_string(static_cast<int>(std::get<1>(info.param)));
    });

}  // namespace
}  // namespace writescope::gpu
