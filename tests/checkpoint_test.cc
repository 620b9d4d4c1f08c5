// Checkpoints through the chief's Checkpointer and in-process servers:
// restoring on a different number of servers, and a full disk mid-save.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "client/ps_client_impl.h"
#include "client/transport/in_process_ps_transport.h"
#include "common/checkpoint/checkpointer.h"
#include "common/checkpoint/directory.h"
#include "common/faulty_file_system.h"
#include "fulcrum/job_checkpoints.h"
#include "worker/strategy/all_reduce_strategy.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

PsServerConfig Config(int ps_index, int num_ps, const std::string& dir) {
  PsServerConfig config;
  config.set_mode(ASYNC);
  config.set_num_replicas(1);
  config.set_replicas_to_aggregate(1);
  config.set_max_staleness(-1);
  config.set_lease_timeout_ms(10000);
  config.set_max_message_bytes(64 << 20);
  config.set_checkpoint_dir(dir);
  for (int i = 0; i < num_ps; ++i) config.mutable_cluster()->mutable_cluster()->add_ps("h:0");
  config.mutable_cluster()->mutable_task()->set_type("ps");
  config.mutable_cluster()->mutable_task()->set_index(ps_index);
  return config;
}

VariableSpec Spec(int max_shards) {
  VariableSpec spec;
  spec.set_name("w");
  spec.add_shape(12);
  spec.add_shape(3);
  spec.set_dtype(DT_FLOAT);
  spec.mutable_initializer()->set_kind(InitializerSpec::RANDOM_NORMAL);
  spec.mutable_initializer()->set_stddev(1.0f);
  spec.mutable_initializer()->set_seed(3);
  spec.mutable_partitioner()->set_kind(PartitionerSpec::FIXED_SHARDS);
  spec.mutable_partitioner()->set_num_shards(max_shards);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  return spec;
}

// `num_ps` in-process servers on checkpoint dir `dir`, and a client.
struct Cluster {
  Cluster(int num_ps, const std::string& dir, FileSystem* fs) {
    std::vector<std::unique_ptr<PsTransport>> transports;
    for (int i = 0; i < num_ps; ++i) {
      servers.push_back(std::make_unique<ParameterServer>(Config(i, num_ps, dir)));
      EXPECT_TRUE(servers.back()->EnableCheckpoints(fs).ok());
      transports.push_back(std::make_unique<InProcessPsTransport>(servers.back().get()));
    }
    client = std::make_unique<PsClientImpl>(std::move(transports), PsClientOptions{});
  }
  std::vector<std::unique_ptr<ParameterServer>> servers;
  std::unique_ptr<PsClient> client;
};

// Phase one through the servers, as the parameter-server strategy does it.
WriteCheckpointFiles Files(PsClient& client) {
  return [&client](int64_t step) { return client.SaveCheckpoint(step); };
}

class CheckpointerTest : public ::testing::Test {
 protected:
  // The step of the newest complete checkpoint, or -1.
  int64_t NewestStep() {
    std::vector<std::string> problems;
    auto loaded = LoadNewestCheckpoint(
        fs_, dir_, [](const CheckpointFiles&) { return absl::OkStatus(); }, &problems);
    return loaded.ok() ? (*loaded)[0]->header().step() : -1;
  }

  std::string dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
  FaultyFileSystem fs_;
};

