// Etcd against a real etcd (Debian's etcd-server) on 127.0.0.1.
#include "common/etcd/etcd_client.h"

#include <grpcpp/security/credentials.h>
#include <stdlib.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/etcd/local_etcd.h"
#include "common/loopback.h"
#include "common/rpc/credentials.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = ::testing::TempDir() + "/etcd-XXXXXX";
    ASSERT_NE(mkdtemp(dir.data()), nullptr);
    absl::StatusOr<std::unique_ptr<LocalEtcd>> started = LocalEtcd::Start(dir);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(*started);
    etcd_ = std::make_unique<Etcd>(server_->endpoint(), grpc::InsecureChannelCredentials());
  }

  std::unique_ptr<LocalEtcd> server_;
  std::unique_ptr<Etcd> etcd_;
};

// Events and the watch's end, collected as a watch delivers them.
class Recorder {
 public:
  void Add(const std::vector<EtcdEvent>& events) {
    absl::MutexLock lock(&mu_);
    for (const EtcdEvent& e : events)
      seen_.push_back((e.deleted ? "-" : "+") + e.kv.key + "=" + e.kv.value);
  }
  void Fail(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    error_ = status;
  }
  // The events, once there are `n` (or after 30 s).
  std::vector<std::string> Await(size_t n) {
    absl::MutexLock lock(&mu_);
    wanted_ = n;
    mu_.AwaitWithTimeout(absl::Condition(this, &Recorder::EnoughLocked), absl::Seconds(30));
    return seen_;
  }
  absl::Status AwaitError() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &Recorder::FailedLocked), absl::Seconds(30));
    return error_;
  }

 private:
  bool FailedLocked() const { return !error_.ok(); }
  bool EnoughLocked() const { return seen_.size() >= wanted_; }

  absl::Mutex mu_;
  std::vector<std::string> seen_;
  size_t wanted_ = 0;
  absl::Status error_;
};

TEST_F(EtcdTest, KeysAreWrittenReadListedAndDeleted) {
  ASSERT_TRUE(etcd_->Put("/job/servers/1", "b:2").ok());
  ASSERT_TRUE(etcd_->Put("/job/servers/0", "a:1").ok());
  ASSERT_TRUE(etcd_->Put("/job/serversX", "not under the prefix").ok());
  absl::StatusOr<EtcdValue> got = etcd_->Get("/job/servers/0");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value, "a:1");
  absl::StatusOr<EtcdListing> listed = etcd_->List("/job/servers/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->values.size(), 2u);
  EXPECT_EQ(listed->values[0].key, "/job/servers/0");
  EXPECT_EQ(listed->values[1].value, "b:2");
  EXPECT_GE(listed->revision, listed->values[1].mod_revision);
  ASSERT_TRUE(etcd_->Delete("/job/servers/0").ok());
  EXPECT_THAT(etcd_->Get("/job/servers/0").status().message(),
              HasSubstr("has no key /job/servers/0"));
}

TEST_F(EtcdTest, OfTwoWritersWhoReadTheSameRevisionOneWins) {
  // Created only if absent.
  absl::StatusOr<int64_t> created = etcd_->CompareAndPut("/job/placement", "epoch 1", 0);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(etcd_->CompareAndPut("/job/placement", "another epoch 1", 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Both read revision `created`; the first write wins, the second is refused.
  ASSERT_TRUE(etcd_->CompareAndPut("/job/placement", "epoch 2", *created).ok());
  absl::Status late = etcd_->CompareAndPut("/job/placement", "rival epoch 2", *created).status();
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.message(), HasSubstr("written by another since revision"));
  EXPECT_EQ(etcd_->Get("/job/placement")->value, "epoch 2");
}

TEST_F(EtcdTest, AKeyHeldByALeaseGoesWhenTheLeaseEndsAndNotWhileItIsRenewed) {
  absl::StatusOr<int64_t> lease = etcd_->GrantLease(absl::Seconds(2));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(etcd_->Put("/job/alive/0", "a:1", *lease).ok());
  EXPECT_EQ(etcd_->Get("/job/alive/0")->lease, *lease);
  // Renewed twice a TTL for twice the TTL: still there.
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<absl::Duration> ttl = etcd_->KeepAlive(*lease);
    ASSERT_TRUE(ttl.ok()) << ttl.status();
    EXPECT_GE(*ttl, absl::Seconds(1));
    absl::SleepFor(absl::Milliseconds(500));  // the renewals' pace, not a wait for anything
  }
  EXPECT_TRUE(etcd_->Get("/job/alive/0").ok());
  // Left to lapse: the key goes, as a watcher sees.
  Recorder recorder;
  std::unique_ptr<EtcdWatch> watch = etcd_->Watch(
      "/job/alive/", 0, [&](const std::vector<EtcdEvent>& e) { recorder.Add(e); },
      [&](const absl::Status& s) { recorder.Fail(s); });
  EXPECT_THAT(recorder.Await(1), ::testing::ElementsAre("-/job/alive/0="));
  EXPECT_TRUE(absl::IsNotFound(etcd_->Get("/job/alive/0").status()));
  EXPECT_TRUE(absl::IsNotFound(etcd_->KeepAlive(*lease).status()));
  // Revoked: at once.
  lease = etcd_->GrantLease(absl::Seconds(60));
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(etcd_->Put("/job/alive/1", "b:2", *lease).ok());
  ASSERT_TRUE(etcd_->RevokeLease(*lease).ok());
  EXPECT_TRUE(absl::IsNotFound(etcd_->Get("/job/alive/1").status()));
}

