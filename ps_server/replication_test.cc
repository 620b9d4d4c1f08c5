// Replicated shards between two in-process servers: a primary and the
// server holding its backups, linked directly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <stdlib.h>

#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/embedding.h"
#include "common/file_system.h"
#include "common/partitioner.h"
#include "common/placement.h"
#include "common/tensor.h"
#include "ps_server/answered_stream.h"
#include "ps_server/coordination.h"
#include "ps_server/grpc/ps_metrics.h"
#include "ps_server/parameter_server.h"
#include "ps_server/replicator.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

constexpr char kBackup[] = "backup:2222";
constexpr char kPrimary[] = "primary:2222";
constexpr char kThird[] = "third:2222";

// The config of the primary (index 0) or the backup's server (1), or of
// the third server (2) of a cluster of `servers`.
PsServerConfig Config(ConsistencyMode mode, int workers, int index = 0, int servers = 2) {
  PsServerConfig config;
  config.mutable_cluster()->mutable_cluster()->add_ps(kPrimary);
  config.mutable_cluster()->mutable_cluster()->add_ps(kBackup);
  if (servers == 3) config.mutable_cluster()->mutable_cluster()->add_ps(kThird);
  config.mutable_cluster()->mutable_task()->set_index(index);
  config.set_mode(mode);
  config.set_num_replicas(workers);
  config.set_replicas_to_aggregate(workers);
  config.set_max_staleness(-1);
  config.set_lease_timeout_ms(60000);
  config.set_max_message_bytes(64 << 20);
  return config;
}

// The backup server called in place of a network: each write, once `open`
// allows, is applied at once and its answer queued for Read.
class DirectStream : public AnsweredStream {
 public:
  // The bytes of the largest request any stream was written.
  static std::atomic<size_t> largest_request;

  DirectStream(ParameterServer* backup, absl::Notification* open, std::atomic<int>* calls,
               bool broken)
      : AnsweredStream(broken, absl::UnavailableError("the stream broke")),
        backup_(backup),
        open_(open),
        calls_(calls) {}

  bool Write(const ReplicateRequest& request) override {
    ++*calls_;
    size_t largest = largest_request.load();
    const size_t bytes = request.ByteSizeLong();
    while (bytes > largest && !largest_request.compare_exchange_weak(largest, bytes)) {
    }
    if (open_ != nullptr) open_->WaitForNotification();
    return AnswerWith([&] { return backup_->Replicate(request); });
  }

 private:
  ParameterServer* backup_;
  absl::Notification* open_;
  std::atomic<int>* calls_;
};

std::atomic<size_t> DirectStream::largest_request{0};

// Streams to the backup; the first `broken` of them break at once.
class DirectLink : public ReplicaLink {
 public:
  DirectLink(ParameterServer* backup, absl::Notification* open, std::atomic<int>* calls,
             int broken = 0)
      : backup_(backup), open_(open), calls_(calls), broken_(broken) {}
  std::unique_ptr<ReplicaStream> Open() override {
    ++opened_;
    return std::make_unique<DirectStream>(backup_, open_, calls_, opened_ <= broken_);
  }
  int opened() const { return opened_; }

 private:
  ParameterServer* backup_;
  absl::Notification* open_;
  std::atomic<int>* calls_;
  const int broken_;
  std::atomic<int> opened_{0};
};

// Variable w [6, 5] with Adam, randomly initialised, in `shards` shards.
std::vector<ShardSpec> Shards(int shards, int64_t rows = 6) {
  std::vector<ShardSpec> out;
  for (int i = 0; i < shards; ++i) {
    ShardSpec spec;
    VariableSpec* v = spec.mutable_variable();
    v->set_name("w");
    v->add_shape(rows);
    v->add_shape(5);
    v->set_dtype(DT_FLOAT);
    v->mutable_initializer()->set_kind(InitializerSpec::RANDOM_NORMAL);
    v->mutable_initializer()->set_seed(3);
    v->mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
    v->mutable_optimizer()->set_learning_rate(0.01f);
    spec.set_shard(i);
    spec.set_num_shards(shards);
    spec.set_row_offset(rows / shards * i);
    spec.set_rows(rows / shards);
    out.push_back(spec);
  }
  return out;
}

// Shards(shards) on `backup` as backups and on `primary` as their primary.
absl::Status CreateOnBoth(ParameterServer& backup, ParameterServer& primary, int shards = 1) {
  CreateShardsRequest on_backup, on_primary;
  for (const ShardSpec& spec : Shards(shards)) {
    *on_backup.add_shards() = spec;
    on_backup.add_copies()->set_primary(kPrimary);
    *on_primary.add_shards() = spec;
    on_primary.add_copies()->add_backups(kBackup);
  }
  if (absl::Status s = backup.CreateShards(on_backup).status(); !s.ok()) return s;
  return primary.CreateShards(on_primary).status();
}

// A primary and its backup server, each shard of Shards(2) created on both.
class ReplicationTest : public ::testing::TestWithParam<ConsistencyMode> {
 protected:
  void Start(ConsistencyMode mode, absl::Notification* open = nullptr) {
    backup_ = std::make_unique<ParameterServer>(Config(mode, kWorkers, 1));
    primary_ = std::make_unique<ParameterServer>(
        Config(mode, kWorkers), absl::Now, [this, open](const std::string& address) {
          EXPECT_EQ(address, kBackup);
          return std::make_unique<DirectLink>(backup_.get(), open, &calls_);
        });
    ASSERT_TRUE(CreateOnBoth(*backup_, *primary_, 2).ok());
  }

  // Worker `worker`'s push of random gradients to both shards, computed at
  // `version`.
  PushRequest RandomPush(int worker, int64_t version, uint64_t push_id) {
    PushRequest push;
    push.set_worker_id(worker);
    push.set_push_id(push_id);
    if (GetParam() == SSP) push.set_clock(version);
    std::normal_distribution<float> normal;
    for (int shard = 0; shard < 2; ++shard) {
      std::vector<float> values(15);
      for (float& x : values) x = normal(random_);
      ShardSlice* slice = push.add_gradients();
      slice->set_variable("w");
      slice->set_shard(shard);
      slice->set_version(version);
      EncodeFloatTensor({3, 5}, values, slice->mutable_tensor());
    }
    return push;
  }

  // Both shards' values and versions, read without a worker (as a reader).
  static PullResponse Read(ParameterServer& ps) {
    PullRequest pull;
    for (int shard = 0; shard < 2; ++shard) {
      ShardRef* ref = pull.add_shards();
      ref->set_variable("w");
      ref->set_shard(shard);
    }
    absl::StatusOr<PullResponse> read = ps.Pull(pull, absl::Now() + absl::Seconds(30));
    EXPECT_TRUE(read.ok()) << read.status();
    return read.ok() ? *read : PullResponse();
  }

