// Checkpoints through the chief's Checkpointer and in-process servers:
// restoring on a different number of servers, and a full disk mid-save.
#include "worker/checkpointer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/checkpoint.h"
#include "common/faulty_file_system.h"
#include "worker/in_process_ps_transport.h"

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
    client = std::make_unique<PsClient>(std::move(transports), PsClientOptions{});
  }
  std::vector<std::unique_ptr<ParameterServer>> servers;
  std::unique_ptr<PsClient> client;
};

class CheckpointerTest : public ::testing::Test {
 protected:
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
    Checkpointer checkpointer(two.client.get(), &fs_, {dir_, 0, 0, 2});
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

TEST_F(CheckpointerTest, AChangedModelIsRefused) {
  {
    Cluster one(1, dir_, &fs_);
    ASSERT_TRUE(one.client->CreateVariables({Spec(1)}).ok());
    ASSERT_TRUE(Checkpointer(one.client.get(), &fs_, {dir_, 0, 0, 2}).Save(1).ok());
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
  Checkpointer checkpointer(two.client.get(), &fs_, {dir_, 0, 0, 3});
  ASSERT_TRUE(checkpointer.Save(1).ok());
  fs_.fault = FaultyFileSystem::Fault::kDiskFull;
  absl::Status status = checkpointer.Save(2);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  fs_.fault = FaultyFileSystem::Fault::kNone;
  // Training goes on, and the newest complete checkpoint is still 1.
  EXPECT_TRUE(two.client->Push({{"w", DenseTensor{{12, 3}, std::vector<float>(36, 1.0f)}}}).ok());
  std::vector<std::string> problems;
  auto loaded = LoadNewestCheckpoint(fs_, dir_, &problems);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ((*loaded)[0].step(), 1);
  ASSERT_TRUE(checkpointer.Save(3).ok());  // the disk has room again
  EXPECT_EQ((*LoadNewestCheckpoint(fs_, dir_, &problems))[0].step(), 3);
}

}  // namespace
}  // namespace fulcrum
