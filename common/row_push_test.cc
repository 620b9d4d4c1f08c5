// A push of rows cut into parts and merged back: the same push, every part
// naming every table, within the bounds; parts of different pushes refused.
#include "common/row_push.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// Tables "a" (width 2, ids 0..n-1, gradient of id i: i, -i) and "b"
// (width 1, no ids).
PushRowsRequest Push(int n) {
  PushRowsRequest push;
  push.set_worker_id(3);
  push.set_push_id(77);
  push.set_incarnation(5);
  TableRows& a = *push.add_tables();
  a.set_table("a");
  a.set_version(9);
  for (int i = 0; i < n; ++i) {
    a.add_ids(i);
    a.add_values(static_cast<float>(i));
    a.add_values(-static_cast<float>(i));
  }
  push.add_tables()->set_table("b");
  return push;
}

TEST(RowPushTest, PartsMergeBackIntoThePush) {
  const PushRowsRequest push = Push(10);
  EXPECT_TRUE(SplitRowPush(push, 10, 1 << 20).empty());  // it fits
  for (const auto& [ids, bytes] : {std::pair<int64_t, int64_t>{3, 1 << 20}, {100, 48}}) {
    std::vector<PushRowsRequest> parts = SplitRowPush(push, ids, bytes);
    ASSERT_EQ(parts.size(), 4u);  // 3 ids a part: by ids; 16 bytes a row, 48 a part: by bytes
    for (const PushRowsRequest& part : parts) {
      ASSERT_EQ(part.tables_size(), 2);
      EXPECT_LE(part.tables(0).ids_size(), 3);
      EXPECT_EQ(part.tables(0).values_size(), 2 * part.tables(0).ids_size());
      EXPECT_EQ(part.tables(0).version(), 9);
      EXPECT_EQ(part.push_id(), 77u);
    }
    auto merged = MergeRowPush(parts);
    ASSERT_TRUE(merged.ok()) << merged.status();
    EXPECT_EQ(merged->SerializeAsString(), push.SerializeAsString());
  }
}

TEST(RowPushTest, PartsOfAnotherPushAreRefused) {
  std::vector<PushRowsRequest> parts = SplitRowPush(Push(4), 2, 1 << 20);
  ASSERT_EQ(parts.size(), 2u);
  std::vector<PushRowsRequest> other_push = parts;
  other_push[1].set_push_id(78);
  EXPECT_THAT(MergeRowPush(other_push).status().message(), HasSubstr("not of the same push"));
  std::vector<PushRowsRequest> other_table = parts;
  other_table[1].mutable_tables(1)->set_table("c");
  EXPECT_THAT(MergeRowPush(other_table).status().message(),
              HasSubstr("names table 'c' range 0 where part 0 names 'b' range 0"));
  EXPECT_EQ(MergeRowPush({}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fulcrum