  static constexpr int kWorkers = 3;
  std::mt19937 random_{11};
  std::atomic<int> calls_{0};
  std::unique_ptr<ParameterServer> backup_;
  std::unique_ptr<ParameterServer> primary_;
};

TEST_P(ReplicationTest, TheBackupEndsBitIdenticalToItsPrimary) {
  Start(GetParam());
  uint64_t push_id = 0;
  for (int step = 0; step < 20; ++step) {
    const int64_t version = step;
    for (int worker = 0; worker < kWorkers; ++worker) {
      // Sync pushes are computed at the step's version, the others at the
      // version this worker last saw (its own pushes' and the others').
      const int64_t at = GetParam() == SYNC ? version : step * kWorkers + worker;
      absl::StatusOr<PushResponse> pushed =
          primary_->Push(RandomPush(worker, GetParam() == SSP ? step : at, ++push_id));
      ASSERT_TRUE(pushed.ok()) << pushed.status();
    }
  }
  const PullResponse primary = Read(*primary_);
  const PullResponse backup = Read(*backup_);
  ASSERT_EQ(primary.slices_size(), 2);
  ASSERT_EQ(backup.slices_size(), 2);
  for (int shard = 0; shard < 2; ++shard) {
    EXPECT_EQ(primary.slices(shard).version(), GetParam() == SYNC ? 20 : 60);
    EXPECT_EQ(backup.slices(shard).version(), primary.slices(shard).version());
    EXPECT_EQ(backup.slices(shard).tensor().data(), primary.slices(shard).tensor().data());
  }
  EXPECT_GT(calls_.load(), 0);
}

