#include "worker/data/criteo.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// A Criteo line: label, 13 integers, 26 hex categories; "" is missing.
std::string Line(const std::string& label, std::vector<std::string> ints,
                 std::vector<std::string> cats) {
  ints.resize(13);
  cats.resize(26);
  return absl::StrCat(label, "\t", absl::StrJoin(ints, "\t"), "\t", absl::StrJoin(cats, "\t"));
}

std::string Write(const std::string& name, const std::vector<std::string>& lines) {
  std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::ofstream(path) << absl::StrJoin(lines, "\n") << "\n";
  return path;
}

TEST(CriteoTest, ReadsLinesInBoundedChunksWithMissingValues) {
  const std::string path =
      Write("day.tsv", {Line("1", {"3", "", "-1"}, {"68fd1e64", "", "0a519c5c"}), Line("0", {}, {}),
                        Line("0", {"0"}, {"68fd1e64"})});
  auto reader = CriteoReader::Open(*MakeLocalFileSystem(), path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto first = (*reader)->Next(2);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->num_examples, 2);
  EXPECT_EQ(first->labels, (std::vector<float>{1, 0}));
  EXPECT_FLOAT_EQ(first->numeric[0], std::log1p(3.0f));
  EXPECT_EQ(first->numeric[1], 0.0f);  // missing
  EXPECT_EQ(first->numeric[2], 0.0f);  // negative
  ASSERT_EQ(first->ids.size(), 2u * 26);
  const int64_t* a = first->ids.data();
  const int64_t* b = first->ids.data() + 26;
  EXPECT_NE(a[0], a[2]);  // different values
  EXPECT_EQ(a[1], b[1]);  // field 2 missing in both: its "missing" id
  EXPECT_NE(b[0], b[1]);  // each field's missing id is its own
  auto second = (*reader)->Next(2);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->num_examples, 1);
  EXPECT_EQ(second->ids[0], a[0]);  // the same value in the same field, the same id
  auto end = (*reader)->Next(2);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->num_examples, 0);
}

TEST(CriteoTest, MalformedLinesAreNamedByFileAndLine) {
  const std::string good = Line("0", {"1"}, {"ab"});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"1\t2\t3", "3 tab-separated fields, not 40"},
      {Line("2", {}, {}), "label '2' is not 0 or 1"},
      {Line("1", {"", "x7"}, {}), "integer feature 2 'x7'"},
      {Line("1", {}, {"", "", "zz"}), "categorical feature 3 'zz'"},
  };
  for (const auto& [line, what] : cases) {
    const std::string path = Write("bad.tsv", {good, line});
    auto reader = CriteoReader::Open(*MakeLocalFileSystem(), path);
    ASSERT_TRUE(reader.ok());
    auto read = (*reader)->Next(10);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << line;
    EXPECT_THAT(std::string(read.status().message()), HasSubstr(absl::StrCat(path, ":2: ", what)));
  }
  EXPECT_EQ(CriteoReader::Open(*MakeLocalFileSystem(), "/no/such/criteo.tsv").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace fulcrum
