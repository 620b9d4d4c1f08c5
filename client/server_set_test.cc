#include "client/server_set.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client_test_util.h"
#include "client/transport/forwarding_ps_transport.h"
#include "client/transport/in_process_ps_transport.h"

namespace fulcrum {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Fails the first `unavailable` describes with UNAVAILABLE, and counts the
// CreateShards calls that reach the server.
class FlakyTransport final : public ForwardingPsTransport {
 public:
  FlakyTransport(std::unique_ptr<PsTransport> inner, int unavailable)
      : ForwardingPsTransport(std::move(inner)), unavailable_(unavailable) {}
  absl::StatusOr<DescribeResponse> Describe(absl::Time deadline) override {
    if (unavailable_-- > 0) return absl::UnavailableError("not up yet");
    return ForwardingPsTransport::Describe(deadline);
  }
  absl::StatusOr<CreateShardsResponse> CreateShards(const CreateShardsRequest& request,
                                                    absl::Time deadline) override {
    ++creates;
    return ForwardingPsTransport::CreateShards(request, deadline);
  }
  std::atomic<int> creates{0};

 private:
  std::atomic<int> unavailable_;
};

class ServerSetTest : public ::testing::Test {
 protected:
  ServerSetTest() : policy_(*MakeClientPolicy(ASYNC)) {
    options_.retry_timeout = absl::Seconds(10);
    options_.initial_backoff = absl::Milliseconds(1);
    std::vector<std::unique_ptr<PsTransport>> transports;
    for (int i = 0; i < 2; ++i) {
      servers_.push_back(std::make_unique<ParameterServer>(TestServerConfig(ASYNC, 1)));
      auto flaky = std::make_unique<FlakyTransport>(
          std::make_unique<InProcessPsTransport>(servers_.back().get()), i == 1 ? 3 : 0);
      flaky_.push_back(flaky.get());
      transports.push_back(std::move(flaky));
    }
    set_ = std::make_unique<ServerSet>(std::move(transports), options_, *policy_);
  }

  PsClientOptions options_;
  std::unique_ptr<ClientConsistencyPolicy> policy_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<FlakyTransport*> flaky_;
  std::unique_ptr<ServerSet> set_;
};

TEST_F(ServerSetTest, RetriesUnavailableServersAndNamesTheOneThatFails) {
  auto described = set_->Describe();
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(described->size(), 2u);

  std::vector<int> called;
  const absl::Status failed =
      set_->ForEachServer({false, true}, "a test call", [&](int ps, absl::Time) {
        called.push_back(ps);
        return absl::InvalidArgumentError("bad request");
      });
  EXPECT_EQ(failed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(failed.message()), HasSubstr("ps 1 (in-process): a test call: bad"));
  EXPECT_THAT(called, ElementsAre(1)) << "only the server involved, and not retried";
}

TEST_F(ServerSetTest, RecoversAServerThatLostItsStateAndForgetsItsVersions) {
  std::vector<CreateShardsRequest> requests(2);
  ShardSpec* shard = requests[1].add_shards();
  *shard->mutable_variable() = TestVariable("w", {4}, 1, 2.0f);
  shard->set_num_shards(1);
  shard->set_rows(4);
  set_->RememberCreated(requests, {0, 0});
  std::vector<std::vector<bool>> forgotten;
  set_->SetForgetHook([&](const std::vector<bool>& recovered) { forgotten.push_back(recovered); });

  std::vector<bool> recovered;
  int after = 0;
  const absl::Status status = set_->ForEachServerRecovering(
      {true, true}, "pull",
      [&](int ps, absl::Time) {
        return ps == 1 ? absl::NotFoundError("no variable 'w' here") : absl::OkStatus();
      },
      [&](int ps, absl::Time) {
        ++after;
        EXPECT_EQ(ps, 1);
        return absl::OkStatus();
      },
      &recovered);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(recovered, ElementsAre(false, true));
  EXPECT_EQ(after, 1);
  EXPECT_EQ(flaky_[1]->creates, 1) << "its shards were created again";
  EXPECT_EQ(flaky_[0]->creates, 0);
  EXPECT_NE(set_->incarnation(1), 0u) << "the new incarnation is learned";
  EXPECT_EQ(servers_[1]->Describe().shards_size(), 1);
  ASSERT_EQ(forgotten.size(), 1u);
  EXPECT_THAT(forgotten[0], ElementsAre(false, true));
}

TEST_F(ServerSetTest, PushIdsAreNeverZeroAndTheClockIsTheSessions) {
  EXPECT_NE(set_->NewPushId(), set_->NewPushId());
  EXPECT_NE(set_->NewPushId(), 0u);
  EXPECT_EQ(set_->clock(), 0);
  set_->set_clock(3);
  EXPECT_EQ(set_->clock(), 3);
}

TEST_F(ServerSetTest, AReaderHasNoLease) {
  PsClientOptions reader;
  reader.worker_id = -1;
  std::vector<std::unique_ptr<PsTransport>> transports;
  transports.push_back(std::make_unique<InProcessPsTransport>(servers_[0].get()));
  ServerSet readers(std::move(transports), reader, *policy_);
  const absl::Status status = readers.Heartbeat();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("reads only"));
}