TEST_P(ReplicationTest, WorkersPushAndPullOnlyAtThePrimary) {
  Start(GetParam());
  const absl::Status pushed = backup_->Push(RandomPush(0, 0, 1)).status();
  EXPECT_EQ(pushed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(pushed.message(), HasSubstr("is a backup copy; its primary is primary:2222"));
  PullRequest pull;
  pull.set_worker_id(0);
  pull.add_shards()->set_variable("w");
  EXPECT_THAT(backup_->Pull(pull, absl::Now() + absl::Seconds(30)).status().message(),
              HasSubstr("its primary is primary:2222"));
  // Routed by a placement table newer than the backup has applied (it has
  // none): it may be promoted in a moment, so the client is told to retry.
  PushRequest routed = RandomPush(0, 0, 1);
  routed.set_placement_epoch(1);
  const absl::Status ahead = backup_->Push(routed).status();
  EXPECT_EQ(ahead.code(), absl::StatusCode::kUnavailable) << ahead;
  EXPECT_THAT(ahead.message(), HasSubstr("routed by epoch 1, which this server has not applied"));
  pull.set_placement_epoch(1);
  EXPECT_EQ(backup_->Pull(pull, absl::Now() + absl::Seconds(30)).status().code(),
            absl::StatusCode::kUnavailable);
  // And the backup takes no updates but its primary's: the primary refuses.
  ReplicateRequest forged;
  ShardUpdate* update = forged.add_updates();
  update->set_variable("w");
  update->set_version(1);
  update->set_averaged(1);
  update->set_gradient(std::string(15 * sizeof(float), '\0'));
  EXPECT_THAT(primary_->Replicate(forged).status().message(), HasSubstr("is not a backup copy"));
}

TEST_P(ReplicationTest, DescribeNamesEachCopyAndACheckpointHoldsEachShardOnce) {
  Start(GetParam());
  const DescribeResponse primary = primary_->Describe();
  const DescribeResponse backup = backup_->Describe();
  ASSERT_EQ(primary.shards_size(), 2);
  ASSERT_EQ(backup.shards_size(), 2);
  EXPECT_THAT(primary.shards(0).backups(), ::testing::ElementsAre(kBackup));
  EXPECT_EQ(primary.shards(0).primary(), "");
  EXPECT_EQ(backup.shards(1).primary(), kPrimary);
  EXPECT_TRUE(backup.shards(1).backups().empty());

  std::string dir = ::testing::TempDir() + "/ckpt-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  std::unique_ptr<FileSystem> fs = MakeLocalFileSystem();
  PsServerConfig config = Config(GetParam(), kWorkers);
  config.set_checkpoint_dir(dir);
  ParameterServer writer_primary(config);
  config.mutable_cluster()->mutable_task()->set_index(1);  // its own file
  ParameterServer writer_backup(config);
  ASSERT_TRUE(writer_primary.EnableCheckpoints(fs.get()).ok());
  ASSERT_TRUE(writer_backup.EnableCheckpoints(fs.get()).ok());
  CreateShardsRequest as_primary, as_backup;
  for (const ShardSpec& spec : Shards(2)) {
    *as_backup.add_shards() = spec;
    as_backup.add_copies()->set_primary(kPrimary);
    *as_primary.add_shards() = spec;
  }
  ASSERT_TRUE(writer_primary.CreateShards(as_primary).ok());
  ASSERT_TRUE(writer_backup.CreateShards(as_backup).ok());
  SaveCheckpointRequest save;
  save.set_step(1);
  absl::StatusOr<SaveCheckpointResponse> by_primary = writer_primary.SaveCheckpoint(save);
  absl::StatusOr<SaveCheckpointResponse> by_backup = writer_backup.SaveCheckpoint(save);
  ASSERT_TRUE(by_primary.ok() && by_backup.ok());
  EXPECT_EQ(by_primary->shards(), 2);
  EXPECT_EQ(by_backup->shards(), 0);  // its copies are the primary's
}

// Table `epoch` of the two servers (ids 0: kPrimary, 1: kBackup) with two
// copies of Shards(2); `moved`: shard 1's primary is the backup's server.
Placement TwoShardTable(int64_t epoch, bool moved) {
  Placement table;
  table.set_epoch(epoch);
  table.set_replication(2);
  table.set_next_server_id(2);
  for (const char* address : {kPrimary, kBackup}) {
    PlacedServer* server = table.add_servers();
    server->set_id(table.servers_size() - 1);
    server->set_address(address);
  }
  for (int shard = 0; shard < 2; ++shard) {
    PlacedUnit* unit = table.add_units();
    unit->set_key(ShardKey("w", shard));
    const bool swapped = moved && shard == 1;
    unit->add_copies()->set_server(swapped ? 1 : 0);
    unit->add_copies()->set_server(swapped ? 0 : 1);
  }
  return table;
}

// Under a placement table, each server writes the primaries its table
// places on it, whatever its copies are by then, and names the table: two
// servers that hold different tables (a shard moved between them, and one
// has not heard yet) say so, and once they hold the same one their files
// hold each shard once. A primary the table places on a server that lacks
// it (restarted) fails the checkpoint there, naming it.
TEST(ReplicationCheckpointTest, EachServerWritesThePrimariesOfItsTableAndNamesIt) {
  std::string dir = ::testing::TempDir() + "/ckpt-table-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  std::unique_ptr<FileSystem> fs = MakeLocalFileSystem();
  std::atomic<int> calls{0};
  ParameterServer* to_first = nullptr;
  ParameterServer* to_second = nullptr;
  PsServerConfig config = Config(ASYNC, 1);
  config.set_checkpoint_dir(dir);
  ParameterServer first(config, absl::Now, [&](const std::string&) {
    return std::make_unique<DirectLink>(to_second, nullptr, &calls);
  });
  config.mutable_cluster()->mutable_task()->set_index(1);
  ParameterServer second(config, absl::Now, [&](const std::string&) {
    return std::make_unique<DirectLink>(to_first, nullptr, &calls);
  });
  to_first = &first;
  to_second = &second;
  first.ServeAt(kPrimary);
  second.ServeAt(kBackup);
  ASSERT_TRUE(first.EnableCheckpoints(fs.get()).ok());
  ASSERT_TRUE(second.EnableCheckpoints(fs.get()).ok());
  ASSERT_TRUE(CreateOnBoth(second, first, 2).ok());
  const Placement before = TwoShardTable(1, false);
  const Placement after = TwoShardTable(2, true);
  first.ApplyPlacement(before);
  second.ApplyPlacement(before);
  SaveCheckpointRequest save;
  auto written = [&](ParameterServer& ps, int64_t step) {
    save.set_step(step);
    absl::StatusOr<SaveCheckpointResponse> saved = ps.SaveCheckpoint(save);
    EXPECT_TRUE(saved.ok()) << saved.status();
    return saved.ok() ? std::make_pair(saved->shards(), saved->placement_epoch())
                      : std::make_pair(-1, int64_t{-1});
  };
  EXPECT_EQ(written(first, 1), std::make_pair(2, int64_t{1}));
  EXPECT_EQ(written(second, 1), std::make_pair(0, int64_t{1}));
  // Shard 1 moved to the second server, which heard first: by their
  // tables both write it, and their answers tell the client so.
  second.ApplyPlacement(after);
  EXPECT_EQ(written(first, 2), std::make_pair(2, int64_t{1}));
  EXPECT_EQ(written(second, 2), std::make_pair(1, int64_t{2}));
  first.ApplyPlacement(after);
  EXPECT_EQ(written(first, 3), std::make_pair(1, int64_t{2}));
  EXPECT_EQ(written(second, 3), std::make_pair(1, int64_t{2}));

  Placement lacking = TwoShardTable(3, true);
  PlacedUnit* unknown = lacking.add_units();
  unknown->set_key(ShardKey("w", 2));
  unknown->add_copies()->set_server(1);
  second.ApplyPlacement(lacking);
  save.set_step(4);
  EXPECT_THAT(second.SaveCheckpoint(save).status().message(),
              HasSubstr("primary of variable 'w' shard 2, which it lacks"));
}

// A gauge of `ps`'s metrics as a scrape reads it; -1 when there is none.
double Gauge(ParameterServer& ps, const std::string& name) {
  prometheus::Registry registry;
  PsMetrics metrics(&ps, registry);
  for (const prometheus::MetricFamily& family : metrics.state()->Collect()) {
    if (family.name == name && !family.metric.empty()) return family.metric[0].gauge.value;
  }
  return -1;
}

// The metrics say which copies a server holds, which of its primaries lack
// a ready backup, and the placement table it applied.
TEST(ReplicationMetricsTest, EachServerExportsItsCopiesAndThoseShortOfABackup) {
  std::atomic<int> calls{0};
  PsServerConfig config = Config(ASYNC, 1, 1);
  config.set_replication(2);
  ParameterServer backup(config);
  config.mutable_cluster()->mutable_task()->set_index(0);
  ParameterServer primary(config, absl::Now, [&](const std::string&) {
    return std::make_unique<DirectLink>(&backup, nullptr, &calls);
  });
  primary.ServeAt(kPrimary);
  backup.ServeAt(kBackup);
  ASSERT_TRUE(CreateOnBoth(backup, primary, 2).ok());
  const Placement table = TwoShardTable(1, false);
  primary.ApplyPlacement(table);
  backup.ApplyPlacement(table);
  EXPECT_EQ(Gauge(primary, "fulcrum_ps_primary_shards"), 2);
  EXPECT_EQ(Gauge(primary, "fulcrum_ps_backup_shards"), 0);
  EXPECT_EQ(Gauge(backup, "fulcrum_ps_primary_shards"), 0);
  EXPECT_EQ(Gauge(backup, "fulcrum_ps_backup_shards"), 2);
  EXPECT_EQ(Gauge(primary, "fulcrum_ps_shards_short_of_backups"), 0);
  EXPECT_EQ(Gauge(primary, "fulcrum_ps_copies_filling"), 0);
  EXPECT_EQ(Gauge(backup, "fulcrum_ps_placement_epoch"), 1);
  // The backup's server lost: both primaries are short of a backup.
  absl::StatusOr<Placement> without = WithoutServer(table, 1);
  ASSERT_TRUE(without.ok()) << without.status();
  primary.ApplyPlacement(*without);
  EXPECT_EQ(Gauge(primary, "fulcrum_ps_shards_short_of_backups"), 2);
  EXPECT_EQ(Gauge(primary, "fulcrum_ps_placement_epoch"), without->epoch());
}

INSTANTIATE_TEST_SUITE_P(Modes, ReplicationTest, ::testing::Values(ASYNC, SYNC, SSP),
                         [](const auto& info) { return ConsistencyMode_Name(info.param); });

// Worker 0's push of ones to Shards(1), computed at version 0.
PushRequest OnesPush() {
  PushRequest push;
  push.set_worker_id(0);
  ShardSlice* slice = push.add_gradients();
  slice->set_variable("w");
  EncodeFloatTensor({6, 5}, std::vector<float>(30, 1.0f), slice->mutable_tensor());
  return push;
}

TEST(ReplicationAckTest, APushIsAnsweredOnlyOnceTheBackupHasItsUpdate) {
  absl::Notification open;
  std::atomic<int> calls{0};
  ParameterServer backup(Config(ASYNC, 1, 1));
  ParameterServer primary(Config(ASYNC, 1), absl::Now, [&](const std::string&) {
    return std::make_unique<DirectLink>(&backup, &open, &calls);
  });
  ASSERT_TRUE(CreateOnBoth(backup, primary).ok());
  const PushRequest push = OnesPush();
  std::atomic<bool> answered{false};
  std::thread pusher([&] {
    EXPECT_TRUE(primary.Push(push).ok());
    answered = true;
  });
  // The update is on its way to the backup, which has not applied it: the
  // push is not answered, and a worker's pull of version 1 waits.
  while (calls.load() == 0) std::this_thread::yield();
  EXPECT_FALSE(answered.load());
  PullRequest pull;
  pull.set_worker_id(0);
  ShardRef* ref = pull.add_shards();
  ref->set_variable("w");
  ref->set_min_version(1);
  EXPECT_EQ(primary.Pull(pull, absl::Now() + absl::Milliseconds(20)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  open.Notify();
  pusher.join();
  EXPECT_TRUE(answered.load());
  EXPECT_TRUE(primary.Pull(pull, absl::Now() + absl::Seconds(30)).ok());
}

TEST(ReplicationAckTest, AStreamThatBreaksIsOpenedAgainAndItsUpdatesSentAgain) {
  std::atomic<int> calls{0};
  DirectLink* link = nullptr;
  ParameterServer backup(Config(ASYNC, 1, 1));
  ParameterServer primary(Config(ASYNC, 1), absl::Now, [&](const std::string&) {
    auto made = std::make_unique<DirectLink>(&backup, nullptr, &calls, /*broken=*/1);
    link = made.get();
    return made;
  });
  ASSERT_TRUE(CreateOnBoth(backup, primary).ok());
  // The first stream breaks on the update; the second carries it.
  ASSERT_TRUE(primary.Push(OnesPush()).ok());
  EXPECT_EQ(link->opened(), 2);
  PullRequest read;
  read.add_shards()->set_variable("w");
  const auto from_primary = primary.Pull(read, absl::Now() + absl::Seconds(30));
  const auto from_backup = backup.Pull(read, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(from_primary.ok() && from_backup.ok());
  EXPECT_EQ(from_backup->slices(0).version(), 1);
  EXPECT_EQ(from_backup->slices(0).tensor().data(), from_primary->slices(0).tensor().data());
}

// A link that says when it is gone.
class WatchedLink : public DirectLink {
 public:
  WatchedLink(ParameterServer* backup, std::atomic<int>* calls, std::atomic<bool>* gone)
      : DirectLink(backup, nullptr, calls, /*broken=*/1 << 30), gone_(gone) {}
  ~WatchedLink() override { *gone_ = true; }

 private:
  std::atomic<bool>* gone_;
};

TEST(ReplicationFailoverTest, ATableWithoutABackupDropsItAndOneWithoutThePrimaryPromotes) {
  std::atomic<int> calls{0};
  std::atomic<bool> link_gone{false};
  ParameterServer backup(Config(ASYNC, 1, 1));
  ParameterServer primary(Config(ASYNC, 1), absl::Now, [&](const std::string&) {
    return std::make_unique<WatchedLink>(&backup, &calls, &link_gone);
  });
  ASSERT_TRUE(CreateOnBoth(backup, primary).ok());
  absl::StatusOr<Placement> table =
      InitialPlacement({{kPrimary, ""}, {kBackup, ""}}, {{ShardKey("w", 0), 120}}, 2);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->units(0).copies(0).server(), 0);  // the primary where it was created
  primary.ApplyPlacement(*table);
  backup.ApplyPlacement(*table);
  EXPECT_EQ(primary.Describe().placement().epoch(), 1);
  // The backup's server never answers (its streams break): the push waits.
  std::atomic<bool> answered{false};
  std::thread pusher([&] {
    absl::StatusOr<PushResponse> pushed = primary.Push(OnesPush());
    EXPECT_TRUE(pushed.ok()) << pushed.status();
    answered = true;
  });
  while (calls.load() == 0) std::this_thread::yield();
  EXPECT_FALSE(answered.load());
  // The backup's server lost: the push is answered without it, and the
  // primary stops calling it.
  absl::StatusOr<Placement> without_backup = WithoutServer(*table, 1);
  ASSERT_TRUE(without_backup.ok());
  primary.ApplyPlacement(*without_backup);
  pusher.join();
  EXPECT_TRUE(answered.load());
  EXPECT_TRUE(link_gone.load());
  EXPECT_TRUE(primary.Describe().shards(0).backups().empty());

  // The primary's server lost instead: the backup is promoted, takes a
  // worker's push, and refuses its old primary's updates.
  absl::StatusOr<Placement> without_primary = WithoutServer(*table, 0);
  ASSERT_TRUE(without_primary.ok());
  EXPECT_EQ(backup.Push(OnesPush()).status().code(), absl::StatusCode::kFailedPrecondition);
  backup.ApplyPlacement(*without_primary);
  absl::StatusOr<PushResponse> pushed = backup.Push(OnesPush());
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->results(0).outcome(), ShardPushResult::APPLIED);
  ReplicateRequest late;
  late.set_primary(kPrimary);
  ShardUpdate* update = late.add_updates();
  update->set_variable("w");
  update->set_version(2);
  update->set_averaged(1);
  update->set_gradient(std::string(30 * sizeof(float), '\0'));
  EXPECT_THAT(backup.Replicate(late).status().message(), HasSubstr("is not a backup copy"));
  // An older table changes nothing.
  backup.ApplyPlacement(*table);
  EXPECT_EQ(backup.Describe().placement().epoch(), 2);
  EXPECT_EQ(backup.Describe().shards(0).primary(), "");
}

// Tables reach a server on several threads (etcd's watch, the caught-up
// marker, a worker's CreateShards), in any order: applied at once, an
// older one (its backups) must not undo a newer one (every shard promoted
// here, its primary's server lost), whichever thread gets in first.
TEST(ReplicationFailoverTest, TablesAppliedAtOnceEndAsTheNewestSays) {
  constexpr int kShards = 64;
  std::vector<PlacementUnitSpec> units;
  CreateShardsRequest as_backups;
  for (const ShardSpec& spec : Shards(kShards, kShards)) {
    units.push_back({ShardKey("w", spec.shard()), 20});
    *as_backups.add_shards() = spec;
    as_backups.add_copies()->set_primary(kPrimary);
  }
  absl::StatusOr<Placement> older = InitialPlacement({{kPrimary, ""}, {kBackup, ""}}, units, 2);
  ASSERT_TRUE(older.ok()) << older.status();
  absl::StatusOr<Placement> newer = WithoutServer(*older, 0);
  ASSERT_TRUE(newer.ok()) << newer.status();
  for (int round = 0; round < 100; ++round) {
    ParameterServer server(Config(ASYNC, 1, 1));
    ASSERT_TRUE(server.CreateShards(as_backups).ok());
    std::atomic<int> ready{0};
    auto apply = [&](const Placement& table) {
      ++ready;
      while (ready.load() < 2) std::this_thread::yield();
      server.ApplyPlacement(table);
    };
    std::thread old_one(apply, *older);
    std::thread new_one(apply, *newer);
    old_one.join();
    new_one.join();
    const DescribeResponse described = server.Describe();
    ASSERT_EQ(described.placement().epoch(), newer->epoch());
    for (const ShardInfo& shard : described.shards()) {
      ASSERT_EQ(shard.primary(), "")
          << "round " << round << ": shard " << shard.shard() << " is a backup of "
          << shard.primary() << " though the newest table promoted it";
    }
  }
}

// Two ssp servers of two workers, w's shard 0 (Shards(1)) created on both:
// its primary on primary_, its backup on backup_, by the first table of
// the two (table_), which both applied.
class SspFailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    primary_.ServeAt(kPrimary);
    backup_.ServeAt(kBackup);
    ASSERT_TRUE(CreateOnBoth(backup_, primary_).ok());
    absl::StatusOr<Placement> table =
        InitialPlacement({{kPrimary, ""}, {kBackup, ""}}, {{ShardKey("w", 0), 120}}, 2);
    ASSERT_TRUE(table.ok()) << table.status();
    table_ = *std::move(table);
    primary_.ApplyPlacement(table_);
    backup_.ApplyPlacement(table_);
  }

  std::atomic<int> calls_{0};
  ParameterServer backup_{Config(SSP, 2, 1)};
  ParameterServer primary_{Config(SSP, 2), absl::Now, [this](const std::string&) {
                             return std::make_unique<DirectLink>(&backup_, nullptr, &calls_);
                           }};
  Placement table_;
};

