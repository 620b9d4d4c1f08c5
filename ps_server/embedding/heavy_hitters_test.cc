#include "ps_server/embedding/heavy_hitters.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <utility>
#include <vector>

namespace fulcrum {
namespace {

// Few ids: every count exact.
TEST(HeavyHittersTest, CountsExactlyWhileItHoldsEveryId) {
  HeavyHitters hot(8);
  for (int i = 0; i < 5; ++i) hot.Add(7);
  for (int i = 0; i < 3; ++i) hot.Add(2);
  hot.Add(9);
  const auto top = hot.Top(2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].id, 7);
  EXPECT_EQ(top[0].count, 5);
  EXPECT_EQ(top[0].error, 0);
  EXPECT_EQ(top[1].id, 2);
  EXPECT_EQ(top[1].count, 3);
  EXPECT_EQ(hot.Top(10).size(), 3u);
}

// Weighted: an id counted with weight w counts as w ids, held or not, and
// one that takes the least counted's place starts above it by its weight.
TEST(HeavyHittersTest, AWeightCountsAsThatManyIds) {
  HeavyHitters hot(2);
  hot.Add(7, 4);
  hot.Add(2);
  hot.Add(2, 2);
  EXPECT_EQ(hot.Top(1)[0].id, 7);
  EXPECT_EQ(hot.Top(1)[0].count, 4);
  hot.Add(9, 5);  // takes 2's place (3), at 8 with an error of 3
  const auto top = hot.Top(2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].id, 9);
  EXPECT_EQ(top[0].count, 8);
  EXPECT_EQ(top[0].error, 3);
  EXPECT_EQ(top[1].id, 7);
}

// A Zipf-like stream of 100,000 ids over a million-id space, in a sketch
// of 256: every id pushed more than total/capacity times is held, with a
// count within its error of the truth and never under it; the three
// hottest (far apart) come first, in order, and the true top 5 are among
// the 10 it reports first.
TEST(HeavyHittersTest, FindsTheHottestOfASkewedStreamInBoundedMemory) {
  constexpr int kCapacity = 256;
  constexpr int kPushes = 100000;
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> uniform(0, 1);
  HeavyHitters hot(kCapacity);
  std::map<int64_t, int64_t> truth;
  for (int i = 0; i < kPushes; ++i) {
    // P(rank r) ~ log((r+1)/r) over 1,000,000 ranks.
    const auto rank = static_cast<int64_t>(std::exp(uniform(random) * std::log(1e6)));
    const int64_t id = rank * 7919 % 1000003;
    hot.Add(id);
    ++truth[id];
  }
  std::vector<std::pair<int64_t, int64_t>> by_count;
  for (const auto& [id, count] : truth) by_count.emplace_back(count, id);
  std::sort(by_count.rbegin(), by_count.rend());
  const auto held = hot.Top(kCapacity);
  std::map<int64_t, HeavyHitters::Hitter> found;
  for (const auto& hitter : held) found[hitter.id] = hitter;
  for (const auto& [count, id] : by_count) {
    if (count <= kPushes / kCapacity) break;
    ASSERT_EQ(found.count(id), 1u) << "id " << id << " pushed " << count << " times";
    EXPECT_GE(found[id].count, count);
    EXPECT_LE(found[id].count - found[id].error, count);
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(held[i].id, by_count[i].second) << "rank " << i + 1;
  std::vector<int64_t> first10;
  for (int i = 0; i < 10; ++i) first10.push_back(held[i].id);
  for (int i = 0; i < 5; ++i) {
    EXPECT_NE(std::find(first10.begin(), first10.end(), by_count[i].second), first10.end())
        << "true rank " << i + 1;
  }
}

}  // namespace
}  // namespace fulcrum
