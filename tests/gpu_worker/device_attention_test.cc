// DeviceAttention (what the gpu_worker's steps call) against the fp64 reference: batched GQA
// decode over sequences with their own tile lists (empty ones, partial last tiles, odd
// counts), on the host device and, when there is one, the CUDA device (its batched decode
// path stages all sequences once). Real head shapes (Qwen3 32/4, Mixtral 32/8, head_dim 128),
// which have compiled CUDA kernels (the adapter's CPU fallback is for shapes without one and
// logs a warning when taken).
#include "gpu_worker/device_attention.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/attention_reference.h"
#include "kernels/bf16.h"
#include "tests/common/test_util.h"
#include "tests/gpu_worker/device_test_util.h"

namespace writescope::gpu {
namespace {

using testing::MakeDevice;

// The kernels' own contract (bf16 inputs, fp32 accumulation against the fp64 reference;
// tests/kernels' CPU and CUDA kernel tests hold them to the same bounds).
constexpr double kOutputTol = 2e-5;
constexpr double kLseTol = 1e-4;

// got (o with 16 guard values after it, lse likewise) against the reference: o within
// o_tolerance, lse within lse_tolerance, empty rows -inf, guards untouched (7.0f).
void ExpectMatchesReference(const std::vector<float>& want_o, const std::vector<float>& want_lse,
                            const std::vector<float>& got_o, const std::vector<float>& got_lse,
                            double o_tolerance, double lse_tolerance) {
  const size_t values = want_o.size(), rows = want_lse.size();
  double worst = 0;
  size_t not_finite = 0;  // std::max would pass a NaN over
  for (size_t i = 0; i < values; ++i) {
    const double error = std::fabs(double(got_o[i]) - want_o[i]);
    if (!std::isfinite(error)) ++not_finite;
    else worst = std::max(worst, error);
  }
  EXPECT_EQ(not_finite, 0u) << "values of o that are not finite";
  for (size_t r = 0; r < rows; ++r) {
    if (std::isinf(want_lse[r])) {
      EXPECT_TRUE(std::isinf(got_lse[r]) && got_lse[r] < 0) << "row " << r;
    } else {
      EXPECT_NEAR(got_lse[r], want_lse[r], lse_tolerance) << "row " << r;
    }
  }
  EXPECT_LT(worst, o_tolerance);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(got_o[values + i], 7.0f);  // guards
    EXPECT_EQ(got_lse[rows + i], 7.0f);
  }
}

// Random bf16 tiles kept twice: on the host, which the reference reads, and on the device,
// which the device attention reads. Each list holds its tiles' bases on both sides.
class TwinTiles {
 public:
  TwinTiles(Device* device, int64_t tile_values, int32_t lists)
      : device_(device), tile_values_(tile_values), host_lists_(lists), device_lists_(lists) {}

  // Appends enough random tiles for `tokens` keys to list `index`.
  void Fill(int32_t index, int64_t tokens, int32_t block_tokens, std::mt19937_64& rng,
            std::uniform_real_distribution<float>& dist) {
    for (int64_t b = 0; b < (tokens + block_tokens - 1) / block_tokens; ++b) {
      std::vector<uint16_t>& tile = host_tiles_.emplace_back(tile_values_);
      for (uint16_t& v : tile) v = kernels::FloatToBf16(dist(rng));
      absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(device_, tile_values_ * 2);
      WS_ASSERT_OK(buffer.status());
      WS_ASSERT_OK(device_->CopyToDevice(buffer->data(), tile.data(), tile_values_ * 2,
                                         Stream::kCompute));
      host_lists_[index].push_back(tile.data());
      device_lists_[index].push_back(static_cast<const uint16_t*>(buffer->data()));
      device_tiles_.push_back(*std::move(buffer));
    }
  }

  // The first `tokens` keys of list `index`, as the host and the device see them.
  void Row(int32_t index, int64_t tokens, int32_t block_tokens, kernels::KvBlockList* host,
           kernels::KvBlockList* device) const {
    const int32_t blocks = static_cast<int32_t>((tokens + block_tokens - 1) / block_tokens);
    const int32_t last =
        blocks == 0 ? 0 : static_cast<int32_t>(tokens - int64_t{blocks - 1} * block_tokens);
    *host = {};
    *device = {};
    host->blocks = host_lists_[index].data();
    device->blocks = device_lists_[index].data();
    host->num_blocks = device->num_blocks = blocks;
    host->last_block_tokens = device->last_block_tokens = last;
  }