TEST_F(CheckpointerTest, TwoServersCheckpointRestoresOnThree) {
  TensorMap saved;
  {
    Cluster two(2, dir_, &fs_);
    ASSERT_TRUE(two.client->CreateVariables({Spec(2)}).ok());
    // Two Adam steps, so values, slots and versions all differ from a fresh start.
    for (int step = 0; step < 2; ++step) {
      ASSERT_TRUE(
          two.client->Push({{"w", DenseTensor{{12, 3}, std::vector<float>(36, 1.0f)}}}).ok());
    }
    ASSERT_TRUE(two.client->Pull({}, &saved).ok());
    Checkpointer checkpointer(Files(*two.client), &fs_, {dir_, 0, 0, 2});
    ASSERT_TRUE(checkpointer.Save(2).ok());
  }
  Cluster three(3, dir_, &fs_);
  EXPECT_EQ(three.servers[0]->Describe().restored_step(), 2);
  ASSERT_TRUE(three.client->CreateVariables({Spec(3)}).ok());  // 3 shards: rows regrouped
  TensorMap restored;
  ASSERT_TRUE(three.client->Pull({}, &restored).ok());
  EXPECT_EQ(restored["w"].values, saved["w"].values);
  EXPECT_EQ(three.client->step(), 2);
  // The Adam slots came back too: the next step moves both the same way.
  TensorMap after_saved, after_restored;
  Cluster again(2, dir_, &fs_);
  ASSERT_TRUE(again.client->CreateVariables({Spec(2)}).ok());
  for (auto* c : {again.client.get(), three.client.get()}) {
    ASSERT_TRUE(c->Push({{"w", DenseTensor{{12, 3}, std::vector<float>(36, 1.0f)}}}).ok());
  }
  ASSERT_TRUE(again.client->Pull({}, &after_saved).ok());
  ASSERT_TRUE(three.client->Pull({}, &after_restored).ok());
  EXPECT_EQ(after_saved["w"].values, after_restored["w"].values);
}

// MaybeSave checkpoints every N steps, and every N seconds on its clock.
TEST_F(CheckpointerTest, SavesByStepsAndByTime) {
  std::vector<int64_t> saved;
  const WriteCheckpointFiles record = [&](int64_t step) {
    saved.push_back(step);
    return absl::StatusOr<std::vector<SaveCheckpointResponse>>(
        std::vector<SaveCheckpointResponse>{});
  };
  Checkpointer by_steps(record, &fs_, {dir_, 10, 0, 2});
  for (int64_t step = 1; step <= 25; ++step) by_steps.MaybeSave(step);
  EXPECT_EQ(saved, (std::vector<int64_t>{10, 20}));

  saved.clear();
  absl::Time now = absl::FromUnixSeconds(100);
  Checkpointer by_time(record, &fs_, {dir_, 0, 60, 2}, [&] { return now; });
  by_time.MaybeSave(1);
  now += absl::Seconds(59);
  by_time.MaybeSave(2);
  now += absl::Seconds(1);
  by_time.MaybeSave(3);
  now += absl::Seconds(30);
  by_time.MaybeSave(4);
  EXPECT_EQ(saved, (std::vector<int64_t>{3})) << "60 s after the start, then not 30 s later";
}

