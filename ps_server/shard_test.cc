#include "ps_server/shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/checkpoint/file.h"
#include "common/file_system.h"
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

// Replication: a backup fed its primary's updates is bit-identical to it.

// Shard 0 of 1 of w [3, 5] with `optimizer`, initialised randomly (seed 1).
Shard MakeReplicaShard(const OptimizerSpec& optimizer) {
  ShardSpec spec;
  VariableSpec* v = spec.mutable_variable();
  v->set_name("w");
  v->add_shape(3);
  v->add_shape(5);
  v->set_dtype(DT_FLOAT);
  v->mutable_initializer()->set_kind(InitializerSpec::RANDOM_NORMAL);
  v->mutable_initializer()->set_seed(1);
  *v->mutable_optimizer() = optimizer;
  *v = CanonicalSpec(*v);
  spec.set_num_shards(1);
  spec.set_rows(3);
  auto contents = NewShardContents(spec, nullptr, "");
  EXPECT_TRUE(contents.ok()) << contents.status();
  return Shard(spec, *std::move(contents));
}

// The shard's whole state (spec, version, values, slots) as the bytes of
// its checkpoint file.
std::string StateBytes(const Shard& shard, const std::string& name) {
  std::unique_ptr<FileSystem> fs = MakeLocalFileSystem();
  const std::string path = ::testing::TempDir() + "/" + name + ".ckpt";
  auto writer = CheckpointFileWriter::Open(*fs, path, PsCheckpointHeader());
  EXPECT_TRUE(writer.ok()) << writer.status();
  EXPECT_TRUE(shard.WriteCheckpoint(**writer).ok());
  EXPECT_TRUE((*writer)->Commit().ok());
  auto file = fs->NewRandomAccessFile(path);
  EXPECT_TRUE(file.ok()) << file.status();
  std::string scratch((*file)->Size(), '\0');
  auto bytes = (*file)->Read(0, scratch.size(), scratch.data());
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return std::string(*bytes);
}

std::vector<OptimizerSpec> EveryOptimizer() {
  std::vector<OptimizerSpec> out;
  for (OptimizerSpec::Kind kind :
       {OptimizerSpec::SGD, OptimizerSpec::MOMENTUM, OptimizerSpec::ADAGRAD, OptimizerSpec::ADAM,
        OptimizerSpec::FTRL}) {
    OptimizerSpec spec;
    spec.set_kind(kind);
    spec.set_learning_rate(0.01f);
    spec.set_momentum(0.9f);
    spec.set_nesterov(true);
    spec.set_l1(0.001f);
    spec.set_learning_rate_scaling(OptimizerSpec::SQRT);
    out.push_back(spec);
  }
  return out;
}

TEST(ShardReplicationTest, ABackupFedItsPrimarysUpdatesStaysBitIdentical) {
  for (const OptimizerSpec& optimizer : EveryOptimizer()) {
    for (bool sync : {false, true}) {
      SCOPED_TRACE(OptimizerSpec::Kind_Name(optimizer.kind()) + (sync ? " sync" : " async"));
      Shard primary = MakeReplicaShard(optimizer);
      Shard backup = MakeReplicaShard(optimizer);
      backup.MakeBackup("primary:1");
      std::vector<ShardUpdate> forwarded;
      primary.ForwardUpdates({[&](ShardUpdate u) { forwarded.push_back(std::move(u)); }});
      std::mt19937 random(7);
      std::normal_distribution<float> normal;
      uint64_t push_id = 0;
      for (int step = 0; step < 40; ++step) {
        for (int worker = 0; worker < 3; ++worker) {
          std::vector<float> values(15);
          for (float& x : values) x = normal(random);
          ShardGradient grad;
          grad.worker = worker;
          grad.push_id = ++push_id;
          grad.computed_at = primary.version();
          grad.parts = {AsFloatBytes(values)};
          auto result = sync ? primary.Accumulate(grad, 3) : primary.ApplyNow(grad, -1);
          ASSERT_TRUE(result.ok()) << result.status();
        }
      }
      ASSERT_EQ(forwarded.size(), sync ? 40u : 120u);
      // Pulls waiting for a version are served only once it is committed.
      EXPECT_EQ(primary.committed_version(), 0);
      for (const ShardUpdate& update : forwarded)
        ASSERT_TRUE(backup.ApplyReplicated(update, "primary:1").ok());
      primary.Committed(primary.version());
      EXPECT_EQ(backup.version(), primary.version());
      EXPECT_EQ(StateBytes(backup, "backup"), StateBytes(primary, "primary"));
      // Promoted, the backup takes a retry of the last push once.
      backup.Promote();
      ShardGradient retried;
      std::vector<float> zeros(15, 0.0f);
      retried.worker = 2;
      retried.push_id = push_id;
      retried.computed_at = backup.version();
      retried.parts = {AsFloatBytes(zeros)};
      auto again = sync ? backup.Accumulate(retried, 3) : backup.ApplyNow(retried, -1);
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_EQ(again->outcome(), ShardPushResult::DUPLICATE);
    }
  }
}

