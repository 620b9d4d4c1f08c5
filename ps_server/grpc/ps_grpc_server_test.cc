// The PsService adapter on its own, over loopback with the generated stubs:
// it serves health, translates the server's errors to gRPC statuses, checks
// who may call, counts what it refuses, and shuts down cleanly.
#include "ps_server/grpc/ps_grpc_server.h"

#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "proto/health.grpc.pb.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

PsServerConfig Config() {
  PsServerConfig config;
  config.set_mode(ASYNC);
  config.set_num_replicas(1);
  config.set_replicas_to_aggregate(1);
  config.set_max_staleness(-1);
  config.set_lease_timeout_ms(10000);
  config.set_max_message_bytes(64 << 20);
  return config;
}

class PsGrpcServerTest : public ::testing::Test {
 protected:
  // A server whose data calls need `cluster_token` (none when empty).
  void Start(const std::string& cluster_token = "") {
    AccessPolicy policy;
    policy.cluster_token = cluster_token;
    auto server = PsGrpcServer::Start(&ps_, "127.0.0.1:0", &metrics_, {}, Access(policy));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = PsService::NewStub(channel_);
  }

  // Health's answer, or its call's error code.
  std::string Health() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status = grpc::health::v1::Health::NewStub(channel_)->Check(
        &context, grpc::health::v1::HealthCheckRequest(), &response);
    return status.ok()
               ? grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status())
               : absl::StrCat("error ", status.error_code());
  }

  // The refusals counted for `method`.
  double Refused(const std::string& method) {
    for (const prometheus::MetricFamily& family : registry_.Collect()) {
      if (family.name != "fulcrum_ps_refused_calls_total") continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        for (const prometheus::ClientMetric::Label& label : metric.label) {
          if (label.name == "method" && label.value == method) return metric.counter.value;
        }
      }
    }
    return 0;
  }

  ParameterServer ps_{Config()};
  prometheus::Registry registry_;
  PsMetrics metrics_{&ps_, registry_};
  std::unique_ptr<PsGrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<PsService::Stub> stub_;
};

TEST_F(PsGrpcServerTest, ServesHealthUntilShutdown) {
  Start();
  EXPECT_EQ(Health(), "SERVING");
  server_->Shutdown(absl::Now() + absl::Seconds(1));
  EXPECT_NE(Health(), "SERVING");
}

TEST_F(PsGrpcServerTest, TheServersErrorsBecomeGrpcStatusesNamingWhatWasWrong) {
  Start();
  CreateShardsRequest request;
  ShardSpec* shard = request.add_shards();
  shard->mutable_variable()->set_name("w");  // no shape
  shard->set_num_shards(1);
  grpc::ClientContext context;
  CreateShardsResponse response;
  const grpc::Status status = stub_->CreateShards(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("'w'"));

  grpc::ClientContext heartbeat_context;
  HeartbeatRequest heartbeat;
  heartbeat.set_worker_id(7);  // of a cluster of one
  HeartbeatResponse answer;
  const grpc::Status bad_worker = stub_->Heartbeat(&heartbeat_context, heartbeat, &answer);
  EXPECT_EQ(bad_worker.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Health(), "SERVING") << "and it serves on";
}

TEST_F(PsGrpcServerTest, RefusesAndCountsCallsWithoutTheToken) {
  Start("cluster-0123456789abcdef");
  grpc::ClientContext context;
  DescribeRequest request;
  DescribeResponse response;
  const grpc::Status refused = stub_->Describe(&context, request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(refused.error_message(), HasSubstr("needs the cluster token"));
  EXPECT_EQ(Refused("Describe"), 1);

  grpc::ClientContext with_token;
  with_token.AddMetadata(kTokenMetadataKey, TokenMetadata("cluster-0123456789abcdef"));
  EXPECT_TRUE(stub_->Describe(&with_token, request, &response).ok());
  EXPECT_EQ(response.mode(), ASYNC);
  EXPECT_EQ(Refused("Describe"), 1);

  grpc::ClientContext control;  // the cluster token alone guards control calls too
  JobDoneRequest done;
  JobDoneResponse done_response;
  EXPECT_EQ(stub_->JobDone(&control, done, &done_response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Refused("JobDone"), 1);
  grpc::ClientContext rebalance_context;
  RebalanceRequest drain;
  drain.set_drain(true);
  RebalanceResponse moved;
  EXPECT_EQ(stub_->Rebalance(&rebalance_context, drain, &moved).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Refused("Rebalance"), 1);

  // The new table calls are data calls, guarded as the others.
  grpc::ClientContext read_context;
  ReadRowsRequest read;
  read.set_table("t");
  ReadRowsResponse page;
  EXPECT_EQ(stub_->ReadRows(&read_context, read, &page).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Refused("ReadRows"), 1);
  grpc::ClientContext stream_context;
  PushRowsResponse pushed;
  auto writer = stub_->PushRowsStream(&stream_context, &pushed);
  writer->WritesDone();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Refused("PushRowsStream"), 1);
}

}  // namespace
}  // namespace fulcrum
