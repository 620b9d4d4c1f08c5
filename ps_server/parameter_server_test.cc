#include "ps_server/parameter_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/tensor.h"
#include "ps_server/test_requests.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

constexpr int kRows = 4;

PsServerConfig Config(ConsistencyMode mode, int replicas, int to_aggregate = 0,
                      int64_t staleness = 0) {
  PsServerConfig config;
  config.set_mode(mode);
  config.set_num_replicas(replicas);
  config.set_replicas_to_aggregate(to_aggregate == 0 ? replicas : to_aggregate);
  config.set_staleness_bound(staleness);
  config.set_max_staleness(-1);
  config.set_lease_timeout_ms(200);
  config.set_startup_timeout_ms(200);
  config.set_max_message_bytes(64 << 20);
  return config;
}

// Variable `name` of shape [4], zeros, SGD with learning rate 1: each applied
// update subtracts the (mean) gradient.
ShardSpec WholeShard(const std::string& name = "w", int64_t rows = kRows) {
  ShardSpec spec;
  VariableSpec* v = spec.mutable_variable();
  v->set_name(name);
  v->add_shape(rows);
  v->set_dtype(DT_FLOAT);
  v->mutable_optimizer()->set_learning_rate(1.0f);
  spec.set_shard(0);
  spec.set_num_shards(1);
  spec.set_rows(rows);
  return spec;
}

void Create(ParameterServer& ps, const ShardSpec& spec) {
  CreateShardsRequest request;
  *request.add_shards() = spec;
  ASSERT_TRUE(ps.CreateShards(request).ok());
}

ShardSlice Gradient(const std::string& name, int64_t version, const std::vector<float>& values) {
  ShardSlice slice;
  slice.set_variable(name);
  slice.set_version(version);
  EncodeFloatTensor({static_cast<int64_t>(values.size())}, values, slice.mutable_tensor());
  return slice;
}

// Rows [row_offset, row_offset + values.size()) of a gradient of `name`.
ShardSlice Slice(const std::string& name, int64_t version, int64_t row_offset,
                 const std::vector<float>& values) {
  ShardSlice slice = Gradient(name, version, values);
  slice.set_row_offset(row_offset);
  return slice;
}

PushRequest Push(int worker, int64_t version, float value, int64_t clock = -1) {
  PushRequest request;
  request.set_worker_id(worker);
  if (clock >= 0) request.set_clock(clock);
  *request.add_gradients() = Gradient("w", version, std::vector<float>(kRows, value));
  return request;
}

ShardPushResult::Outcome PushOutcome(ParameterServer& ps, const PushRequest& request) {
  auto response = ps.Push(request);
  EXPECT_TRUE(response.ok()) << response.status();
  return response.ok() ? response->results(0).outcome() : ShardPushResult::STALE;
}

absl::StatusOr<PullResponse> PullW(ParameterServer& ps, int worker, int64_t min_version = 0,
                                   int64_t clock = -1, absl::Duration wait = absl::Seconds(10)) {
  return ps.Pull(PullOf("w", worker, min_version, clock), absl::Now() + wait, {1 << 20});
}

// The value of w's first element and w's version, as a pull sees them.
std::pair<float, int64_t> ValueAndVersion(ParameterServer& ps) {
  auto pulled = PullW(ps, -1);
  EXPECT_TRUE(pulled.ok()) << pulled.status();
  const ShardSlice& slice = pulled->slices(0);
  return {FloatValues(slice.tensor())[0], slice.version()};
}

TEST(SyncModeTest, ThreeWorkersGiveOneUpdatePerStepEqualToTheMean) {
  ParameterServer ps(Config(SYNC, 3));
  Create(ps, WholeShard());
  float expected = 0;
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(PushOutcome(ps, Push(0, step, 1.0f)), ShardPushResult::ACCUMULATED);
    EXPECT_EQ(PushOutcome(ps, Push(1, step, 2.0f)), ShardPushResult::ACCUMULATED);
    EXPECT_EQ(ValueAndVersion(ps), std::make_pair(expected, int64_t{step}));  // nothing applied yet
    EXPECT_EQ(PushOutcome(ps, Push(2, step, 6.0f)), ShardPushResult::APPLIED);
    expected -= 3.0f;  // mean of 1, 2, 6
    EXPECT_EQ(ValueAndVersion(ps), std::make_pair(expected, int64_t{step + 1}));
  }
  EXPECT_EQ(ps.Describe().updates_applied(), 3);
  EXPECT_EQ(ps.Describe().stale_gradients_dropped(), 0);
}

// With linear scaling, a step of 2 averaged gradients takes twice the rate;
// the step that completes after a worker finished averages 1 and takes the
// rate for 1, not the rate meant for 2.
TEST(SyncModeTest, TheLearningRateFollowsTheGradientsEachStepAveraged) {
  ParameterServer ps(Config(SYNC, 2));
  ShardSpec spec = WholeShard();
  spec.mutable_variable()->mutable_optimizer()->set_learning_rate_scaling(OptimizerSpec::LINEAR);
  Create(ps, spec);
  EXPECT_EQ(PushOutcome(ps, Push(0, 0, 1.0f)), ShardPushResult::ACCUMULATED);
  EXPECT_EQ(PushOutcome(ps, Push(1, 0, 3.0f)), ShardPushResult::APPLIED);
  EXPECT_EQ(ValueAndVersion(ps), std::make_pair(-4.0f, int64_t{1}));  // mean 2 at rate 2
  EXPECT_EQ(PushOutcome(ps, Push(0, 1, 1.0f)), ShardPushResult::ACCUMULATED);
  HeartbeatRequest finished;
  finished.set_worker_id(1);
  finished.set_finished(true);
  ASSERT_TRUE(ps.Heartbeat(finished).ok());
  EXPECT_EQ(ValueAndVersion(ps), std::make_pair(-5.0f, int64_t{2}));  // mean 1 at rate 1
}

