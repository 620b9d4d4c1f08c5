#include "client/transport/parallel_ps_transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/client_test_util.h"
#include "client/ps_client_impl.h"
#include "client/transport/forwarding_ps_transport.h"
#include "client/transport/in_process_ps_transport.h"

namespace fulcrum {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAreArray;

// Holds each arrival until `n` have arrived (or a timeout passes): the
// calls that all pass it ran at the same time.
class Rendezvous {
 public:
  explicit Rendezvous(int n) : left_(n) {}
  bool Arrive() {
    absl::MutexLock lock(&mu_);
    --left_;
    return mu_.AwaitWithTimeout(absl::Condition(this, &Rendezvous::AllArrived), absl::Seconds(30));
  }

 private:
  bool AllArrived() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return left_ <= 0; }

  absl::Mutex mu_;
  int left_ ABSL_GUARDED_BY(mu_);
};

// An in-process transport that records the shards of each call made over
// it, and can fail them.
class RecordingLane final : public ForwardingPsTransport {
 public:
  explicit RecordingLane(ParameterServer* ps)
      : ForwardingPsTransport(std::make_unique<InProcessPsTransport>(ps)) {}

  std::vector<std::string> pulled;  // "variable/shard" of each pulled shard
  std::vector<std::string> pushed;  // ... of each pushed slice
  int calls = 0;                    // pulls, pushes and push-pulls
  absl::Status fail;                // returned instead when not OK
  std::function<void()> on_call;    // run at the start of each call

  absl::StatusOr<PullResponse> Pull(const PullRequest& request, int64_t response_bytes,
                                    absl::Time deadline, SlicePlacer* sink) override {
    if (absl::Status s = Record(nullptr, &request); !s.ok()) return s;
    return ForwardingPsTransport::Pull(request, response_bytes, deadline, sink);
  }
  absl::StatusOr<PushResponse> Push(std::shared_ptr<const OutgoingPush> request,
                                    absl::Time deadline) override {
    if (absl::Status s = Record(&request->request, nullptr); !s.ok()) return s;
    return ForwardingPsTransport::Push(std::move(request), deadline);
  }
  absl::StatusOr<PullResponse> PushPull(std::shared_ptr<const OutgoingPush> push,
                                        const PullRequest& pull, int64_t response_bytes,
                                        absl::Time deadline, SlicePlacer* sink) override {
    if (absl::Status s = Record(&push->request, &pull); !s.ok()) return s;
    return ForwardingPsTransport::PushPull(std::move(push), pull, response_bytes, deadline, sink);
  }

 private:
  absl::Status Record(const PushRequest* push, const PullRequest* pull) {
    ++calls;
    if (on_call) on_call();
    if (push != nullptr) {
      for (const ShardSlice& slice : push->gradients()) {
        pushed.push_back(absl::StrCat(slice.variable(), "/", slice.shard()));
      }
    }
    if (pull != nullptr) {
      for (const ShardRef& ref : pull->shards()) {
        pulled.push_back(absl::StrCat(ref.variable(), "/", ref.shard()));
      }
    }
    return fail;
  }
};

// One server, reached by a client over three recording lanes that split
// calls of more than `min_split_bytes`.
class ParallelTest : public ::testing::Test {
 protected:
  void Connect(int64_t min_split_bytes) {
    std::vector<std::unique_ptr<PsTransport>> lanes;
    for (int i = 0; i < 3; ++i) {
      auto lane = std::make_unique<RecordingLane>(&server_);
      lanes_.push_back(lane.get());
      lanes.push_back(std::move(lane));
    }
    std::vector<std::unique_ptr<PsTransport>> servers;
    servers.push_back(std::make_unique<ParallelPsTransport>(std::move(lanes), min_split_bytes));
    client_ = std::make_unique<PsClientImpl>(std::move(servers), PsClientOptions());
    // w: 4 shards of 2 rows of 8 floats, 64 bytes each; b: 1 shard.
    ASSERT_TRUE(
        client_
            ->CreateVariables({TestVariable("w", {8, 8}, 4, 1.0f), TestVariable("b", {8}, 1, 0.0f)})
            .ok());
  }