// A checkpoint is the same under either strategy: an all-reduce chief's
// restores on three servers, and theirs on an all-reduce chief, values,
// slots and step.
TEST_F(CheckpointerTest, CheckpointsRestoreUnderEitherStrategy) {
  const TensorMap ones = {{"w", DenseTensor{{12, 3}, std::vector<float>(36, 1.0f)}}};
  AllReduceStrategyOptions options;
  options.checkpoint_dir = dir_;
  options.fs = &fs_;
  SoloLinks solo;
  AllReduceStrategy mirrored(&solo, {Spec(1)}, options);
  TensorMap weights;
  ASSERT_TRUE(mirrored.Start(&weights).ok());
  for (int step = 0; step < 2; ++step) ASSERT_TRUE(mirrored.Step(&ones, {}, &weights).ok());
  Checkpointer by_workers([&](int64_t step) { return mirrored.SaveCheckpoint(step); }, &fs_,
                          {dir_, 0, 0, 5});
  ASSERT_TRUE(by_workers.Save(mirrored.step()).ok());

  Cluster three(3, dir_, &fs_);
  EXPECT_EQ(three.servers[0]->Describe().restored_step(), 2);
  ASSERT_TRUE(three.client->CreateVariables({Spec(3)}).ok());
  TensorMap on_servers;
  ASSERT_TRUE(three.client->Pull({}, &on_servers).ok());
  EXPECT_EQ(on_servers["w"].values, weights["w"].values);
  EXPECT_EQ(three.client->step(), 2);
  // The slots came too: the next step moves both alike, to the bit.
  ASSERT_TRUE(mirrored.Step(&ones, {}, &weights).ok());
  ASSERT_TRUE(three.client->PushPull(ones, {}, &on_servers).ok());
  EXPECT_EQ(on_servers["w"].values, weights["w"].values);

  // And back: the servers' checkpoint restores on an all-reduce chief.
  ASSERT_TRUE(Checkpointer(Files(*three.client), &fs_, {dir_, 0, 0, 5}).Save(3).ok());
  AllReduceStrategy again(&solo, {Spec(1)}, options);
  TensorMap restored;
  ASSERT_TRUE(again.Start(&restored).ok());
  EXPECT_EQ(again.step(), 3);
  EXPECT_EQ(again.ResumedBatches(1, 100), 3);
  EXPECT_EQ(restored["w"].values, on_servers["w"].values);
  ASSERT_TRUE(again.Step(&ones, {}, &restored).ok());
  ASSERT_TRUE(three.client->PushPull(ones, {}, &on_servers).ok());
  EXPECT_EQ(restored["w"].values, on_servers["w"].values);

  // A model the checkpoints do not hold is refused, not started afresh.
  VariableSpec wider = Spec(1);
  wider.set_shape(1, 4);
  AllReduceStrategy other(&solo, {wider}, options);
  const absl::Status refused = other.Start(&restored);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("hold another model"));
}

TEST_F(CheckpointerTest, AChangedModelIsRefused) {
  {
    Cluster one(1, dir_, &fs_);
    ASSERT_TRUE(one.client->CreateVariables({Spec(1)}).ok());
    ASSERT_TRUE(Checkpointer(Files(*one.client), &fs_, {dir_, 0, 0, 2}).Save(1).ok());
  }
  Cluster one(1, dir_, &fs_);
  VariableSpec wider = Spec(1);
  wider.set_shape(1, 4);
  absl::Status status = one.client->CreateVariables({wider});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("the checkpoint holds"));
}

TEST_F(CheckpointerTest, FullDiskLeavesThePreviousCheckpointAndTrainingGoesOn) {
  Cluster two(2, dir_, &fs_);
  ASSERT_TRUE(two.client->CreateVariables({Spec(2)}).ok());
  Checkpointer checkpointer(Files(*two.client), &fs_, {dir_, 0, 0, 3});
  ASSERT_TRUE(checkpointer.Save(1).ok());
  FaultyFileSystem::Faults full;
  full.disk_full_after_bytes = 100;
  fs_.SetFaults(full);
  absl::Status status = checkpointer.Save(2);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  fs_.SetFaults({});
  // Training goes on, and the newest complete checkpoint is still 1.
  EXPECT_TRUE(two.client->Push({{"w", DenseTensor{{12, 3}, std::vector<float>(36, 1.0f)}}}).ok());
  EXPECT_EQ(NewestStep(), 1);
  ASSERT_TRUE(checkpointer.Save(3).ok());  // the disk has room again
  EXPECT_EQ(NewestStep(), 3);
}

