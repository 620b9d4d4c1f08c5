#include "common/partitioner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/tensor.h"

namespace fulcrum {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

VariableSpec Spec(const std::string& name, const Shape& shape,
                  const PartitionerSpec& partitioner = {}) {
  VariableSpec spec;
  spec.set_name(name);
  spec.mutable_shape()->Assign(shape.begin(), shape.end());
  spec.set_dtype(DT_FLOAT);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  *spec.mutable_partitioner() = partitioner;
  return spec;
}

PartitionerSpec Fixed(int n) {
  PartitionerSpec p;
  p.set_kind(PartitionerSpec::FIXED_SHARDS);
  p.set_num_shards(n);
  return p;
}

TEST(PartitionerTest, ShardKeysParseBack) {
  std::string variable;
  int shard = -1;
  ASSERT_TRUE(ParseShardKey(ShardKey("dense/kernel", 12), &variable, &shard));
  EXPECT_EQ(variable, "dense/kernel");
  EXPECT_EQ(shard, 12);
  EXPECT_FALSE(ParseShardKey("table#3", &variable, &shard));
  EXPECT_FALSE(ParseShardKey("w/x", &variable, &shard));
}

TEST(PartitionerTest, SplitsLikeTensorFlow) {
  EXPECT_THAT(SplitRows(13, 5), ElementsAre(3, 3, 3, 2, 2));
  EXPECT_THAT(SplitRows(4, 4), ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(SplitRows(7, 1), ElementsAre(7));
}

TEST(PartitionerTest, FixedShardsNeverExceedRows) {
  EXPECT_EQ(NumShards(Spec("v", {13, 4}, Fixed(5))), 5);
  EXPECT_EQ(NumShards(Spec("v", {3, 4}, Fixed(5))), 3);
  EXPECT_EQ(NumShards(Spec("v", {3, 4})), 1);
}

TEST(PartitionerTest, MinSizeKeepsShardsAboveTheMinimum) {
  PartitionerSpec p;
  p.set_kind(PartitionerSpec::MIN_SIZE);
  p.set_min_shard_bytes(1000);
  p.set_max_shards(8);
  // 100 rows x 10 floats = 4000 bytes: 4 shards of 1000 bytes.
  EXPECT_EQ(NumShards(Spec("v", {100, 10}, p)), 4);
  // 999 bytes: too small to split.
  EXPECT_EQ(NumShards(Spec("v", {999, 1},
                           [&] {
                             auto q = p;
                             q.set_min_shard_bytes(4000);
                             return q;
                           }())),
            1);
  // Capped by max_shards.
  EXPECT_EQ(NumShards(Spec("v", {10000, 10}, p)), 8);
  // Defaults: 256 KiB minimum, one shard at most.
  PartitionerSpec defaults;
  defaults.set_kind(PartitionerSpec::MIN_SIZE);
  EXPECT_EQ(NumShards(Spec("v", {1 << 20, 4}, defaults)), 1);
}

TEST(PartitionerTest, MaxSizeKeepsShardsBelowTheMaximum) {
  PartitionerSpec p;
  p.set_kind(PartitionerSpec::MAX_SIZE);
  p.set_max_shard_bytes(400);  // 10 rows of 10 floats
  EXPECT_EQ(NumShards(Spec("v", {95, 10}, p)), 10);
  p.set_max_shards(3);
  EXPECT_EQ(NumShards(Spec("v", {95, 10}, p)), 3);
  p.set_max_shards(0);
  p.set_max_shard_bytes(4);  // smaller than a row: one row per shard
  EXPECT_EQ(NumShards(Spec("v", {6, 10}, p)), 6);
}

TEST(PartitionerTest, PlacesEqualShardsRoundRobin) {
  auto placed = PlaceVariables({Spec("a", {13, 4}, Fixed(5))}, 2);
  ASSERT_TRUE(placed.ok()) << placed.status();
  const auto& shards = (*placed)[0].shards;
  ASSERT_EQ(shards.size(), 5u);
  EXPECT_EQ(shards[0].ps, 0);
  EXPECT_EQ(shards[1].ps, 1);
  EXPECT_EQ(shards[2].ps, 0);
  EXPECT_EQ(shards[3].ps, 1);  // shard 2 (3 rows) on ps 0 made ps 1 lighter
  EXPECT_EQ(shards[4].ps, 1);  // ps 0: 3+3 rows, ps 1: 3+2 rows -> ps 1
  EXPECT_THAT(
      std::vector<int64_t>({shards[0].row_offset, shards[1].row_offset, shards[2].row_offset,
                            shards[3].row_offset, shards[4].row_offset}),
      ElementsAre(0, 3, 6, 9, 11));
}

TEST(PartitionerTest, BalancesBytesAcrossVariables) {
  // A big variable then three small ones: the small ones avoid the big one's server.
  auto placed = PlaceVariables(
      {Spec("big", {1000, 10}), Spec("s1", {10}), Spec("s2", {10}), Spec("s3", {10})}, 2);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ((*placed)[0].shards[0].ps, 0);
  for (int i = 1; i <= 3; ++i) EXPECT_EQ((*placed)[i].shards[0].ps, 1) << i;
}

TEST(PartitionerTest, RejectsBadSpecs) {
  EXPECT_THAT(PlaceVariables({Spec("a", {2}), Spec("a", {3})}, 1).status().message(),
              HasSubstr("specified twice"));
  EXPECT_THAT(PlaceVariables({Spec("a", {0, 3})}, 1).status().message(), HasSubstr("'a'"));
  EXPECT_FALSE(PlaceVariables({Spec("a", {2})}, 0).ok());
}

}  // namespace
}  // namespace fulcrum