TEST(SyncModeTest, BackupWorkerPushIsDroppedAsStaleAndCounted) {
  ParameterServer ps(Config(SYNC, 4, /*to_aggregate=*/3));
  Create(ps, WholeShard());
  for (int step = 0; step < 5; ++step) {
    // The slowest worker rotates; its push arrives after the step is applied.
    const int slow = step % 4;
    std::vector<ShardPushResult::Outcome> outcomes;
    for (int w = 0; w < 4; ++w) {
      if (w != slow) outcomes.push_back(PushOutcome(ps, Push(w, step, 3.0f)));
    }
    EXPECT_EQ(outcomes.back(), ShardPushResult::APPLIED);
    EXPECT_EQ(PushOutcome(ps, Push(slow, step, 100.0f)), ShardPushResult::STALE);
  }
  const DescribeResponse info = ps.Describe();
  EXPECT_EQ(info.updates_applied(), 5);
  EXPECT_EQ(info.stale_gradients_dropped(), 5);
  EXPECT_EQ(ValueAndVersion(ps), std::make_pair(-15.0f, int64_t{5}));  // the 100s never landed
}

TEST(AsyncModeTest, ConcurrentPushesLoseNoUpdate) {
  constexpr int kThreads = 8;
  constexpr int kPushes = 250;
  ParameterServer ps(Config(ASYNC, kThreads));
  Create(ps, WholeShard());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&ps, t] {
      for (int i = 0; i < kPushes; ++i) {
        // Integer gradients: every partial sum is exact in float32.
        ASSERT_TRUE(ps.Push(Push(t, 0, static_cast<float>(t + 1))).ok());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const int total = kPushes * kThreads * (kThreads + 1) / 2;  // 9000: exact in float32
  EXPECT_EQ(ValueAndVersion(ps),
            std::make_pair(-static_cast<float>(total), int64_t{kThreads} * kPushes));
  const DescribeResponse info = ps.Describe();
  EXPECT_EQ(info.updates_applied(), kThreads * kPushes);
  int64_t histogram_total = 0;
  for (int64_t count : info.staleness_histogram()) histogram_total += count;
  EXPECT_EQ(histogram_total, kThreads * kPushes);
}

TEST(AsyncModeTest, MaxStalenessDropsOldPushes) {
  PsServerConfig config = Config(ASYNC, 1);
  config.set_max_staleness(1);
  ParameterServer ps(config);
  Create(ps, WholeShard());
  EXPECT_EQ(PushOutcome(ps, Push(0, 0, 1.0f)), ShardPushResult::APPLIED);  // staleness 0
  EXPECT_EQ(PushOutcome(ps, Push(0, 0, 1.0f)), ShardPushResult::APPLIED);  // staleness 1
  EXPECT_EQ(PushOutcome(ps, Push(0, 0, 1.0f)), ShardPushResult::STALE);    // staleness 2
  EXPECT_EQ(ValueAndVersion(ps), std::make_pair(-2.0f, int64_t{2}));
  EXPECT_EQ(ps.Describe().stale_gradients_dropped(), 1);
}

// w's values, as a pull sees them.
std::vector<float> ValuesOfW(ParameterServer& ps) {
  auto pulled = PullW(ps, -1);
  EXPECT_TRUE(pulled.ok()) << pulled.status();
  if (!pulled.ok()) return {};
  const absl::Span<const float> values = FloatValues(pulled->slices(0).tensor());
  return std::vector<float>(values.begin(), values.end());
}

// A shard's gradient may arrive in slices of rows, in any order and encoding:
// it is applied (or accumulated) once, as the whole gradient would be.
TEST(SlicedPushTest, SlicesApplyAsTheWholeGradientWould) {
  for (ConsistencyMode mode : {ASYNC, SYNC}) {
    ParameterServer ps(Config(mode, mode == SYNC ? 2 : 1));
    Create(ps, WholeShard());
    PushRequest sliced;
    sliced.set_worker_id(0);
    *sliced.add_gradients() = Slice("w", 0, 1, {2, 3, 4});
    *sliced.add_gradients() = Slice("w", 0, 0, {1});
    ASSERT_TRUE(EncodeFloatTensor({3}, std::vector<float>{2, 3, 4}, DT_BFLOAT16, "w",
                                  sliced.mutable_gradients(0)->mutable_tensor())
                    .ok());
    auto pushed = ps.Push(sliced);
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    ASSERT_EQ(pushed->results_size(), 1);  // one shard, one outcome
    if (mode == SYNC) {
      EXPECT_EQ(pushed->results(0).outcome(), ShardPushResult::ACCUMULATED);
      PushRequest whole = Push(1, 0, 0.0f);
      *whole.mutable_gradients(0) = Gradient("w", 0, {3, 2, 1, 2});
      EXPECT_EQ(PushOutcome(ps, whole), ShardPushResult::APPLIED);
      EXPECT_EQ(ValuesOfW(ps), (std::vector<float>{-2, -2, -2, -3}));  // the mean
    } else {
      EXPECT_EQ(pushed->results(0).outcome(), ShardPushResult::APPLIED);
      EXPECT_EQ(ValuesOfW(ps), (std::vector<float>{-1, -2, -3, -4}));
    }
    EXPECT_EQ(ValueAndVersion(ps).second, 1) << "one update, not one per slice";
  }
}

// The values of variable `name`, as a pull sees them.
std::vector<float> ValuesOf(ParameterServer& ps, const std::string& name) {
  PullRequest request;
  request.add_shards()->set_variable(name);
  auto pulled = ps.Pull(request, absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(pulled.ok()) << pulled.status();
  if (!pulled.ok()) return {};
  const absl::Span<const float> values = FloatValues(pulled->slices(0).tensor());
  return std::vector<float>(values.begin(), values.end());
}

PushRequest PushOf(std::vector<ShardSlice> slices) {
  PushRequest part;
  part.set_worker_id(0);
  for (ShardSlice& slice : slices) *part.add_gradients() = std::move(slice);
  return part;
}

// A push that arrives in parts applies each shard once its slices are all
// in, before the push ends, and what the mode does at the end once.
TEST(IncomingPushTest, EachShardAppliesWhenItsSlicesAreAllIn) {
  for (ConsistencyMode mode : {ASYNC, SSP}) {
    ParameterServer ps(Config(mode, 1, 0, /*staleness=*/1));
    Create(ps, WholeShard("w"));
    Create(ps, WholeShard("b", 2));
    ParameterServer::IncomingPush push(&ps, StreamedCallLimits());
    PushRequest part = PushOf({Slice("w", 0, 0, {1, 1})});
    part.set_clock(0);
    ASSERT_TRUE(push.Add(&part).ok());
    EXPECT_TRUE(part.gradients(0).tensor().data().empty()) << "copied, not moved";
    EXPECT_EQ(ValuesOfW(ps), std::vector<float>(kRows, 0.0f)) << "applied half a shard";
    part = PushOf({Slice("w", 0, 2, {1, 1}), Gradient("b", 0, {2, 2})});
    part.set_clock(0);
    ASSERT_TRUE(push.Add(&part).ok());
    EXPECT_EQ(ValuesOfW(ps), std::vector<float>(kRows, -1.0f));
    EXPECT_EQ(ValuesOf(ps, "b"), std::vector<float>(2, -2.0f));
    EXPECT_EQ(push.bytes(), 24);
    if (mode == SSP) {
      EXPECT_EQ(ps.Describe().workers(0).clock(), 0) << "moved before the end";
    }
    auto done = push.Finish();
    ASSERT_TRUE(done.ok()) << done.status();
    ASSERT_EQ(done->results_size(), 2);
    for (const ShardPushResult& result : done->results()) {
      EXPECT_EQ(result.outcome(), ShardPushResult::APPLIED);
    }
    EXPECT_EQ(ps.Describe().updates_applied(), 2);
    if (mode == SSP) {
      EXPECT_EQ(ps.Describe().workers(0).clock(), 1);
    }
  }
}

// An error ends the push: the shards applied before it stay, the bad one
// and those after it are not applied, and a shard named again is refused.
TEST(IncomingPushTest, AnErrorLeavesTheShardsBeforeItAndNothingAfter) {
  ParameterServer ps(Config(ASYNC, 1));
  Create(ps, WholeShard("w"));
  Create(ps, WholeShard("b", 2));
  {
    ParameterServer::IncomingPush push(&ps, StreamedCallLimits());
    PushRequest part = PushOf({Gradient("w", 0, std::vector<float>(kRows, 1.0f))});
    ASSERT_TRUE(push.Add(&part).ok());
    part = PushOf({Gradient("b", 0, {2, std::nanf("")})});
    const absl::Status nan = push.Add(&part);
    EXPECT_EQ(nan.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(nan.message()), HasSubstr("variable 'b' shard 0: gradient element 1"));
    EXPECT_THAT(std::string(nan.message()),
                HasSubstr("(but 1 shard(s) of this push, whole in "
                          "its earlier messages, were applied before it)"));
    EXPECT_EQ(ValuesOfW(ps), std::vector<float>(kRows, -1.0f));
    EXPECT_EQ(ValuesOf(ps, "b"), std::vector<float>(2, 0.0f));
  }
  {
    ParameterServer::IncomingPush push(&ps, StreamedCallLimits());
    PushRequest part = PushOf({Gradient("w", 1, std::vector<float>(kRows, 1.0f))});
    ASSERT_TRUE(push.Add(&part).ok());
    part = PushOf({Slice("w", 1, 0, {1})});
    const absl::Status twice = push.Add(&part);
    EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(twice.message()), HasSubstr("covers each shard once"));
  }
  {
    // A shard never made whole: Finish says what it lacks.
    ParameterServer::IncomingPush push(&ps, StreamedCallLimits());
    PushRequest part = PushOf({Slice("b", 0, 0, {1})});
    ASSERT_TRUE(push.Add(&part).ok());
    const auto lacking = push.Finish();
    EXPECT_EQ(lacking.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(lacking.status().message()), HasSubstr("expected shape [2], got [1]"));
  }
  EXPECT_EQ(ValuesOfW(ps), std::vector<float>(kRows, -2.0f));
  EXPECT_EQ(ValuesOf(ps, "b"), std::vector<float>(2, 0.0f));
  EXPECT_EQ(ps.Describe().updates_applied(), 2);
}

// `slice`'s float32 data as a server's reads leave it in gRPC's buffers
// (ReceivedBytes): one byte off alignment, in pieces of 1, 2, 3, ... whole
// values; the slice keeps none of it.
ReceivedSlice LeftInBuffers(ShardSlice* slice) {
  const std::string& data = slice->tensor().data();
  auto buffer = std::make_shared<std::string>(1 + data.size(), '\0');
  std::memcpy(&(*buffer)[1], data.data(), data.size());
  ReceivedSlice received;
  received.bytes = static_cast<int64_t>(data.size());
  for (size_t at = 1, n = 1; at < buffer->size(); at += n++ * sizeof(float)) {
    received.pieces.emplace_back(buffer->data() + at,
                                 std::min(n * sizeof(float), buffer->size() - at));
  }
  received.owner = buffer;
  slice->mutable_tensor()->clear_data();
  return received;
}

TEST(IncomingPushTest, DataLeftInGrpcBuffersAppliesAsHeldData) {
  std::vector<float> grad(37);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = 0.25f * static_cast<float>(i) - 3.0f;
  for (ConsistencyMode mode : {ASYNC, SYNC}) {
    ParameterServer held(Config(mode, 1));
    ParameterServer left(Config(mode, 1));
    Create(held, WholeShard("v", 37));
    Create(left, WholeShard("v", 37));
    PushRequest push = PushOf({Gradient("v", 0, grad)});
    ASSERT_TRUE(held.Push(push).ok());
    ParameterServer::IncomingPush incoming(&left, StreamedCallLimits());
    ASSERT_TRUE(incoming.Add(&push, {LeftInBuffers(push.mutable_gradients(0))}).ok());
    EXPECT_EQ(incoming.bytes(), 37 * 4);
    ASSERT_TRUE(incoming.Finish().ok());
    EXPECT_EQ(left.Describe().updates_applied(), 1);
    EXPECT_EQ(ValuesOf(left, "v"), ValuesOf(held, "v"));
    EXPECT_EQ(ValuesOf(left, "v")[36], -6.0f);
  }
  ParameterServer ps(Config(ASYNC, 1));
  Create(ps, WholeShard("v", 37));
  std::vector<float> bad = grad;
  bad[20] = std::nanf("");  // in the sixth piece
  PushRequest push = PushOf({Gradient("v", 0, bad)});
  ReceivedBytes received = {LeftInBuffers(push.mutable_gradients(0))};
  const absl::Status nan = ps.Push(push, StreamedCallLimits(), received).status();
  EXPECT_THAT(std::string(nan.message()), HasSubstr("variable 'v' shard 0: gradient element 20"));
  received[0].bytes -= 4;
  const absl::Status short_data = ps.Push(push, StreamedCallLimits(), received).status();
  EXPECT_THAT(std::string(short_data.message()), HasSubstr("needs 148 bytes, got 144"));
  EXPECT_EQ(ValuesOf(ps, "v"), std::vector<float>(37, 0.0f));
}

// Streams of hostile parts -- unknown variables and shards, rows out of
// range or overflowing, shapes and byte counts that disagree, NaNs, slices
// repeated -- never crash the server or leave a shard half-updated: its
// values stay finite, and each update applied moved one version.
TEST(IncomingPushTest, HostileStreamsLeaveEveryShardWholeAndFinite) {
  ParameterServer ps(Config(ASYNC, 1));
  Create(ps, WholeShard("w"));
  Create(ps, WholeShard("b", 2));
  std::mt19937 random(17);
  const auto pick = [&](const auto& choices) {
    return choices[std::uniform_int_distribution<size_t>(0, std::size(choices) - 1)(random)];
  };
  const std::string names[] = {"w", "w", "b", "b", "zzz"};
  const int64_t rows[] = {-1, 0, 1, 2, 4, int64_t{1} << 62};
  const int shards[] = {0, 0, 0, 1, -1};
  int streams_ok = 0;
  for (int stream = 0; stream < 2000; ++stream) {
    ParameterServer::IncomingPush push(&ps, StreamedCallLimits());
    bool ok = true;
    for (int p = std::uniform_int_distribution<int>(0, 3)(random); p > 0 && ok; --p) {
      std::vector<ShardSlice> slices;
      for (int n = std::uniform_int_distribution<int>(0, 3)(random); n > 0; --n) {
        std::vector<float> values(std::uniform_int_distribution<int>(0, 4)(random), 0.5f);
        if (!values.empty() && random() % 8 == 0) values[0] = std::nanf("");
        ShardSlice slice = Slice(pick(names), 0, pick(rows), values);
        slice.set_shard(pick(shards));
        slice.mutable_tensor()->set_shape(0, pick(rows));
        if (random() % 10 == 0) slice.mutable_tensor()->set_dtype(DT_INT64);
        slices.push_back(std::move(slice));
      }
      PushRequest part = PushOf(std::move(slices));
      ok = push.Add(&part).ok();
    }
    if (ok && push.Finish().ok()) ++streams_ok;
  }
  EXPECT_GT(streams_ok, 0) << "no stream was valid: the test checks nothing";
  for (const std::string name : {"w", "b"}) {
    for (float v : ValuesOf(ps, name)) EXPECT_TRUE(std::isfinite(v)) << name;
  }
  const DescribeResponse described = ps.Describe();
  int64_t versions = 0;
  for (const ShardInfo& shard : described.shards()) versions += shard.version();
  EXPECT_EQ(versions, described.updates_applied());
  EXPECT_GT(described.updates_applied(), 0);
}

// A lending pull sends the shard's own memory; a push while it is out
// applies to a copy, so the pull still sends the values it read, and one
// with no pull out applies in place.
TEST(PullLendingTest, PushesCopyOnlyWhileASnapshotIsOut) {
  for (ConsistencyMode mode : {ASYNC, SYNC}) {
    ParameterServer ps(Config(mode, 1));
    Create(ps, WholeShard());
    PullRequest request;
    request.add_shards()->set_variable("w");
    const auto lend = [&] {
      auto pulled = ps.PullLending(request, absl::Now() + absl::Seconds(10));
      EXPECT_TRUE(pulled.ok()) << pulled.status();
      return pulled.ok() ? *std::move(pulled) : OutgoingPull();
    };
    const auto lent_values = [](const OutgoingPull& pull) {
      EXPECT_EQ(pull.lent.size(), 1u);
      EXPECT_TRUE(pull.response.slices(0).tensor().data().empty()) << "copied, not lent";
      const auto* values = reinterpret_cast<const float*>(pull.lent[0].data());
      return std::vector<float>(values, values + pull.lent[0].size() / sizeof(float));
    };
    std::optional<OutgoingPull> held = lend();
    const char* shard_memory = held->lent[0].data();
    EXPECT_EQ(PushOutcome(ps, Push(0, 0, 1.0f)), ShardPushResult::APPLIED);
    EXPECT_EQ(lent_values(*held), std::vector<float>(kRows, 0.0f)) << "the push changed a snapshot";
    const OutgoingPull after = lend();
    EXPECT_EQ(lent_values(after), std::vector<float>(kRows, -1.0f));
    EXPECT_NE(after.lent[0].data(), shard_memory) << "applied in place under a snapshot";
    held.reset();
    // `after` is still out: the next push copies again.
    EXPECT_EQ(PushOutcome(ps, Push(0, 1, 1.0f)), ShardPushResult::APPLIED);
    EXPECT_EQ(lent_values(after), std::vector<float>(kRows, -1.0f));
    const char* unshared = lend().lent[0].data();  // let go at once
    EXPECT_EQ(PushOutcome(ps, Push(0, 2, 1.0f)), ShardPushResult::APPLIED);
    OutgoingPull last = lend();
    EXPECT_EQ(last.lent[0].data(), unshared) << "copied with no snapshot out";
    EXPECT_EQ(lent_values(last), std::vector<float>(kRows, -3.0f));
    // What Pull answers is that, copied in.
    EXPECT_EQ(ValuesOfW(ps), std::vector<float>(kRows, -3.0f));
  }
}

class BadInputTest : public ::testing::Test {
 protected:
  BadInputTest() : ps_(Config(ASYNC, 2)) {
    Create(ps_, WholeShard("w"));
    Create(ps_, WholeShard("b", 2));
    EXPECT_EQ(PushOutcome(ps_, Push(0, 0, 1.0f)), ShardPushResult::APPLIED);
  }

  // Nothing changed: w is still -1 everywhere at version 1.
  void ExpectUntouched() {
    EXPECT_EQ(ValueAndVersion(ps_), std::make_pair(-1.0f, int64_t{1}));
    EXPECT_EQ(ps_.Describe().updates_applied(), 1);
  }

  ParameterServer ps_;
};

TEST_F(BadInputTest, UnknownVariableIsNotFound) {
  PushRequest push = Push(0, 0, 1.0f);
  push.mutable_gradients(0)->set_variable("nope");
  EXPECT_EQ(ps_.Push(push).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ps_.Push(push).status().message(), HasSubstr("'nope'"));
  PullRequest pull;
  pull.add_shards()->set_variable("w");
  pull.mutable_shards(0)->set_shard(3);
  auto pulled = ps_.Pull(pull, absl::Now() + absl::Seconds(1), {1 << 20});
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(pulled.status().message(), HasSubstr("shard 3"));
  ExpectUntouched();
}

TEST_F(BadInputTest, WrongShapeSaysExpectedAndGot) {
  PushRequest push = Push(0, 0, 1.0f);
  *push.mutable_gradients(0) = Gradient("w", 0, {1, 2, 3});
  auto pushed = ps_.Push(push);
  EXPECT_EQ(pushed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pushed.status().message(), HasSubstr("expected shape [4], got [3]"));
  // The right shape with too few bytes.
  push = Push(0, 0, 1.0f);
  push.mutable_gradients(0)->mutable_tensor()->mutable_data()->resize(7);
  EXPECT_THAT(ps_.Push(push).status().message(), HasSubstr("needs 16 bytes, got 7"));
  ExpectUntouched();
}

TEST_F(BadInputTest, WrongDtypeSaysExpectedAndGot) {
  PushRequest push = Push(0, 0, 1.0f);
  push.mutable_gradients(0)->mutable_tensor()->set_dtype(DT_INT64);
  auto pushed = ps_.Push(push);
  EXPECT_EQ(pushed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pushed.status().message(),
              HasSubstr("expected dtype DT_FLOAT, DT_BFLOAT16 or DT_FLOAT16, got DT_INT64"));
  // A 16-bit encoding with float32's byte count.
  push = Push(0, 0, 1.0f);
  push.mutable_gradients(0)->mutable_tensor()->set_dtype(DT_BFLOAT16);
  EXPECT_THAT(ps_.Push(push).status().message(), HasSubstr("in DT_BFLOAT16 needs 8 bytes, got 16"));
  // Pulls may ask only for a float encoding.
  PullRequest pull;
  pull.add_shards()->set_variable("w");
  pull.set_wire_dtype(DT_INT64);
  auto pulled = ps_.Pull(pull, absl::Now() + absl::Seconds(1), {1 << 20});
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pulled.status().message(), HasSubstr("wire_dtype DT_INT64"));
  ExpectUntouched();
}