// SSP at bound 0, two workers. Each push reaches both servers; worker 0's
// last one reached the backup's server but not the primary, which is then
// lost. Once promoted, the backup counts worker 0 at the clock of that
// push, yet lacks its gradient: a pull routed by the new table waits for
// worker 0 to retry it there.
TEST_F(SspFailoverTest, AnSspPullAfterAFailoverWaitsForThePushesThePrimaryLost) {
  auto push_at = [](int worker, bool gradient, int64_t epoch) {
    PushRequest push = OnesPush();
    push.set_worker_id(worker);
    push.set_push_id(10 + worker);
    push.set_clock(0);
    push.set_placement_epoch(epoch);
    if (!gradient) push.clear_gradients();
    return push;
  };
  ASSERT_TRUE(primary_.Push(push_at(1, true, 1)).ok());
  ASSERT_TRUE(backup_.Push(push_at(1, false, 1)).ok());
  ASSERT_TRUE(backup_.Push(push_at(0, false, 1)).ok());
  EXPECT_EQ(backup_.Describe().workers(0).clock(), 1);

  absl::StatusOr<Placement> without_primary = WithoutServer(table_, 0);
  ASSERT_TRUE(without_primary.ok());
  backup_.ApplyPlacement(*without_primary);
  PullRequest pull;
  pull.set_worker_id(1);
  pull.set_clock(1);
  pull.set_placement_epoch(2);
  pull.add_shards()->set_variable("w");
  absl::StatusOr<PullResponse> early = backup_.Pull(pull, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded) << early.status();
  EXPECT_THAT(early.status().message(), HasSubstr("waits for worker(s) 0 to reach clock 1"));

  absl::StatusOr<PullResponse> pulled;
  std::thread puller([&] { pulled = backup_.Pull(pull, absl::Now() + absl::Seconds(30)); });
  // Worker 0 retries its push by the new table: the promoted copy applies
  // it, and the pull goes on.
  absl::StatusOr<PushResponse> retried = backup_.Push(push_at(0, true, 2));
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->results(0).outcome(), ShardPushResult::APPLIED);
  puller.join();
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->slices(0).version(), 2);
}

