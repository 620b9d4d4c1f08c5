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
  auto whole = std::make_shared<OutgoingPush>();
  whole->request.set_worker_id(3);
  whole->request.set_clock(7);
  whole->request.set_incarnation(11);
  *whole->request.mutable_gradients() = Slices({4, 5, 6});
  const char lent[6] = {1, 2, 3, 4, 5, 6};
  whole->lent = {{}, {}, absl::MakeConstSpan(lent)};
  const ShardSlice* last = &whole->request.gradients(2);
  std::shared_ptr<const OutgoingPush> part = PushPart(whole, {2, 0});
  EXPECT_EQ(part->request.worker_id(), 3);
  EXPECT_EQ(part->request.clock(), 7);
  EXPECT_EQ(part->request.incarnation(), 11);
  ASSERT_EQ(part->request.gradients_size(), 2);
  EXPECT_EQ(&part->request.gradients(0), last);  // the same slice, not a copy
  EXPECT_EQ(part->SliceData(0).data(), lent);    // and its lent bytes
  EXPECT_EQ(part->SliceData(1).size(), 4u);      // held
  EXPECT_EQ(part->TensorBytes(), 10);

  std::weak_ptr<const OutgoingPush> held = whole;
  whole.reset();
  EXPECT_FALSE(held.expired());  // the part keeps it
  part.reset();                  // gives the slices back: the whole frees them, once
  EXPECT_TRUE(held.expired());
}

// Float32 slices lend their bytes from where they lie; Materialize copies
// them in, and batching counts them.
TEST(OutgoingPushTest, LentSlicesMaterializeAndBatchByTheirBytes) {
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  OutgoingPush push;
  ASSERT_TRUE(AppendShardSlices("w", 0, 4, {3, 2}, values, DT_FLOAT, 8,
                                push.request.mutable_gradients(), &push.lent)
                  .ok());
  ASSERT_EQ(push.request.gradients_size(), 3);
  ASSERT_EQ(push.lent.size(), 3u);
  EXPECT_TRUE(push.request.gradients(1).tensor().data().empty());
  EXPECT_EQ(push.lent[1].data(), reinterpret_cast<const char*>(values.data() + 2));
  EXPECT_EQ(push.TensorBytes(), 24);
  EXPECT_EQ(BatchSlices(push.request.gradients(), 16, push.lent).size(), 2u);
  const PushRequest whole = push.Materialize();
  std::vector<float> storage;
  auto decoded = DecodeFloatTensor(whole.gradients(2).tensor(), {1, 2}, "w", &storage);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(std::vector<float>(decoded->begin(), decoded->end()), std::vector<float>({5, 6}));
  // Other encodings hold their bytes: no lent entry is filled.
  OutgoingPush half;
  ASSERT_TRUE(AppendShardSlices("w", 0, 4, {3, 2}, values, DT_BFLOAT16, 8,
                                half.request.mutable_gradients(), &half.lent)
                  .ok());
  for (absl::Span<const char> lent : half.lent) EXPECT_TRUE(lent.empty());
  EXPECT_EQ(half.TensorBytes(), 12);
}

}  // namespace
}  // namespace fulcrum
