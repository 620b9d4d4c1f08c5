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
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/etcd/local_etcd.h"
#include "common/rpc/credentials.h"
#include "common/tensor.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/ps_client.h"
#include "proto/ps_service.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/pushers.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// Server `i` of `n` of a job of `workers`, started with `flags` on `port`
// (0: one of its own), once it listens; its address, "" if it does not.
std::unique_ptr<ChildProcess> StartServer(int i, int n, int workers,
                                          const std::vector<std::string>& flags, int port,
                                          std::string* address) {
  std::string ps_hosts;
  for (int j = 0; j < n; ++j) absl::StrAppend(&ps_hosts, j ? "," : "", "127.0.0.1:0");
  std::string worker_hosts;
  for (int j = 0; j < workers; ++j)
    absl::StrAppend(&worker_hosts, j ? "," : "", "127.0.0.1:", j + 1);
  std::vector<std::string> argv = {RunfilePath("ps_server/ps_server"),
                                   "--ps_hosts=" + ps_hosts,
                                   "--worker_hosts=" + worker_hosts,
                                   absl::StrCat("--task_index=", i),
                                   "--bind_host=127.0.0.1",
                                   absl::StrCat("--port=", port),
                                   "--mode=async"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto server = std::make_unique<ChildProcess>(absl::StrCat("ps", i), argv);
  const std::optional<int> listening = WaitForPort(*server, "listening on", absl::Seconds(30));
  *address = listening ? absl::StrCat("127.0.0.1:", *listening) : "";
  return server;
}

// `n` servers of a job of `workers`, each started with `flags` and its own
// port.
std::vector<std::unique_ptr<ChildProcess>> StartServers(
    int n, const std::vector<std::vector<std::string>>& flags, std::vector<std::string>* addresses,
    int workers = 1) {
  std::vector<std::unique_ptr<ChildProcess>> servers;
  for (int i = 0; i < n; ++i) {
    servers.push_back(StartServer(i, n, workers, flags[i], 0, &addresses->emplace_back()));
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
  // Three servers of a job of `workers` in `mode` with two copies of each
  // shard, coordinated through an etcd of the test's own under `prefix`
  // with 1 s leases, checkpointing to checkpoints_ when it is set and
  // serving metrics with metrics_;
  // `flags` are theirs.
  std::vector<std::unique_ptr<ChildProcess>> StartCoordinated(ConsistencyMode mode, int workers,
                                                              const std::string& prefix,
                                                              std::vector<std::string>* flags,
                                                              std::vector<std::string>* addresses,
                                                              int replication = 2);
  void KillOneForGood(ConsistencyMode mode);
  // Mid-run, a fourth server is added (fulcrumctl add-server) and one of
  // the first three removed (remove-server).
  void AddOneRemoveAnother(ConsistencyMode mode, int replication = 2);
  // A fourth server of a job of `workers`, started with `flags` and added
  // to the running job (fulcrumctl add-server, which says it holds its
  // share); its address, or "" (a failure added) when it is not.
  std::string AddFourth(const std::vector<std::string>& flags, int workers,
                        std::unique_ptr<ChildProcess>* server) {
    std::string added;
    *server = StartServer(3, 4, workers, flags, 0, &added);
    if (added.empty() || !(*server)->WaitForLine("coordinated through etcd", absl::Seconds(30))) {
      ADD_FAILURE() << "the fourth server did not start";
      return "";
    }
    auto add = Ctl({"add-server", added});
    if (add->Wait(absl::Seconds(120)) != 0 || !add->HasLine(added + " holds its share")) {
      ADD_FAILURE() << "add-server " << added << " failed";
      return "";
    }
    return added;
  }
  // The Pushers' clients over `addresses` in `mode`, having created w.
  std::vector<std::unique_ptr<PsClient>> Workers(const std::vector<std::string>& addresses,
                                                 ConsistencyMode mode);
  // fulcrumctl with `args`, as the operator runs it (its certificate).
  std::unique_ptr<ChildProcess> Ctl(const std::vector<std::string>& args) const {
    const TlsFiles tls = Tls("fulcrumctl");
    std::vector<std::string> argv = {RunfilePath("deploy/fulcrumctl")};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(),
                {"--tls_cert=" + tls.cert, "--tls_key=" + tls.key, "--tls_ca=" + tls.ca});
    return std::make_unique<ChildProcess>("fulcrumctl", argv);
  }
  // What the server at `address` says of itself (empty when it does not
  // answer).
  DescribeResponse DescribeAt(const std::string& address) {
    grpc::ClientContext context;
    DescribeResponse described;
    if (!Stub(address, "worker")->Describe(&context, DescribeRequest(), &described).ok()) return {};
    return described;
  }
  // w's `shards` at `address`, read as a reader reads them ("" when it
  // does not answer).
  std::string ReadAt(const std::string& address, const std::vector<int>& shards) {
    PullRequest pull;
    for (int shard : shards) {
      ShardRef* ref = pull.add_shards();
      ref->set_variable("w");
      ref->set_shard(shard);
    }
    grpc::ClientContext context;
    PullResponse read;
    if (!Stub(address, "worker")->PullSmall(&context, pull, &read).ok()) return "";
    std::string bytes;
    for (const ShardSlice& slice : read.slices()) bytes += slice.tensor().data();
    return bytes;
  }

  std::string certs_;
  std::string checkpoints_;  // the servers' --checkpoint_dir; "": none
  bool metrics_ = false;     // the servers serve metrics (--metrics_port=0)
  std::unique_ptr<LocalEtcd> etcd_;
};

// Whether `condition` holds within `timeout`, asked every 50 ms.
bool Eventually(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));  // polls the servers' state
  }
  return true;
}

