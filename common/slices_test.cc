#include "common/slices.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fulcrum {
namespace {

// Slices carrying `sizes` bytes of data each.
SliceList Slices(const std::vector<int>& sizes) {
  SliceList slices;
  for (int size : sizes) slices.Add()->mutable_tensor()->set_data(std::string(size, 'x'));
  return slices;
}

std::vector<std::pair<int, int>> Runs(const SliceList& slices, int64_t max_batch_bytes) {
  std::vector<std::pair<int, int>> runs;
  for (const SliceRange& run : BatchSlices(slices, max_batch_bytes)) {
    runs.emplace_back(run.begin, run.end);
  }
  return runs;
}

TEST(BatchSlicesTest, GroupsInOrderUpToTheBound) {
  using Expected = std::vector<std::pair<int, int>>;
  EXPECT_EQ(Runs(Slices({4, 4, 4, 4, 4}), 8), (Expected{{0, 2}, {2, 4}, {4, 5}}));
  // A slice larger than the bound travels alone; the first never waits.
  EXPECT_EQ(Runs(Slices({20, 2, 30, 3}), 8), (Expected{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(Runs(Slices({1, 2, 3}), 100), (Expected{{0, 3}}));
  // No slices: still one (empty) message.
  EXPECT_EQ(Runs(Slices({}), 8), (Expected{{0, 0}}));
}

TEST(SlicesTest, BytesAndRows) {
  SliceList slices = Slices({3, 5});
  EXPECT_EQ(TensorBytes(slices), 8);
  EXPECT_EQ(SliceRows(slices[0]), 0);  // no shape
  slices.Mutable(0)->mutable_tensor()->add_shape(7);
  slices.Mutable(0)->mutable_tensor()->add_shape(2);
  EXPECT_EQ(SliceRows(slices[0]), 7);
}

TEST(PushPartTest, BorrowsTheSlicesAndKeepsTheWholeAlive) {
  auto whole = std::make_shared<PushRequest>();
  whole->set_worker_id(3);
  whole->set_clock(7);
  whole->set_incarnation(11);
  *whole->mutable_gradients() = Slices({4, 5, 6});
  const ShardSlice* last = &whole->gradients(2);
  std::shared_ptr<const PushRequest> part = PushPart(whole, {2, 0});
  EXPECT_EQ(part->worker_id(), 3);
  EXPECT_EQ(part->clock(), 7);
  EXPECT_EQ(part->incarnation(), 11);
  ASSERT_EQ(part->gradients_size(), 2);
  EXPECT_EQ(&part->gradients(0), last);  // the same slice, not a copy
  EXPECT_EQ(part->gradients(1).tensor().data().size(), 4u);

  std::weak_ptr<const PushRequest> held = whole;
  whole.reset();
  EXPECT_FALSE(held.expired());  // the part keeps it
  part.reset();                  // gives the slices back: the whole frees them, once
  EXPECT_TRUE(held.expired());
}

}  // namespace
}  // namespace fulcrum