TEST_F(BadInputTest, NanInASixteenBitGradientIsRejected) {
  for (DataType encoding : {DT_BFLOAT16, DT_FLOAT16}) {
    PushRequest push = Push(0, 0, 1.0f);
    ASSERT_TRUE(EncodeFloatTensor({4}, std::vector<float>{1, 1, 1, std::nanf("")}, encoding, "w",
                                  push.mutable_gradients(0)->mutable_tensor())
                    .ok());
    EXPECT_THAT(ps_.Push(push).status().message(), HasSubstr("element 3 is nan"));
    ExpectUntouched();
  }
}

TEST_F(BadInputTest, NanOrInfGradientIsRejectedAndNothingApplied) {
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    // A good gradient for b first: the whole push must be rejected.
    PushRequest push;
    push.set_worker_id(0);
    *push.add_gradients() = Gradient("b", 0, {1, 1});
    *push.add_gradients() = Gradient("w", 0, {1, 1, bad, 1});
    auto pushed = ps_.Push(push);
    EXPECT_EQ(pushed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(pushed.status().message(), HasSubstr("element 2"));
    ExpectUntouched();
    PullRequest pull;
    pull.add_shards()->set_variable("b");
    auto b = ps_.Pull(pull, absl::Now() + absl::Seconds(1), {1 << 20});
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->slices(0).version(), 0);
  }
}