TEST(ShardReplicationTest, AWaitingPullIsServedOnlyWhatTheBackupsHave) {
  Shard primary = MakeShard(1.0f);
  primary.ForwardUpdates({[](const ShardUpdate&) {}});
  Gradient grad(0, 0, 0.5f, 1);
  ASSERT_TRUE(primary.ApplyNow(grad.grad, -1).ok());
  EXPECT_EQ(primary.version(), 1);
  OutgoingPull out;
  const absl::Status waited =
      primary.Read(1, absl::Now() + absl::Milliseconds(50), DT_FLOAT, 1 << 20, &out);
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(waited.message(), HasSubstr("(1 not yet on its backups)"));
  std::thread commit([&] { primary.Committed(1); });
  EXPECT_TRUE(primary.Read(1, absl::Now() + absl::Seconds(30), DT_FLOAT, 1 << 20, &out).ok());
  commit.join();
}

// A primary made a backup (its shard moved to another server) before its
// backups had a version: the push waiting for that version fails, rather
// than being answered, and the shard takes no more pushes.
TEST(ShardReplicationTest, APrimaryMovedAwayFailsThePushesItsCopiesLackAndTakesNoMore) {
  Shard primary = MakeShard(0.0f);
  primary.ForwardUpdates({[](const ShardUpdate&) {}});
  Gradient g(0, 0, 1.0f, 7);
  ASSERT_TRUE(primary.ApplyNow(g.grad, -1).ok());
  absl::Status awaited;
  std::thread waiter([&] { awaited = primary.AwaitCommitted(1, absl::Now() + absl::Seconds(60)); });
  primary.MakeBackup("10.0.0.2:2222");
  primary.ForwardUpdates({});  // what the replicator does as the shard stops being a primary
  waiter.join();
  EXPECT_EQ(awaited.code(), absl::StatusCode::kFailedPrecondition) << awaited;
  EXPECT_THAT(awaited.message(), HasSubstr("moved to the primary 10.0.0.2:2222 before version 1"));
  EXPECT_EQ(primary.committed_version(), 0);
  EXPECT_EQ(primary.ApplyNow(Gradient(0, 1, 1.0f, 8).grad, -1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(primary.Accumulate(Gradient(0, 1, 1.0f, 9).grad, 2).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // Its copy goes from this server: every call on it fails, saying so.
  primary.Retire();
  OutgoingPull out;
  const absl::Status read =
      primary.Read(0, absl::Now() + absl::Seconds(1), DT_FLOAT, 1 << 20, &out);
  EXPECT_THAT(read.message(), HasSubstr("has no copy here any more"));
  EXPECT_EQ(primary.CheckPrimary().code(), absl::StatusCode::kFailedPrecondition);
  ShardUpdate update;
  update.set_variable("w");
  update.set_version(2);
  update.set_averaged(1);
  update.set_gradient(std::string(16, '\0'));
  EXPECT_EQ(primary.ApplyReplicated(update, "10.0.0.2:2222").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A primary whose only copy is catching up (a move with one copy) commits
// each version as it makes it, until the copy has caught up: from then on
// a version is committed only once the copy has it.
TEST(ShardReplicationTest, WaitForCommitsHoldsBackTheVersionsTheCopyLacks) {
  Shard primary = MakeShard(0.0f);
  Shard::Forwarding forwarding;
  forwarding.forward = [](const ShardUpdate&) {};
  forwarding.commits_wait = false;
  primary.ForwardUpdates(forwarding);
  ASSERT_TRUE(primary.ApplyNow(Gradient(0, 0, 1.0f, 1).grad, -1).ok());
  EXPECT_EQ(primary.committed_version(), 1);
  primary.WaitForCommits();
  ASSERT_TRUE(primary.ApplyNow(Gradient(0, 1, 1.0f, 2).grad, -1).ok());
  EXPECT_EQ(primary.committed_version(), 1);
  primary.Committed(2);
  EXPECT_EQ(primary.committed_version(), 2);
}

TEST(ShardReplicationTest, ABackupRefusesAGapAnotherShardsUpdateAndTakesARepeatOnce) {
  Shard backup = MakeShard(1.0f);
  EXPECT_TRUE(backup.CheckPrimary().ok());
  ShardUpdate update;
  update.set_variable("w");
  update.set_shard(0);
  update.set_version(2);
  update.set_averaged(1);
  std::vector<float> gradient(4, 0.5f);
  update.set_gradient(std::string(reinterpret_cast<const char*>(gradient.data()), 16));
  // Only a backup takes updates, and only from its primary.
  EXPECT_THAT(backup.ApplyReplicated(update, "10.0.0.1:2222").status().message(),
              HasSubstr("is not a backup copy"));
  backup.MakeBackup("10.0.0.1:2222");
  EXPECT_THAT(backup.CheckPrimary().message(), HasSubstr("its primary is 10.0.0.1:2222"));
  EXPECT_THAT(backup.ApplyReplicated(update, "10.0.0.2:2222").status().message(),
              HasSubstr("takes updates only from its primary 10.0.0.1:2222, not 10.0.0.2:2222"));
  EXPECT_THAT(backup.ApplyReplicated(update, "10.0.0.1:2222").status().message(),
              HasSubstr("at version 0, given the update to version 2"));
  update.set_version(1);
  ShardUpdate other = update;
  other.set_variable("v");
  EXPECT_EQ(backup.ApplyReplicated(other, "10.0.0.1:2222").status().code(),
            absl::StatusCode::kInvalidArgument);
  other = update;
  other.mutable_gradient()->resize(12);
  EXPECT_EQ(backup.ApplyReplicated(other, "10.0.0.1:2222").status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(backup.ApplyReplicated(update, "10.0.0.1:2222").ok());
  ASSERT_TRUE(backup.ApplyReplicated(update, "10.0.0.1:2222").ok());  // again: nothing more
  EXPECT_EQ(backup.version(), 1);
  EXPECT_EQ(ReadValues(backup), std::vector<float>(4, 0.5f));
}

// A snapshot fills a copy that differs from its primary (one ahead of it,
// as the other backup of a promoted primary may be, or new) in parts: it
// becomes bit-identical, slots and push ids too, and then takes the
// primary's next updates. A part sent again after the stream broke
// changes nothing.
TEST(ShardReplicationTest, ASnapshotInPartsMakesACopyThatDiffersBitIdentical) {
  OptimizerSpec adam;
  adam.set_kind(OptimizerSpec::ADAM);
  adam.set_learning_rate(0.01f);
  Shard primary = MakeReplicaShard(adam);
  Shard backup = MakeReplicaShard(adam);
  backup.MakeBackup("primary:1");
  std::vector<float> values(15, 0.5f);
  ShardGradient grad;
  grad.parts = {AsFloatBytes(values)};
  for (uint64_t id = 1; id <= 3; ++id) {
    grad.push_id = id;
    ASSERT_TRUE(primary.ApplyNow(grad, -1).ok());
  }
  // The copy went a version further its own way (an update the old
  // primary sent it alone, never acknowledged).
  ShardUpdate own;
  own.set_variable("w");
  own.set_version(1);
  own.set_averaged(1);
  own.set_gradient(std::string(15 * sizeof(float), '\x3f'));
  ASSERT_TRUE(backup.ApplyReplicated(own, "primary:1").ok());
  for (int i = 2; i <= 4; ++i) {
    own.set_version(i);
    ASSERT_TRUE(backup.ApplyReplicated(own, "primary:1").ok());
  }
  ASSERT_EQ(backup.version(), 4);

  std::vector<ShardUpdate> parts;
  std::vector<ShardUpdate> after;
  // Parts of 8 floats: 15 values and Adam's two slots make 45 floats.
  primary.ForwardUpdates({[&](ShardUpdate u) { after.push_back(std::move(u)); }});
  primary.Snapshot(8 * sizeof(float),
                   [&](std::vector<ShardUpdate> snapshot) { parts = std::move(snapshot); });
  ASSERT_EQ(parts.size(), 6u);
  EXPECT_TRUE(parts[0].snapshot().has_spec());
  EXPECT_EQ(parts.back().snapshot().push_ids(0), 3u);
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::StatusOr<int64_t> answered = backup.ApplyReplicated(parts[i], "primary:1");
    ASSERT_TRUE(answered.ok()) << answered.status();
    EXPECT_EQ(*answered, i + 1 < parts.size() ? -1 : 3) << "part " << i;
    if (i == 2) {  // a part out of order is refused, the filling kept
      EXPECT_EQ(backup.ApplyReplicated(parts[4], "primary:1").status().code(),
                absl::StatusCode::kFailedPrecondition);
    }
  }
  EXPECT_EQ(backup.version(), 3);
  EXPECT_EQ(StateBytes(backup, "filled"), StateBytes(primary, "filling"));
  // Sent again after a break: taken already.
  absl::StatusOr<int64_t> again = backup.ApplyReplicated(parts[3], "primary:1");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, 3);
  EXPECT_EQ(StateBytes(backup, "filled"), StateBytes(primary, "filling"));
  // The next update follows; promoted, the copy knows the last push.
  grad.push_id = 4;
  ASSERT_TRUE(primary.ApplyNow(grad, -1).ok());
  ASSERT_EQ(after.size(), 1u);
  ASSERT_TRUE(backup.ApplyReplicated(after[0], "primary:1").ok());
  EXPECT_EQ(StateBytes(backup, "followed"), StateBytes(primary, "leading"));
  backup.Promote();
  auto retried = backup.ApplyNow(grad, -1);
  ASSERT_TRUE(retried.ok());
  EXPECT_EQ(retried->outcome(), ShardPushResult::DUPLICATE);
  // A snapshot of another size is refused by name.
  ShardUpdate wrong = parts[0];
  wrong.mutable_snapshot()->set_floats(44);
  backup.MakeBackup("primary:1");
  EXPECT_THAT(backup.ApplyReplicated(wrong, "primary:1").status().message(),
              HasSubstr("is not one of its 45 floats"));
}

// A sync step being accumulated is not in a snapshot, and neither are the
// pushes added to it: a copy that takes the primary's place (a move) takes
// them when their workers push them again, and the step completes there.
TEST(ShardReplicationTest, ASnapshotLeavesOutTheStepBeingAccumulatedAndItsPushes) {
  Shard primary = MakeShard(1.0f);
  Shard copy = MakeShard(1.0f);
  copy.MakeBackup("primary:1");
  Gradient first(0, 0, 0.5f, /*push_id=*/7);
  ASSERT_EQ(primary.Accumulate(first.grad, 2)->outcome(), ShardPushResult::ACCUMULATED);
  EXPECT_EQ(primary.Accumulate(first.grad, 2)->outcome(), ShardPushResult::DUPLICATE);
  std::vector<ShardUpdate> parts;
  primary.ForwardUpdates({[](const ShardUpdate&) {}});
  primary.Snapshot(1 << 20,
                   [&](std::vector<ShardUpdate> snapshot) { parts = std::move(snapshot); });
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].snapshot().push_ids_size() > 0 ? parts[0].snapshot().push_ids(0) : 0u, 0u)
      << "a push of the step being accumulated";
  ASSERT_TRUE(copy.ApplyReplicated(parts[0], "primary:1").ok());
  copy.Promote();
  EXPECT_EQ(copy.Accumulate(first.grad, 2)->outcome(), ShardPushResult::ACCUMULATED);
  Gradient second(1, 0, 1.5f, /*push_id=*/9);
  EXPECT_EQ(copy.Accumulate(second.grad, 2)->outcome(), ShardPushResult::APPLIED);
  EXPECT_EQ(copy.version(), 1);
  // Once applied, a retry of either is DUPLICATE... or STALE, as its step
  // has passed; never taken twice.
  EXPECT_NE(copy.Accumulate(first.grad, 2)->outcome(), ShardPushResult::ACCUMULATED);
  Gradient retried(0, 1, 0.5f, /*push_id=*/7);
  EXPECT_EQ(copy.Accumulate(retried.grad, 2)->outcome(), ShardPushResult::DUPLICATE);
}

}  // namespace
}  // namespace fulcrum