// Whether every shard a server described has a ready copy on another: it
// is a backup, or a primary with backups and none catching up.
bool EveryShardBackedUp(const DescribeResponse& described) {
  for (const ShardInfo& info : described.shards()) {
    if (info.primary().empty() && (info.backups().empty() || !info.catching_up().empty()))
      return false;
  }
  return true;
}

TEST_F(ReplicationClusterTest, EveryShardHasTwoBitIdenticalCopiesAndOnlyServersReplicate) {
  std::vector<std::string> addresses;
  auto servers = StartServers(2, {ServerFlags(2), ServerFlags(2)}, &addresses);
  for (const std::string& address : addresses) ASSERT_FALSE(address.empty());
  std::unique_ptr<PsClient> worker = NewGrpcPsClient(addresses, Client("chief"));
  ASSERT_TRUE(worker->CreateVariables({Ones()}).ok());
  constexpr int kPushes = 25;
  TensorMap gradient;
  gradient["w"] = DenseTensor{{64, 8}, std::vector<float>(Pushers::kElements, 1.0f)};
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
  ASSERT_EQ(copies[0].size(), Pushers::kElements * sizeof(float));
  EXPECT_EQ(copies[0], copies[1]);
  std::vector<float> values(Pushers::kElements);
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
  update->set_gradient(std::string(Pushers::kElements / 4 * sizeof(float), '\0'));
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
std::vector<std::unique_ptr<ChildProcess>> ReplicationClusterTest::StartCoordinated(
    ConsistencyMode mode, int workers, const std::string& prefix, std::vector<std::string>* flags,
    std::vector<std::string>* addresses, int replication) {
  std::string dir = ::testing::TempDir() + "/etcd-XXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  absl::StatusOr<std::unique_ptr<LocalEtcd>> etcd = LocalEtcd::Start(dir, Tls("etcd"));
  if (!etcd.ok()) {
    ADD_FAILURE() << etcd.status();
    return {};
  }
  etcd_ = *std::move(etcd);
  *flags = ServerFlags(replication);
  flags->insert(flags->end(),
                {absl::StrCat("--mode=", absl::AsciiStrToLower(ConsistencyMode_Name(mode))),
                 absl::StrCat("--staleness=", Pushers::kStaleness), "--etcd=" + etcd_->endpoint(),
                 "--etcd_prefix=" + prefix, "--etcd_lease_secs=1",
                 // Long worker leases: a sync step whose gradients a lost
                 // primary held completes only because they are pushed
                 // again, not because their workers are presumed dead.
                 "--lease_timeout_ms=300000"});
  if (!checkpoints_.empty()) flags->push_back("--checkpoint_dir=" + checkpoints_);
  if (metrics_) flags->push_back("--metrics_port=0");
  auto servers =
      StartServers(3, std::vector<std::vector<std::string>>(3, *flags), addresses, workers);
  for (size_t i = 0; i < servers.size(); ++i) {
    EXPECT_FALSE((*addresses)[i].empty());
    EXPECT_TRUE(servers[i]->WaitForLine("coordinated through etcd", absl::Seconds(30)));
  }
  return servers;
}

// Pushers' clients over `addresses`, having created w in 6 shards.
std::vector<std::unique_ptr<PsClient>> ReplicationClusterTest::Workers(
    const std::vector<std::string>& addresses, ConsistencyMode mode) {
  std::vector<std::unique_ptr<PsClient>> workers;
  for (int w = 0; w < Pushers::kWorkers; ++w) {
    PsClientOptions options = Client(w == 0 ? "chief" : "worker");
    options.worker_id = w;
    options.mode = mode;
    workers.push_back(NewGrpcPsClient(addresses, options));
    // Every shard on a primary and a backup of the three.
    const absl::Status created = workers.back()->CreateVariables({Ones(6)});
    EXPECT_TRUE(created.ok()) << created;
  }
  return workers;
}

void ReplicationClusterTest::KillOneForGood(ConsistencyMode mode) {
  constexpr int kSteps = 60;
  std::vector<std::string> flags;
  std::vector<std::string> addresses;
  auto servers = StartCoordinated(mode, Pushers::kWorkers, "/exactness/", &flags, &addresses);
  ASSERT_FALSE(HasFailure());
  std::vector<std::unique_ptr<PsClient>> workers = Workers(addresses, mode);
  ASSERT_FALSE(HasFailure());
  Pushers pushers(&workers, mode, kSteps);
  ASSERT_TRUE(pushers.AwaitEach(20, absl::Seconds(120)));
  std::unique_ptr<PsClient> observer = NewGrpcPsClient(addresses, Client("worker"));
  ASSERT_TRUE(observer->Describe().ok());
  servers[1]->Signal(SIGKILL);
  // A client asking every server's state as it goes (a worker's re-dealing
  // at an epoch's end) is answered once the table drops it, its entry
  // empty as a server lost before.
  const absl::StatusOr<std::vector<DescribeResponse>> during = observer->Describe();
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ((*during)[1].incarnation(), 0u);
  EXPECT_NE((*during)[0].incarnation(), 0u);
  // The survivors see its lease go, and take it out of the table.
  EXPECT_TRUE(servers[0]->WaitForLine("lost its lease in etcd", absl::Seconds(30)));
  pushers.Join();
  for (int w = 0; w < Pushers::kWorkers; ++w) {
    EXPECT_TRUE(pushers.failed()[w].ok()) << "worker " << w << ": " << pushers.failed()[w];
    EXPECT_EQ(pushers.acknowledged()[w], kSteps) << "worker " << w;
  }
  EXPECT_THAT(pushers.too_stale(), ::testing::IsEmpty());
  EXPECT_TRUE(EachPushAppliedOnce(*workers[0], mode, pushers.acknowledged()));
  TensorMap values;
  ASSERT_TRUE(workers[0]->Pull({"w"}, &values).ok());
  // The copies the lost server held are made again on the two others,
  // from their primaries, in the background: every shard ends with a
  // ready backup, and its two copies read the same.
  auto all_backed_up = [&](const std::string& address) {
    const DescribeResponse described = DescribeAt(address);
    return described.shards_size() == 6 && EveryShardBackedUp(described);
  };
  ASSERT_TRUE(Eventually([&] { return all_backed_up(addresses[0]) && all_backed_up(addresses[2]); },
                         absl::Seconds(60)))
      << "shards not made again on both";
  const std::string on_first = ReadAt(addresses[0], {0, 1, 2, 3, 4, 5});
  ASSERT_EQ(on_first.size(), Pushers::kElements * sizeof(float));
  EXPECT_EQ(on_first, ReadAt(addresses[2], {0, 1, 2, 3, 4, 5}));
  // A worker started after the failover (a restarted one) finds the table
  // and leaves the lost server out: its first Describe (a worker checks
  // the servers' mode with it) does not wait for the lost one, whose entry
  // is empty.
  PsClientOptions options = Client("worker");
  options.worker_id = 1;
  options.mode = mode;
  std::unique_ptr<PsClient> late = NewGrpcPsClient(addresses, options);
  const absl::StatusOr<std::vector<DescribeResponse>> described = late->Describe();
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 3u);
  EXPECT_EQ((*described)[1].incarnation(), 0u);
  EXPECT_NE((*described)[0].incarnation(), 0u);
  EXPECT_NE((*described)[2].incarnation(), 0u);
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

// A server added to a running job (fulcrumctl add-server) takes its
// share of the copies, moved live, and another removed (fulcrumctl
// remove-server) hands its copies to the others and leaves the job. The
// workers, given the first three servers, follow the shards (to the new
// server too), and no push is lost or applied twice: every element ends
// at exactly minus its worker's acknowledged pushes (a quarter in sync), and in
// ssp no pull misses a push its bound requires.
// Meanwhile the operator takes checkpoints (fulcrumctl checkpoint, given
// the first three servers) as the shards move: each holds every shard
// once (fulcrumctl export reads it whole).
void ReplicationClusterTest::AddOneRemoveAnother(ConsistencyMode mode, int replication) {
  std::vector<std::string> flags;
  std::vector<std::string> addresses;
  checkpoints_ = ::testing::TempDir() + "/checkpoints-XXXXXX";
  ASSERT_NE(mkdtemp(checkpoints_.data()), nullptr);
  auto servers =
      StartCoordinated(mode, Pushers::kWorkers, "/membership/", &flags, &addresses, replication);
  ASSERT_FALSE(HasFailure());
  std::vector<std::unique_ptr<PsClient>> workers = Workers(addresses, mode);
  ASSERT_FALSE(HasFailure());
  Pushers pushers(&workers, mode, 20, /*until_stopped=*/true);
  ASSERT_TRUE(pushers.AwaitEach(10, absl::Seconds(120)));

  std::string added;
  auto fourth = StartServer(3, 4, Pushers::kWorkers, flags, 0, &added);
  ASSERT_FALSE(added.empty());
  ASSERT_TRUE(fourth->WaitForLine("coordinated through etcd", absl::Seconds(30)));
  std::atomic<bool> moving{true};
  absl::Mutex mu;
  std::vector<int> checkpointed;  // the steps written, complete
  std::thread checkpointer([&] {
    for (int step = 1; moving.load(); ++step) {
      auto ctl = Ctl({"checkpoint", "--ps_hosts=" + absl::StrJoin(addresses, ","),
                      "--checkpoint_dir=" + checkpoints_, absl::StrCat("--step=", step)});
      EXPECT_EQ(ctl->Wait(absl::Seconds(60)), 0) << "checkpoint " << step;
      if (ctl->HasLine(absl::StrCat("checkpoint ", step, " complete"))) {
        absl::MutexLock lock(&mu);
        checkpointed.push_back(step);
      }
    }
  });
  // Each move waits for a checkpoint taken meanwhile (one takes about 3 s
  // here, a move less), so that checkpoints overlap both.
  const auto await_checkpoints = [&](size_t n) {
    absl::MutexLock lock(&mu);
    const auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return checkpointed.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(120));
  };
  auto add = Ctl({"add-server", added});
  ASSERT_EQ(add->Wait(absl::Seconds(120)), 0);
  EXPECT_TRUE(add->HasLine(added + " holds its share"));
  EXPECT_GT(DescribeAt(added).shards_size(), 0);
  ASSERT_TRUE(pushers.AwaitEach(pushers.Fewest() + 10, absl::Seconds(120)));
  EXPECT_TRUE(await_checkpoints(1));

  auto remove = Ctl({"remove-server", addresses[1]});
  ASSERT_EQ(remove->Wait(absl::Seconds(120)), 0);
  EXPECT_TRUE(remove->HasLine(addresses[1] + " holds no copy and has left the job"));
  EXPECT_EQ(DescribeAt(addresses[1]).shards_size(), 0);  // its copies freed
  EXPECT_TRUE(await_checkpoints(2));
  moving = false;
  checkpointer.join();
  EXPECT_GE(checkpointed.size(), 2u);
  for (int step : checkpointed) {
    auto exported =
        Ctl({"export", "--checkpoint_dir=" + checkpoints_, absl::StrCat("--step=", step),
             absl::StrCat("--out=", checkpoints_, "/w-", step, ".npz")});
    EXPECT_EQ(exported->Wait(absl::Seconds(60)), 0) << "checkpoint " << step << " does not "
                                                    << "hold each shard once";
  }
  ASSERT_TRUE(pushers.AwaitEach(pushers.Fewest() + 10, absl::Seconds(120)));
  pushers.Stop();
  pushers.Join();
  for (int w = 0; w < Pushers::kWorkers; ++w) {
    EXPECT_TRUE(pushers.failed()[w].ok()) << "worker " << w << ": " << pushers.failed()[w];
  }
  EXPECT_TRUE(EachPushAppliedOnce(*workers[0], mode, pushers.acknowledged()));
  EXPECT_THAT(pushers.too_stale(), ::testing::IsEmpty());

  // The table has the added server and not the removed one; every shard
  // has a primary and (replicated) a ready backup there, bit-identical, and
  // some of the primaries are on the added server (the workers reached it).
  const std::vector<std::string> now = {addresses[0], addresses[2], added};
  std::vector<std::string> in_table;
  const DescribeResponse first = DescribeAt(addresses[0]);
  for (const PlacedServer& server : first.placement().servers())
    in_table.push_back(server.address());
  EXPECT_THAT(in_table, ::testing::UnorderedElementsAreArray(now));
  int primaries = 0;
  int on_added = 0;
  for (const std::string& address : now) {
    const DescribeResponse described = DescribeAt(address);
    if (replication > 1) {
      EXPECT_TRUE(EveryShardBackedUp(described)) << address;
    }
    for (const ShardInfo& shard : described.shards()) {
      if (!shard.primary().empty()) continue;
      ++primaries;
      on_added += address == added ? 1 : 0;
      ASSERT_EQ(shard.backups_size(), replication - 1) << address << " shard " << shard.shard();
      if (replication == 1) continue;
      const std::string bytes = ReadAt(address, {shard.shard()});
      EXPECT_FALSE(bytes.empty());
      EXPECT_EQ(bytes, ReadAt(shard.backups(0), {shard.shard()})) << "shard " << shard.shard();
    }
  }
  EXPECT_EQ(primaries, 6);
  EXPECT_GT(on_added, 0);
}