// A machine that crashes while a checkpoint is written (its syncs failing
// first) comes back to the previous complete one.
TEST_F(CheckpointerTest, ACrashMidCheckpointComesBackToThePreviousOne) {
  {
    Cluster two(2, dir_, &fs_);
    ASSERT_TRUE(two.client->CreateVariables({Spec(2)}).ok());
    Checkpointer checkpointer(Files(*two.client), &fs_, {dir_, 0, 0, 3});
    ASSERT_TRUE(checkpointer.Save(1).ok());
    ASSERT_TRUE(two.client->Push({{"w", DenseTensor{{12, 3}, std::vector<float>(36, 1.0f)}}}).ok());
    FaultyFileSystem::Faults failing;
    failing.fail_syncs = true;
    fs_.SetFaults(failing);
    EXPECT_FALSE(checkpointer.Save(2).ok());
    fs_.DropUnsyncedData();
  }
  Cluster restarted(2, dir_, &fs_);
  EXPECT_EQ(restarted.servers[0]->Describe().restored_step(), 1);
  ASSERT_TRUE(restarted.client->CreateVariables({Spec(2)}).ok());
  TensorMap values;
  ASSERT_TRUE(restarted.client->Pull({}, &values).ok());
  EXPECT_EQ(restarted.client->step(), 0);  // the push after checkpoint 1 is lost
}

// Files that verify but do not make whole variables (here two servers both
// wrote rows 0-5 of w) are skipped for the checkpoint before, instead of
// stopping the servers.
TEST_F(CheckpointerTest, ACheckpointThatDoesNotRegroupFallsBack) {
  {
    Cluster two(2, dir_, &fs_);
    ASSERT_TRUE(two.client->CreateVariables({Spec(2)}).ok());
    ASSERT_TRUE(Checkpointer(Files(*two.client), &fs_, {dir_, 0, 0, 3}).Save(1).ok());
    ASSERT_TRUE(Checkpointer(Files(*two.client), &fs_, {dir_, 0, 0, 3}).Save(2).ok());
  }
  const std::string dir2 = absl::StrCat(dir_, "/", CheckpointDirName(2));
  const std::string first = absl::StrCat(dir2, "/", PsFileName(0, 2));
  ASSERT_TRUE(fs_.Rename(first, absl::StrCat(dir2, "/", PsFileName(1, 2))).ok());
  ASSERT_TRUE(
      WriteFile(fs_, first, *ReadFile(fs_, absl::StrCat(dir2, "/", PsFileName(1, 2)))).ok());
  // The manifest lists both files with their new contents.
  std::vector<ManifestFile> files;
  for (int ps = 0; ps < 2; ++ps) {
    auto opened = CheckpointFile::Open(fs_, absl::StrCat(dir2, "/", PsFileName(ps, 2)));
    ASSERT_TRUE(opened.ok());
    const std::string data = *ReadFile(fs_, (*opened)->path());
    ManifestFile& file = files.emplace_back();
    file.set_name(PsFileName(ps, 2));
    file.set_bytes(static_cast<int64_t>(data.size()));
    file.set_crc32(Crc32(data));
  }
  ASSERT_TRUE(WriteManifest(fs_, dir_, 2, 2, files).ok());
  Cluster restarted(2, dir_, &fs_);
  EXPECT_EQ(restarted.servers[0]->Describe().restored_step(), 1);
  EXPECT_TRUE(restarted.client->CreateVariables({Spec(2)}).ok());
}

