#include "common/rpc/credentials.h"

#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/health.grpc.pb.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// A fresh directory under the test's temporary directory.
std::string FreshDir(const std::string& name) {
  std::string dir = absl::StrCat(::testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A CA and the certificates of the default roles, in a fresh `name`.
std::string MakeCerts(const std::string& name) {
  std::string dir = FreshDir(name);
  const std::string command = "scripts/make_certs.sh " + dir + " > /dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return dir;
}

TlsFiles Role(const std::string& dir, const std::string& role) {
  return {dir + "/" + role + ".pem", dir + "/" + role + ".key", dir + "/ca.pem"};
}

// A server of a health service that answers every check, on 127.0.0.1.
struct HealthServer {
  class Healthy final : public grpc::health::v1::Health::Service {
    grpc::Status Check(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest*,
                       grpc::health::v1::HealthCheckResponse* response) override {
      response->set_status(grpc::health::v1::HealthCheckResponse::SERVING);
      return grpc::Status::OK;
    }
  };

  explicit HealthServer(const TlsFiles& files) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", MakeServerCredentials(files), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~HealthServer() {
    if (server != nullptr) server->Shutdown();
  }
  Healthy service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// A health check of the server on 127.0.0.1:`port` (an address, not a name:
// Debian's c-ares leaks a few bytes per lookup, which LeakSanitizer reports).
grpc::Status Check(int port, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), credentials));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&context, request, &response);
}

TEST(CredentialsTest, MutualTlsAcceptsPeersOfTheCaAndRefusesAllOthers) {
  const std::string certs = MakeCerts("certs");
  const std::string other = MakeCerts("other");  // another CA's
  HealthServer server(Role(certs, "ps"));
  ASSERT_NE(server.server, nullptr);
  EXPECT_TRUE(Check(server.port, MakeChannelCredentials(Role(certs, "worker"))).ok());
  EXPECT_TRUE(Check(server.port, MakeChannelCredentials(Role(certs, "chief"))).ok());

  // No client certificate: refused in the handshake.
  grpc::SslCredentialsOptions no_cert;
  std::ifstream ca(certs + "/ca.pem");
  no_cert.pem_root_certs.assign(std::istreambuf_iterator<char>(ca), {});
  EXPECT_EQ(Check(server.port, grpc::SslCredentials(no_cert)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // A certificate of another CA, or none at all.
  EXPECT_EQ(Check(server.port, MakeChannelCredentials(Role(other, "worker"))).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Check(server.port, grpc::InsecureChannelCredentials()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // The client checks the server too: another CA's server is refused.
  HealthServer impostor(Role(other, "ps"));
  EXPECT_EQ(Check(impostor.port, MakeChannelCredentials(Role(certs, "worker"))).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// Certificates rotated on disk apply to new connections without a restart.
TEST(CredentialsTest, RotatedFilesApplyWithoutARestart) {
  const std::string first = MakeCerts("first");
  const std::string second = MakeCerts("second");
  const std::string live = FreshDir("live");
  const auto install = [&](const std::string& from) {  // whole files, by rename
    for (const char* name : {"ps.pem", "ps.key", "ca.pem"}) {
      std::filesystem::copy_file(from + "/" + name, live + "/new",
                                 std::filesystem::copy_options::overwrite_existing);
      std::filesystem::rename(live + "/new", live + "/" + name);
    }
  };
  install(first);
  TlsFiles files = Role(live, "ps");
  files.reload_secs = 1;
  HealthServer server(files);
  EXPECT_TRUE(Check(server.port, MakeChannelCredentials(Role(first, "worker"))).ok());
  EXPECT_FALSE(Check(server.port, MakeChannelCredentials(Role(second, "worker"))).ok());
  install(second);
  bool rotated = false;
  for (absl::Time deadline = absl::Now() + absl::Seconds(30); !rotated && absl::Now() < deadline;) {
    rotated = Check(server.port, MakeChannelCredentials(Role(second, "worker"))).ok();
  }
  EXPECT_TRUE(rotated) << "the server never took the second CA's files";
  EXPECT_FALSE(Check(server.port, MakeChannelCredentials(Role(first, "worker"))).ok());
}

TEST(CredentialsTest, BadFilesAreNamed) {
  EXPECT_TRUE(CheckTlsFiles({}).ok());  // plaintext
  const std::string certs = MakeCerts("named");
  EXPECT_TRUE(CheckTlsFiles(Role(certs, "ps")).ok());
  TlsFiles files = Role(certs, "ps");
  files.key.clear();
  EXPECT_THAT(std::string(CheckTlsFiles(files).message()), HasSubstr("--tls_key is missing"));
  files = Role(certs, "ps");
  files.ca = certs + "/absent.pem";
  EXPECT_THAT(std::string(CheckTlsFiles(files).message()),
              HasSubstr("--tls_ca '" + certs + "/absent.pem' cannot be read"));
  files = Role(certs, "ps");
  files.cert = files.key;  // a key where the certificate belongs
  EXPECT_THAT(std::string(CheckTlsFiles(files).message()), HasSubstr("holds no PEM CERTIFICATE"));
}

}  // namespace
}  // namespace fulcrum
