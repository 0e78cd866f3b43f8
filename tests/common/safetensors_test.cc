#include "common/safetensors.h"

#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/model_test_util.h"
#include "tests/common/test_util.h"

namespace writescope {
namespace {

using ::testing::HasSubstr;

std::string Bytes(std::initializer_list<uint8_t> bytes) {
  return std::string(bytes.begin(), bytes.end());
}

// A file with the given raw header text and `data_bytes` zero bytes of data.
std::string RawFile(const std::string& header, size_t data_bytes) {
  std::string out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += header;
  out.append(data_bytes, '\0');
  return out;
}

std::vector<SafetensorsWriteTensor> SampleTensors() {
  return {
      {"a.weight", SafetensorsDtype::kBF16, {2, 3}, std::string(12, '\x01')},
      {"b.bias", SafetensorsDtype::kF32, {5}, std::string(20, '\x02')},
      {"c.half", SafetensorsDtype::kF16, {1, 1, 2}, Bytes({0x00, 0x3c, 0x00, 0xc0})},
      {"d.empty", SafetensorsDtype::kBF16, {0, 4}, ""},
      {"e.scalar", SafetensorsDtype::kI64, {}, std::string(8, '\x07')},
  };
}

TEST(SafetensorsTest, RoundTripInMemory) {
  auto bytes = SerializeSafetensors(SampleTensors(), {{"format", "pt"}});
  WS_ASSERT_OK(bytes.status());
  EXPECT_EQ((bytes->size() - 8) % 8, (12u + 20 + 4 + 0 + 8) % 8);  // header padded to 8
  auto header = ParseSafetensorsHeader(*bytes, "mem");
  WS_ASSERT_OK(header.status());
  ASSERT_EQ(header->tensors.size(), 5u);
  EXPECT_EQ(header->metadata.at("format"), "pt");
  EXPECT_EQ(header->data_offset % 8, 0u);
  const SafetensorsTensorInfo* a = header->Find("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, SafetensorsDtype::kBF16);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->numel, 6);
  EXPECT_EQ(a->bytes(), 12u);
  const SafetensorsTensorInfo* e = header->Find("e.scalar");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->shape.empty());
  EXPECT_EQ(e->numel, 1);
  EXPECT_EQ(header->Find("d.empty")->numel, 0);
  EXPECT_EQ(header->Find("missing"), nullptr);
}

TEST(SafetensorsTest, RoundTripThroughFileMapsData) {
  const std::string dir = testing::MakeTempDir("st");
  const std::string path = dir + "/x.safetensors";
  WS_ASSERT_OK(WriteSafetensors(path, SampleTensors()));
  auto file = SafetensorsFile::Open(path);
  WS_ASSERT_OK(file.status());
  EXPECT_EQ((*file)->path(), path);
  const SafetensorsTensorInfo* c = (*file)->Find("c.half");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(std::memcmp((*file)->data(*c), "\x00\x3c\x00\xc0", 4), 0);
  const SafetensorsTensorInfo* b = (*file)->Find("b.bias");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*file)->data(*b)), 20),
            std::string(20, '\x02'));
}

TEST(SafetensorsTest, OpenMissingFile) {
  auto file = SafetensorsFile::Open("/nonexistent/x.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr("/nonexistent/x.safetensors"));
}

TEST(SafetensorsTest, OpenTruncatedFileNamesIt) {
  const std::string dir = testing::MakeTempDir("st");
  auto bytes = SerializeSafetensors(SampleTensors());
  WS_ASSERT_OK(bytes.status());
  const std::string path = dir + "/truncated.safetensors";
  std::ofstream(path, std::ios::binary) << bytes->substr(0, bytes->size() - 3);
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), HasSubstr(path));
  EXPECT_THAT(file.status().message(), HasSubstr("truncated"));

  const std::string tiny = dir + "/tiny.safetensors";
  std::ofstream(tiny, std::ios::binary) << "abc";
  file = SafetensorsFile::Open(tiny);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("shorter than the 8-byte header length"));
}

struct Corruption {
  std::string test_name;
  std::string file;
  std::string expected_message;
};

class SafetensorsCorruptionTest : public ::testing::TestWithParam<Corruption> {};

TEST_P(SafetensorsCorruptionTest, IsAnErrorNamingTheProblem) {
  const Corruption& c = GetParam();
  auto header = ParseSafetensorsHeader(c.file, "bad.safetensors");
  ASSERT_FALSE(header.ok());
  EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(header.status().message(), HasSubstr("bad.safetensors"));
  EXPECT_THAT(header.status().message(), HasSubstr(c.expected_message));
}

const char kGood[] = R"({"t":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})";