TEST_F(ReplicationClusterTest, AServerAddedAndAnotherRemovedLoseNoAsyncPush) {
  AddOneRemoveAnother(ASYNC);
}

TEST_F(ReplicationClusterTest, AServerAddedAndAnotherRemovedLoseNoSyncStep) {
  AddOneRemoveAnother(SYNC);
}

TEST_F(ReplicationClusterTest, AServerAddedAndAnotherRemovedKeepSspClocksAndItsBound) {
  AddOneRemoveAnother(SSP);
}

// With one copy of each shard (--replication=1 and --etcd), the moves are
// of the only copy: the same exactness holds.
TEST_F(ReplicationClusterTest, WithOneCopyAServerAddedAndAnotherRemovedLoseNoPush) {
  AddOneRemoveAnother(ASYNC, /*replication=*/1);
}

// With one copy of each shard and range, a server that restarts keeps its
// place in the table (no other copy can take it), and its clients create
// its shards and its tables' ranges again there, as for an unreplicated
// server: those the table moved onto it too.
TEST_F(ReplicationClusterTest, WithOneCopyARestartedServerKeepsItsPlaceAndItsShards) {
  std::vector<std::string> flags;
  std::vector<std::string> addresses;
  auto servers = StartCoordinated(ASYNC, 1, "/one-copy/", &flags, &addresses, 1);
  ASSERT_FALSE(HasFailure());
  std::unique_ptr<PsClient> worker = NewGrpcPsClient(addresses, Client("chief"));
  ASSERT_TRUE(worker->CreateVariables({Ones(6)}).ok());
  EmbeddingTableSpec table;
  table.set_name("t");
  table.set_width(2);
  table.set_partitions(6);
  table.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  table.mutable_optimizer()->set_learning_rate(1.0f);
  ASSERT_TRUE(worker->CreateTables({table}).ok());
  std::unique_ptr<ChildProcess> fourth;
  const std::string added = AddFourth(flags, 1, &fourth);
  ASSERT_FALSE(added.empty());
  const int on_added = DescribeAt(added).shards_size();
  const int ranges_on_added = DescribeAt(added).tables_size();
  ASSERT_GT(on_added, 0);
  ASSERT_GT(ranges_on_added, 0);
  TensorMap gradient;
  gradient["w"] = DenseTensor{{64, 8}, std::vector<float>(Pushers::kElements, 1.0f)};
  TableIds lookup{"t", {}};
  for (int64_t id = 0; id < 64; ++id) lookup.ids.push_back(id);
  const std::vector<float> ones(size_t{64} * 2, 1.0f);
  ASSERT_TRUE(worker->Push(gradient).ok());  // the worker follows the moves
  ASSERT_TRUE(worker->PushRows({lookup}, {ones}).ok());

  fourth->Signal(SIGKILL);
  ASSERT_TRUE(fourth->Wait(absl::Seconds(30)).has_value());
  const int port = std::stoi(added.substr(added.rfind(':') + 1));
  std::string restarted;
  fourth = StartServer(3, 4, 1, flags, port, &restarted);
  ASSERT_EQ(restarted, added);
  EXPECT_TRUE(fourth->WaitForLine("rejoining the placement table at its place", absl::Seconds(30)));
  for (int i = 0; i < 2; ++i) {  // the first finds it restarted: its part is lost
    absl::StatusOr<PushStats> pushed = worker->Push(gradient);
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    pushed = worker->PushRows({lookup}, {ones});
    ASSERT_TRUE(pushed.ok()) << pushed.status();
  }
  EXPECT_EQ(DescribeAt(added).shards_size(), on_added);
  EXPECT_EQ(DescribeAt(added).tables_size(), ranges_on_added);
  // Rows elsewhere kept all three pushes; those created again, at least
  // the last.
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(worker->PullRows({lookup}, &rows).ok());
  for (float v : rows[0]) EXPECT_TRUE(v == -3 || v == -1 || v == -2) << v;
  EXPECT_NE(std::count(rows[0].begin(), rows[0].end(), -3.0f), 0);
  TensorMap values;
  ASSERT_TRUE(worker->Pull({"w"}, &values).ok());
  // Those created again (no checkpoint) have the push after the restart.
  const DescribeResponse again = DescribeAt(added);
  for (const ShardInfo& shard : again.shards()) {
    EXPECT_TRUE(shard.primary().empty());
    EXPECT_GE(shard.version(), 1) << "shard " << shard.shard();
  }
}

