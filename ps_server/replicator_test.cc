// The replicator against a backup server that answers at once: what it
// sends, when, and in what order.
#include "ps_server/replicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/tensor.h"
#include "ps_server/answered_stream.h"
#include "ps_server/shard.h"

namespace fulcrum {
namespace {

constexpr int64_t kFloats = 4096;  // a shard's: 16 KiB, one snapshot part

// Shard 0 of 1 of `name` [kFloats], updated by SGD.
Shard MakeShard(const std::string& name) {
  ShardSpec spec;
  VariableSpec* v = spec.mutable_variable();
  v->set_name(name);
  v->add_shape(kFloats);
  v->set_dtype(DT_FLOAT);
  v->mutable_optimizer()->set_learning_rate(0.5f);
  *v = CanonicalSpec(*v);
  spec.set_num_shards(1);
  spec.set_rows(kFloats);
  auto contents = NewShardContents(spec, nullptr, "");
  EXPECT_TRUE(contents.ok()) << contents.status();
  return Shard(spec, *std::move(contents));
}

// What the backup server was sent: each update's variable, whether it was
// a snapshot's part, its version, and when it came.
struct Received {
  std::string variable;
  bool snapshot;
  int64_t version;
  absl::Time at;
};

// A backup server that takes everything and answers each update with its
// version at once.
class AnsweringStream : public AnsweredStream {
 public:
  AnsweringStream(absl::Mutex* mu, std::vector<Received>* log) : log_mu_(mu), log_(log) {}
  bool Write(const ReplicateRequest& request) override {
    return AnswerWith([&] {
      ReplicateResponse answer;
      absl::MutexLock lock(log_mu_);
      for (const ShardUpdate& update : request.updates()) {
        log_->push_back({update.variable(), update.has_snapshot(), update.version(), absl::Now()});
        answer.add_versions(update.version());
      }
      return absl::StatusOr<ReplicateResponse>(std::move(answer));
    });
  }

 private:
  absl::Mutex* const log_mu_;
  std::vector<Received>* const log_;
};

// A gradient of ones, from worker 0 as its push `push_id`.
ShardGradient Ones(uint64_t push_id) {
  static const std::vector<float> ones(kFloats, 1.0f);
  ShardGradient grad;
  grad.worker = 0;
  grad.push_id = push_id;
  grad.parts = {AsFloatBytes(ones)};
  return grad;
}

class AnsweringLink : public ReplicaLink {
 public:
  AnsweringLink(absl::Mutex* mu, std::vector<Received>* log) : mu_(mu), log_(log) {}
  std::unique_ptr<ReplicaStream> Open() override {
    return std::make_unique<AnsweringStream>(mu_, log_);
  }

 private:
  absl::Mutex* const mu_;
  std::vector<Received>* const log_;
};

// A replicator whose backups answer at once, each update logged in `log`;
// the snapshots of copies that catch up go at `rate` bytes/s, and each
// copy caught up is recorded in `caught_up` with when (under `mu`).
std::unique_ptr<Replicator> Answering(absl::Mutex* mu, std::vector<Received>* log,
                                      std::map<std::string, absl::Time>* caught_up, int64_t rate) {
  ReplicatorOptions options;
  options.catch_up_bytes_per_sec = rate;
  return std::make_unique<Replicator>(
      "primary:1",
      [mu, log](const std::string&) { return std::make_unique<AnsweringLink>(mu, log); },
      [mu, caught_up](ReplicatedUnit* shard, const std::string&) {
        absl::MutexLock lock(mu);
        (*caught_up)[shard->key()] = absl::Now();
      },
      options);
}

// Two copies catch up on a server that also holds a ready backup of a
// third shard: their snapshots go at the rate (the second no sooner than
// the first's bytes allow), while an update of the third shard overtakes
// the second snapshot, and is committed before that copy has caught up.
TEST(ReplicatorTest, CatchingUpSnapshotsArePacedAndOtherShardsOvertakeThem) {
  constexpr int64_t kRate = kFloats * 4 / 5;  // a part each 5 s
  absl::Mutex mu;
  std::vector<Received> log;
  std::map<std::string, absl::Time> caught_up;
  // Made before the replicator, which stops forwarding their updates as it goes.
  Shard ready = MakeShard("ready"), first = MakeShard("first"), second = MakeShard("second");
  auto replicator = Answering(&mu, &log, &caught_up, kRate);
  replicator->Replicate(&ready, {"backup:1"});
  replicator->Replicate(&first, {}, {"backup:1"});
  replicator->Replicate(&second, {}, {"backup:1"});

  ASSERT_TRUE(ready.ApplyNow(Ones(1), -1).ok());
  ASSERT_TRUE(ready.AwaitCommitted(1, absl::Now() + absl::Seconds(30)).ok());
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(caught_up.count("second/0"), 0u) << "the second snapshot went before the update";
    auto both = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return caught_up.size() == 2; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&both), absl::Seconds(60)));
    std::map<std::string, absl::Time> sent;
    std::vector<std::string> order;
    for (const Received& r : log) {
      order.push_back(r.variable);
      if (r.snapshot) sent[r.variable] = r.at;
    }
    EXPECT_THAT(order, ::testing::ElementsAre("first", "ready", "second"));
    EXPECT_GE(sent["second"] - sent["first"], absl::Seconds(5) - absl::Milliseconds(10));
  }
}

// A copy's snapshot is taken when its turn comes, not when the copy is
// made: a shard updated while its copy waits for the rate sends one
// snapshot, of the version it has then, and none of the updates made
// meanwhile (the snapshot has them); those after it follow it.
TEST(ReplicatorTest, ASnapshotIsTakenWhenItsTurnComesWithTheUpdatesMadeWhileItWaited) {
  constexpr int64_t kRate = kFloats * 4 / 2;  // a part each 2 s
  absl::Mutex mu;
  std::vector<Received> log;
  std::map<std::string, absl::Time> caught_up;
  Shard first = MakeShard("first"), second = MakeShard("second");
  auto replicator = Answering(&mu, &log, &caught_up, kRate);
  replicator->Replicate(&first, {}, {"backup:1"});
  replicator->Replicate(&second, {}, {"backup:1"});
  for (uint64_t push = 1; push <= 3; ++push) ASSERT_TRUE(second.ApplyNow(Ones(push), -1).ok());
  {
    absl::MutexLock lock(&mu);
    auto both = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return caught_up.size() == 2; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&both), absl::Seconds(60)));
  }
  ASSERT_TRUE(second.ApplyNow(Ones(4), -1).ok());
  ASSERT_TRUE(second.AwaitCommitted(4, absl::Now() + absl::Seconds(30)).ok());
  absl::MutexLock lock(&mu);
  std::vector<std::pair<bool, int64_t>> of_second;  // snapshot, version
  for (const Received& r : log) {
    if (r.variable == "second") of_second.emplace_back(r.snapshot, r.version);
  }
  EXPECT_THAT(of_second, ::testing::ElementsAre(std::make_pair(true, int64_t{3}),
                                                std::make_pair(false, int64_t{4})));
}

}  // namespace
}  // namespace fulcrum