TEST_F(EtcdTest, AWatchSeesChangesInOrderFromARevisionAndSaysWhenItBreaks) {
  const int64_t from = *etcd_->Put("/job/placement", "epoch 1");
  ASSERT_TRUE(etcd_->Put("/job/placement", "epoch 2").ok());
  Recorder recorder;
  // From a revision in the past: what happened since is delivered first.
  std::unique_ptr<EtcdWatch> watch = etcd_->Watch(
      "/job/", from, [&](const std::vector<EtcdEvent>& e) { recorder.Add(e); },
      [&](const absl::Status& s) { recorder.Fail(s); });
  ASSERT_TRUE(etcd_->Delete("/job/placement").ok());
  ASSERT_TRUE(etcd_->Put("/other", "unwatched").ok());
  ASSERT_TRUE(etcd_->Put("/job/servers/3", "c:3").ok());
  EXPECT_EQ(recorder.Await(4),
            (std::vector<std::string>{"+/job/placement=epoch 1", "+/job/placement=epoch 2",
                                      "-/job/placement=", "+/job/servers/3=c:3"}));
  server_->Kill();
  const absl::Status broken = recorder.AwaitError();
  EXPECT_EQ(broken.code(), absl::StatusCode::kUnavailable) << broken;
  EXPECT_THAT(broken.message(), HasSubstr("watching /job/"));
}

TEST(EtcdUnreachableTest, CallsFailNamingTheEndpointWithinTheirTimeout) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(FreeLoopbackPorts(1)[0]);
  Etcd etcd(endpoint, grpc::InsecureChannelCredentials(), absl::Seconds(1));
  const absl::Time start = absl::Now();
  const absl::Status status = etcd.Put("/k", "v").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("etcd at " + endpoint + ": writing /k"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

// Certificates of a job's CA (scripts/make_certs.sh) in a new directory.
std::string MakeCerts(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/" + name + "-XXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  const std::string command = "scripts/make_certs.sh " + dir + " > /dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return dir;
}

TlsFiles Role(const std::string& dir, const std::string& role) {
  return {dir + "/" + role + ".pem", dir + "/" + role + ".key", dir + "/ca.pem"};
}

// An etcd over mutual TLS takes the clients whose certificate its CA
// signed, and no other: not plaintext, not another job's certificate.
TEST(LocalEtcdTest, OverTlsItTakesOnlyClientsOfItsCa) {
  const std::string certs = MakeCerts("certs");
  const std::string other = MakeCerts("other");
  std::string dir = ::testing::TempDir() + "/etcd-tls-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  absl::StatusOr<std::unique_ptr<LocalEtcd>> started = LocalEtcd::Start(dir, Role(certs, "etcd"));
  ASSERT_TRUE(started.ok()) << started.status();
  const std::string endpoint = (*started)->endpoint();

  Etcd ps(endpoint, MakeChannelCredentials(Role(certs, "ps")), absl::Seconds(5));
  ASSERT_TRUE(ps.Put("/job/k", "v").ok());
  absl::StatusOr<EtcdValue> read = ps.Get("/job/k");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->value, "v");

  Etcd plaintext(endpoint, grpc::InsecureChannelCredentials(), absl::Seconds(2));
  EXPECT_EQ(plaintext.Put("/job/k", "plaintext").status().code(), absl::StatusCode::kUnavailable);
  Etcd stranger(endpoint, MakeChannelCredentials(Role(other, "ps")), absl::Seconds(2));
  EXPECT_EQ(stranger.Put("/job/k", "stranger").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ps.Get("/job/k")->value, "v");
}

TEST(LocalEtcdTest, AMissingProgramIsNamedWithItsPackage) {
  absl::StatusOr<std::unique_ptr<LocalEtcd>> started =
      LocalEtcd::Start(::testing::TempDir() + "/none", {}, "/nonexistent/etcd");
  EXPECT_EQ(started.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(started.status().message(), HasSubstr("etcd-server"));
}

}  // namespace
}  // namespace fulcrum
