#include <gmock/gmock.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/client_test_util.h"
#include "client/ps_client_impl.h"
#include "client/transport/forwarding_ps_transport.h"
#include "client/transport/in_process_ps_transport.h"
#include "fulcrum/grpc_ps_client.h"
#include "proto/ps_service.grpc.pb.h"
#include "ps_server/grpc/ps_grpc_server.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// Two in-process servers and clients for `workers` replicas.
class Cluster {
 public:
  Cluster(ConsistencyMode mode, int workers, DataType wire_dtype = DT_FLOAT) {
    for (int i = 0; i < 2; ++i) {
      servers_.push_back(std::make_unique<ParameterServer>(TestServerConfig(mode, workers)));
    }
    for (int w = 0; w < workers; ++w) {
      std::vector<std::unique_ptr<PsTransport>> transports;
      for (auto& server : servers_) {
        transports.push_back(std::make_unique<InProcessPsTransport>(server.get()));
      }
      PsClientOptions options;
      options.worker_id = w;
      options.mode = mode;
      options.wire_dtype = wire_dtype;
      clients_.push_back(std::make_unique<PsClientImpl>(std::move(transports), options));
    }
  }
  PsClient& client(int w) { return *clients_[w]; }
  ParameterServer& server(int i) { return *servers_[i]; }

 private:
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::unique_ptr<PsClient>> clients_;
};