  ParameterServer server_{TestServerConfig(ASYNC, 1)};
  std::vector<RecordingLane*> lanes_;
  std::unique_ptr<PsClient> client_;
};

TEST_F(ParallelTest, DealsShardsRoundRobinAndMergesTheParts) {
  Connect(/*min_split_bytes=*/0);
  TensorMap pulled;
  ASSERT_TRUE(client_->Pull({}, &pulled).ok());
  EXPECT_EQ(pulled["w"].values, std::vector<float>(64, 1.0f));
  EXPECT_EQ(pulled["b"].values, std::vector<float>(8, 0.0f));
  EXPECT_THAT(lanes_[0]->pulled, ElementsAre("w/0", "w/3"));
  EXPECT_THAT(lanes_[1]->pulled, ElementsAre("w/1", "b/0"));
  EXPECT_THAT(lanes_[2]->pulled, ElementsAre("w/2"));

  // A push-pull sends each shard's gradient over the lane that pulls it:
  // each shard's pull follows its own push.
  for (RecordingLane* lane : lanes_) lane->pulled.clear();
  auto stats =
      client_->PushPull({{"w", Filled({8, 8}, 0.5f)}, {"b", Filled({8}, 2.0f)}}, {}, &pulled);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->applied, 5);  // every shard's outcome, merged
  EXPECT_EQ(pulled["w"].values, std::vector<float>(64, 0.5f));
  EXPECT_EQ(pulled["b"].values, std::vector<float>(8, -2.0f));
  for (RecordingLane* lane : lanes_) {
    EXPECT_THAT(lane->pushed, UnorderedElementsAreArray(lane->pulled));
  }
}

TEST_F(ParallelTest, ThePartsRunAtTheSameTime) {
  Connect(/*min_split_bytes=*/0);
  Rendezvous all(3);
  for (RecordingLane* lane : lanes_) lane->on_call = [&] { EXPECT_TRUE(all.Arrive()); };
  ASSERT_TRUE(client_->Push({{"w", Filled({8, 8}, 1.0f)}}).ok());
  for (RecordingLane* lane : lanes_) EXPECT_EQ(lane->calls, 1);
  EXPECT_THAT(lanes_[2]->pushed, ElementsAre("w/2"));
}

TEST_F(ParallelTest, SmallCallsAndSingleShardsGoWholeOverTheFirstLane) {
  Connect(/*min_split_bytes=*/4096);
  TensorMap pulled;
  ASSERT_TRUE(client_->Pull({}, &pulled).ok());
  ASSERT_TRUE(client_->PushPull({{"w", Filled({8, 8}, 0.5f)}}, {}, &pulled).ok());
  EXPECT_EQ(lanes_[0]->calls, 2);
  EXPECT_THAT(lanes_[1]->pulled, IsEmpty());
  EXPECT_THAT(lanes_[2]->pulled, IsEmpty());
}

TEST_F(ParallelTest, APartsErrorIsTheCallsAndTheOtherPartsStillApply) {
  Connect(/*min_split_bytes=*/0);
  lanes_[1]->fail = absl::InvalidArgumentError("lane 1 refuses");
  auto pushed = client_->Push({{"w", Filled({8, 8}, 1.0f)}});
  EXPECT_EQ(pushed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pushed.status().message(), HasSubstr("lane 1 refuses"));
  lanes_[1]->fail = absl::OkStatus();
  TensorMap pulled;
  ASSERT_TRUE(client_->Pull({"w"}, &pulled).ok());
  // Shards 0 and 3 (lane 0) and 2 (lane 2) applied; shard 1 (rows 2-3) not.
  for (int row = 0; row < 8; ++row) {
    EXPECT_EQ(pulled["w"].values[size_t{8} * row], row / 2 == 1 ? 1.0f : 0.0f) << "row " << row;
  }
}

}  // namespace
}  // namespace fulcrum
