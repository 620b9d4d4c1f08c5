// A server holding more than 2 GiB checkpoints and restores all of it.
// Checkpoints were once one protobuf message per server, which protobuf
// cannot serialize past 2 GiB: such a server wrote a 24-byte file with a
// valid checksum, and lost the whole model at the next restore.
#include <gtest/gtest.h>
#include <sys/statvfs.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/directory.h"
#include "common/tensor.h"
#include "ps_server/parameter_server.h"

namespace fulcrum {
namespace {

// 192 x 2^20 floats in 4 shards, with Adam's two slots: 2.25 GiB.
constexpr int64_t kRows = 192;
constexpr int64_t kCols = int64_t{1} << 20;
constexpr int kShards = 4;

PsServerConfig Config(const std::string& dir) {
  PsServerConfig config;
  config.set_mode(ASYNC);
  config.set_num_replicas(1);
  config.set_max_staleness(-1);
  config.set_lease_timeout_ms(600000);
  config.set_max_message_bytes(1 << 30);
  config.set_checkpoint_dir(dir);
  config.mutable_cluster()->mutable_cluster()->add_ps("h:0");
  return config;
}

CreateShardsRequest Shards() {
  CreateShardsRequest request;
  for (int i = 0; i < kShards; ++i) {
    ShardSpec* spec = request.add_shards();
    VariableSpec* v = spec->mutable_variable();
    v->set_name("big");
    v->add_shape(kRows);
    v->add_shape(kCols);
    v->set_dtype(DT_FLOAT);
    v->mutable_initializer()->set_kind(InitializerSpec::RANDOM_UNIFORM);
    v->mutable_initializer()->set_minval(-1);
    v->mutable_initializer()->set_maxval(1);
    v->mutable_initializer()->set_seed(11);
    v->mutable_partitioner()->set_kind(PartitionerSpec::FIXED_SHARDS);
    v->mutable_partitioner()->set_num_shards(kShards);
    v->mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
    v->mutable_optimizer()->set_learning_rate(0.01f);
    spec->set_shard(i);
    spec->set_num_shards(kShards);
    spec->set_row_offset(i * kRows / kShards);
    spec->set_rows(kRows / kShards);
  }
  return request;
}

// A gradient for shard 1 alone: its Adam slots move off zero.
PushRequest PushToShard1(int64_t version) {
  PushRequest push;
  push.set_worker_id(0);
  ShardSlice* slice = push.add_gradients();
  slice->set_variable("big");
  slice->set_shard(1);
  slice->set_version(version);
  std::vector<float> grad(kRows / kShards * kCols);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(i % 7) - 3;
  EncodeFloatTensor({kRows / kShards, kCols}, grad, slice->mutable_tensor());
  return push;
}

// Each shard's version and the CRC-32 of its values, as a pull reads them.
std::vector<std::pair<int64_t, uint32_t>> Fingerprint(ParameterServer& ps) {
  std::vector<std::pair<int64_t, uint32_t>> out;
  for (int i = 0; i < kShards; ++i) {
    PullRequest pull;
    ShardRef* ref = pull.add_shards();
    ref->set_variable("big");
    ref->set_shard(i);
    auto pulled = ps.Pull(pull, absl::Now() + absl::Minutes(5), {64 << 20});
    EXPECT_TRUE(pulled.ok()) << pulled.status();
    if (!pulled.ok()) return out;
    uint32_t crc = 0;
    for (const ShardSlice& slice : pulled->slices()) crc = Crc32(slice.tensor().data(), crc);
    out.emplace_back(pulled->slices(0).version(), crc);
  }
  return out;
}

TEST(LargeCheckpointTest, AServerHoldingMoreThan2GiBRestoresWhole) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/checkpoints");
  struct statvfs disk;
  if (statvfs(std::getenv("TEST_TMPDIR"), &disk) == 0 &&
      static_cast<double>(disk.f_bavail) * disk.f_frsize < 6e9) {
    GTEST_SKIP() << "skipped: the test directory's disk has less than 6 GB free";
  }
  auto fs = MakeLocalFileSystem();
  std::vector<std::pair<int64_t, uint32_t>> before, after_push;
  ManifestFile file;
  {
    ParameterServer ps(Config(dir));
    ASSERT_TRUE(ps.EnableCheckpoints(fs.get()).ok());
    ASSERT_TRUE(ps.CreateShards(Shards()).ok());
    ASSERT_GT(ps.Describe().memory_bytes(), int64_t{1} << 31);
    ASSERT_TRUE(ps.Push(PushToShard1(0)).ok());
    SaveCheckpointRequest request;
    request.set_step(5);
    auto saved = ps.SaveCheckpoint(request);
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ(saved->shards(), kShards);
    EXPECT_GT(saved->bytes(), int64_t{1} << 31);
    file.set_name(saved->file());
    file.set_bytes(saved->bytes());
    file.set_crc32(saved->crc32());
    ASSERT_TRUE(WriteManifest(*fs, dir, 5, 1, {file}).ok());
    before = Fingerprint(ps);
    ASSERT_TRUE(ps.Push(PushToShard1(1)).ok());
    after_push = Fingerprint(ps);
  }  // the first server's memory goes before the second's comes

  ParameterServer restored(Config(dir));
  ASSERT_TRUE(restored.EnableCheckpoints(fs.get()).ok());
  EXPECT_EQ(restored.Describe().restored_step(), 5);
  auto created = restored.CreateShards(Shards());
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->restored(), kShards);
  EXPECT_EQ(Fingerprint(restored), before);
  // The slots came back too: the same next update gives the same values.
  ASSERT_TRUE(restored.Push(PushToShard1(1)).ok());
  EXPECT_EQ(Fingerprint(restored), after_push);
}

}  // namespace
}  // namespace fulcrum