// A server frozen (SIGSTOP: a partition that cuts it off from everyone,
// etcd among them, or a long pause) past its lease while four async
// workers push: the others take it out of the table and promote its
// shards' backups. Thawed, it takes no write (its lease may have run out),
// frees the copies the table moved away and joins the table again holding
// nothing; fulcrumctl add-server gives it copies again. The pushes it held
// when it froze are made again at the new primaries: every element ends
// at exactly minus its worker's acknowledged pushes, and no shard ever had
// two primaries whose writes both count.
TEST_F(ReplicationClusterTest, AFrozenServerAcknowledgesNothingItsSuccessorsLackAndRejoins) {
  std::vector<std::string> flags;
  std::vector<std::string> addresses;
  auto servers = StartCoordinated(ASYNC, Pushers::kWorkers, "/frozen/", &flags, &addresses);
  ASSERT_FALSE(HasFailure());
  std::vector<std::unique_ptr<PsClient>> workers = Workers(addresses, ASYNC);
  ASSERT_FALSE(HasFailure());
  Pushers pushers(&workers, ASYNC, 20, /*until_stopped=*/true);
  ASSERT_TRUE(pushers.AwaitEach(10, absl::Seconds(120)));

  servers[1]->Signal(SIGSTOP);
  EXPECT_TRUE(servers[0]->WaitForLine("lost its lease in etcd", absl::Seconds(30)));
  ASSERT_TRUE(Eventually(
      [&] {
        const DescribeResponse described = DescribeAt(addresses[0]);
        for (const PlacedServer& server : described.placement().servers()) {
          if (server.address() == addresses[1]) return false;
        }
        return described.placement().epoch() > 0;
      },
      absl::Seconds(30)))
      << "the frozen server is still in the table";
  servers[1]->Signal(SIGCONT);
  EXPECT_TRUE(servers[1]->WaitForLine("lease in etcd ran out", absl::Seconds(30)));
  ASSERT_TRUE(pushers.AwaitEach(pushers.Fewest() + 10, absl::Seconds(120)));
  ASSERT_TRUE(
      Eventually([&] { return DescribeAt(addresses[1]).shards_size() == 0; }, absl::Seconds(30)))
      << "the thawed server kept copies the table moved away";

  auto add = Ctl({"add-server", addresses[1]});
  ASSERT_EQ(add->Wait(absl::Seconds(120)), 0);
  EXPECT_GT(DescribeAt(addresses[1]).shards_size(), 0);
  ASSERT_TRUE(pushers.AwaitEach(pushers.Fewest() + 10, absl::Seconds(120)));
  pushers.Stop();
  pushers.Join();
  for (int w = 0; w < Pushers::kWorkers; ++w) {
    EXPECT_TRUE(pushers.failed()[w].ok()) << "worker " << w << ": " << pushers.failed()[w];
  }
  EXPECT_TRUE(EachPushAppliedOnce(*workers[0], ASYNC, pushers.acknowledged()));
  // The last moves' backups may still be filling (a Replicate cancelled by
  // a move is sent again within a second).
  EXPECT_TRUE(Eventually(
      [&] {
        for (const std::string& address : addresses) {
          if (!EveryShardBackedUp(DescribeAt(address))) return false;
        }
        return true;
      },
      absl::Seconds(30)))
      << "a shard without its backup";
  for (const std::string& address : addresses) {
    const DescribeResponse described = DescribeAt(address);
    for (const ShardInfo& shard : described.shards()) {
      if (!shard.primary().empty()) continue;
      ASSERT_EQ(shard.backups_size(), 1) << address << " shard " << shard.shard();
      EXPECT_EQ(ReadAt(address, {shard.shard()}), ReadAt(shard.backups(0), {shard.shard()}))
          << "shard " << shard.shard();
    }
  }
}