TEST(PsClientTest, ShardsAcrossServersAndAppliesPushes) {
  Cluster cluster(ASYNC, 1);
  PsClient& client = cluster.client(0);
  ASSERT_TRUE(
      client.CreateVariables({TestVariable("w", {5, 2}, 3, 1.0f), TestVariable("b", {2}, 1, 0.0f)})
          .ok());
  // Both servers hold something: 3 shards of w and b spread over 2 servers.
  EXPECT_GT(cluster.server(0).Describe().shards_size(), 0);
  EXPECT_GT(cluster.server(1).Describe().shards_size(), 0);

  TensorMap grads;
  grads["w"] = DenseTensor{{5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
  grads["b"] = Filled({2}, 0.5f);
  auto stats = client.Push(grads);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->applied, 4);

  TensorMap values;
  ASSERT_TRUE(client.Pull({}, &values).ok());
  ASSERT_EQ(values["w"].shape, Shape({5, 2}));
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(values["w"].values[i], 1.0f - i);
  EXPECT_EQ(values["b"].values, std::vector<float>({-0.5f, -0.5f}));
  EXPECT_EQ(client.step(), 1);
}

// A shard over 16 MiB gets advice to split it; smaller ones none.
TEST(PsClientTest, CreatingAShardOver16MiBAdvisesSplittingIt) {
  Cluster cluster(ASYNC, 1);
  PsClient& client = cluster.client(0);
  ::testing::internal::CaptureStdout();
  ASSERT_TRUE(client.CreateVariables({TestVariable("small", {4096, 1024}, 1, 0.0f)}).ok());
  EXPECT_THAT(::testing::internal::GetCapturedStdout(),
              ::testing::Not(HasSubstr("has a shard of")));
  ::testing::internal::CaptureStdout();
  ASSERT_TRUE(client.CreateVariables({TestVariable("big", {4097, 1024}, 1, 0.0f)}).ok());
  EXPECT_THAT(::testing::internal::GetCapturedStdout(),
              HasSubstr("variable 'big' has a shard of 16.0 MiB"));
}

// Gradients and pulls travel rounded to 16 bits; the servers apply the
// rounded gradient to float32 values and keep them at full precision.
TEST(PsClientTest, SixteenBitWireRoundsWhatTravelsNotWhatServersKeep) {
  for (DataType wire : {DT_BFLOAT16, DT_FLOAT16}) {
    SCOPED_TRACE(DataType_Name(wire));
    Cluster cluster(ASYNC, 1, wire);
    PsClient& client = cluster.client(0);
    ASSERT_TRUE(client.CreateVariables({TestVariable("w", {4}, 2, 0.0f)}).ok());  // SGD, lr 1
    const std::vector<float> g = {1.0f / 3, -1000.1f, 2.5e-3f, 1.0f};
    ASSERT_TRUE(client.Push({{"w", DenseTensor{{4}, g}}}).ok());
    TensorMap pulled;
    ASSERT_TRUE(client.Pull({}, &pulled).ok());
    const int bits = wire == DT_BFLOAT16 ? 8 : 11;  // common/tensor.h's bounds
    for (int i = 0; i < 4; ++i) {
      if (i < 3) {
        EXPECT_NE(pulled["w"].values[i], -g[i]) << "element " << i << " was not rounded";
      }
      EXPECT_LE(std::abs(pulled["w"].values[i] + g[i]), std::ldexp(std::abs(g[i]), -bits));
    }
    // A second, tiny step: on the servers 1 - 2^-12 in float32, which a
    // 16-bit pull rounds back to 1 but a float32 reader sees.
    ASSERT_TRUE(client.Push({{"w", Filled({4}, std::ldexp(1.0f, -12))}}).ok());
    ASSERT_TRUE(client.Pull({}, &pulled).ok());
    EXPECT_EQ(pulled["w"].values[3], -1.0f);
    std::vector<std::unique_ptr<PsTransport>> transports;
    for (int ps = 0; ps < 2; ++ps) {
      transports.push_back(std::make_unique<InProcessPsTransport>(&cluster.server(ps)));
    }
    PsClientOptions reader_options;
    reader_options.worker_id = -1;
    PsClientImpl reader(std::move(transports), reader_options);
    ASSERT_TRUE(reader.CreateVariables({TestVariable("w", {4}, 2, 0.0f)}).ok());
    TensorMap exact;
    ASSERT_TRUE(reader.Pull({}, &exact).ok());
    EXPECT_EQ(exact["w"].values[3], -1.0f - std::ldexp(1.0f, -12));
  }
}

TEST(PsClientTest, Float16OverflowFailsThePushNamingTheVariable) {
  Cluster cluster(ASYNC, 1, DT_FLOAT16);
  PsClient& client = cluster.client(0);
  ASSERT_TRUE(client.CreateVariables({TestVariable("w", {4}, 1, 0.0f)}).ok());
  auto pushed = client.Push({{"w", DenseTensor{{4}, {0, 0, 1e5f, 0}}}});
  EXPECT_EQ(pushed.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(pushed.status().message(), HasSubstr("variable 'w'"));
  EXPECT_THAT(pushed.status().message(), HasSubstr("element 2 is 100000"));
  EXPECT_EQ(cluster.server(0).Describe().updates_applied(), 0);
}

TEST(PsClientTest, SyncPullWaitsForTheAggregatedStep) {
  Cluster cluster(SYNC, 2);
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(cluster.client(w).CreateVariables({TestVariable("w", {4}, 2, 0.0f)}).ok());
  }
  for (int step = 0; step < 3; ++step) {
    TensorMap values[2];
    std::thread other([&] {
      ASSERT_TRUE(cluster.client(1).PushPull({{"w", Filled({4}, 3.0f)}}, {}, &values[1]).ok());
    });
    auto stats = cluster.client(0).PushPull({{"w", Filled({4}, 1.0f)}}, {}, &values[0]);
    other.join();
    ASSERT_TRUE(stats.ok()) << stats.status();
    // Both see the step applied once, with the mean of 1 and 3.
    for (int w = 0; w < 2; ++w) {
      EXPECT_EQ(values[w]["w"].values, std::vector<float>(4, -2.0f * (step + 1))) << w;
      EXPECT_EQ(cluster.client(w).step(), step + 1);
    }
  }
}

// In sync, a worker's start waits for the other worker's first contact; in
// async it does not wait at all.
TEST(PsClientTest, AwaitJobStartWaitsForEveryWorkerInSync) {
  Cluster cluster(SYNC, 2);
  std::atomic<bool> started{false};
  std::thread first([&] {
    EXPECT_TRUE(cluster.client(0).AwaitJobStart(nullptr).ok());
    started = true;
  });
  // Worker 0 has made contact and still waits for worker 1.
  while (!cluster.server(1).Describe().workers(0).seen()) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_FALSE(started.load());
  EXPECT_TRUE(cluster.server(0).Describe().workers(1).awaited());
  ASSERT_TRUE(cluster.client(1).Heartbeat().ok());
  first.join();
  EXPECT_TRUE(started.load());

  Cluster async(ASYNC, 2);
  EXPECT_TRUE(async.client(0).AwaitJobStart(nullptr).ok());
  EXPECT_FALSE(async.server(0).Describe().workers(0).seen());  // not even a heartbeat
}

TEST(PsClientTest, SspClockAdvancesWithEachPush) {
  Cluster cluster(SSP, 1);
  PsClient& client = cluster.client(0);
  ASSERT_TRUE(client.CreateVariables({TestVariable("w", {2}, 1, 0.0f)}).ok());
  TensorMap values;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client.PushPull({{"w", Filled({2}, 1.0f)}}, {}, &values).ok());
  }
  EXPECT_EQ(client.clock(), 3);
  EXPECT_EQ(cluster.server(0).Describe().workers(0).clock(), 3);
  EXPECT_EQ(cluster.server(1).Describe().workers(0).clock(), 3);  // told though it holds nothing
}