// An ssp pull waiting for the other workers' clocks at a server whose
// shard then moves away ends, naming the new primary, instead of waiting
// for clocks that no push here will advance (the others follow the move).
TEST_F(SspFailoverTest, AnSspPullWaitingOnAShardThatMovesAwayEndsNamingItsPrimary) {
  PushRequest push = OnesPush();  // worker 0's, at clock 0
  push.set_push_id(7);
  push.set_clock(0);
  push.set_placement_epoch(1);
  ASSERT_TRUE(primary_.Push(push).ok());
  PullRequest pull;
  pull.set_worker_id(1);
  pull.set_clock(2);  // waits for worker 0 at clock 2
  pull.set_placement_epoch(1);
  pull.add_shards()->set_variable("w");
  absl::StatusOr<PullResponse> pulled;
  std::thread puller([&] { pulled = primary_.Pull(pull, absl::Now() + absl::Seconds(60)); });
  // The pull tells the server its worker's clock as it starts to wait.
  while (primary_.Describe().workers(1).clock() != 2) std::this_thread::yield();
  Placement moved = table_;
  moved.set_epoch(2);
  std::swap(*moved.mutable_units(0)->mutable_copies(0), *moved.mutable_units(0)->mutable_copies(1));
  const absl::Time applied = absl::Now();
  primary_.ApplyPlacement(moved);
  puller.join();
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kFailedPrecondition) << pulled.status();
  EXPECT_THAT(pulled.status().message(), HasSubstr(kBackup));
  EXPECT_LT(absl::Now() - applied, absl::Seconds(30));  // not its deadline
}

// Table t: lazy Adam, width 4, at most 40 rows, ids stored from their
// second push, all in one range (partitions 1).
EmbeddingTableSpec TableSpec() {
  EmbeddingTableSpec spec;
  spec.set_name("t");
  spec.set_width(4);
  spec.mutable_initializer()->set_kind(InitializerSpec::RANDOM_NORMAL);
  spec.mutable_initializer()->set_seed(5);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.05f);
  spec.set_max_rows(40);
  spec.set_admit_after(2);
  spec.set_partitions(1);
  return spec;
}

// What ThreeServers replicates: w's shard 0 of 1, or t's range 0.
enum class Unit { kShard, kRange };