EmbeddingTableSpec TableSpec() {
  EmbeddingTableSpec spec;
  spec.set_name("t");
  spec.set_width(2);
  spec.mutable_initializer()->set_kind(InitializerSpec::ZEROS);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

// A job with no complete checkpoint (a Python chief that never saved one)
// stopped by signal: every server wrote its final file, and on restart
// they restore from those, a variable split over both servers and a
// table's rows included.
TEST_F(CheckpointerTest, EveryServersFinalFileRestoresWithoutAManifest) {
  TensorMap saved;
  std::vector<std::vector<float>> saved_rows;
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6};
  {
    Cluster two(2, dir_, &fs_);
    ASSERT_TRUE(two.client->CreateVariables({Spec(2)}).ok());
    ASSERT_TRUE(two.client->CreateTables({TableSpec()}).ok());
    for (int step = 0; step < 2; ++step) {
      ASSERT_TRUE(
          two.client->Push({{"w", DenseTensor{{12, 3}, std::vector<float>(36, 1.0f)}}}).ok());
    }
    ASSERT_TRUE(two.client->PushRows({{"t", ids}}, {std::vector<float>(12, 0.5f)}).ok());
    ASSERT_TRUE(two.client->Pull({}, &saved).ok());
    ASSERT_TRUE(two.client->PullRows({{"t", ids}}, &saved_rows).ok());
    for (auto& server : two.servers) ASSERT_TRUE(server->SaveFinalCheckpoint().ok());
  }
  Cluster restarted(2, dir_, &fs_);
  ASSERT_TRUE(restarted.client->CreateVariables({Spec(2)}).ok());
  ASSERT_TRUE(restarted.client->CreateTables({TableSpec()}).ok());
  TensorMap restored;
  std::vector<std::vector<float>> restored_rows;
  ASSERT_TRUE(restarted.client->Pull({}, &restored).ok());
  ASSERT_TRUE(restarted.client->PullRows({{"t", ids}}, &restored_rows).ok());
  EXPECT_EQ(restored["w"].values, saved["w"].values);
  EXPECT_EQ(restarted.client->step(), 2);
  EXPECT_EQ(restored_rows, saved_rows);
  EXPECT_EQ(restored_rows[0][0], -0.5f);
}

// Only server 1 wrote its final file (server 0 was killed): server 1's
// shard comes back, server 0's starts from its initializer.
TEST_F(CheckpointerTest, OneServersFinalFileRestoresItsOwnShards) {
  TensorMap saved, initial;
  {
    Cluster two(2, dir_, &fs_);
    ASSERT_TRUE(two.client->CreateVariables({Spec(2)}).ok());
    ASSERT_TRUE(two.client->Pull({}, &initial).ok());
    ASSERT_TRUE(two.client->Push({{"w", DenseTensor{{12, 3}, std::vector<float>(36, 1.0f)}}}).ok());
    ASSERT_TRUE(two.client->Pull({}, &saved).ok());
    ASSERT_TRUE(two.servers[1]->SaveFinalCheckpoint().ok());
  }
  Cluster restarted(2, dir_, &fs_);
  ASSERT_TRUE(restarted.client->CreateVariables({Spec(2)}).ok());
  TensorMap restored;
  ASSERT_TRUE(restarted.client->Pull({}, &restored).ok());
  const std::vector<float>& got = restored["w"].values;
  EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 18),
            std::vector<float>(initial["w"].values.begin(), initial["w"].values.begin() + 18));
  EXPECT_EQ(std::vector<float>(got.begin() + 18, got.end()),
            std::vector<float>(saved["w"].values.begin() + 18, saved["w"].values.end()));
}

// The public JobCheckpoints: a chief's state saved with a checkpoint comes
// back once the servers restored it; a fresh job has none.
TEST_F(CheckpointerTest, JobCheckpointsKeepTheChiefsStateWithTheCheckpoint) {
  {
    Cluster two(2, dir_, &fs_);
    ASSERT_TRUE(two.client->CreateVariables({Spec(2)}).ok());
    auto checkpoints = JobCheckpoints::Create(two.client.get(), {dir_, 0, 0, 2});
    ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
    EXPECT_EQ((*checkpoints)->RestoredState().status().code(), absl::StatusCode::kNotFound);
    ASSERT_TRUE((*checkpoints)->Save(4, {{"epoch", "3"}, {"rng", std::string("\0\1", 2)}}).ok());
  }
  Cluster again(2, dir_, &fs_);
  auto checkpoints = JobCheckpoints::Create(again.client.get(), {dir_, 0, 0, 2});
  ASSERT_TRUE(checkpoints.ok());
  auto state = (*checkpoints)->RestoredState();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, (CheckpointState{{"epoch", "3"}, {"rng", std::string("\0\1", 2)}}));
  EXPECT_EQ(JobCheckpoints::Create(again.client.get(), {"", 0, 0, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(JobCheckpoints::Create(again.client.get(), {dir_, -1, 0, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fulcrum