INSTANTIATE_TEST_SUITE_P(
    Cases, SafetensorsCorruptionTest,
    ::testing::Values(
        Corruption{"Empty", "", "shorter than the 8-byte header length"},
        Corruption{"SevenBytes", std::string(7, '\0'), "shorter than the 8-byte header length"},
        Corruption{"HeaderLengthBeyondFile", Bytes({0xff, 0, 0, 0, 0, 0, 0, 0, '{', '}'}),
                   "header length 255 runs past the end of the file"},
        Corruption{"HugeHeaderLength", Bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}),
                   "runs past the end of the file"},
        Corruption{"ZeroHeaderLength", RawFile("", 0), "too small for a JSON object"},
        Corruption{"MalformedJson", RawFile("{\"t\": {", 0), "not valid JSON"},
        Corruption{"NotUtf8", RawFile("{\"\xff\": 1}", 0), "not valid JSON"},
        Corruption{"NotAnObject", RawFile("[1, 2, 3]", 0), "must be a JSON object"},
        Corruption{"EntryNotObject", RawFile(R"({"t": 3})", 0), "entry must be an object"},
        Corruption{"MissingDtype", RawFile(R"({"t":{"shape":[2],"data_offsets":[0,4]}})", 4),
                   "tensor \"t\": missing 'dtype'"},
        Corruption{"MissingShape", RawFile(R"({"t":{"dtype":"BF16","data_offsets":[0,4]}})", 4),
                   "missing 'shape'"},
        Corruption{"MissingOffsets", RawFile(R"({"t":{"dtype":"BF16","shape":[2]}})", 4),
                   "missing 'data_offsets'"},
        Corruption{"UnknownDtype",
                   RawFile(R"({"t":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,4]}})", 4),
                   "unknown dtype \"Q4_K\""},
        Corruption{"DtypeNotString",
                   RawFile(R"({"t":{"dtype":16,"shape":[2],"data_offsets":[0,4]}})", 4),
                   "dtype must be a string"},
        Corruption{"NegativeDim",
                   RawFile(R"({"t":{"dtype":"BF16","shape":[-2],"data_offsets":[0,4]}})", 4),
                   "shape must hold non-negative integers"},
        Corruption{"FloatDim",
                   RawFile(R"({"t":{"dtype":"BF16","shape":[2.5],"data_offsets":[0,4]}})", 4),
                   "shape must hold non-negative integers"},
        Corruption{"OverflowingShape",
                   RawFile(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,16],)"
                           R"("data_offsets":[0,4]}})",
                           4),
                   "overflows"},
        Corruption{"OffsetsNotPair",
                   RawFile(R"({"t":{"dtype":"BF16","shape":[2],"data_offsets":[0]}})", 4),
                   "data_offsets must be [begin, end]"},
        Corruption{"OffsetsReversed",
                   RawFile(R"({"t":{"dtype":"BF16","shape":[0],"data_offsets":[4,0]}})", 4),
                   "end before they begin"},
        Corruption{"OffsetsPastData", RawFile(kGood, 3), "run past the data section (3 bytes)"},
        Corruption{"OffsetsDontMatchShape",
                   RawFile(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8),
                   "hold 4 bytes but dtype F32 x shape [2] needs 8"},
        Corruption{"Overlap",
                   RawFile(R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[2,6]}})",
                           8),
                   "tensor \"b\": data_offsets [2, 6] overlap those of tensor \"a\""},
        Corruption{"DuplicateName",
                   RawFile(R"({"t":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                           R"("t":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}})",
                           8),
                   "duplicate entry \"t\""},
        Corruption{"MetadataNotStrings", RawFile(R"({"__metadata__":{"format":1}})", 0),
                   "__metadata__ entry \"format\" must be a string"},
        Corruption{"DeepNesting", RawFile(std::string(50, '[') + std::string(50, ']'), 0),
                   "nested too deeply"}),
    [](const ::testing::TestParamInfo<Corruption>& info) { return info.param.test_name; });

TEST(SafetensorsTest, GapsBetweenTensorsAreAllowed) {
  auto header =
      ParseSafetensorsHeader(RawFile(R"({"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                                     R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}})",
                                     12),
                             "gap");
  WS_ASSERT_OK(header.status());
  EXPECT_EQ(header->tensors.size(), 2u);
}

// Random mutations of a valid file: every outcome is OK or an error, never a crash
// (run under ASan/UBSan to make this a real fuzz smoke test).
TEST(SafetensorsTest, MutationsNeverCrash) {
  auto valid = SerializeSafetensors(SampleTensors(), {{"format", "pt"}});
  WS_ASSERT_OK(valid.status());
  std::mt19937_64 rng(12345);
  int errors = 0;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::string bytes = *valid;
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < mutations; ++m) {
      switch (rng() % 4) {
        case 0:  // flip a byte
          bytes[rng() % bytes.size()] = static_cast<char>(rng());
          break;
        case 1:  // truncate
          bytes.resize(rng() % (bytes.size() + 1));
          break;
        case 2:  // flip a header-length byte
          if (bytes.size() >= 8) bytes[rng() % 8] = static_cast<char>(rng());
          break;
        case 3:  // replace a digit in the header
          for (size_t tries = 0; tries < 16 && bytes.size() > 8; ++tries) {
            const size_t pos = 8 + rng() % (bytes.size() - 8);
            if (bytes[pos] >= '0' && bytes[pos] <= '9') {
              bytes[pos] = static_cast<char>('0' + rng() % 10);
              break;
            }
          }
          break;
      }
      if (bytes.empty()) break;
    }
    auto header = ParseSafetensorsHeader(bytes, "fuzz");
    if (!header.ok()) {
      ++errors;
      continue;
    }
    // Whatever parsed must be self-consistent.
    for (const SafetensorsTensorInfo& t : header->tensors) {
      ASSERT_LE(t.data_end, bytes.size() - header->data_offset);
      ASSERT_EQ(t.bytes(), static_cast<uint64_t>(t.numel) * SafetensorsDtypeSize(t.dtype));
    }
  }
  EXPECT_GT(errors, 1000);
}

}  // namespace
}  // namespace writescope