// Three servers of one cluster (kPrimary, kBackup, kThird), each linked
// directly to the others, and w's shard 0 of 1 (Shards(1)), or table t's
// range 0 (TableSpec), created on them as the first table of
// `replication` copies places it.
class ThreeServers {
 public:
  // w [rows, 5] in one shard, or t, with `replication` copies.
  explicit ThreeServers(int replication, int64_t rows = 6, Unit kind = Unit::kShard)
      : table_(*InitialPlacement(
            {{kPrimary, ""}, {kBackup, ""}, {kThird, ""}},
            {{kind == Unit::kShard ? ShardKey("w", 0) : TableKey("t", 0), rows * 5 * 4}},
            replication)) {
    const Placement& table = table_;
    for (int i = 0; i < 3; ++i) {
      servers_.push_back(std::make_unique<ParameterServer>(
          Config(ASYNC, 1, i, 3), absl::Now, [this](const std::string& address) {
            return std::make_unique<DirectLink>(&At(address), nullptr, &calls_);
          }));
    }
    const PlacedUnit& unit = table.units(0);
    for (int c = 0; c < unit.copies_size(); ++c) {
      CreateShardsRequest request;
      ShardCopy* copy = nullptr;
      if (kind == Unit::kShard) {
        *request.add_shards() = Shards(1, rows)[0];
        copy = request.add_copies();
      } else {
        *request.add_tables() = TableSpec();
        TableRange* range = request.add_ranges();
        range->set_table("t");
        copy = range->mutable_copy();
      }
      for (int b = 1; c == 0 && b < unit.copies_size(); ++b)
        copy->add_backups(Address(table, unit.copies(b).server()));
      if (c > 0) copy->set_primary(Address(table, unit.copies(0).server()));
      EXPECT_TRUE(At(Address(table, unit.copies(c).server())).CreateShards(request).ok());
    }
    Apply(table);
  }
  const Placement& table() const { return table_; }
  // The server of the shard's copy `c` (0: the primary) in the first table.
  const std::string& CopyAt(int c) const {
    return Address(table_, table_.units(0).copies(c).server());
  }
  static const std::string& Address(const Placement& table, int32_t id) {
    for (const PlacedServer& server : table.servers()) {
      if (server.id() == id) return server.address();
    }
    return PlacedServer::default_instance().address();
  }
  ParameterServer& At(const std::string& address) {
    return *servers_[address == kPrimary ? 0 : address == kBackup ? 1 : 2];
  }
  // Every server but `lost` (an address) applies `table`.
  void Apply(const Placement& table, const std::string& lost = "") {
    for (const char* address : {kPrimary, kBackup, kThird}) {
      if (address != lost) At(address).ApplyPlacement(table);
    }
  }
  // The shard's values and version as a reader reads them at `address`.
  std::pair<std::string, int64_t> Read(const std::string& address) {
    PullRequest read;
    read.add_shards()->set_variable("w");
    absl::StatusOr<PullResponse> got = At(address).Pull(read, absl::Now() + absl::Seconds(30));
    EXPECT_TRUE(got.ok()) << address << ": " << got.status();
    if (!got.ok()) return {};
    return {got->slices(0).tensor().data(), got->slices(0).version()};
  }
  // Every row of t's range at `address`, its values then its slots, by id.
  std::map<int64_t, std::vector<float>> ReadRange(const std::string& address) {
    ReadRowsRequest read;
    read.set_table("t");
    read.set_partition(0);
    read.set_slots(true);
    absl::StatusOr<ReadRowsResponse> got = At(address).ReadRows(read);
    EXPECT_TRUE(got.ok()) << address << ": " << got.status();
    std::map<int64_t, std::vector<float>> rows;
    if (!got.ok()) return rows;
    EXPECT_EQ(got->next(), got->rows());  // one page
    const int64_t width = got->width();
    const int64_t slots = width * got->num_slots();
    for (int i = 0; i < got->ids_size(); ++i) {
      std::vector<float>& row = rows[got->ids(i)];
      row.assign(got->values().begin() + i * width, got->values().begin() + (i + 1) * width);
      row.insert(row.end(), got->slots().begin() + i * slots,
                 got->slots().begin() + (i + 1) * slots);
    }
    return rows;
  }

 private:
  const Placement table_;
  std::atomic<int> calls_{0};
  std::vector<std::unique_ptr<ParameterServer>> servers_;
};

// Worker 0's push of ones, with `push_id`.
PushRequest OnesPushWithId(uint64_t push_id) {
  PushRequest push = OnesPush();
  push.set_push_id(push_id);
  return push;
}

// Three copies; the primary is lost after handing one update to one
// backup alone (so never acknowledged). The other backup is promoted and
// fills the first with its snapshot before its next version counts: the
// two end bit-identical, the update the lost primary sent alone gone.
TEST(ReplicationFailoverTest, APromotedPrimaryFillsItsOtherBackupThoughItWentAhead) {
  ThreeServers cluster(3);
  const std::string primary = cluster.CopyAt(0);
  const std::string promoted = cluster.CopyAt(1);
  const std::string ahead = cluster.CopyAt(2);
  for (uint64_t id = 1; id <= 3; ++id)
    ASSERT_TRUE(cluster.At(primary).Push(OnesPushWithId(id)).ok());
  ASSERT_EQ(cluster.Read(ahead), cluster.Read(promoted));
  ReplicateRequest alone;
  alone.set_primary(primary);
  ShardUpdate* update = alone.add_updates();
  update->set_variable("w");
  update->set_version(4);
  update->set_averaged(1);
  update->set_gradient(std::string(30 * sizeof(float), '\x40'));
  ASSERT_TRUE(cluster.At(ahead).Replicate(alone).ok());
  ASSERT_EQ(cluster.Read(ahead).second, 4);

  absl::StatusOr<Placement> without =
      WithoutServer(cluster.table(), cluster.table().units(0).copies(0).server());
  ASSERT_TRUE(without.ok()) << without.status();
  cluster.Apply(*without, primary);
  absl::StatusOr<PushResponse> pushed = cluster.At(promoted).Push(OnesPushWithId(4));
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->results(0).version(), 4);
  EXPECT_EQ(cluster.Read(ahead), cluster.Read(promoted));
  EXPECT_EQ(cluster.At(promoted).Describe().shards(0).backups(0), ahead);
}

// What a primary tells its coordination: the copies reported caught up.
class RecordingCoordination : public Coordination {
 public:
  absl::Status AddUnits(const Placement&) override { return absl::OkStatus(); }
  absl::Status CheckServing() const override { return absl::OkStatus(); }
  absl::StatusOr<Placement> Rebalance(bool) override {
    return absl::UnimplementedError("not in this test");
  }
  void CaughtUp(const std::string& key, const std::string& address) override {
    absl::MutexLock lock(&mu_);
    reported_.push_back(absl::StrCat(key, " on ", address));
  }
  std::vector<std::string> AwaitReports(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](std::vector<std::string>* r) { return !r->empty(); }, &reported_),
                         timeout);
    return reported_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> reported_ ABSL_GUARDED_BY(mu_);
};

