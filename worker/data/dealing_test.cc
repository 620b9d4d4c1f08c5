// Dealing: shares that are disjoint, whole batches, reshuffled each epoch,
// and dealt again over the workers left when one is gone for good.
#include "worker/data/dealing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace fulcrum {
namespace {

TEST(DealingTest, SharesAreDisjointWholeBatchesReshuffledEachEpoch) {
  std::set<int64_t> seen;
  for (int shard = 0; shard < 3; ++shard) {
    const std::vector<int64_t> share = DealtExamples(100, {shard, 3}, 0, 7, 8);
    ASSERT_EQ(share.size(), size_t{32});  // floor(100 / 3 / 8) = 4 batches of 8
    for (int64_t i : share) {
      EXPECT_EQ(i % 3, shard);
      EXPECT_TRUE(seen.insert(i).second) << i;
    }
  }
  const std::vector<int64_t> first = DealtExamples(100, {0, 3}, 0, 7, 8);
  EXPECT_EQ(DealtExamples(100, {0, 3}, 0, 7, 8), first);  // the seed decides
  EXPECT_NE(DealtExamples(100, {0, 3}, 1, 7, 8), first);  // another epoch, another order
  EXPECT_NE(DealtExamples(100, {0, 3}, 0, 8, 8), first);
}

// Servers that all say worker 1 is neither live, finished nor awaited: its
// share goes to workers 0 and 2, which become ranks 0 and 1 of 2.
TEST(DealingTest, AWorkerGoneForGoodOnEveryServerIsDealtAround) {
  std::vector<DescribeResponse> servers(2);
  for (size_t i = 0; i < servers.size(); ++i) {
    servers[i].set_incarnation(7 + i);  // running servers: never 0
    for (int w = 0; w < 3; ++w) servers[i].add_workers()->set_live(w != 1);
  }
  // A third server, lost for good, was not asked: its empty answer tells
  // nothing either way.
  servers.emplace_back();
  std::vector<int> gone;
  Dealing dealing = DealOverWorkersLeft(servers, 2, 3, &gone);
  EXPECT_EQ(gone, std::vector<int>{1});
  EXPECT_EQ(dealing.shard_index, 1);
  EXPECT_EQ(dealing.num_shards, 2);
  // No server asked: nobody can be told gone.
  const std::vector<DescribeResponse> none(2);
  EXPECT_EQ(DealOverWorkersLeft(none, 2, 3, &gone).num_shards, 3);
  EXPECT_TRUE(gone.empty());
  // One server still counts it (finished there): nobody is gone.
  servers[1].mutable_workers(1)->set_finished(true);
  dealing = DealOverWorkersLeft(servers, 2, 3, &gone);
  EXPECT_TRUE(gone.empty());
  EXPECT_EQ(dealing.shard_index, 2);
  EXPECT_EQ(dealing.num_shards, 3);
  // A server that has not heard of every worker yet cannot tell.
  servers[1].clear_workers();
  EXPECT_EQ(DealOverWorkersLeft(servers, 0, 3, &gone).num_shards, 3);
}

}  // namespace
}  // namespace fulcrum