TEST_F(BadInputTest, WorkerOutOfRangeAndFutureVersionsAreRejected) {
  EXPECT_THAT(ps_.Push(Push(7, 0, 1.0f)).status().message(), HasSubstr("worker_id 7"));
  // An unset worker_id is no worker, not worker 0.
  PushRequest anonymous = Push(0, 0, 1.0f);
  anonymous.clear_worker_id();
  EXPECT_THAT(std::string(ps_.Push(anonymous).status().message()),
              HasSubstr("carries no worker_id"));
  EXPECT_EQ(ps_.Heartbeat(HeartbeatRequest()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ps_.Describe().workers(0).seen() && ps_.Describe().workers(1).seen());
  EXPECT_EQ(PullW(ps_, -1).status().code(), absl::StatusCode::kOk);  // a reader
  PullRequest negative;
  negative.set_worker_id(-1);  // set, and out of range
  negative.add_shards()->set_variable("w");
  EXPECT_THAT(std::string(ps_.Pull(negative, absl::Now(), {1 << 20}).status().message()),
              HasSubstr("worker_id -1 is out of range"));
  auto future = ps_.Push(Push(0, 5, 1.0f));
  EXPECT_EQ(future.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(future.status().message(), HasSubstr("version 5"));
  PushRequest twice;
  twice.set_worker_id(0);
  *twice.add_gradients() = Gradient("b", 0, {1, 1});
  *twice.add_gradients() = twice.gradients(0);
  EXPECT_THAT(ps_.Push(twice).status().message(), HasSubstr("slices overlap at row 0"));
  ExpectUntouched();
}

TEST_F(BadInputTest, SlicesThatDoNotTileTheShardAreRejected) {
  struct Bad {
    std::vector<ShardSlice> slices;
    const char* message;
  };
  const std::vector<Bad> cases = {
      {{Slice("w", 0, 0, {1}), Slice("w", 0, 2, {1, 1})}, "lacks rows from 1"},
      {{Slice("w", 0, 0, {1, 1}), Slice("w", 0, 1, {1, 1, 1})}, "slices overlap at row 1"},
      {{Slice("w", 0, 0, {1, 1})}, "expected shape [4], got [2]"},
      {{Slice("w", 0, 1, {1, 1, 1})}, "lacks rows from 0"},
      {{Slice("w", 0, 0, {1, 1}), Slice("w", 1, 2, {1, 1})}, "computed at version 1, the shard's"},
      {{Slice("w", 0, 0, {1, 1}), Slice("w", 0, 2, {1})},
       "rows from 2: expected shape [2], got [1]"},
      {{Slice("w", 0, 0, {1, 1}), Slice("w", 0, 2, {1, std::nanf("")})}, "element 3 is nan"},
  };
  for (const Bad& bad : cases) {
    PushRequest push;
    push.set_worker_id(0);
    for (const ShardSlice& slice : bad.slices) *push.add_gradients() = slice;
    auto pushed = ps_.Push(push);
    EXPECT_EQ(pushed.status().code(), absl::StatusCode::kInvalidArgument) << bad.message;
    EXPECT_THAT(pushed.status().message(), HasSubstr(bad.message));
    ExpectUntouched();
  }
}

TEST_F(BadInputTest, CreateIsIdempotentAndConflictsNameBothSpecs) {
  CreateShardsRequest same;
  *same.add_shards() = WholeShard("w");
  auto again = ps_.CreateShards(same);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->existing(), 1);
  EXPECT_EQ(again->created(), 0);

  CreateShardsRequest conflict;
  *conflict.add_shards() = WholeShard("w");
  conflict.mutable_shards(0)->mutable_variable()->mutable_optimizer()->set_learning_rate(0.5f);
  auto created = ps_.CreateShards(conflict);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(created.status().message(), HasSubstr("learning_rate: 1"));
  EXPECT_THAT(created.status().message(), HasSubstr("learning_rate: 0.5"));

  CreateShardsRequest bad;
  *bad.add_shards() = WholeShard("x");
  bad.mutable_shards(0)->set_rows(9);  // more rows than the variable has
  EXPECT_THAT(ps_.CreateShards(bad).status().message(), HasSubstr("does not fit"));
  ExpectUntouched();
}

TEST_F(BadInputTest, InitialValuesMustBeOnePerShardOfItsSize) {
  const std::vector<float> four = {1, 2, 3, 4};
  const std::string bytes(reinterpret_cast<const char*>(four.data()), 16);
  CreateShardsRequest uneven;
  *uneven.add_shards() = WholeShard("x");
  *uneven.add_shards() = WholeShard("y");
  uneven.add_initial_values(bytes);
  EXPECT_THAT(ps_.CreateShards(uneven).status().message(),
              HasSubstr("1 initial values for 2 shards"));
  CreateShardsRequest short_values;
  *short_values.add_shards() = WholeShard("x");
  short_values.add_initial_values(bytes.substr(0, 12));
  auto created = ps_.CreateShards(short_values);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(created.status().message(),
              HasSubstr("variable 'x' shard 0: initial values of 12 bytes; its 4 float32"));
  EXPECT_EQ(ps_.Describe().shards_size(), 2);
  ExpectUntouched();

  CreateShardsRequest good;
  *good.add_shards() = WholeShard("x");
  good.add_initial_values(bytes);
  ASSERT_TRUE(ps_.CreateShards(good).ok());
  PullRequest pull;
  ShardRef* ref = pull.add_shards();
  ref->set_variable("x");
  auto pulled = ps_.Pull(pull, absl::Now() + absl::Seconds(10), {1 << 20});
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  const absl::Span<const float> values = FloatValues(pulled->slices(0).tensor());
  EXPECT_EQ(std::vector<float>(values.begin(), values.end()), four);
}

TEST_F(BadInputTest, OverflowingShapesAndRowRangesAreRejected) {
  const int64_t big = int64_t{1} << 40;
  struct Bad {
    std::vector<int64_t> shape;
    int64_t row_offset, rows;
    const char* message;
  };
  const std::vector<Bad> cases = {
      // The product wraps to 0 in 64 bits: once a segfault.
      {{int64_t{1} << 24, big}, 0, 1, "more than 17179869184 elements"},
      {{big, big, big}, 0, 1, "more than 17179869184 elements"},
      {{4, -1}, 0, 4, "every dimension must be >= 1"},
      {{1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 1, "has rank 9; at most 8"},
      {{4}, std::numeric_limits<int64_t>::max(), 1, "does not fit shape [4]"},
      {{4}, 3, std::numeric_limits<int64_t>::max(), "does not fit shape [4]"},
      {{4}, -1, 1, "does not fit shape [4]"},
  };
  for (const Bad& bad : cases) {
    CreateShardsRequest request;
    ShardSpec* spec = request.add_shards();
    *spec = WholeShard("x");
    spec->mutable_variable()->clear_shape();
    for (int64_t d : bad.shape) spec->mutable_variable()->add_shape(d);
    spec->set_row_offset(bad.row_offset);
    spec->set_rows(bad.rows);
    auto created = ps_.CreateShards(request);
    EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument) << bad.message;
    EXPECT_THAT(created.status().message(), HasSubstr(bad.message));
  }
  EXPECT_EQ(ps_.Describe().shards_size(), 2);
  ExpectUntouched();
  EXPECT_EQ(PushOutcome(ps_, Push(0, 1, 1.0f)), ShardPushResult::APPLIED);  // still serving
}

// The limits a call's transport sets are the server's to enforce, so the
// in-process transport meets the same ones as gRPC.
TEST_F(BadInputTest, CallLimitsAndPushBytesAreEnforcedByTheServer) {
  CallLimits small = SmallCallLimits();
  small.max_pull_bytes = 8;  // w is 16 bytes
  PullRequest pull;
  pull.add_shards()->set_variable("w");
  auto pulled = ps_.Pull(pull, absl::Now(), small);
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(pulled.status().message()),
              HasSubstr("answers 16 bytes of tensors; this call carries at most 8"));
  small.max_push_bytes = 8;
  auto pushed = ps_.Push(Push(0, 1, 1.0f), small);
  EXPECT_EQ(pushed.status().code(), absl::StatusCode::kResourceExhausted);
  // Never more than every shard here once (w and b: 24 bytes), whatever
  // the call; nothing at all to a server with no variables.
  EXPECT_THAT(std::string(ps_.AdmitPushBytes(0, 25).message()), HasSubstr("holds only 24 bytes"));
  // A pull that names w a thousand times would copy it a thousand times.
  PullRequest greedy;
  for (int i = 0; i < 1000; ++i) greedy.add_shards()->set_variable("w");
  auto copied = ps_.Pull(greedy, absl::Now());
  EXPECT_EQ(copied.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(copied.status().message()),
              HasSubstr("asks for 16000 bytes of tensors, more than the 24 bytes"));
  EXPECT_TRUE(ps_.AdmitPushBytes(0, 24).ok());
  ParameterServer empty(Config(ASYNC, 1));
  EXPECT_EQ(empty.AdmitPushBytes(0, 4).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(empty.Push(Push(0, 0, 1.0f)).status().code(), absl::StatusCode::kNotFound);
  // A restarted server still being refilled holds fewer bytes than a push
  // made for its last incarnation: the restart is said, not the bound, so
  // that the client recreates its variables instead of giving up.
  CreateShardsRequest refill;
  *refill.add_shards() = WholeShard("b", 1);
  ASSERT_TRUE(empty.CreateShards(refill).ok());
  CreateShardsRequest again;
  *again.add_shards() = WholeShard("w");
  const uint64_t before_restart = ps_.CreateShards(again)->incarnation();
  const absl::Status stale = empty.AdmitPushBytes(before_restart, 16);
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted) << stale;
  EXPECT_THAT(std::string(stale.message()), HasSubstr("restarted"));
  ExpectUntouched();
}