// Two copies; the backup's server is lost, and the table makes the copy
// again on the third server, catching up: the primary creates it there
// with its snapshot, pushes meanwhile wait for no one, the copy is
// reported caught up, and once the table counts it ready it is a backup
// like any, bit-identical.
TEST(ReplicationFailoverTest, ACopyMadeAgainIsFilledFromThePrimaryAndReportedCaughtUp) {
  ThreeServers cluster(2);
  const std::string primary = cluster.CopyAt(0);
  const std::string lost = cluster.CopyAt(1);
  RecordingCoordination coordination;
  cluster.At(primary).SetCoordination(&coordination);
  for (uint64_t id = 1; id <= 3; ++id)
    ASSERT_TRUE(cluster.At(primary).Push(OnesPushWithId(id)).ok());

  absl::StatusOr<Placement> without =
      WithoutServer(cluster.table(), cluster.table().units(0).copies(1).server());
  ASSERT_TRUE(without.ok()) << without.status();
  const Placement repaired = Repaired(*without);
  ASSERT_EQ(repaired.units(0).copies_size(), 2);
  ASSERT_TRUE(repaired.units(0).copies(1).catching_up());
  const int32_t third_id = repaired.units(0).copies(1).server();
  const std::string third = ThreeServers::Address(repaired, third_id);
  ASSERT_NE(third, lost);
  cluster.Apply(repaired, lost);
  EXPECT_THAT(coordination.AwaitReports(absl::Seconds(30)),
              ::testing::ElementsAre(absl::StrCat("w/0 on ", third)));
  const DescribeResponse filling = cluster.At(primary).Describe();
  EXPECT_TRUE(filling.shards(0).backups().empty());
  EXPECT_THAT(filling.shards(0).catching_up(), ::testing::ElementsAre(third));
  EXPECT_EQ(cluster.Read(third), cluster.Read(primary));

  absl::StatusOr<Placement> ready = CaughtUp(repaired, ShardKey("w", 0), third_id);
  ASSERT_TRUE(ready.ok()) << ready.status();
  cluster.Apply(*ready, lost);
  EXPECT_THAT(cluster.At(primary).Describe().shards(0).backups(), ::testing::ElementsAre(third));
  ASSERT_TRUE(cluster.At(primary).Push(OnesPushWithId(4)).ok());
  EXPECT_EQ(cluster.Read(third), cluster.Read(primary));
  EXPECT_EQ(cluster.Read(third).second, 4);
  // A snapshot for a copy the table does not place is refused.
  ReplicateRequest stray;
  stray.set_primary(kThird);
  ShardUpdate* part = stray.add_updates();
  part->set_variable("v");
  part->mutable_snapshot()->mutable_spec()->mutable_variable()->set_name("v");
  EXPECT_THAT(cluster.At(primary).Replicate(stray).status().message(),
              HasSubstr("has no copy here of third:2222"));
}

// The primary's server is drained (fulcrumctl remove-server): a copy on
// the third server catches up from its snapshot, and from the moment it
// is reported every push the primary acknowledges is on it too; once the
// table swaps them it is the primary, with the push ids (a push made again
// there is DUPLICATE), and the drained server frees its copy, leaves the
// table and names the new primary to a worker's push.
TEST(ReplicationFailoverTest, AMovedPrimaryLacksNoAcknowledgedPushAndTheOldCopyIsFreed) {
  ThreeServers cluster(2);
  const std::string primary = cluster.CopyAt(0);
  const std::string backup = cluster.CopyAt(1);
  RecordingCoordination coordination;
  cluster.At(primary).SetCoordination(&coordination);
  for (uint64_t id = 1; id <= 3; ++id)
    ASSERT_TRUE(cluster.At(primary).Push(OnesPushWithId(id)).ok());

  const int32_t drained_id = cluster.table().units(0).copies(0).server();
  absl::StatusOr<Placement> draining = Draining(cluster.table(), drained_id);
  ASSERT_TRUE(draining.ok()) << draining.status();
  const PlacedCopy& moving = draining->units(0).copies(2);
  ASSERT_TRUE(moving.catching_up() && moving.replaces() == drained_id);
  const std::string third = ThreeServers::Address(*draining, moving.server());
  cluster.Apply(*draining);
  EXPECT_THAT(coordination.AwaitReports(absl::Seconds(30)),
              ::testing::ElementsAre(absl::StrCat("w/0 on ", third)));
  // Acknowledged by the primary: so on the copy that takes its place.
  ASSERT_TRUE(cluster.At(primary).Push(OnesPushWithId(4)).ok());
  EXPECT_EQ(cluster.Read(third), cluster.Read(primary));
  EXPECT_EQ(cluster.Read(third).second, 4);

  absl::StatusOr<Placement> moved = CaughtUp(*draining, ShardKey("w", 0), moving.server());
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->servers_size(), 2);  // the drained server left the table
  cluster.Apply(*moved);
  EXPECT_EQ(cluster.At(primary).Describe().shards_size(), 0);
  const absl::Status refused = cluster.At(primary).Push(OnesPushWithId(5)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("its shards moved to other servers"));
  absl::StatusOr<PushResponse> again = cluster.At(third).Push(OnesPushWithId(4));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->results(0).outcome(), ShardPushResult::DUPLICATE);
  absl::StatusOr<PushResponse> pushed = cluster.At(third).Push(OnesPushWithId(5));
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->results(0).outcome(), ShardPushResult::APPLIED);
  EXPECT_EQ(cluster.Read(third).second, 5);
  EXPECT_EQ(cluster.Read(backup), cluster.Read(third));
}

// A copy filled from a snapshot of many parts: they go in several calls,
// each about the replicator's bound (a snapshot's parts once went in one
// call, which past gRPC's message limit was refused, and sent again, for
// ever).
TEST(ReplicationFailoverTest, ALargeSnapshotGoesInCallsOfBoundedSize) {
  ThreeServers cluster(2, int64_t{1} << 20);  // 20 MiB of values, 60 MiB with Adam's slots
  const std::string primary = cluster.CopyAt(0);
  const std::string lost = cluster.CopyAt(1);
  RecordingCoordination coordination;
  cluster.At(primary).SetCoordination(&coordination);
  absl::StatusOr<Placement> without =
      WithoutServer(cluster.table(), cluster.table().units(0).copies(1).server());
  ASSERT_TRUE(without.ok()) << without.status();
  const Placement repaired = Repaired(*without);
  const std::string third = ThreeServers::Address(repaired, repaired.units(0).copies(1).server());
  DirectStream::largest_request = 0;
  cluster.Apply(repaired, lost);
  EXPECT_THAT(coordination.AwaitReports(absl::Seconds(60)),
              ::testing::ElementsAre(absl::StrCat("w/0 on ", third)));
  EXPECT_EQ(cluster.Read(third), cluster.Read(primary));
  // The bound and one part of 4 MiB over it, at most (and the fields).
  EXPECT_GT(DirectStream::largest_request.load(), size_t{4} << 20);
  EXPECT_LE(DirectStream::largest_request.load(), Replicator::kMaxCallBytes + (size_t{5} << 20));
}

