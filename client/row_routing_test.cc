#include "client/row_routing.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/embedding.h"

namespace fulcrum {
namespace {

TEST(RowRoutingTest, EachDistinctIdGoesOnceToItsOwner) {
  const std::vector<int64_t> ids = {7, 3, 7, 11, 3, 7, 42};
  const RoutedIds routed = RouteIds(ids, 3);
  EXPECT_EQ(routed.unique, (std::vector<int64_t>{7, 3, 11, 42}));
  EXPECT_EQ(routed.position, (std::vector<int32_t>{0, 1, 0, 2, 1, 0, 3}));
  size_t routed_ids = 0;
  for (int ps = 0; ps < 3; ++ps) {
    for (int32_t i : routed.by_range[ps]) EXPECT_EQ(EmbeddingOwner(routed.unique[i], 3), ps);
    routed_ids += routed.by_range[ps].size();
  }
  EXPECT_EQ(routed_ids, routed.unique.size());
}

TEST(RowRoutingTest, RowsScatterToEveryPositionAndGradientsSumPerId) {
  const std::vector<int64_t> ids = {5, 6, 5};
  const RoutedIds routed = RouteIds(ids, 1);
  const std::vector<float> unique_rows = {1, 2, 3, 4};  // 5 -> {1, 2}, 6 -> {3, 4}
  std::vector<float> out(6);
  ScatterRows(routed, unique_rows, 2, absl::MakeSpan(out));
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4, 1, 2}));
  const std::vector<float> grads = {1, 1, 2, 2, 10, 10};
  EXPECT_EQ(SumRowsPerId(routed, grads, 2), (std::vector<float>{11, 11, 2, 2}));
}

}  // namespace
}  // namespace fulcrum