TEST(MemoryBudgetTest, ShardsPastTheBudgetAreRefusedAndNothingHeldIsLost) {
  for (ConsistencyMode mode : {ASYNC, SYNC}) {
    PsServerConfig config = Config(mode, 1);
    config.set_max_memory_bytes(1 << 20);
    ParameterServer ps(config);
    Create(ps, WholeShard("w"));
    EXPECT_EQ(PushOutcome(ps, Push(0, 0, 1.0f)), ShardPushResult::APPLIED);
    // Legal, and 64 GiB.
    CreateShardsRequest huge;
    *huge.add_shards() = WholeShard("huge", kMaxElements);
    auto created = ps.CreateShards(huge);
    EXPECT_EQ(created.status().code(), absl::StatusCode::kResourceExhausted);
    const std::string message(created.status().message());
    EXPECT_THAT(message, HasSubstr(absl::StrCat("variable 'huge' shard 0 (17179869184 of "
                                                "[17179869184]) needs ",
                                                mode == ASYNC ? "64.0" : "128.0", " GiB")));
    EXPECT_THAT(message, HasSubstr("of its 1.0 MiB budget"));
    // 64K floats with Adam's two slots: 768 KiB, or 1 MiB with sync's
    // accumulator, which no longer fits beside w.
    CreateShardsRequest adam;
    *adam.add_shards() = WholeShard("adam", 65536);
    adam.mutable_shards(0)->mutable_variable()->mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
    EXPECT_EQ(ps.CreateShards(adam).ok(), mode == ASYNC) << ConsistencyMode_Name(mode);
    const DescribeResponse described = ps.Describe();
    EXPECT_EQ(described.max_memory_bytes(), 1 << 20);
    // Values, slots and (sync) sums; and each shard's spec and overhead.
    auto kept = [](ShardSpec spec) {
      *spec.mutable_variable() = CanonicalSpec(spec.variable());
      return static_cast<int64_t>(spec.ByteSizeLong()) + VariableStore::kShardOverheadBytes;
    };
    const int64_t w = (mode == ASYNC ? 16 : 32) + kept(WholeShard("w"));
    EXPECT_EQ(described.memory_bytes(),
              mode == ASYNC ? w + int64_t{3} * (4 << 16) + kept(adam.shards(0)) : w);
    EXPECT_EQ(ValueAndVersion(ps), std::make_pair(-1.0f, int64_t{1}));
  }
}

