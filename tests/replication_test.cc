// Replicated shards between real ps_server processes on 127.0.0.1, over
// mutual TLS as a cluster runs them.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/etcd/local_etcd.h"
#include "common/rpc/credentials.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/ps_client.h"
#include "proto/ps_service.grpc.pb.h"
#include "tests/child_process.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// `n` servers of a job of `workers`, each started with `flags` and its own
// port.
std::vector<std::unique_ptr<ChildProcess>> StartServers(
    int n, const std::vector<std::vector<std::string>>& flags, std::vector<std::string>* addresses,
    int workers = 1) {
  std::string ps_hosts;
  for (int i = 0; i < n; ++i) absl::StrAppend(&ps_hosts, i ? "," : "", "127.0.0.1:0");
  std::string worker_hosts;
  for (int i = 0; i < workers; ++i)
    absl::StrAppend(&worker_hosts, i ? "," : "", "127.0.0.1:", i + 1);
  std::vector<std::unique_ptr<ChildProcess>> servers;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> argv = {RunfilePath("ps_server/ps_server"),
                                     "--ps_hosts=" + ps_hosts,
                                     "--worker_hosts=" + worker_hosts,
                                     absl::StrCat("--task_index=", i),
                                     "--bind_host=127.0.0.1",
                                     "--port=0",
                                     "--mode=async"};
    argv.insert(argv.end(), flags[i].begin(), flags[i].end());
    servers.push_back(std::make_unique<ChildProcess>(absl::StrCat("ps", i), argv));
    const std::optional<int> port = WaitForPort(*servers.back(), "listening on", absl::Seconds(30));
    addresses->push_back(port ? absl::StrCat("127.0.0.1:", *port) : "");
  }
  return servers;
}

class ReplicationClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    certs_ = ::testing::TempDir() + "/certs";
    ASSERT_EQ(std::system(("scripts/make_certs.sh " + certs_ + " > /dev/null").c_str()), 0);
  }
  TlsFiles Tls(const std::string& role) const {
    return {certs_ + "/" + role + ".pem", certs_ + "/" + role + ".key", certs_ + "/ca.pem"};
  }
  std::vector<std::string> ServerFlags(int replication) const {
    const TlsFiles tls = Tls("ps");
    return {absl::StrCat("--replication=", replication), "--tls_cert=" + tls.cert,
            "--tls_key=" + tls.key, "--tls_ca=" + tls.ca};
  }
  PsClientOptions Client(const std::string& role) const {
    PsClientOptions options;
    const TlsFiles tls = Tls(role);
    options.tls_cert = tls.cert;
    options.tls_key = tls.key;
    options.tls_ca = tls.ca;
    return options;
  }
  // A stub to one server, presenting `role`'s certificate.
  std::unique_ptr<PsService::Stub> Stub(const std::string& address, const std::string& role) {
    return PsService::NewStub(grpc::CreateChannel(address, MakeChannelCredentials(Tls(role))));
  }
  void KillOneForGood(ConsistencyMode mode);

  std::string certs_;
};