// Worker 0's push `push_id` of row gradients of t: 3 ids drawn (by the
// push id) from 60, more than the table keeps, so rows are admitted and
// evicted as the pushes go on.
PushRowsRequest RowPush(uint64_t push_id) {
  PushRowsRequest push;
  push.set_worker_id(0);
  push.set_push_id(push_id);
  TableRows* rows = push.add_tables();
  rows->set_table("t");
  rows->set_partition(0);
  for (int k = 0; k < 3; ++k) {
    rows->add_ids(static_cast<int64_t>((push_id * 7 + uint64_t{13} * k) % 60));
    for (int e = 0; e < 4; ++e) rows->add_values(std::sin(static_cast<float>(push_id + k + e)));
  }
  return push;
}

// A range of a table is replicated as a shard is: its backup ends
// bit-identical (rows and slots) after many evictions and
// refuses workers naming its primary, as the server with no copy does;
// when the primary is lost the backup is promoted with the push ids, and
// the copy made again on the third server is filled from its snapshot.
TEST(TableReplicationTest, ARangeFailsOverAndIsCopiedAgainLosingNoAcknowledgedPush) {
  ThreeServers cluster(2, 6, Unit::kRange);
  const std::string primary = cluster.CopyAt(0);
  const std::string backup = cluster.CopyAt(1);
  std::string third = kPrimary;
  for (const char* address : {kBackup, kThird}) {
    if (address != primary && address != backup) third = address;
  }
  for (uint64_t id = 1; id <= 80; ++id) {
    absl::StatusOr<PushRowsResponse> pushed = cluster.At(primary).PushRows(RowPush(id));
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    ASSERT_EQ(pushed->results(0).outcome(), ShardPushResult::APPLIED);
  }
  EXPECT_GT(cluster.At(primary).Describe().tables(0).evictions(), 0);
  EXPECT_TRUE(cluster.ReadRange(backup) == cluster.ReadRange(primary));
  const absl::Status refused = cluster.At(backup).PushRows(RowPush(81)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("its primary is ", primary)));
  const absl::Status elsewhere = cluster.At(third).PushRows(RowPush(81)).status();
  EXPECT_EQ(elsewhere.code(), absl::StatusCode::kFailedPrecondition) << elsewhere;
  EXPECT_THAT(elsewhere.message(),
              HasSubstr(absl::StrCat("embedding table 't' range 0 has no copy here: by placement "
                                     "table epoch 1 its primary is ",
                                     primary)));

  absl::StatusOr<Placement> without =
      WithoutServer(cluster.table(), cluster.table().units(0).copies(0).server());
  ASSERT_TRUE(without.ok()) << without.status();
  const Placement repaired = Repaired(*without);
  ASSERT_EQ(ThreeServers::Address(repaired, repaired.units(0).copies(1).server()), third);
  RecordingCoordination coordination;
  cluster.At(backup).SetCoordination(&coordination);
  cluster.Apply(repaired, primary);
  // Acknowledged before: applied once at the promoted copy.
  absl::StatusOr<PushRowsResponse> again = cluster.At(backup).PushRows(RowPush(80));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->results(0).outcome(), ShardPushResult::DUPLICATE);
  EXPECT_THAT(coordination.AwaitReports(absl::Seconds(30)),
              ::testing::ElementsAre(absl::StrCat("t#0 on ", third)));
  const int64_t evicted = cluster.At(backup).Describe().tables(0).evictions();
  for (uint64_t id = 81; id <= 90; ++id) {
    absl::StatusOr<PushRowsResponse> pushed = cluster.At(backup).PushRows(RowPush(id));
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    ASSERT_EQ(pushed->results(0).outcome(), ShardPushResult::APPLIED);
  }
  // Equal after evictions since the fill: so the order of use is too.
  EXPECT_GT(cluster.At(backup).Describe().tables(0).evictions(), evicted);
  EXPECT_TRUE(cluster.ReadRange(third) == cluster.ReadRange(backup));
  const DescribeResponse described = cluster.At(third).Describe();
  ASSERT_EQ(described.tables_size(), 1);
  EXPECT_EQ(described.tables(0).rows(), cluster.At(backup).Describe().tables(0).rows());
}

// A range's copy the table does not place is refused, as are ranges of
// tables not in the request and partitions past the table's.
TEST(TableReplicationTest, RangesThatCannotBeAreRefusedByName) {
  ThreeServers cluster(2, 6, Unit::kRange);
  ReplicateRequest stray;
  stray.set_primary(kThird);
  ShardUpdate* part = stray.add_updates();
  part->set_table("u");
  part->set_partition(0);
  part->mutable_table_snapshot()->mutable_spec()->set_name("u");
  EXPECT_THAT(cluster.At(kPrimary).Replicate(stray).status().message(),
              HasSubstr("unit 'u#0' has no copy here of third:2222"));
  CreateShardsRequest request;
  *request.add_tables() = TableSpec();
  TableRange* range = request.add_ranges();
  range->set_table("u");
  EXPECT_THAT(cluster.At(kPrimary).CreateShards(request).status().message(),
              HasSubstr("a range of table 'u', which is not among its tables"));
  range->set_table("t");
  range->set_partition(1);
  EXPECT_THAT(cluster.At(kPrimary).CreateShards(request).status().message(),
              HasSubstr("range 1 of table 't', which has ranges [0, 1)"));
  range->set_partition(0);
  range->mutable_copy()->set_primary(kBackup);
  range->mutable_copy()->add_backups(kThird);
  EXPECT_THAT(cluster.At(kPrimary).CreateShards(request).status().message(), HasSubstr("not both"));
}

TEST(ReplicationCreateTest, CopiesThatCannotBeAreRefusedByName) {
  ParameterServer unreplicated(Config(ASYNC, 1));
  CreateShardsRequest request;
  *request.add_shards() = Shards(1)[0];
  request.add_copies()->add_backups(kBackup);
  EXPECT_THAT(unreplicated.CreateShards(request).status().message(),
              HasSubstr("this server replicates to none"));
  request.mutable_copies(0)->set_primary(kPrimary);
  EXPECT_THAT(unreplicated.CreateShards(request).status().message(), HasSubstr("not both"));
  request.add_copies();
  EXPECT_THAT(unreplicated.CreateShards(request).status().message(),
              HasSubstr("2 copies for 1 shards"));
}

}  // namespace
}  // namespace fulcrum