TEST(PsClientTest, BadGradientsAreRejectedBeforeSending) {
  Cluster cluster(ASYNC, 1);
  PsClient& client = cluster.client(0);
  ASSERT_TRUE(client.CreateVariables({TestVariable("w", {4}, 2, 0.0f)}).ok());
  auto unknown = client.Push({{"nope", Filled({4}, 1.0f)}});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  auto shape = client.Push({{"w", Filled({5}, 1.0f)}});
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shape.status().message(), HasSubstr("expected shape [4], got [5]"));
  EXPECT_EQ(cluster.server(0).Describe().updates_applied(), 0);
  TensorMap values;
  EXPECT_EQ(client.Pull({"nope"}, &values).code(), absl::StatusCode::kNotFound);
}

TEST(PsClientTest, ConflictingCreateIsAlreadyExists) {
  Cluster cluster(ASYNC, 2);
  ASSERT_TRUE(cluster.client(0).CreateVariables({TestVariable("w", {4}, 2, 0.0f)}).ok());
  ASSERT_TRUE(
      cluster.client(1).CreateVariables({TestVariable("w", {4}, 2, 0.0f)}).ok());  // idempotent
  absl::Status conflict = cluster.client(1).CreateVariables({TestVariable("w", {4}, 2, 7.0f)});
  EXPECT_EQ(conflict.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(conflict.message(), HasSubstr("ps "));
}

// The views read and write the caller's buffers in place: what the Python
// package relies on for zero copy.
TEST(PsClientTest, ViewsPullIntoAndPushFromTheCallersBuffers) {
  Cluster cluster(ASYNC, 1);
  PsClient& client = cluster.client(0);
  ASSERT_TRUE(
      client.CreateVariables({TestVariable("w", {3, 2}, 2, 1.0f), TestVariable("b", {2}, 1, 0.0f)})
          .ok());
  std::vector<float> w(6, -9.0f), b(2, -9.0f);
  ASSERT_TRUE(client.PullInto({{"w", {{3, 2}, w.data()}}}).ok());
  EXPECT_EQ(w, std::vector<float>(6, 1.0f));
  EXPECT_EQ(b, std::vector<float>(2, -9.0f));  // not asked for: untouched

  const std::vector<float> gw = {0, 1, 2, 3, 4, 5}, gb = {0.5f, 0.25f};
  auto pushed = client.PushFrom({{"w", {{3, 2}, gw.data()}}});
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->applied, 2);
  auto both = client.PushPullInto({{"b", {{2}, gb.data()}}},
                                  {{"w", {{3, 2}, w.data()}}, {"b", {{2}, b.data()}}});
  ASSERT_TRUE(both.ok()) << both.status();
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(w[i], 1.0f - gw[i]);
  EXPECT_EQ(b, std::vector<float>({-0.5f, -0.25f}));

  // Mistakes fail before anything is sent, naming the variable.
  const int64_t applied = cluster.server(0).Describe().updates_applied() +
                          cluster.server(1).Describe().updates_applied();
  absl::Status shape = client.PullInto({{"w", {{2, 3}, w.data()}}});
  EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shape.message(), HasSubstr("variable 'w': expected shape [3, 2], got [2, 3]"));
  EXPECT_EQ(client.PullInto({{"w", {{3, 2}, nullptr}}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.PullInto({{"nope", {{1}, w.data()}}}).code(), absl::StatusCode::kNotFound);
  auto bad_push = client.PushFrom({{"b", {{3}, gb.data()}}});
  EXPECT_THAT(bad_push.status().message(), HasSubstr("expected shape [2], got [3]"));
  EXPECT_EQ(client.PushPullInto({{"b", {{2}, gb.data()}}}, {{"b", {{2}, nullptr}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster.server(0).Describe().updates_applied() +
                cluster.server(1).Describe().updates_applied(),
            applied);
}

// The first creator's values win: shards created with values take them,
// later creators (with or without values) see them.
TEST(PsClientTest, InitialValuesFromTheFirstCreatorWin) {
  Cluster cluster(ASYNC, 2);
  std::vector<float> chief(10);
  for (int i = 0; i < 10; ++i) chief[i] = 0.5f * i;
  const std::vector<VariableSpec> specs = {TestVariable("w", {5, 2}, 3, 7.0f),
                                           TestVariable("b", {2}, 1, 7.0f)};
  absl::Status wrong = cluster.client(0).CreateVariables(specs, {{"w", {{2, 5}, chief.data()}}});
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.message(), HasSubstr("initial value of 'w': expected shape [5, 2]"));
  EXPECT_EQ(cluster.client(0).CreateVariables(specs, {{"v", {{1}, chief.data()}}}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(cluster.client(0).CreateVariables(specs, {{"w", {{5, 2}, chief.data()}}}).ok());
  std::vector<float> other(10, 3.0f);
  ASSERT_TRUE(cluster.client(1).CreateVariables(specs, {{"w", {{5, 2}, other.data()}}}).ok());
  ASSERT_TRUE(cluster.client(1).CreateVariables(specs).ok());
  TensorMap values;
  ASSERT_TRUE(cluster.client(1).Pull({}, &values).ok());
  EXPECT_EQ(values["w"].values, chief);
  EXPECT_EQ(values["b"].values, std::vector<float>(2, 7.0f));  // its initializer
}

// Refuses, as gRPC does, a CreateShards call over `max_bytes`.
class MessageLimit : public ForwardingPsTransport {
 public:
  MessageLimit(ParameterServer* server, size_t max_bytes)
      : ForwardingPsTransport(std::make_unique<InProcessPsTransport>(server)),
        max_bytes_(max_bytes) {}
  absl::StatusOr<CreateShardsResponse> CreateShards(const CreateShardsRequest& request,
                                                    absl::Time deadline) override {
    if (request.ByteSizeLong() > max_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Sent message larger than max (", request.ByteSizeLong(), ")"));
    }
    return ForwardingPsTransport::CreateShards(request, deadline);
  }

 private:
  const size_t max_bytes_;
};

// Initial values larger than one message go a few shards at a time; a
// shard too large for any message is refused, saying what to do.
TEST(PsClientTest, InitialValuesLargerThanOneMessageGoAFewShardsAtATime) {
  ParameterServer server(TestServerConfig(ASYNC, 1));
  std::vector<std::unique_ptr<PsTransport>> transports;
  transports.push_back(std::make_unique<MessageLimit>(&server, size_t{40} << 20));
  PsClientImpl client(std::move(transports), PsClientOptions{});
  const Shape shape = {48, 1 << 18};  // 48 MiB in 8 shards of 6 MiB
  std::vector<float> initial(48 << 18);
  for (size_t i = 0; i < initial.size(); ++i) initial[i] = static_cast<float>(i % 1000);
  ASSERT_TRUE(client
                  .CreateVariables({TestVariable("big", shape, 8, 0.0f)},
                                   {{"big", {shape, initial.data()}}})
                  .ok());
  TensorMap values;
  ASSERT_TRUE(client.Pull({}, &values).ok());
  EXPECT_EQ(values["big"].values, initial);

  const Shape huge = {256, 1 << 18};  // one shard of 256 MiB, never touched
  std::unique_ptr<float[]> untouched(new float[size_t{256} << 18]);
  absl::Status refused = client.CreateVariables({TestVariable("huge", huge, 1, 0.0f)},
                                                {{"huge", {huge, untouched.get()}}});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("give the variable a partitioner"));
}

// Fails UNAVAILABLE a number of times, then passes calls through, pulls in
// slices of `max_slice_bytes` and changed by `mangle_pull`, if set. The
// first `lost_push_responses` pushes reach the server and then fail
// UNAVAILABLE, as when a connection breaks after the server applied them.
class FlakyTransport final : public ForwardingPsTransport {
 public:
  FlakyTransport(ParameterServer* ps, int failures,
                 int64_t max_slice_bytes = std::numeric_limits<int64_t>::max())
      : ForwardingPsTransport(std::make_unique<InProcessPsTransport>(ps, max_slice_bytes)),
        failures_(failures) {}
  std::function<void(PullResponse*)> mangle_pull;
  int lost_push_responses = 0;

  std::string address() const override { return "flaky"; }
  absl::StatusOr<CreateShardsResponse> CreateShards(const CreateShardsRequest& r,
                                                    absl::Time d) override {
    if (Fail()) return absl::UnavailableError("connection refused");
    return ForwardingPsTransport::CreateShards(r, d);
  }
  // A mangled pull is not placed: the client takes the values from it.
  absl::StatusOr<PullResponse> Pull(const PullRequest& r, int64_t bytes, absl::Time d,
                                    SlicePlacer* sink) override {
    if (Fail()) return absl::UnavailableError("connection refused");
    auto pulled = ForwardingPsTransport::Pull(r, bytes, d, mangle_pull ? nullptr : sink);
    if (pulled.ok() && mangle_pull) mangle_pull(&*pulled);
    return pulled;
  }
  absl::StatusOr<PushResponse> Push(std::shared_ptr<const OutgoingPush> r, absl::Time d) override {
    auto pushed = ForwardingPsTransport::Push(std::move(r), d);
    if (lost_push_responses-- > 0) return absl::UnavailableError("connection reset");
    return pushed;
  }
  absl::StatusOr<PullResponse> PushPull(std::shared_ptr<const OutgoingPush> p, const PullRequest& r,
                                        int64_t bytes, absl::Time d, SlicePlacer* sink) override {
    auto pulled = ForwardingPsTransport::PushPull(std::move(p), r, bytes, d, sink);
    if (lost_push_responses-- > 0) return absl::UnavailableError("connection reset");
    return pulled;
  }
  int calls() const { return calls_; }

 private:
  bool Fail() { return ++calls_ <= failures_; }
  const int failures_;
  std::atomic<int> calls_{0};
};

TEST(PsClientTest, RetriesUnavailableWithBackoffThenGivesUpNamingTheServer) {
  ParameterServer ps(TestServerConfig(ASYNC, 1));
  PsClientOptions options;
  options.initial_backoff = absl::Milliseconds(1);
  options.max_backoff = absl::Milliseconds(4);
  options.retry_timeout = absl::Seconds(5);
  std::vector<std::unique_ptr<PsTransport>> transports;
  auto flaky = std::make_unique<FlakyTransport>(&ps, 3);
  FlakyTransport* flaky_ptr = flaky.get();
  transports.push_back(std::move(flaky));
  PsClientImpl client(std::move(transports), options);
  ASSERT_TRUE(client.CreateVariables({TestVariable("w", {2}, 1, 0.0f)}).ok());
  EXPECT_EQ(flaky_ptr->calls(), 4);

  ParameterServer down(TestServerConfig(ASYNC, 1));
  options.retry_timeout = absl::Milliseconds(30);
  std::vector<std::unique_ptr<PsTransport>> never;
  never.push_back(std::make_unique<FlakyTransport>(&down, 1 << 30));
  PsClientImpl gives_up(std::move(never), options);
  absl::Status status = gives_up.CreateVariables({TestVariable("w", {2}, 1, 0.0f)});
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("ps 0 (flaky): create variables"));
}

// A push whose response was lost is retried, and the retry, which carries
// the same push_id, is not applied again.
TEST(PsClientTest, ARetriedPushAppliesOnce) {
  for (ConsistencyMode mode : {ASYNC, SSP}) {
    ParameterServer ps(TestServerConfig(mode, 1));
    PsClientOptions options;
    options.mode = mode;
    options.initial_backoff = absl::Milliseconds(1);
    std::vector<std::unique_ptr<PsTransport>> transports;
    auto flaky = std::make_unique<FlakyTransport>(&ps, 0);
    FlakyTransport* transport = flaky.get();
    transports.push_back(std::move(flaky));
    PsClientImpl client(std::move(transports), options);
    ASSERT_TRUE(client.CreateVariables({TestVariable("w", {2}, 1, 0.0f)}).ok());
    transport->lost_push_responses = 1;
    auto pushed = client.Push({{"w", Filled({2}, 1.0f)}});
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    EXPECT_EQ(pushed->duplicate, 1) << ConsistencyMode_Name(mode);
    TensorMap out;
    transport->lost_push_responses = 1;
    auto again = client.PushPull({{"w", Filled({2}, 1.0f)}}, {}, &out);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->duplicate, 1);
    EXPECT_EQ(out["w"].values, std::vector<float>(2, -2.0f));  // two pushes, each once
    EXPECT_EQ(ps.Describe().updates_applied(), 2);
  }
}

// A pull that arrives in many slices is put together in place; slices that
// leave a gap, overlap or disagree on the version are refused.
TEST(PsClientTest, PullPlacesSlicesAndRefusesGapsAndOverlaps) {
  ParameterServer ps(TestServerConfig(ASYNC, 1));
  std::vector<std::unique_ptr<PsTransport>> transports;
  auto sliced = std::make_unique<FlakyTransport>(&ps, 0, /*max_slice_bytes=*/8);
  FlakyTransport* transport = sliced.get();
  transports.push_back(std::move(sliced));
  PsClientImpl client(std::move(transports), PsClientOptions{});
  ASSERT_TRUE(client.CreateVariables({TestVariable("w", {5, 2}, 1, 1.0f)}).ok());
  TensorMap grads;
  grads["w"] = DenseTensor{{5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}};
  ASSERT_TRUE(client.Push(grads).ok());
  TensorMap pulled;
  ASSERT_TRUE(client.Pull({}, &pulled).ok());  // five slices of one row
  EXPECT_EQ(pulled["w"].values, (std::vector<float>{1, 0, -1, -2, -3, -4, -5, -6, -7, -8}));

  // Rows 2 and 3 arrive as slices in reverse order: placed all the same.
  transport->mangle_pull = [](PullResponse* r) { r->mutable_slices()->SwapElements(2, 3); };
  ASSERT_TRUE(client.Pull({}, &pulled).ok());
  EXPECT_EQ(pulled["w"].values[6], -5);
  transport->mangle_pull = [](PullResponse* r) { r->mutable_slices()->DeleteSubrange(2, 1); };
  absl::Status gap = client.Pull({}, &pulled);
  EXPECT_EQ(gap.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(gap.message(), HasSubstr("at row 3, version 1 does not continue rows [0, 2)"));
  transport->mangle_pull = [](PullResponse* r) { r->mutable_slices()->RemoveLast(); };
  EXPECT_THAT(client.Pull({}, &pulled).message(), HasSubstr("rows [4, 5) missing"));
  transport->mangle_pull = [](PullResponse* r) { *r->add_slices() = r->slices(1); };
  EXPECT_EQ(client.Pull({}, &pulled).code(), absl::StatusCode::kDataLoss);
  transport->mangle_pull = [](PullResponse* r) { r->mutable_slices(4)->set_version(7); };
  EXPECT_THAT(client.Pull({}, &pulled).message(), HasSubstr("version 7"));
}

// A server whose streamed pull responses carry a field the client's parser
// refuses after values it read into place: a second shape entry after the
// data (protobuf writes unknown fields last). Each stream keeps writing
// until the client goes away.
class MalformedPullService final : public PsService::Service {
 public:
  grpc::Status CreateShards(grpc::ServerContext*, const CreateShardsRequest* request,
                            CreateShardsResponse* response) override {
    response->set_created(request->shards_size());
    return grpc::Status::OK;
  }
  grpc::Status Pull(grpc::ServerContext*, const PullRequest* request,
                    grpc::ServerWriter<PullResponse>* writer) override {
    PullResponse filler;  // more than flow control lets through unread
    filler.add_push_results()->set_variable(std::string(1 << 20, 'x'));
    if (writer->Write(Malformed(request->shards(0)))) {
      while (writer->Write(filler)) {
      }
    }
    absl::MutexLock lock(&mu_);
    ++cancelled_;  // the client went away: the call has no deadline
    return grpc::Status::OK;
  }
  // Whether `calls` calls were cancelled within a while.
  bool AwaitCancelled(int calls) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancelled_ >= calls; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(30));
  }

 private:
  static PullResponse Malformed(const ShardRef& shard) {
    PullResponse response;
    ShardSlice* slice = response.add_slices();
    slice->set_variable(shard.variable());
    slice->set_shard(shard.shard());
    EncodeFloatTensor({4}, std::vector<float>{1, 2, 3, 4}, slice->mutable_tensor());
    TensorProto* tensor = slice->mutable_tensor();
    tensor->GetReflection()->MutableUnknownFields(tensor)->AddVarint(2, 4);
    return response;
  }

  absl::Mutex mu_;
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
};

// Over one channel, and over three: then the three shards' pulls are read
// on three threads at once, two of them not the caller's.
class PsClientChannelsTest : public ::testing::TestWithParam<int> {};

TEST_P(PsClientChannelsTest, AMalformedPullResponseIsDataLossNotAHang) {
  MalformedPullService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  // Request threads notice shutdown when their poll times out: gRPC's 10 s
  // default would hold the test's end that long.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::CQ_TIMEOUT_MSEC, 200);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  PsClientOptions options;
  options.worker_id = -1;
  options.channels_per_server = GetParam();
  // No deadline: a client that waited for the rest of the stream would
  // hang, and the test time out.
  options.call_timeout = absl::InfiniteDuration();
  auto client = NewGrpcPsClient({absl::StrCat("127.0.0.1:", port)}, options);
  // 8 MiB: pulled over the stream, whose values the client reads into place.
  ASSERT_TRUE(client->CreateVariables({TestVariable("big", {2 << 20}, 3, 0)}).ok());
  TensorMap out;
  const absl::Status pulled = client->Pull({"big"}, &out);
  EXPECT_EQ(pulled.code(), absl::StatusCode::kDataLoss) << pulled;
  EXPECT_THAT(pulled.message(), HasSubstr("malformed pull response"));
  EXPECT_TRUE(service.AwaitCancelled(GetParam()));
  server->Shutdown();
}

TEST_P(PsClientChannelsTest, LargeCallsArriveWhole) {
  ParameterServer ps(TestServerConfig(ASYNC, 1));
  auto server = PsGrpcServer::Start(&ps, "127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  PsClientOptions options;
  options.channels_per_server = GetParam();
  auto client = NewGrpcPsClient({absl::StrCat("127.0.0.1:", (*server)->port())}, options);
  // 12 MiB in 5 shards: streamed, and over three channels split.
  const Shape shape = {1536, 2048};
  ASSERT_TRUE(client->CreateVariables({TestVariable("w", shape, 5, 1.0f)}).ok());
  ASSERT_TRUE(client->Push({{"w", Filled(shape, 0.25f)}}).ok());
  TensorMap out;
  ASSERT_TRUE(client->Pull({}, &out).ok());
  EXPECT_EQ(out["w"].values, std::vector<float>(NumElements(shape), 0.75f));
  auto pushed = client->PushPull({{"w", Filled(shape, 0.25f)}}, {}, &out);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->applied, 5);
  EXPECT_EQ(out["w"].values, std::vector<float>(NumElements(shape), 0.5f));
  (*server)->Shutdown(absl::Now() + absl::Seconds(5));
}

INSTANTIATE_TEST_SUITE_P(Channels, PsClientChannelsTest, ::testing::Values(1, 3));

}  // namespace
}  // namespace fulcrum