// A server killed (-9) and started again at once at its address, as the
// launcher restarts one that crashed: it takes itself out of the table,
// joins it again holding nothing, and the copies it lost are made again on
// it, filled from their primaries, while the worker goes on pushing (the
// client creates nothing there: the table's copies are the primaries' to
// fill). Each copy it ends with reads as its primary's, and every push
// applied once.
TEST_F(ReplicationClusterTest, ARestartedServerRejoinsAsBackupsFilledFromThePrimaries) {
  std::vector<std::string> flags;
  std::vector<std::string> addresses;
  auto servers = StartCoordinated(ASYNC, 1, "/rejoin/", &flags, &addresses);
  ASSERT_FALSE(HasFailure());
  std::unique_ptr<PsClient> worker = NewGrpcPsClient(addresses, Client("chief"));
  ASSERT_TRUE(worker->CreateVariables({Ones(6)}).ok());
  TensorMap gradient;
  gradient["w"] = DenseTensor{{64, 8}, std::vector<float>(Pushers::kElements, 1.0f)};
  int pushes = 0;
  auto push = [&](int n) {
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<PushStats> pushed = worker->Push(gradient);
      ASSERT_TRUE(pushed.ok()) << pushed.status();
      ++pushes;
    }
  };
  push(10);
  servers[1]->Signal(SIGKILL);
  ASSERT_TRUE(servers[1]->Wait(absl::Seconds(30)).has_value());
  const int port = std::stoi(addresses[1].substr(addresses[1].rfind(':') + 1));
  std::string restarted;
  servers[1] = StartServer(1, 3, 1, flags, port, &restarted);
  ASSERT_EQ(restarted, addresses[1]);
  ASSERT_TRUE(servers[1]->WaitForLine(" being filled", absl::Seconds(30)));
  push(10);
  ASSERT_TRUE(Eventually(
      [&] {
        if (DescribeAt(restarted).shards_size() == 0) return false;
        for (const std::string& address : addresses) {
          if (!EveryShardBackedUp(DescribeAt(address))) return false;
        }
        return true;
      },
      absl::Seconds(60)))
      << "the restarted server's copies not all filled";
  push(1);
  const DescribeResponse on_restarted = DescribeAt(restarted);
  for (const ShardInfo& copy : on_restarted.shards()) {
    ASSERT_FALSE(copy.primary().empty()) << "shard " << copy.shard() << " moved its primary";
    const std::string bytes = ReadAt(restarted, {copy.shard()});
    EXPECT_FALSE(bytes.empty());
    EXPECT_EQ(bytes, ReadAt(copy.primary(), {copy.shard()})) << "shard " << copy.shard();
  }
  TensorMap values;
  ASSERT_TRUE(worker->Pull({"w"}, &values).ok());
  for (float v : values["w"].values) ASSERT_EQ(v, -pushes);
}