 private:
  Device* device_;
  int64_t tile_values_;
  std::vector<std::vector<uint16_t>> host_tiles_;
  std::vector<DeviceBuffer> device_tiles_;
  std::vector<std::vector<const uint16_t*>> host_lists_, device_lists_;
};

struct Case {
  int32_t q_heads, kv_heads;
  std::vector<int64_t> seq_tokens;  // per sequence; 0: no keys
};

class DeviceAttentionTest : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(DeviceAttentionTest, BatchedGqaDecodeMatchesTheReference) {
  const auto& [device_kind, c] = GetParam();
  std::unique_ptr<Device> device = MakeDevice(device_kind);
  if (device == nullptr) GTEST_SKIP() << "no CUDA device";
  auto attention = CreateDeviceAttention(device.get());
  WS_ASSERT_OK(attention.status());
  kernels::GqaShape shape;
  shape.num_q_heads = c.q_heads;
  shape.num_kv_heads = c.kv_heads;
  shape.head_dim = 128;
  shape.block_tokens = 256;
  shape.softmax_scale = 1.0f / std::sqrt(128.0f);
  const int64_t tile_values = int64_t{2} * c.kv_heads * shape.block_tokens * shape.head_dim;
  const int32_t n = static_cast<int32_t>(c.seq_tokens.size());
  std::mt19937_64 rng(17 + n);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);

  TwinTiles tiles(device.get(), tile_values, n);
  std::vector<kernels::KvBlockList> host_seqs(n), device_seqs(n);
  for (int32_t s = 0; s < n; ++s) {
    tiles.Fill(s, c.seq_tokens[s], shape.block_tokens, rng, dist);
    tiles.Row(s, c.seq_tokens[s], shape.block_tokens, &host_seqs[s], &device_seqs[s]);
  }
  WS_ASSERT_OK(device->SynchronizeAll());
  std::vector<uint16_t> q(int64_t{n} * c.q_heads * shape.head_dim);
  for (uint16_t& v : q) v = kernels::FloatToBf16(dist(rng));
  const int64_t rows = int64_t{n} * c.q_heads;
  std::vector<float> want_o(rows * shape.head_dim), want_lse(rows);
  std::vector<float> got_o(rows * shape.head_dim + 16, 7.0f), got_lse(rows + 16, 7.0f);

  kernels::GqaDecodeArgs args;
  args.shape = shape;
  args.num_seqs = n;
  args.q = q.data();
  args.seqs = host_seqs.data();
  args.o = want_o.data();
  args.lse = want_lse.data();
  WS_ASSERT_OK(kernels::ReferenceGqaDecode(args));
  args.seqs = device_seqs.data();
  args.o = got_o.data();
  args.lse = got_lse.data();
  WS_ASSERT_OK((*attention)->GqaDecode(args));
  ExpectMatchesReference(want_o, want_lse, got_o, got_lse, kOutputTol, kLseTol);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DeviceAttentionTest,
    ::testing::Combine(::testing::Values("host", "cuda"),
                       ::testing::Values(Case{32, 4, {1}}, Case{32, 4, {300, 0, 257, 5, 1000}},
                                         Case{32, 8, {256, 77, 0, 0, 513}},
                                         Case{32, 4, std::vector<int64_t>(32, 511)},
                                         Case{32, 4, {0}})),
    [](const auto& info) {
      const Case& c = std::get<1>(info.param);
      return std::get<0>(info.param) + "_h" + std::to_string(c.q_heads) + "_kv" +
             std::to_string(c.kv_heads) + "_n" + std::to_string(c.seq_tokens.size()) + "_" +
             std::to_string(info.index);
    });