// w [64, 8] in `shards` shards, zeros, SGD at rate 1: each push of ones
// takes 1 from every element.
VariableSpec Ones(int shards = 4) {
  VariableSpec spec;
  spec.set_name("w");
  spec.add_shape(64);
  spec.add_shape(8);
  spec.set_dtype(DT_FLOAT);
  spec.mutable_partitioner()->set_kind(PartitionerSpec::FIXED_SHARDS);
  spec.mutable_partitioner()->set_num_shards(shards);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

TEST_F(ReplicationClusterTest, EveryShardHasTwoBitIdenticalCopiesAndOnlyServersReplicate) {
  std::vector<std::string> addresses;
  auto servers = StartServers(2, {ServerFlags(2), ServerFlags(2)}, &addresses);
  for (const std::string& address : addresses) ASSERT_FALSE(address.empty());
  std::unique_ptr<PsClient> worker = NewGrpcPsClient(addresses, Client("chief"));
  ASSERT_TRUE(worker->CreateVariables({Ones()}).ok());
  constexpr int kPushes = 25;
  constexpr size_t kElements = size_t{64} * 8;
  TensorMap gradient;
  gradient["w"] = DenseTensor{{64, 8}, std::vector<float>(kElements, 1.0f)};
  for (int i = 0; i < kPushes; ++i) {
    absl::StatusOr<PushStats> pushed = worker->Push(gradient);
    ASSERT_TRUE(pushed.ok()) << pushed.status();
  }
  // Every shard on both servers: read each copy as a reader does.
  PullRequest pull;
  for (int shard = 0; shard < 4; ++shard) {
    ShardRef* ref = pull.add_shards();
    ref->set_variable("w");
    ref->set_shard(shard);
  }
  std::vector<std::string> copies;
  for (const std::string& address : addresses) {
    grpc::ClientContext context;
    PullResponse response;
    const grpc::Status read = Stub(address, "worker")->PullSmall(&context, pull, &response);
    ASSERT_TRUE(read.ok()) << address << ": " << read.error_message();
    std::string bytes;
    for (const ShardSlice& slice : response.slices()) {
      EXPECT_EQ(slice.version(), kPushes) << address;
      bytes += slice.tensor().data();
    }
    copies.push_back(bytes);
  }
  ASSERT_EQ(copies[0].size(), kElements * sizeof(float));
  EXPECT_EQ(copies[0], copies[1]);
  std::vector<float> values(kElements);
  std::memcpy(values.data(), copies[0].data(), copies[0].size());
  for (float v : values) ASSERT_EQ(v, -kPushes);  // each push applied once

  // fulcrumctl says which copy each server holds, and counts each shard once.
  const TlsFiles operator_tls = Tls("fulcrumctl");
  const std::vector<std::string> tls = {
      "--tls_cert=" + operator_tls.cert, "--tls_key=" + operator_tls.key,
      "--tls_ca=" + operator_tls.ca, "--ps_hosts=" + addresses[0] + "," + addresses[1]};
  std::vector<std::string> status = {RunfilePath("deploy/fulcrumctl"), "status"};
  status.insert(status.end(), tls.begin(), tls.end());
  ChildProcess ctl("fulcrumctl", status);
  ASSERT_EQ(ctl.Wait(absl::Seconds(60)), 0);
  EXPECT_TRUE(ctl.HasLine("  backup of 127.0.0.1:"));
  EXPECT_TRUE(ctl.HasLine("  primary, backed up on 127.0.0.1:"));
  std::vector<std::string> variables = {RunfilePath("deploy/fulcrumctl"), "variables"};
  variables.insert(variables.end(), tls.begin(), tls.end());
  ChildProcess listed("fulcrumctl", variables);
  ASSERT_EQ(listed.Wait(absl::Seconds(60)), 0);
  EXPECT_TRUE(listed.HasLine("[64, 8]"));

  // Only a server's certificate may send a backup updates.
  ReplicateRequest forged;
  ShardUpdate* update = forged.add_updates();
  update->set_variable("w");
  update->set_version(kPushes + 1);
  update->set_averaged(1);
  update->set_gradient(std::string(kElements / 4 * sizeof(float), '\0'));
  grpc::ClientContext context;
  auto stub = Stub(addresses[1], "worker");
  auto stream = stub->Replicate(&context);
  stream->Write(forged);
  stream->WritesDone();
  ReplicateResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status refused = stream->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(refused.error_message(), HasSubstr("only a certificate naming ps"));
}

// The exactness check: workers push ones to w over 3 servers with
// two copies of each shard, coordinated through etcd, `kSteps` pushes each,
// worker w to the rows r with r % 4 == w (so each row counts one worker's
// pushes); one server is killed (-9) once each has made 20, and never
// restarted. Its shards' backups take over, the workers follow the new
// table, and every element ends at exactly what the pushes make: async and
// ssp, minus its worker's pushes (nothing lost, nothing applied twice);
// sync, minus a quarter of every step (each step's mean applied once, the
// gradients a lost primary had accumulated pushed again to the new one).
// In ssp, no pull, before or after the failover, misses a push its bound
// requires: a worker at clock c sees at least c - k pushes of each.
void ReplicationClusterTest::KillOneForGood(ConsistencyMode mode) {
  std::string dir = ::testing::TempDir() + "/etcd-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  absl::StatusOr<std::unique_ptr<LocalEtcd>> etcd = LocalEtcd::Start(dir);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  constexpr int kServers = 3;
  constexpr int kWorkers = 4;
  constexpr int kSteps = 60;
  constexpr int kBound = 1;
  std::vector<std::string> flags = ServerFlags(2);
  flags.insert(flags.end(),
               {absl::StrCat("--mode=", absl::AsciiStrToLower(ConsistencyMode_Name(mode))),
                absl::StrCat("--staleness=", kBound), "--etcd=" + (*etcd)->endpoint(),
                "--etcd_prefix=/exactness/", "--etcd_lease_secs=1",
                // Long worker leases: a sync step whose gradients a lost
                // primary held completes only because they are pushed again,
                // not because their workers are presumed dead.
                "--lease_timeout_ms=300000"});
  std::vector<std::string> addresses;
  auto servers = StartServers(kServers, std::vector<std::vector<std::string>>(kServers, flags),
                              &addresses, kWorkers);
  for (const std::string& address : addresses) ASSERT_FALSE(address.empty());
  for (auto& server : servers) {
    ASSERT_TRUE(server->WaitForLine("coordinated through etcd", absl::Seconds(30)));
  }

  constexpr size_t kElements = size_t{64} * 8;
  std::vector<std::unique_ptr<PsClient>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    PsClientOptions options = Client(w == 0 ? "chief" : "worker");
    options.worker_id = w;
    options.mode = mode;
    workers.push_back(NewGrpcPsClient(addresses, options));
    // Every shard on a primary and a backup of the three.
    ASSERT_TRUE(workers.back()->CreateVariables({Ones(6)}).ok());
  }
  std::vector<int64_t> acknowledged(kWorkers, 0);
  std::vector<absl::Status> failed(kWorkers);
  std::vector<std::string> too_stale;  // ssp: pulls that missed a push their bound requires
  absl::Mutex mu;
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      TensorMap gradient;
      gradient["w"] = DenseTensor{{64, 8}, std::vector<float>(kElements, 0.0f)};
      for (size_t i = 0; i < kElements; ++i) {
        if (i / 8 % kWorkers == static_cast<size_t>(w)) gradient["w"].values[i] = 1.0f;
      }
      TensorMap values;
      // A sync step waits for every worker once all have come.
      if (absl::Status s = workers[w]->AwaitJobStart(nullptr); !s.ok()) {
        absl::MutexLock lock(&mu);
        failed[w] = s;
        return;
      }
      for (int step = 0; step < kSteps; ++step) {
        absl::Status pulled = workers[w]->Pull({"w"}, &values);
        if (pulled.ok() && mode == SSP) {
          // At clock `step`, every worker's first step - k pushes are in.
          const float at_most = -static_cast<float>(std::max(step - kBound, 0));
          for (size_t i = 0; i < kElements; i += 8) {
            if (values["w"].values[i] <= at_most) continue;
            absl::MutexLock lock(&mu);
            too_stale.push_back(absl::StrCat("worker ", w, " at clock ", step, " read ",
                                             values["w"].values[i], " in row ", i / 8, ", at most ",
                                             at_most));
          }
        }
        absl::StatusOr<PushStats> pushed =
            pulled.ok() ? workers[w]->Push(gradient) : absl::StatusOr<PushStats>(pulled);
        absl::MutexLock lock(&mu);
        if (!pushed.ok()) {
          failed[w] = pushed.status();
          return;
        }
        ++acknowledged[w];
      }
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto twenty_each = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      for (int w = 0; w < kWorkers; ++w) {
        if (acknowledged[w] < 20 && failed[w].ok()) return false;
      }
      return true;
    };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&twenty_each), absl::Seconds(120)));
  }
  servers[1]->Signal(SIGKILL);
  // The survivors see its lease go, and take it out of the table.
  EXPECT_TRUE(servers[0]->WaitForLine("lost its lease in etcd", absl::Seconds(30)));
  for (std::thread& t : threads) t.join();
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_TRUE(failed[w].ok()) << "worker " << w << ": " << failed[w];
    EXPECT_EQ(acknowledged[w], kSteps) << "worker " << w;
  }
  EXPECT_THAT(too_stale, ::testing::IsEmpty());
  const float expected = mode == SYNC ? -kSteps / static_cast<float>(kWorkers) : -kSteps;
  TensorMap values;
  ASSERT_TRUE(workers[0]->Pull({"w"}, &values).ok());
  ASSERT_EQ(values["w"].values.size(), kElements);
  for (size_t i = 0; i < kElements; ++i) {
    ASSERT_EQ(values["w"].values[i], expected) << "element " << i;
  }
  // The copies the lost server held are made again on the two others,
  // from their primaries, in the background: every shard ends with a
  // ready backup, and its two copies read the same.
  PullRequest every_shard;
  for (int shard = 0; shard < 6; ++shard) {
    ShardRef* ref = every_shard.add_shards();
    ref->set_variable("w");
    ref->set_shard(shard);
  }
  auto copies_of = [&](const std::string& address, std::string* bytes) {
    grpc::ClientContext describe_context;
    DescribeResponse described;
    if (!Stub(address, "worker")->Describe(&describe_context, DescribeRequest(), &described).ok())
      return false;
    for (const ShardInfo& info : described.shards()) {
      if (info.primary().empty() && info.backups().empty()) return false;  // no ready backup
    }
    grpc::ClientContext context;
    PullResponse read;
    if (described.shards_size() != 6 ||
        !Stub(address, "worker")->PullSmall(&context, every_shard, &read).ok()) {
      return false;
    }
    bytes->clear();
    for (const ShardSlice& slice : read.slices()) *bytes += slice.tensor().data();
    return true;
  };
  std::string on_first;
  std::string on_last;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!(copies_of(addresses[0], &on_first) && copies_of(addresses[2], &on_last)) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));  // polls the servers' state
  }
  ASSERT_EQ(on_first.size(), kElements * sizeof(float)) << "shards not made again on both";
  EXPECT_EQ(on_first, on_last);
  // A worker started after the failover (a restarted one) finds the table
  // and leaves the lost server out.
  PsClientOptions options = Client("worker");
  options.worker_id = 1;
  options.mode = mode;
  std::unique_ptr<PsClient> late = NewGrpcPsClient(addresses, options);
  const absl::Status created = late->CreateVariables({Ones(6)});
  ASSERT_TRUE(created.ok()) << created;
  TensorMap again;
  const absl::Status pulled = late->Pull({"w"}, &again);
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(again["w"].values, values["w"].values);
}

TEST_F(ReplicationClusterTest, AServerKilledForGoodLosesNoAcknowledgedAsyncPush) {
  KillOneForGood(ASYNC);
}

TEST_F(ReplicationClusterTest, AServerKilledForGoodLosesNoSyncStep) { KillOneForGood(SYNC); }

TEST_F(ReplicationClusterTest, AServerKilledForGoodKeepsSspClocksAndItsBound) {
  KillOneForGood(SSP);
}

TEST_F(ReplicationClusterTest, ServersThatDisagreeOnReplicationAreNamed) {
  std::vector<std::string> addresses;
  auto servers = StartServers(2, {ServerFlags(2), ServerFlags(1)}, &addresses);
  for (const std::string& address : addresses) ASSERT_FALSE(address.empty());
  const absl::Status created =
      NewGrpcPsClient(addresses, Client("chief"))->CreateVariables({Ones()});
  EXPECT_EQ(created.code(), absl::StatusCode::kFailedPrecondition) << created;
  EXPECT_THAT(created.message(), HasSubstr("the servers disagree on --replication"));
}

}  // namespace
}  // namespace fulcrum