TEST(InitializerTest, ValuesDoNotDependOnSharding) {
  ParameterServer ps(Config(ASYNC, 1));
  VariableSpec spec;
  spec.set_name("e");
  spec.add_shape(6);
  spec.add_shape(3);
  spec.set_dtype(DT_FLOAT);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.mutable_initializer()->set_kind(InitializerSpec::GLOROT_UNIFORM);
  spec.mutable_initializer()->set_seed(42);
  ShardSpec whole;
  *whole.mutable_variable() = spec;
  whole.set_num_shards(1);
  whole.set_rows(6);
  Create(ps, whole);
  spec.set_name("e2");  // the same values, split 4 + 2
  for (int s = 0; s < 2; ++s) {
    ShardSpec part;
    *part.mutable_variable() = spec;
    part.set_shard(s);
    part.set_num_shards(2);
    part.set_row_offset(s == 0 ? 0 : 4);
    part.set_rows(s == 0 ? 4 : 2);
    Create(ps, part);
  }
  PullRequest pull;
  pull.add_shards()->set_variable("e");
  pull.add_shards()->set_variable("e2");
  pull.add_shards()->set_variable("e2");
  pull.mutable_shards(2)->set_shard(1);
  auto pulled = ps.Pull(pull, absl::Now() + absl::Seconds(1), {1 << 20});
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  auto whole_values = FloatValues(pulled->slices(0).tensor());
  std::vector<float> joined(FloatValues(pulled->slices(1).tensor()).begin(),
                            FloatValues(pulled->slices(1).tensor()).end());
  for (float v : FloatValues(pulled->slices(2).tensor())) joined.push_back(v);
  ASSERT_EQ(joined.size(), 18u);
  const float limit = std::sqrt(6.0f / 9.0f);
  for (int i = 0; i < 18; ++i) {
    EXPECT_EQ(whole_values[i], joined[i]);
    EXPECT_LE(std::fabs(whole_values[i]), limit);
  }
  EXPECT_NE(whole_values[0], whole_values[3]);  // rows differ
}

}  // namespace
}  // namespace fulcrum