// MLA rows as the step builds them: decode rows with their own lists (empty ones, partial
// last tiles) and prefill rows that list prefixes of one shared block array (each query of a
// chunk sees its own causal prefix), in one call.
struct MlaCase {
  std::vector<int64_t> row_tokens;  // own list per row; 0: no keys
  int32_t prefix_rows = 0;          // then this many rows over prefixes of one shared list
  int64_t shared_tokens = 0;
};

class DeviceMlaTest : public ::testing::TestWithParam<std::tuple<std::string, MlaCase>> {};

TEST_P(DeviceMlaTest, MlaDecodeMatchesTheReference) {
  const auto& [device_kind, c] = GetParam();
  std::unique_ptr<Device> device = MakeDevice(device_kind);
  if (device == nullptr) GTEST_SKIP() << "no CUDA device";
  auto attention = CreateDeviceAttention(device.get());
  WS_ASSERT_OK(attention.status());
  kernels::MlaShape shape;
  shape.block_tokens = 64;
  shape.softmax_scale = 1.0f / std::sqrt(192.0f);
  const int64_t tile_values = int64_t{shape.block_tokens} * shape.row_dim();
  const int32_t own = static_cast<int32_t>(c.row_tokens.size());
  const int32_t n = own + c.prefix_rows;
  std::mt19937_64 rng(29 + n);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);

  // Lists: one per own row, then the shared one.
  TwinTiles tiles(device.get(), tile_values, own + 1);
  for (int32_t s = 0; s < own; ++s) tiles.Fill(s, c.row_tokens[s], shape.block_tokens, rng, dist);
  tiles.Fill(own, c.shared_tokens, shape.block_tokens, rng, dist);
  WS_ASSERT_OK(device->SynchronizeAll());
  std::vector<kernels::KvBlockList> host_rows(n), device_rows(n);
  auto set_row = [&](int32_t row, int32_t list, int64_t tokens) {
    tiles.Row(list, tokens, shape.block_tokens, &host_rows[row], &device_rows[row]);
  };
  for (int32_t s = 0; s < own; ++s) set_row(s, s, c.row_tokens[s]);
  for (int32_t i = 0; i < c.prefix_rows; ++i) {
    // Row i of the chunk sees the first tokens of the shared list, growing with i.
    set_row(own + i, own, c.shared_tokens - (c.prefix_rows - 1 - i) * 37 % (c.shared_tokens + 1));
  }
  std::vector<uint16_t> q(int64_t{n} * shape.num_heads * shape.row_dim());
  for (uint16_t& v : q) v = kernels::FloatToBf16(dist(rng));
  const int64_t rows = int64_t{n} * shape.num_heads;
  std::vector<float> want_o(rows * shape.kv_lora_rank), want_lse(rows);
  std::vector<float> got_o(rows * shape.kv_lora_rank + 16, 7.0f), got_lse(rows + 16, 7.0f);
  kernels::MlaDecodeArgs args;
  args.shape = shape;
  args.num_seqs = n;
  args.q = q.data();
  args.seqs = host_rows.data();
  args.o = want_o.data();
  args.lse = want_lse.data();
  WS_ASSERT_OK(kernels::ReferenceMlaDecode(args));
  args.seqs = device_rows.data();
  args.o = got_o.data();
  args.lse = got_lse.data();
  WS_ASSERT_OK((*attention)->MlaDecode(args));
  ExpectMatchesReference(want_o, want_lse, got_o, got_lse, kOutputTol, kLseTol);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DeviceMlaTest,
    ::testing::Combine(::testing::Values("host", "cuda"),
                       ::testing::Values(MlaCase{{1}, 0, 0}, MlaCase{{300, 0, 257, 5, 1000}, 0, 0},
                                         MlaCase{{}, 5, 200}, MlaCase{{65, 0}, 7, 129},
                                         MlaCase{std::vector<int64_t>(32, 511), 0, 0},
                                         MlaCase{{0, 0}, 0, 0})),
    [](const auto& info) {
      const MlaCase& c = std::get<1>(info.param);
      return std::get<0>(info.param) + "_n" + std::to_string(c.row_tokens.size()) + "_p" +
             std::to_string(c.prefix_rows) + "_" + std::to_string(info.index);
    });

}  // namespace
}  // namespace writescope::gpu
