#include "common/flag_choice.h"

#include "gtest/gtest.h"

namespace writescope {
namespace {

enum class Mode { kAuto, kOn, kOff };

absl::StatusOr<Mode> Parse(absl::string_view text) {
  return ParseFlagChoice<Mode>("mode", text,
                               {{"auto", Mode::kAuto}, {"on", Mode::kOn}, {"off", Mode::kOff}});
}

TEST(FlagChoiceTest, EveryWordGivesItsValue) {
  EXPECT_EQ(*Parse("auto"), Mode::kAuto);
  EXPECT_EQ(*Parse("on"), Mode::kOn);
  EXPECT_EQ(*Parse("off"), Mode::kOff);
}

TEST(FlagChoiceTest, AnotherWordNamesTheFlagTheChoicesAndTheWord) {
  for (absl::string_view bad : {"", "On", "of", "auto "}) {
    const absl::StatusOr<Mode> got = Parse(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(got.status().message(),
              absl::StrCat("--mode must be auto, on or off, not '", bad, "'"));
  }
  const absl::StatusOr<int> two = ParseFlagChoice<int>("x", "c", {{"a", 1}, {"b", 2}});
  EXPECT_EQ(two.status().message(), "--x must be a or b, not 'c'");
  const absl::StatusOr<int> one = ParseFlagChoice<int>("x", "c", {{"a", 1}});
  EXPECT_EQ(one.status().message(), "--x must be a, not 'c'");
}

}  // namespace
}  // namespace writescope
