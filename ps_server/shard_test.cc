#include "ps_server/shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "common/tensor.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// Shard 0 of 1 of w [4], filled with `init`, updated by SGD at rate 1.
Shard MakeShard(float init) {
  ShardSpec spec;
  VariableSpec* v = spec.mutable_variable();
  v->set_name("w");
  v->add_shape(4);
  v->set_dtype(DT_FLOAT);
  v->mutable_initializer()->set_kind(InitializerSpec::CONSTANT);
  v->mutable_initializer()->set_value(init);
  v->mutable_optimizer()->set_learning_rate(1.0f);
  *v = CanonicalSpec(*v);
  spec.set_num_shards(1);
  spec.set_rows(4);
  auto contents = NewShardContents(spec, nullptr, "");
  EXPECT_TRUE(contents.ok()) << contents.status();
  return Shard(spec, *std::move(contents));
}

// A gradient of `value` everywhere from `worker`, computed at `at`.
struct Gradient {
  Gradient(int worker, int64_t at, float value, uint64_t push_id = 0) : values(4, value) {
    grad.worker = worker;
    grad.push_id = push_id;
    grad.computed_at = at;
    grad.parts = {AsFloatBytes(values)};
  }
  std::vector<float> values;
  ShardGradient grad;
};

std::vector<float> ReadValues(const Shard& shard) {
  OutgoingPull out;
  EXPECT_TRUE(shard.Read(0, absl::Now() + absl::Seconds(1), DT_FLOAT, 1 << 20, &out).ok());
  const std::string data = std::move(out).Materialize().slices(0).tensor().data();
  std::vector<float> values(data.size() / sizeof(float));
  std::memcpy(values.data(), data.data(), data.size());
  return values;
}

TEST(ShardTest, AppliesAtOnceDropsTheTooStaleAndTakesARetriedPushOnce) {
  Shard shard = MakeShard(1.0f);
  EXPECT_EQ(shard.label(), "variable 'w' shard 0");
  Gradient first(0, 0, 0.5f, /*push_id=*/7);
  auto applied = shard.ApplyNow(first.grad, /*max_staleness=*/-1);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->outcome(), ShardPushResult::APPLIED);
  EXPECT_EQ(shard.version(), 1);
  EXPECT_EQ(ReadValues(shard), std::vector<float>(4, 0.5f));
  // The same push again (its response was lost): taken once.
  auto retried = shard.ApplyNow(first.grad, -1);
  ASSERT_TRUE(retried.ok());
  EXPECT_EQ(retried->outcome(), ShardPushResult::DUPLICATE);
  EXPECT_EQ(shard.version(), 1);
  // Computed at version 0 while the shard is at 1: staleness 1.
  Gradient stale(1, 0, 0.25f);
  auto dropped = shard.ApplyNow(stale.grad, /*max_staleness=*/0);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(dropped->outcome(), ShardPushResult::STALE);
  EXPECT_EQ(dropped->staleness(), 1);
  EXPECT_EQ(ReadValues(shard), std::vector<float>(4, 0.5f)) << "nothing applied";
}

TEST(ShardTest, AccumulatesAStepAndAppliesTheMeanOnce) {
  Shard shard = MakeShard(0.0f);
  Gradient a(0, 0, 1.0f), b(1, 0, 3.0f), again(0, 0, 100.0f);
  EXPECT_EQ(shard.Accumulate(a.grad, 2)->outcome(), ShardPushResult::ACCUMULATED);
  EXPECT_EQ(shard.Accumulate(again.grad, 2)->outcome(), ShardPushResult::DUPLICATE)
      << "one gradient per worker and step";
  EXPECT_EQ(shard.version(), 0);
  EXPECT_EQ(shard.Describe().pending_gradients(), 1);
  EXPECT_EQ(shard.Accumulate(b.grad, 2)->outcome(), ShardPushResult::APPLIED);
  EXPECT_EQ(shard.version(), 1);
  EXPECT_EQ(ReadValues(shard), std::vector<float>(4, -2.0f)) << "0 - mean(1, 3)";
  Gradient late(2, 0, 5.0f);
  EXPECT_EQ(shard.Accumulate(late.grad, 2)->outcome(), ShardPushResult::STALE);
}

TEST(ShardTest, AStepCompletesWithFewerGradientsWhenWorkersLeave) {
  Shard shard = MakeShard(0.0f);
  Gradient a(0, 0, 2.0f);
  ASSERT_EQ(shard.Accumulate(a.grad, 3)->outcome(), ShardPushResult::ACCUMULATED);
  EXPECT_FALSE(shard.CompleteIfReady(2)) << "one gradient of the two now required";
  EXPECT_TRUE(shard.CompleteIfReady(1));
  EXPECT_EQ(shard.version(), 1);
  EXPECT_EQ(ReadValues(shard), std::vector<float>(4, -2.0f));
}

TEST(ShardTest, GradientsFromAFutureVersionAreRefused) {
  Shard shard = MakeShard(0.0f);
  const absl::Status future = shard.CheckComputedAt(3);
  EXPECT_EQ(future.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(future.message()), HasSubstr("variable 'w' shard 0"));
  EXPECT_EQ(shard.CheckComputedAt(-1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(shard.CheckComputedAt(0).ok());
}

TEST(ShardTest, AReaderWaitsForItsVersionAndSeesItsSnapshot) {
  Shard shard = MakeShard(1.0f);
  OutgoingPull early;
  EXPECT_EQ(shard.Read(1, absl::Now() + absl::Milliseconds(20), DT_FLOAT, 1 << 20, &early).code(),
            absl::StatusCode::kDeadlineExceeded);
  // A snapshot lent to a pull stays as it was while a push applies.
  OutgoingPull lent;
  ASSERT_TRUE(shard.Read(0, absl::Now() + absl::Seconds(1), DT_FLOAT, 1 << 20, &lent).ok());
  std::thread waiter([&] {
    OutgoingPull after;
    ASSERT_TRUE(shard.Read(1, absl::Now() + absl::Seconds(30), DT_FLOAT, 1 << 20, &after).ok());
    EXPECT_EQ(after.response.slices(0).version(), 1);
  });
  Gradient g(0, 0, 1.0f);
  ASSERT_TRUE(shard.ApplyNow(g.grad, -1).ok());
  waiter.join();
  const std::string before = std::move(lent).Materialize().slices(0).tensor().data();
  std::vector<float> values(4);
  std::memcpy(values.data(), before.data(), before.size());
  EXPECT_EQ(values, std::vector<float>(4, 1.0f)) << "the lent snapshot, from before the push";
  EXPECT_EQ(ReadValues(shard), std::vector<float>(4, 0.0f));
}

TEST(ShardTest, CancelWakesWaitingReaders) {
  Shard shard = MakeShard(0.0f);
  std::thread waiter([&] {
    OutgoingPull out;
    EXPECT_EQ(shard.Read(5, absl::Now() + absl::Seconds(30), DT_FLOAT, 1 << 20, &out).code(),
              absl::StatusCode::kUnavailable);
  });
  shard.Cancel();
  waiter.join();
}

}  // namespace
}  // namespace fulcrum
