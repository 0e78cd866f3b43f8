// A kError message carries the CPU side's status code and message to the gpu_worker, so a
// worker that is stopping reads as UNAVAILABLE there, not as a broken step; any other failure
// of the CPU side reads as INTERNAL.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/data_plane.h"
#include "gtest/gtest.h"

namespace writescope {
namespace {

class ErrorPayloadRoundTrip : public ::testing::TestWithParam<absl::StatusCode> {};

TEST_P(ErrorPayloadRoundTrip, KeepsTheCodeAndTheMessage) {
  const absl::Status status(GetParam(), "cpu_worker is stopping");
  std::vector<std::byte> payload(ErrorPayloadBytes(status) + 7);  // room to spare
  const size_t n = WriteErrorPayload(status, absl::MakeSpan(payload));
  EXPECT_EQ(n, ErrorPayloadBytes(status));
  const absl::Status read = ReadErrorPayload(absl::MakeConstSpan(payload).subspan(0, n), "ctx: ");
  EXPECT_EQ(read.code(), GetParam());
  EXPECT_EQ(read.message(), "ctx: cpu_worker is stopping");
}

INSTANTIATE_TEST_SUITE_P(
    EveryFailure, ErrorPayloadRoundTrip,
    ::testing::Values(absl::StatusCode::kCancelled, absl::StatusCode::kUnknown,
                      absl::StatusCode::kInvalidArgument, absl::StatusCode::kDeadlineExceeded,
                      absl::StatusCode::kNotFound, absl::StatusCode::kAlreadyExists,
                      absl::StatusCode::kPermissionDenied, absl::StatusCode::kResourceExhausted,
                      absl::StatusCode::kFailedPrecondition, absl::StatusCode::kAborted,
                      absl::StatusCode::kOutOfRange, absl::StatusCode::kUnimplemented,
                      absl::StatusCode::kInternal, absl::StatusCode::kUnavailable,
                      absl::StatusCode::kDataLoss, absl::StatusCode::kUnauthenticated));

TEST(ErrorPayloadTest, AMessageCutToTheRoomKeepsItsCode) {
  const absl::Status status = absl::ResourceExhaustedError("0123456789");
  std::vector<std::byte> payload(sizeof(uint32_t) + 4);
  const size_t n = WriteErrorPayload(status, absl::MakeSpan(payload));
  EXPECT_EQ(n, payload.size());
  const absl::Status read = ReadErrorPayload(payload, "");
  EXPECT_EQ(read.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(read.message(), "0123");
}

TEST(ErrorPayloadTest, NoRoomForTheCodeWritesNothing) {
  std::vector<std::byte> payload(sizeof(uint32_t) - 1, std::byte{0x5a});
  EXPECT_EQ(WriteErrorPayload(absl::InternalError("x"), absl::MakeSpan(payload)), 0u);
  EXPECT_EQ(payload[0], std::byte{0x5a});
  EXPECT_EQ(WriteErrorPayload(absl::InternalError("x"), {}), 0u);
}

TEST(ErrorPayloadTest, APayloadWithoutAFailuresCodeReadsAsInternal) {
  // Shorter than the code: its bytes are the message.
  const std::string text = "ab";
  std::vector<std::byte> shorter(text.size());
  std::memcpy(shorter.data(), text.data(), text.size());
  absl::Status read = ReadErrorPayload(shorter, "ctx: ");
  EXPECT_EQ(read.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(read.message(), "ctx: ab");
  // Empty: INTERNAL with the context alone (never OK).
  read = ReadErrorPayload({}, "ctx");
  EXPECT_EQ(read.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(read.message(), "ctx");
  // Code 0 (OK) and codes past absl's last are no failure the sender wrote.
  for (const uint32_t code : {0u, 17u, 0xffffffffu}) {
    std::vector<std::byte> payload(sizeof(code) + 1);
    std::memcpy(payload.data(), &code, sizeof(code));
    payload.back() = std::byte{'m'};
    read = ReadErrorPayload(payload, "");
    EXPECT_EQ(read.code(), absl::StatusCode::kInternal) << code;
    EXPECT_EQ(read.message(), "m") << code;
  }
}

TEST(CpuSideFailureTest, OnlyAWorkerGoingAwayKeepsItsCode) {
  for (const absl::StatusCode code :
       {absl::StatusCode::kUnavailable, absl::StatusCode::kCancelled}) {
    const absl::Status status(code, "cpu_worker is stopping");
    std::vector<std::byte> payload(ErrorPayloadBytes(status));
    WriteErrorPayload(status, absl::MakeSpan(payload));
    const absl::Status read = CpuSideFailure(payload, "layer 3: ");
    EXPECT_EQ(read.code(), code);
    EXPECT_EQ(read.message(), "layer 3: cpu_worker is stopping");
  }
  // A mismatch between the workers is no client's bad argument; a reply that timed out is no
  // client's deadline.
  for (const absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kDeadlineExceeded,
        absl::StatusCode::kFailedPrecondition, absl::StatusCode::kResourceExhausted,
        absl::StatusCode::kInternal}) {
    const absl::Status status(code, "queries of 5 tokens, expected 4");
    std::vector<std::byte> payload(ErrorPayloadBytes(status));
    WriteErrorPayload(status, absl::MakeSpan(payload));
    const absl::Status read = CpuSideFailure(payload, "layer 3: ");
    EXPECT_EQ(read.code(), absl::StatusCode::kInternal) << absl::StatusCodeToString(code);
    EXPECT_EQ(read.message(), "layer 3: queries of 5 tokens, expected 4");
  }
  EXPECT_EQ(CpuSideFailure({}, "x").code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace writescope