namespace fulcrum {
namespace {

TEST(JobDoneTest, WaitsForEveryWorkerToFinishOrDie) {
  absl::Time fake_now = absl::Now();
  std::atomic<int64_t> offset_ms{0};
  ParameterServer ps(Config(SYNC, 3),
                     [&] { return fake_now + absl::Milliseconds(offset_ms.load()); });
  Create(ps, WholeShard());
  auto finish = [&](int worker) {
    HeartbeatRequest request;
    request.set_worker_id(worker);
    request.set_finished(true);
    ASSERT_TRUE(ps.Heartbeat(request).ok());
  };
  // Workers 0 and 1 push step 0; worker 2 has finished already, so the step
  // completes with two gradients.
  finish(2);
  EXPECT_EQ(PushOutcome(ps, Push(0, 0, 1.0f)), ShardPushResult::ACCUMULATED);
  EXPECT_EQ(PushOutcome(ps, Push(1, 0, 3.0f)), ShardPushResult::APPLIED);
  EXPECT_EQ(ValueAndVersion(ps), std::make_pair(-2.0f, int64_t{1}));

  finish(0);
  ps.JobDone("chief done");
  EXPECT_TRUE(ps.Describe().job_done());
  EXPECT_FALSE(ps.WaitForJobDone(absl::ZeroDuration()));  // worker 1 still trains
  offset_ms = 100;
  ASSERT_TRUE(ps.Heartbeat([] {
                  HeartbeatRequest r;
                  r.set_worker_id(1);
                  return r;
                }())
                  .ok());
  offset_ms = 250;  // only worker 1's renewed lease would still hold
  ps.CheckLeases();
  EXPECT_FALSE(ps.WaitForJobDone(absl::ZeroDuration()));
  offset_ms = 400;  // worker 1 went silent: its lease runs out
  ps.CheckLeases();
  EXPECT_TRUE(ps.WaitForJobDone(absl::ZeroDuration()));
  EXPECT_TRUE(ps.Describe().shutting_down());
}

}  // namespace
}  // namespace fulcrum