// The heartbeats a gone server got, kept by the test (the server itself
// goes with its set).
struct HeartbeatCounts {
  absl::Mutex mu;
  int calls ABSL_GUARDED_BY(mu) = 0;
  int after_closing ABSL_GUARDED_BY(mu) = 0;
  bool closing ABSL_GUARDED_BY(mu) = false;
};

// A server that is gone for good: every heartbeat is UNAVAILABLE, counted.
class GoneServer final : public ForwardingPsTransport {
 public:
  GoneServer(ParameterServer* server, HeartbeatCounts* counts)
      : ForwardingPsTransport(std::make_unique<InProcessPsTransport>(server)), counts_(*counts) {}
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest&, absl::Time) override {
    absl::MutexLock lock(&counts_.mu);
    ++counts_.calls;
    if (counts_.closing) ++counts_.after_closing;
    return absl::UnavailableError("gone");
  }

 private:
  HeartbeatCounts& counts_;
};

// The heartbeats' retries give up once the set is destroyed, rather than
// holding the program's exit for the retry timeout (a chief whose servers
// exited at job done).
TEST_F(ServerSetTest, ClosingGivesUpTheHeartbeatsRetries) {
  PsClientOptions options;
  options.retry_timeout = absl::Hours(1);
  options.initial_backoff = absl::Milliseconds(1);
  HeartbeatCounts counts;
  std::vector<std::unique_ptr<PsTransport>> transports;
  transports.push_back(std::make_unique<GoneServer>(servers_[0].get(), &counts));
  auto set = std::make_unique<ServerSet>(std::move(transports), options, *policy_);
  set->StartHeartbeats(absl::Milliseconds(1));
  {
    absl::MutexLock lock(&counts.mu);
    auto retrying = [&counts]() ABSL_SHARED_LOCKS_REQUIRED(counts.mu) { return counts.calls >= 3; };
    counts.mu.AwaitWithTimeout(absl::Condition(&retrying), absl::Seconds(30));
    counts.closing = true;
  }
  set.reset();  // returns now, not in an hour
  absl::MutexLock lock(&counts.mu);
  EXPECT_GE(counts.calls, 3);
  EXPECT_LE(counts.after_closing, 1);  // at most the attempt in flight
}

// One of servers "ps0" to "ps2" whose Describe carries a placement table:
// all three, or once `lost` is set, the table without ps2, which then
// answers nothing.
class TabledServer final : public ForwardingPsTransport {
 public:
  TabledServer(ParameterServer* server, int ps, const std::atomic<bool>* lost)
      : ForwardingPsTransport(std::make_unique<InProcessPsTransport>(server)),
        ps_(ps),
        lost_(*lost) {}
  std::string address() const override { return absl::StrCat("ps", ps_); }
  absl::StatusOr<DescribeResponse> Describe(absl::Time deadline) override {
    if (lost_ && ps_ == 2) return absl::UnavailableError("gone");
    absl::StatusOr<DescribeResponse> described = ForwardingPsTransport::Describe(deadline);
    if (!described.ok()) return described;
    Placement* table = described->mutable_placement();
    table->set_epoch(lost_ ? 2 : 1);
    for (int ps = 0; ps < (lost_ ? 2 : 3); ++ps) {
      table->add_servers()->set_address(absl::StrCat("ps", ps));
    }
    return described;
  }

 private:
  const int ps_;
  const std::atomic<bool>& lost_;
};

// A server lost for good while a call to every server was made (its call
// failed until the table dropped it) is left out, and the servers that
// had answered are not called again: the call succeeds.
TEST_F(ServerSetTest, AServerLostForGoodDuringACallToEveryServerIsLeftOut) {
  std::atomic<bool> lost{false};
  std::vector<std::unique_ptr<ParameterServer>> servers;
  std::vector<std::unique_ptr<PsTransport>> transports;
  for (int ps = 0; ps < 3; ++ps) {
    servers.push_back(std::make_unique<ParameterServer>(TestServerConfig(ASYNC, 1)));
    transports.push_back(std::make_unique<TabledServer>(servers.back().get(), ps, &lost));
  }
  ServerSet set(std::move(transports), options_, *policy_);
  ASSERT_TRUE(set.Describe().ok());  // finds the table, and follows it
  std::vector<std::atomic<int>> calls(3);
  const absl::Status called = set.ForEveryServer("a test call", [&](int ps, absl::Time) {
    ++calls[ps];
    if (ps != 2) return absl::OkStatus();
    lost = true;
    return absl::UnavailableError("gone");
  });
  EXPECT_TRUE(called.ok()) << called;
  EXPECT_EQ(calls[0], 1);
  EXPECT_EQ(calls[1], 1);
  EXPECT_GE(calls[2], 1);
  const auto described = set.Describe();
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 3u);
  EXPECT_EQ((*described)[2].incarnation(), 0u);
  EXPECT_NE((*described)[0].incarnation(), 0u);
}

}  // namespace
}  // namespace fulcrum