// A server that cannot reach etcd (cut off, or etcd down) takes no push
// once its lease may have run out, since the others may
// hold its shards by then: the side of a partition without etcd stops, and
// no shard has two primaries taking writes. Here etcd stops, which cuts
// every server off.
TEST_F(ReplicationClusterTest, AServerCutOffFromEtcdTakesNoWritesOnceItsLeaseMayHaveRunOut) {
  std::vector<std::string> flags;
  std::vector<std::string> addresses;
  auto servers = StartCoordinated(ASYNC, 1, "/cut-off/", &flags, &addresses);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(NewGrpcPsClient(addresses, Client("chief"))->CreateVariables({Ones(6)}).ok());
  // A push of ones to a shard ps 0 is the primary of, each with a new id.
  PushPullRequest request;
  PushRequest* push = request.mutable_push();
  push->set_worker_id(0);
  const DescribeResponse described = DescribeAt(addresses[0]);
  for (const ShardInfo& shard : described.shards()) {
    if (!shard.primary().empty()) continue;
    ShardSlice* slice = push->add_gradients();
    slice->set_variable("w");
    slice->set_shard(shard.shard());
    const std::vector<int64_t> shape(shard.shape().begin(), shard.shape().end());
    EncodeFloatTensor(shape, std::vector<float>(NumElements(shape), 1.0f), slice->mutable_tensor());
    break;
  }
  ASSERT_EQ(push->gradients_size(), 1);
  auto push_at_0 = [&] {
    push->set_push_id(push->push_id() + 1);
    grpc::ClientContext context;
    PullResponse answer;
    return Stub(addresses[0], "worker")->PushPullSmall(&context, request, &answer);
  };
  grpc::Status pushed = push_at_0();
  ASSERT_TRUE(pushed.ok()) << pushed.error_message();
  etcd_.reset();
  ASSERT_TRUE(Eventually([&] { return !(pushed = push_at_0()).ok(); }, absl::Seconds(30)));
  EXPECT_EQ(pushed.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(pushed.error_message(), HasSubstr("lease in etcd ran out"));
}

// Four servers in two zones (--zone): each shard's two copies are in
// different zones, and each server says its zone.
// The tensor bytes the server whose output `server` is has sent to pulls
// (fulcrum_ps_pulled_bytes_total at its metrics port); -1 when unknown.
double PulledBytes(const ChildProcess& server) {
  const std::regex port("metrics on http://127\\.0\\.0\\.1:(\\d+)/metrics");
  for (const std::string& line : server.lines()) {
    std::smatch match;
    if (!std::regex_search(line, match, port)) continue;
    const std::string metrics = HttpGet(std::stoi(match[1]), "/metrics");
    std::smatch value;
    if (std::regex_search(metrics, value,
                          std::regex("\nfulcrum_ps_pulled_bytes_total(\\{[^}]*\\})? (\\S+)"))) {
      return std::stod(value[2]);
    }
  }
  return -1;
}

// A reader (worker id -1) with read_from_backups pulls each shard from its
// ready backup, not its primary: the values the workers' acknowledged
// pushes made, and every byte of it sent by the backups' servers.
TEST_F(ReplicationClusterTest, AReaderOfBackupsPullsFromTheBackupsOnly) {
  std::vector<std::string> flags;
  std::vector<std::string> addresses;
  metrics_ = true;
  auto servers = StartCoordinated(ASYNC, 1, "/backup-reads/", &flags, &addresses);
  ASSERT_FALSE(HasFailure());
  PsClientOptions options = Client("chief");
  std::unique_ptr<PsClient> worker = NewGrpcPsClient(addresses, options);
  ASSERT_TRUE(worker->CreateVariables({Ones(6)}).ok());
  TensorMap ones;
  ones["w"] = DenseTensor{{64, 8}, std::vector<float>(Pushers::kElements, 1.0f)};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(worker->Push(ones).ok());

  options = Client("worker");
  options.worker_id = -1;
  options.read_from_backups = true;
  std::unique_ptr<PsClient> reader = NewGrpcPsClient(addresses, options);
  ASSERT_TRUE(reader->CreateVariables({Ones(6)}).ok());
  std::vector<double> before;
  for (const auto& server : servers) before.push_back(PulledBytes(*server));
  constexpr int kPulls = 20;
  for (int i = 0; i < kPulls; ++i) {
    TensorMap values;
    ASSERT_TRUE(reader->Pull({"w"}, &values).ok());
    ASSERT_EQ(values["w"].values, std::vector<float>(Pushers::kElements, -3.0f));
  }
  for (size_t i = 0; i < servers.size(); ++i) {
    double backed_up = 0;  // bytes of the shards this server holds a backup of
    const DescribeResponse described = DescribeAt(addresses[i]);
    for (const ShardInfo& shard : described.shards()) {
      if (!shard.primary().empty()) backed_up += NumElements(shard.shape()) * sizeof(float);
    }
    EXPECT_GT(backed_up, 0);
    EXPECT_EQ(PulledBytes(*servers[i]) - before[i], kPulls * backed_up) << "server " << i;
  }
}

TEST_F(ReplicationClusterTest, TheCopiesOfAShardAreInDifferentZones) {
  const std::vector<std::string> zones = {"a", "a", "b", "b"};
  std::vector<std::vector<std::string>> flags;
  for (const std::string& zone : zones) {
    flags.push_back(ServerFlags(2));
    flags.back().push_back("--zone=" + zone);
  }
  std::vector<std::string> addresses;
  auto servers = StartServers(4, flags, &addresses);
  for (const std::string& address : addresses) ASSERT_FALSE(address.empty());
  ASSERT_TRUE(NewGrpcPsClient(addresses, Client("chief"))->CreateVariables({Ones(8)}).ok());
  std::map<std::string, std::string> zone_of;
  std::vector<DescribeResponse> described;
  for (const std::string& address : addresses) {
    described.push_back(DescribeAt(address));
    zone_of[address] = described.back().zone();
  }
  int primaries = 0;
  for (size_t i = 0; i < addresses.size(); ++i) {
    EXPECT_EQ(zone_of[addresses[i]], zones[i]);
    for (const ShardInfo& shard : described[i].shards()) {
      if (!shard.primary().empty()) continue;
      ++primaries;
      ASSERT_EQ(shard.backups_size(), 1) << shard.shard();
      EXPECT_NE(zone_of[shard.backups(0)], zones[i])
          << "shard " << shard.shard() << " on " << addresses[i] << " and " << shard.backups(0);
    }
  }
  EXPECT_EQ(primaries, 8);
}

// A table's ranges are replicated, and move, as shards do: a worker pushes
// ones to every id of t (SGD, learning rate 1) over 3 servers with two
// copies of each range. One server is killed (-9) and never restarted;
// later a fourth is added (fulcrumctl add-server) and takes its share of
// the ranges, moved live, and then the first is removed (remove-server).
// The worker follows the ranges to their new primaries, and every row
// ends at exactly minus the pushes acknowledged: nothing lost, nothing
// applied twice. Each range ends with two copies, bit-identical.
TEST_F(ReplicationClusterTest, ATableLosesNoPushWhenServersDieJoinAndLeave) {
  std::vector<std::string> flags;
  std::vector<std::string> addresses;
  auto servers = StartCoordinated(ASYNC, 1, "/tables/", &flags, &addresses);
  ASSERT_FALSE(HasFailure());
  PsClientOptions options = Client("chief");
  options.worker_id = 0;
  std::unique_ptr<PsClient> worker = NewGrpcPsClient(addresses, options);
  EmbeddingTableSpec spec;
  spec.set_name("t");
  spec.set_width(2);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  ASSERT_TRUE(worker->CreateTables({spec}).ok());
  constexpr int kIds = 64;
  constexpr int kPushes = 20;  // between the changes
  TableIds lookup{"t", {}};
  for (int64_t id = 0; id < kIds; ++id) lookup.ids.push_back(id * 7919);
  const std::vector<float> ones(size_t{kIds} * 2, 1.0f);
  int acknowledged = 0;
  auto push = [&] {
    for (int i = 0; i < kPushes; ++i) {
      absl::StatusOr<PushStats> pushed = worker->PushRows({lookup}, {ones});
      ASSERT_TRUE(pushed.ok()) << "push " << acknowledged << ": " << pushed.status();
      ++acknowledged;
    }
  };
  // Every row, as the worker pulls it, is minus the pushes acknowledged.
  auto exact = [&] {
    std::vector<std::vector<float>> rows;
    const absl::Status pulled = worker->PullRows({lookup}, &rows);
    if (!pulled.ok()) return ::testing::AssertionFailure() << pulled;
    for (float v : rows[0]) {
      if (v != -acknowledged)
        return ::testing::AssertionFailure() << v << " after " << acknowledged;
    }
    return ::testing::AssertionSuccess();
  };
  // The ranges (primaries and backups) the server at `address` holds.
  auto ranges_at = [&](const std::string& address) { return DescribeAt(address).tables_size(); };
  ASSERT_NO_FATAL_FAILURE(push());
  servers[1]->Signal(SIGKILL);
  EXPECT_TRUE(servers[0]->WaitForLine("lost its lease in etcd", absl::Seconds(30)));
  ASSERT_NO_FATAL_FAILURE(push());
  EXPECT_TRUE(exact());
  // The lost copies are made again on the survivors.
  ASSERT_TRUE(
      Eventually([&] { return ranges_at(addresses[0]) == 3 && ranges_at(addresses[2]) == 3; },
                 absl::Seconds(60)))
      << "ranges not made again on both";

  std::unique_ptr<ChildProcess> fourth;
  const std::string added = AddFourth(flags, 1, &fourth);
  ASSERT_FALSE(added.empty());
  EXPECT_GT(ranges_at(added), 0);
  ASSERT_NO_FATAL_FAILURE(push());
  auto remove = Ctl({"remove-server", addresses[0]});
  ASSERT_EQ(remove->Wait(absl::Seconds(120)), 0);
  EXPECT_TRUE(remove->HasLine(addresses[0] + " holds no copy and has left the job"));
  EXPECT_EQ(ranges_at(addresses[0]), 0);  // its copies freed
  ASSERT_NO_FATAL_FAILURE(push());
  EXPECT_TRUE(exact());

  // The two servers left hold both copies of every range, bit-identical.
  ASSERT_TRUE(Eventually([&] { return ranges_at(addresses[2]) == 3 && ranges_at(added) == 3; },
                         absl::Seconds(60)));
  auto read_all = [&](const std::string& address) {
    std::map<std::pair<int, int64_t>, std::vector<float>> read;
    for (int p = 0; p < 3; ++p) {
      ReadRowsRequest request;
      request.set_table("t");
      request.set_partition(p);
      grpc::ClientContext context;
      ReadRowsResponse page;
      const grpc::Status s = Stub(address, "worker")->ReadRows(&context, request, &page);
      EXPECT_TRUE(s.ok()) << address << ": " << s.error_message();
      for (int i = 0; i < page.ids_size(); ++i) {
        read[{p, page.ids(i)}].assign(page.values().begin() + int64_t{2} * i,
                                      page.values().begin() + int64_t{2} * i + 2);
      }
    }
    return read;
  };
  const auto left = read_all(addresses[2]);
  EXPECT_EQ(left.size(), static_cast<size_t>(kIds));
  EXPECT_TRUE(left == read_all(added));
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
