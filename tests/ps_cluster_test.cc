// Real ps_server processes on 127.0.0.1, on ports they pick, driven by the
// client library over gRPC.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/impl/codegen/sync_stream.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/slices.h"
#include "common/tensor.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/ps_client.h"
#include "proto/health.grpc.pb.h"
#include "proto/ps_service.grpc.pb.h"
#include "tests/child_process.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// A ps_server on 127.0.0.1 with a port it picked.
struct PsProcess {
  std::unique_ptr<ChildProcess> process;
  int port = 0;
  std::string address;
};

PsProcess StartPs(int index, int num_ps, int workers, const std::vector<std::string>& flags,
                  int port = 0) {
  // The cluster spec's own ports are placeholders: --port=0 picks a free one.
  std::string ps_hosts, worker_hosts;
  for (int i = 0; i < num_ps; ++i) absl::StrAppend(&ps_hosts, i ? "," : "", "127.0.0.1:0");
  for (int i = 0; i < workers; ++i) {
    absl::StrAppend(&worker_hosts, i ? "," : "", "127.0.0.1:", 1 + i);
  }
  std::vector<std::string> argv = {RunfilePath("ps_server/ps_server"),
                                   "--ps_hosts=" + ps_hosts,
                                   "--worker_hosts=" + worker_hosts,
                                   absl::StrCat("--task_index=", index),
                                   "--bind_host=127.0.0.1",
                                   absl::StrCat("--port=", port)};
  // Plaintext unless the flags give TLS.
  if (std::none_of(flags.begin(), flags.end(),
                   [](const std::string& flag) { return absl::StartsWith(flag, "--tls_"); })) {
    argv.emplace_back("--insecure");
  }
  argv.insert(argv.end(), flags.begin(), flags.end());
  PsProcess ps;
  ps.process = std::make_unique<ChildProcess>(absl::StrCat("ps", index), argv);
  ps.port = WaitForPort(*ps.process, "listening on", absl::Seconds(30)).value_or(0);
  if (ps.port != 0) ps.address = absl::StrCat("127.0.0.1:", ps.port);
  return ps;
}

std::vector<std::string> Addresses(const std::vector<PsProcess>& servers) {
  std::vector<std::string> out;
  for (const PsProcess& ps : servers) out.push_back(ps.address);
  return out;
}

constexpr int64_t kBigRows = 4200;

VariableSpec BigVariable(int shards = 2) {
  // 4200 x 1024 floats (16.4 MiB), by default in 2 shards of 8.2 MiB: each
  // travels in chunks, in 16-bit encodings too.
  VariableSpec spec;
  spec.set_name("embedding");
  spec.add_shape(kBigRows);
  spec.add_shape(1024);
  spec.set_dtype(DT_FLOAT);
  spec.mutable_initializer()->set_kind(InitializerSpec::CONSTANT);
  spec.mutable_initializer()->set_value(1.0f);
  spec.mutable_partitioner()->set_kind(PartitionerSpec::FIXED_SHARDS);
  spec.mutable_partitioner()->set_num_shards(shards);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

struct Wire {
  DataType dtype;
  int channels;  // per server; with more than one, each server holds that many shards
};

// Over each wire encoding, and over several channels: the gradients and
// values here are small integers and halves, which 16-bit encodings hold
// exactly.
class SyncTrainingTest : public ::testing::TestWithParam<Wire> {};

TEST_P(SyncTrainingTest, SyncTrainingAcrossTwoServerProcesses) {
  std::vector<PsProcess> servers;
  for (int i = 0; i < 2; ++i) servers.push_back(StartPs(i, 2, 2, {"--mode=sync"}));
  for (const PsProcess& ps : servers) ASSERT_FALSE(ps.address.empty());

  constexpr int kSteps = 3;
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int w = 0; w < 2; ++w) {
    PsClientOptions options;
    options.worker_id = w;
    options.mode = SYNC;
    options.wire_dtype = GetParam().dtype;
    options.channels_per_server = GetParam().channels;
    clients.push_back(NewGrpcPsClient(Addresses(servers), options));
    ASSERT_TRUE(clients[w]->CreateVariables({BigVariable(2 * GetParam().channels)}).ok());
  }
  const Shape shape = {kBigRows, 1024};
  std::vector<TensorMap> pulled(2);
  std::vector<absl::Status> status(2);
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      for (int step = 0; step < kSteps && status[w].ok(); ++step) {
        // Element i of worker w's gradient: (w + 1) * (i % 7).
        DenseTensor grad{shape, std::vector<float>(kBigRows * 1024)};
        for (size_t i = 0; i < grad.values.size(); ++i) grad.values[i] = (w + 1) * (i % 7);
        status[w] = clients[w]->PushPull({{"embedding", grad}}, {}, &pulled[w]).status();
      }
    });
  }
  for (auto& t : workers) t.join();
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(status[w].ok()) << status[w];
    EXPECT_EQ(clients[w]->step(), kSteps);
    const auto& values = pulled[w]["embedding"].values;
    ASSERT_EQ(values.size(), kBigRows * 1024u);
    // Each step subtracts the mean 1.5 * (i % 7).
    for (size_t i = 0; i < values.size(); i += 997) {
      ASSERT_FLOAT_EQ(values[i], 1.0f - kSteps * 1.5f * (i % 7)) << "worker " << w << " at " << i;
    }
  }
  auto described = clients[0]->Describe();
  ASSERT_TRUE(described.ok()) << described.status();
  for (const DescribeResponse& d : *described) {
    EXPECT_EQ(d.mode(), SYNC);
    ASSERT_EQ(d.shards_size(), GetParam().channels);  // as many shards on each server
    for (const ShardInfo& shard : d.shards()) EXPECT_EQ(shard.version(), kSteps);
    EXPECT_EQ(d.updates_applied(), kSteps * GetParam().channels);
  }

  // Worker 0 finishes and the chief says the job is done: the servers still
  // wait for worker 1, then exit 0 once it finishes.
  ASSERT_TRUE(clients[0]->Finish().ok());
  ASSERT_TRUE(clients[0]->JobDone("test finished").ok());
  auto waiting = clients[1]->Describe();
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_TRUE((*waiting)[0].job_done());
  EXPECT_FALSE((*waiting)[0].shutting_down());
  ASSERT_TRUE(clients[1]->Finish().ok());
  for (PsProcess& ps : servers) EXPECT_EQ(ps.process->Wait(absl::Seconds(30)), 0);
}

INSTANTIATE_TEST_SUITE_P(Wire, SyncTrainingTest,
                         ::testing::Values(Wire{DT_FLOAT, 1}, Wire{DT_BFLOAT16, 1},
                                           Wire{DT_FLOAT16, 1}, Wire{DT_FLOAT, 3}),
                         [](const ::testing::TestParamInfo<Wire>& info) {
                           return absl::StrCat(DataType_Name(info.param.dtype), "_",
                                               info.param.channels, "channels");
                         });

// A server killed and started again at its address has lost its
// variables; a client whose calls to it are split over several channels
// creates them there again and goes on.
TEST(PsClusterTest, ARestartedServerIsRecoveredOverSeveralChannels) {
  PsProcess ps = StartPs(0, 1, 1, {"--mode=async"});
  ASSERT_FALSE(ps.address.empty());
  const int port = ps.port;
  PsClientOptions options;
  options.channels_per_server = 3;
  auto client = NewGrpcPsClient({ps.address}, options);
  ASSERT_TRUE(client->CreateVariables({BigVariable(6)}).ok());  // 6 slices of 2.7 MiB
  const DenseTensor grad{{kBigRows, 1024}, std::vector<float>(kBigRows * 1024, 0.5f)};
  TensorMap pulled;
  auto before = client->PushPull({{"embedding", grad}}, {}, &pulled);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->applied, 6);
  EXPECT_EQ(pulled["embedding"].values.back(), 0.5f);

  ps.process->Signal(SIGKILL);
  ASSERT_TRUE(ps.process->Wait(absl::Seconds(30)).has_value());
  ps = StartPs(0, 1, 1, {"--mode=async"}, port);
  ASSERT_FALSE(ps.address.empty());
  // The push meant for the lost values is dropped; the values start again.
  auto after = client->PushPull({{"embedding", grad}}, {}, &pulled);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->lost, 6);
  EXPECT_EQ(after->applied, 0);
  EXPECT_EQ(pulled["embedding"].values.front(), 1.0f);
  EXPECT_EQ(pulled["embedding"].values.back(), 1.0f);
  auto next = client->PushPull({{"embedding", grad}}, {}, &pulled);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->applied, 6);
  EXPECT_EQ(pulled["embedding"].values.back(), 0.5f);
}

// A raw call of `method` that sends `bytes` as its one message, bypassing
// the client library and protobuf: its status.
grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& bytes) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  // Any method's messages travel on an HTTP/2 stream: a bidirectional raw
  // call reaches unary and streaming methods alike. grpc::internal::,
  // because gRPC's public API makes no blocking call on raw bytes (as in
  // client/grpc/grpc_ps_transport.cc).
  const grpc::internal::RpcMethod rpc(method.c_str(), grpc::internal::RpcMethod::BIDI_STREAMING,
                                      channel);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel.get(), rpc, &context));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer message(&slice, 1);
  stream->Write(message);
  stream->WritesDone();
  grpc::ByteBuffer response;
  while (stream->Read(&response)) {
  }
  return stream->Finish();
}

// Resets the connection (RST) after asking for the metrics, mid-response.
void ScrapeAndReset(int port) {
  const int fd = ConnectLoopback(port);
  ASSERT_GE(fd, 0);
  const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  char first;
  EXPECT_EQ(recv(fd, &first, 1, 0), 1);
  const linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  close(fd);
}

// What a hostile or broken peer can send a server: garbage on every
// method, oversize and overflowing requests, huge legal variables, a pull
// of one shard many times over, mismatched tensors, resets on the metrics
// port, a table too wide and rows past the memory budget. Each gets an
// error; the
// server keeps serving, its variables intact.
TEST(PsClusterTest, AHostileClientGetsAnErrorForEachAndTheServerServesOn) {
  PsProcess ps = StartPs(
      0, 1, 1, {"--mode=async", "--max_message_mb=2", "--max_memory_mb=64", "--metrics_port=0"});
  ASSERT_FALSE(ps.address.empty());
  const std::optional<int> metrics_port = WaitForPort(*ps.process, "metrics on", absl::Seconds(10));
  ASSERT_TRUE(metrics_port.has_value());
  auto channel = grpc::CreateChannel(ps.address, grpc::InsecureChannelCredentials());
  auto stub = PsService::NewStub(channel);

  PsClientOptions options;
  auto client = NewGrpcPsClient({ps.address}, options);
  VariableSpec spec = BigVariable();
  spec.set_name("w");
  spec.clear_shape();
  spec.add_shape(8);
  ASSERT_TRUE(client->CreateVariables({spec}).ok());
  ASSERT_TRUE(client->Push({{"w", DenseTensor{{8}, std::vector<float>(8, 1.0f)}}}).ok());

  // Garbage on every method: a field whose length runs past the message,
  // and bytes that are no protobuf at all.
  for (const char* method :
       {"CreateShards", "Pull", "Push", "PushPull", "PullSmall", "PushPullSmall", "PullRows",
        "PushRows", "Heartbeat", "Describe", "SaveCheckpoint", "JobDone", "Rebalance"}) {
    for (const std::string& garbage :
         {std::string("\x0a\x7f\x01", 3), std::string(11, '\xff'), std::string("\x08")}) {
      const grpc::Status status =
          RawCall(channel, absl::StrCat("/fulcrum.PsService/", method), garbage);
      EXPECT_FALSE(status.ok()) << method;
    }
  }
  // Larger than the server takes.
  EXPECT_EQ(RawCall(channel, "/fulcrum.PsService/CreateShards", std::string(3 << 20, '\x0a'))
                .error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);

  // Shapes whose element count wraps, and a legal variable of 64 GiB.
  auto create = [&](std::vector<int64_t> shape) {
    CreateShardsRequest request;
    ShardSpec* shard = request.add_shards();
    *shard->mutable_variable() = spec;
    shard->mutable_variable()->set_name("hostile");
    shard->mutable_variable()->clear_shape();
    for (int64_t d : shape) shard->mutable_variable()->add_shape(d);
    shard->set_num_shards(1);
    shard->set_rows(shape[0]);
    grpc::ClientContext context;
    CreateShardsResponse response;
    return stub->CreateShards(&context, request, &response);
  };
  EXPECT_EQ(create({int64_t{1} << 24, int64_t{1} << 40}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  const grpc::Status huge = create({kMaxElements});
  EXPECT_EQ(huge.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(huge.error_message(), HasSubstr("budget (ps_server --max_memory_mb)"));

  // Tensors that do not match w: shapes, dtypes, byte counts, a shape that
  // claims far more than it carries.
  auto push = [&](const std::function<void(TensorProto*)>& mangle) {
    PushPullRequest request;
    request.mutable_push()->set_worker_id(0);
    ShardSlice* slice = request.mutable_push()->add_gradients();
    slice->set_variable("w");
    slice->set_version(1);
    EncodeFloatTensor({8}, std::vector<float>(8, 1.0f), slice->mutable_tensor());
    mangle(slice->mutable_tensor());
    grpc::ClientContext context;
    PullResponse response;
    return stub->PushPullSmall(&context, request, &response);
  };
  for (const auto& mangle : std::vector<std::function<void(TensorProto*)>>{
           [](TensorProto* t) { t->set_shape(0, 4); },
           [](TensorProto* t) { t->set_dtype(DT_INT64); },
           [](TensorProto* t) { t->mutable_data()->resize(7); },
           [](TensorProto* t) { t->set_shape(0, int64_t{1} << 40); },
           [](TensorProto* t) { t->add_shape(int64_t{1} << 40); }}) {
    EXPECT_EQ(push(mangle).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    // One shard named ten thousand times: its copies would not fit.
    PullRequest greedy;
    for (int i = 0; i < 10000; ++i) greedy.add_shards()->set_variable("w");
    grpc::ClientContext context;
    auto reader = stub->Pull(&context, greedy);
    PullResponse part;
    while (reader->Read(&part)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    grpc::ClientContext context;
    HeartbeatRequest request;
    request.set_worker_id(1 << 30);
    HeartbeatResponse response;
    EXPECT_EQ(stub->Heartbeat(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  // A push stream whose messages each fit but together exceed every variable
  // the server holds (32 bytes here) is refused before it is buffered: here
  // a slice that says it is one row of a shard (and carries four), again
  // and again, which never makes the shard whole.
  {
    grpc::ClientContext context;
    PushResponse response;
    auto writer = stub->Push(&context, &response);
    PushRequest part;
    part.set_worker_id(0);
    ShardSlice* slice = part.add_gradients();
    slice->set_variable("w");
    EncodeFloatTensor({4}, std::vector<float>(4, 1.0f), slice->mutable_tensor());
    slice->mutable_tensor()->set_shape(0, 1);
    for (int i = 0; i < 16 && writer->Write(part); ++i) {
    }
    writer->WritesDone();
    const grpc::Status flood = writer->Finish();
    EXPECT_EQ(flood.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(flood.error_message(), HasSubstr("holds only 32 bytes"));
  }
  // Scrapes reset mid-response.
  for (int i = 0; i < 5; ++i) ScrapeAndReset(*metrics_port);

  // The server still serves, its state intact: w is 1 - 1 = 0.
  grpc::health::v1::HealthCheckResponse health;
  grpc::ClientContext health_context;
  ASSERT_TRUE(grpc::health::v1::Health::NewStub(channel)
                  ->Check(&health_context, grpc::health::v1::HealthCheckRequest(), &health)
                  .ok());
  EXPECT_EQ(health.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  TensorMap values;
  ASSERT_TRUE(client->Pull({}, &values).ok());
  EXPECT_EQ(values["w"].values, std::vector<float>(8, 0.0f));
  EXPECT_EQ(client->step(), 1);
  auto described = client->Describe();
  ASSERT_TRUE(described.ok());
  EXPECT_EQ((*described)[0].shards_size(), 2);  // w's two, and nothing hostile
  EXPECT_THAT(HttpGet(*metrics_port, "/metrics"), HasSubstr("fulcrum_ps_updates_applied_total 2"));

  // An embedding table too wide, then rows pushed until the memory budget
  // refuses them: each an error, nothing half-stored.
  EmbeddingTableSpec table;
  table.set_name("t");
  table.set_width(int64_t{1} << 21);
  table.mutable_optimizer()->set_learning_rate(0.1f);
  EXPECT_EQ(client->CreateTables({table}).code(), absl::StatusCode::kInvalidArgument);
  table.set_width(64);
  ASSERT_TRUE(client->CreateTables({table}).ok());
  absl::Status filled;
  int64_t next_id = 0;
  for (int push = 0; push < 200 && filled.ok(); ++push) {
    std::vector<int64_t> ids(3000);
    for (int64_t& id : ids) id = next_id++;
    filled = client->PushRows({{"t", ids}}, {std::vector<float>(ids.size() * 64, 0.5f)}).status();
  }
  EXPECT_EQ(filled.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(filled.message()), HasSubstr("bound the table with max_rows"));

  ASSERT_TRUE(client->Pull({}, &values).ok());  // still serving, w intact
  EXPECT_EQ(values["w"].values, std::vector<float>(8, 0.0f));

  // SIGTERM: a clean exit 0.
  ps.process->Signal(SIGTERM);
  EXPECT_EQ(ps.process->Wait(absl::Seconds(30)), 0);
  EXPECT_TRUE(ps.process->WaitForLine("stopped", absl::Seconds(1)));
}

// In async mode a streamed push-pull answers each pulled shard as soon as
// the push has applied it: here before the push's second shard is even
// sent (a server that waited for the whole push would leave the first
// Read blocked until the deadline).
TEST(PsClusterTest, AsyncPushPullSendsEachShardBackOnceApplied) {
  PsProcess ps = StartPs(0, 1, 1, {"--mode=async"});
  ASSERT_FALSE(ps.address.empty());
  VariableSpec spec;
  spec.set_name("w");
  spec.add_shape(8);
  spec.set_dtype(DT_FLOAT);
  spec.mutable_partitioner()->set_kind(PartitionerSpec::FIXED_SHARDS);
  spec.mutable_partitioner()->set_num_shards(2);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  ASSERT_TRUE(NewGrpcPsClient({ps.address}, PsClientOptions{})->CreateVariables({spec}).ok());
  auto stub =
      PsService::NewStub(grpc::CreateChannel(ps.address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  auto stream = stub->PushPull(&context);
  const auto part = [](int shard, float gradient) {
    PushPullRequest request;
    request.mutable_push()->set_worker_id(0);
    ShardSlice* slice = request.mutable_push()->add_gradients();
    slice->set_variable("w");
    slice->set_shard(shard);
    EncodeFloatTensor({4}, std::vector<float>(4, gradient), slice->mutable_tensor());
    return request;
  };
  PushPullRequest first = part(0, 1.0f);
  first.mutable_pull()->set_worker_id(0);
  for (int shard : {0, 1}) {
    ShardRef* ref = first.mutable_pull()->add_shards();
    ref->set_variable("w");
    ref->set_shard(shard);
  }
  ASSERT_TRUE(stream->Write(first));
  PullResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_EQ(response.slices_size(), 1);
  EXPECT_EQ(response.slices(0).shard(), 0);
  EXPECT_THAT(FloatValues(response.slices(0).tensor()), ::testing::Each(-1.0f));
  EXPECT_EQ(response.push_results_size(), 0) << "the push is not over";

  ASSERT_TRUE(stream->Write(part(1, 2.0f)));
  ASSERT_TRUE(stream->WritesDone());
  PullResponse rest;
  while (stream->Read(&response)) AppendPullResponse(response, &rest);
  EXPECT_TRUE(stream->Finish().ok());
  ASSERT_EQ(rest.slices_size(), 1);
  EXPECT_EQ(rest.slices(0).shard(), 1);
  EXPECT_THAT(FloatValues(rest.slices(0).tensor()), ::testing::Each(-2.0f));
  ASSERT_EQ(rest.push_results_size(), 2);
  for (const ShardPushResult& result : rest.push_results()) {
    EXPECT_EQ(result.outcome(), ShardPushResult::APPLIED);
  }
}

// The unary calls serve transfers of one chunk each way; larger ones are
// refused with a clear error, and nothing is applied.
TEST(PsClusterTest, SmallCallsRefuseLargeTransfers) {
  PsProcess ps = StartPs(0, 1, 1, {"--mode=async"});
  ASSERT_FALSE(ps.address.empty());
  auto client = NewGrpcPsClient({ps.address}, PsClientOptions{});
  ASSERT_TRUE(client->CreateVariables({BigVariable()}).ok());  // 2 shards of 8.2 MiB
  auto stub =
      PsService::NewStub(grpc::CreateChannel(ps.address, grpc::InsecureChannelCredentials()));

  PullRequest pull;
  pull.set_worker_id(0);
  pull.add_shards()->set_variable("embedding");
  PullResponse response;
  grpc::ClientContext pull_context;
  const grpc::Status pulled = stub->PullSmall(&pull_context, pull, &response);
  EXPECT_EQ(pulled.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(pulled.error_message(),
              HasSubstr("this call carries at most 4194304 (larger transfers stream)"));

  PushPullRequest push_pull;
  push_pull.mutable_push()->set_worker_id(0);
  ShardSlice* slice = push_pull.mutable_push()->add_gradients();
  slice->set_variable("embedding");
  EncodeFloatTensor({1280, 1024}, std::vector<float>(size_t{1280} * 1024, 1.0f),
                    slice->mutable_tensor());
  grpc::ClientContext push_context;
  const grpc::Status pushed = stub->PushPullSmall(&push_context, push_pull, &response);
  EXPECT_EQ(pushed.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(pushed.error_message(),
              HasSubstr("this call carries at most 4194304 (larger transfers stream)"));

  auto described = client->Describe();
  ASSERT_TRUE(described.ok());
  EXPECT_EQ((*described)[0].updates_applied(), 0);
}

TEST(PsClusterTest, KeepServingAfterJobDoneUntilSigterm) {
  PsProcess ps = StartPs(0, 1, 1, {"--keep_serving_after_job_done"});
  ASSERT_FALSE(ps.address.empty());
  auto client = NewGrpcPsClient({ps.address}, PsClientOptions{});
  ASSERT_TRUE(client->Finish().ok());
  ASSERT_TRUE(client->JobDone("inspect me").ok());
  auto described = client->Describe();  // still answering, the job marked done
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_TRUE((*described)[0].shutting_down());
  client.reset();
  ps.process->Signal(SIGTERM);
  EXPECT_EQ(ps.process->Wait(absl::Seconds(30)), 0);
}

TEST(PsClusterTest, PrometheusMetrics) {
  PsProcess ps = StartPs(0, 1, 1, {"--mode=async", "--metrics_port=0"});
  ASSERT_FALSE(ps.address.empty());
  const std::optional<int> port = WaitForPort(*ps.process, "metrics on", absl::Seconds(10));
  ASSERT_TRUE(port.has_value());

  auto client = NewGrpcPsClient({ps.address}, PsClientOptions{});
  VariableSpec spec = BigVariable();
  spec.set_name("w");
  spec.clear_shape();
  spec.add_shape(8);
  ASSERT_TRUE(client->CreateVariables({spec}).ok());
  TensorMap values;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        client->PushPull({{"w", DenseTensor{{8}, std::vector<float>(8, 1.0f)}}}, {}, &values).ok());
  }
  const std::string metrics = HttpGet(*port, "/metrics");
  // 3 pushes to both shards of w.
  EXPECT_THAT(metrics, HasSubstr("fulcrum_ps_updates_applied_total 6"));
  EXPECT_THAT(metrics, HasSubstr("fulcrum_ps_step 3"));
  EXPECT_THAT(metrics, HasSubstr("fulcrum_ps_pushed_bytes_total 96"));  // 3 x 8 floats
  // Steps this small travel as unary calls.
  EXPECT_THAT(metrics,
              HasSubstr("fulcrum_ps_rpc_duration_seconds_count{method=\"PushPullSmall\"} 3"));
  EXPECT_THAT(metrics, HasSubstr("fulcrum_ps_gradient_staleness_count 6"));
  EXPECT_THAT(metrics, HasSubstr("fulcrum_ps_pulled_bytes_total 96"));
  EXPECT_THAT(metrics, HasSubstr("fulcrum_ps_stale_gradients_dropped_total 0"));
  EXPECT_THAT(metrics, HasSubstr("fulcrum_ps_workers_active 1"));
  EXPECT_THAT(metrics, HasSubstr("fulcrum_ps_workers{state=\"live\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("fulcrum_ps_workers{state=\"dead\"} 0"));
  EXPECT_THAT(metrics, HasSubstr("fulcrum_ps_job_done 0"));
  EXPECT_THAT(metrics, HasSubstr("fulcrum_ps_checkpoint_failures_total 0"));
  // The status page beside them: the shards, the worker, the security.
  const std::string page = HttpGet(*port, "/");
  EXPECT_THAT(page, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(page, HasSubstr("parameter server 0 of 1 at " + ps.address));
  EXPECT_THAT(page, HasSubstr("<td>w</td><td>0 of 2</td>"));
  EXPECT_THAT(page, HasSubstr("<td>w</td><td>1 of 2</td>"));
  EXPECT_THAT(page, HasSubstr("<td>0</td><td>live</td>"));
  EXPECT_THAT(page, HasSubstr("updates applied 6"));
  EXPECT_THAT(page, HasSubstr("&middot; plaintext &middot;"));
}

TEST(PsClusterTest, UnreachableServerIsReportedByAddress) {
  PsClientOptions options;
  options.call_timeout = absl::Milliseconds(300);
  options.retry_timeout = absl::Milliseconds(300);
  options.initial_backoff = absl::Milliseconds(20);
  // A port nothing listens on: bind one, then close it.
  PsProcess ps = StartPs(0, 1, 1, {});
  const std::string address = ps.address;
  ps.process->Signal(SIGTERM);
  ASSERT_EQ(ps.process->Wait(absl::Seconds(30)), 0);
  auto client = NewGrpcPsClient({address}, options);
  absl::Status status = client->CreateVariables({BigVariable()});
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr(address));
}

TEST(PsClusterTest, ClientWaitsForAServerThatStartsLate) {
  // A port this test's own server picked, then left.
  PsProcess first = StartPs(0, 1, 1, {});
  ASSERT_NE(first.port, 0);
  first.process->Signal(SIGKILL);
  ASSERT_TRUE(first.process->Wait(absl::Seconds(30)).has_value());
  PsClientOptions options;
  options.call_timeout = absl::Seconds(30);
  auto client = NewGrpcPsClient({first.address}, options);
  absl::Status created = absl::UnknownError("not run");
  absl::Notification done;
  std::thread worker([&] {
    created = client->CreateVariables({BigVariable()});
    done.Notify();
  });
  // The worker is already waiting when the server comes up.
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  PsProcess ps = StartPs(0, 1, 1, {}, first.port);
  worker.join();
  EXPECT_TRUE(created.ok()) << created;
}

// Two servers on one port would split the workers between them; the second
// is refused instead. So is a taken metrics port.
TEST(PsClusterTest, ASecondServerOnATakenPortExitsWithAClearError) {
  PsProcess ps = StartPs(0, 1, 1, {"--metrics_port=0"});
  ASSERT_NE(ps.port, 0);
  const std::optional<int> metrics_port = WaitForPort(*ps.process, "metrics on", absl::Seconds(10));
  ASSERT_TRUE(metrics_port.has_value());
  PsProcess second = StartPs(0, 1, 1, {}, ps.port);
  EXPECT_EQ(second.process->Wait(absl::Seconds(30)), 1);
  EXPECT_TRUE(second.process->HasLine(
      absl::StrCat("cannot listen on 127.0.0.1:", ps.port, ": the port is in use")));
  PsProcess third = StartPs(0, 1, 1, {absl::StrCat("--metrics_port=", *metrics_port)});
  EXPECT_EQ(third.process->Wait(absl::Seconds(30)), 1);
  EXPECT_TRUE(third.process->HasLine(absl::StrCat(
      "cannot serve metrics on 127.0.0.1:", *metrics_port, ": Address already in use")));
  // The first server serves on, alone.
  auto client = NewGrpcPsClient({ps.address}, PsClientOptions{});
  EXPECT_TRUE(client->CreateVariables({BigVariable()}).ok());
}

TEST(PsClusterTest, BadFlagsExitWithAClearError) {
  ChildProcess bad_mode("bad", {RunfilePath("ps_server/ps_server"), "--ps_hosts=127.0.0.1:0",
                                "--worker_hosts=127.0.0.1:1", "--mode=eventual"});
  EXPECT_EQ(bad_mode.Wait(absl::Seconds(30)), 2);
  EXPECT_TRUE(bad_mode.WaitForLine("--mode: 'eventual'", absl::Seconds(1)));
  ChildProcess no_spec("nospec", {RunfilePath("ps_server/ps_server")});
  EXPECT_EQ(no_spec.Wait(absl::Seconds(30)), 2);
  EXPECT_TRUE(no_spec.WaitForLine("no cluster spec", absl::Seconds(1)));
  // Plaintext only when asked.
  ChildProcess no_tls("notls", {RunfilePath("ps_server/ps_server"), "--ps_hosts=127.0.0.1:0",
                                "--worker_hosts=127.0.0.1:1"});
  EXPECT_EQ(no_tls.Wait(absl::Seconds(30)), 2);
  EXPECT_TRUE(no_tls.WaitForLine("no transport security chosen", absl::Seconds(1)));
  std::ofstream(::testing::TempDir() + "/short.token") << "short";
  ChildProcess short_token("short", {RunfilePath("ps_server/ps_server"), "--ps_hosts=127.0.0.1:0",
                                     "--worker_hosts=127.0.0.1:1", "--insecure",
                                     "--auth_token_file=" + ::testing::TempDir() + "/short.token"});
  EXPECT_EQ(short_token.Wait(absl::Seconds(30)), 2);
  EXPECT_TRUE(short_token.WaitForLine("a token needs at least 16", absl::Seconds(1)));
  ChildProcess bad_zone("zone", {RunfilePath("ps_server/ps_server"), "--ps_hosts=127.0.0.1:0",
                                 "--worker_hosts=127.0.0.1:1", "--insecure", "--zone=rack 1"});
  EXPECT_EQ(bad_zone.Wait(absl::Seconds(30)), 2);
  EXPECT_TRUE(bad_zone.WaitForLine("zone: at most 63 letters", absl::Seconds(1)));
}

// With token files, a plaintext server takes data calls with the cluster
// token and control calls with the control token only.
TEST(PsClusterTest, TokensGuardAPlaintextServer) {
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/cluster.token") << "cluster-0123456789abcdef\n";
  std::ofstream(dir + "/control.token") << "control-0123456789abcdef\n";
  PsProcess ps = StartPs(0, 1, 1,
                         {"--mode=async", "--auth_token_file=" + dir + "/cluster.token",
                          "--control_token_file=" + dir + "/control.token"});
  ASSERT_FALSE(ps.address.empty());
  const auto connect = [&](const std::string& token) {
    PsClientOptions options;
    options.call_timeout = absl::Seconds(10);
    options.retry_timeout = absl::Seconds(1);
    options.auth_token = token;
    return NewGrpcPsClient({ps.address}, options);
  };
  for (const std::string& token : {std::string(), std::string("cluster-0123456789abcdeX")}) {
    const absl::Status refused = connect(token)->Describe().status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated) << refused;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("needs the cluster token"));
  }
  auto worker = connect("cluster-0123456789abcdef");
  EXPECT_TRUE(worker->Describe().ok()) << "the server carries on";
  const absl::Status stop = worker->JobDone("a worker trying");
  EXPECT_EQ(stop.code(), absl::StatusCode::kUnauthenticated) << stop;
  EXPECT_THAT(std::string(stop.message()), HasSubstr("needs the control token"));
  auto chief = connect("control-0123456789abcdef");
  EXPECT_TRUE(chief->Describe().ok()) << "the control token serves data calls too";
  EXPECT_TRUE(chief->JobDone("the chief").ok());
  EXPECT_TRUE(ps.process->WaitForLine("job done", absl::Seconds(10)));
}

// A server with the cluster token alone never takes a control call without
// a token: JobDone and SaveCheckpoint then need the cluster token. Its
// health service answers probes without one (deliberately: kubelet's gRPC
// probes carry no metadata).
TEST(PsClusterTest, ControlCallsNeverFailOpenWithTheClusterTokenAlone) {
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/only-cluster.token") << "cluster-0123456789abcdef\n";
  PsProcess ps =
      StartPs(0, 1, 1, {"--mode=async", "--auth_token_file=" + dir + "/only-cluster.token"});
  ASSERT_FALSE(ps.address.empty());
  const auto connect = [&](const std::string& token) {
    PsClientOptions options;
    options.call_timeout = absl::Seconds(10);
    options.retry_timeout = absl::Seconds(1);
    options.auth_token = token;
    return NewGrpcPsClient({ps.address}, options);
  };
  auto tokenless = connect("");
  const absl::Status stop = tokenless->JobDone("anyone who can reach the port");
  EXPECT_EQ(stop.code(), absl::StatusCode::kUnauthenticated) << stop;
  EXPECT_THAT(std::string(stop.message()), HasSubstr("needs the cluster token"));
  EXPECT_THAT(std::string(stop.message()), HasSubstr("carries no token"));
  const absl::Status save = tokenless->SaveCheckpoint(1).status();
  EXPECT_EQ(save.code(), absl::StatusCode::kUnauthenticated) << save;
  EXPECT_TRUE(ps.process->WaitForLine("refused JobDone", absl::Seconds(10)));

  grpc::health::v1::HealthCheckResponse health;
  grpc::ClientContext health_context;
  const grpc::Status probed =
      grpc::health::v1::Health::NewStub(
          grpc::CreateChannel(ps.address, grpc::InsecureChannelCredentials()))
          ->Check(&health_context, grpc::health::v1::HealthCheckRequest(), &health);
  ASSERT_TRUE(probed.ok()) << probed.error_message();
  EXPECT_EQ(health.status(), grpc::health::v1::HealthCheckResponse::SERVING)
      << "the server serves on after the refusals";

  auto chief = connect("cluster-0123456789abcdef");
  EXPECT_TRUE(chief->Describe().ok());
  EXPECT_TRUE(chief->JobDone("the chief, with the cluster token").ok());
  EXPECT_TRUE(ps.process->WaitForLine("job done", absl::Seconds(10)));
}

// With the TLS flags, a server lets in clients that hold a certificate of
// its CA, refuses the others in the handshake, and serves on.
TEST(PsClusterTest, MutualTlsLetsInOnlyTheCasCertificates) {
  const std::string certs = ::testing::TempDir() + "/certs";
  ASSERT_EQ(std::system(("scripts/make_certs.sh " + certs + " > /dev/null").c_str()), 0);
  PsProcess ps =
      StartPs(0, 1, 1,
              {"--mode=async", "--tls_cert=" + certs + "/ps.pem", "--tls_key=" + certs + "/ps.key",
               "--tls_ca=" + certs + "/ca.pem", "--metrics_port=0"});
  ASSERT_FALSE(ps.address.empty());
  EXPECT_TRUE(ps.process->WaitForLine("(mutual TLS)", absl::Seconds(1)));
  // The status page is served to loopback only with TLS: this test asks
  // from 127.0.0.1 (MetricsServerTest checks which peers are loopback).
  const std::optional<int> metrics_port = WaitForPort(*ps.process, "metrics on", absl::Seconds(10));
  ASSERT_TRUE(metrics_port.has_value());
  EXPECT_THAT(HttpGet(*metrics_port, "/"), HasSubstr("&middot; mutual TLS &middot;"));
  PsClientOptions worker;
  worker.tls_cert = certs + "/worker.pem";
  worker.tls_key = certs + "/worker.key";
  worker.tls_ca = certs + "/ca.pem";
  auto client = NewGrpcPsClient({ps.address}, worker);
  VariableSpec spec;
  spec.set_name("w");
  spec.add_shape(8);
  spec.set_dtype(DT_FLOAT);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  const absl::Status created = client->CreateVariables({spec});
  ASSERT_TRUE(created.ok()) << created;
  TensorMap grads, values;
  grads["w"] = DenseTensor{{8}, std::vector<float>(8, 1.0f)};
  ASSERT_TRUE(client->PushPull(grads, {}, &values).ok());
  EXPECT_EQ(values.at("w").values.size(), 8u);

  PsClientOptions plaintext;  // no certificate at all
  plaintext.worker_id = -1;
  plaintext.call_timeout = absl::Seconds(5);
  plaintext.retry_timeout = absl::Seconds(1);
  auto refused = NewGrpcPsClient({ps.address}, plaintext)->Describe();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_TRUE(client->Describe().ok());

  // Control calls: a worker's certificate may not make them, the chief's may.
  const absl::Status stop = client->JobDone("a worker trying");
  EXPECT_EQ(stop.code(), absl::StatusCode::kPermissionDenied) << stop;
  EXPECT_THAT(std::string(stop.message()),
              HasSubstr("only a certificate naming chief or fulcrumctl"));
  EXPECT_THAT(std::string(stop.message()), HasSubstr("fulcrum://worker"));
  EXPECT_EQ(client->SaveCheckpoint(1).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(ps.process->WaitForLine("refused JobDone", absl::Seconds(10)));
  EXPECT_TRUE(client->Describe().ok()) << "the server carries on";
  PsClientOptions chief = worker;
  chief.tls_cert = certs + "/chief.pem";
  chief.tls_key = certs + "/chief.key";
  auto chief_client = NewGrpcPsClient({ps.address}, chief);
  // Past the check: this server has no checkpoint directory to write to,
  // which its metrics count as a checkpoint failed (an alert's series).
  EXPECT_NE(chief_client->SaveCheckpoint(1).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(HttpGet(*metrics_port, "/metrics"),
              HasSubstr("fulcrum_ps_checkpoint_failures_total 1"));
  auto described = chief_client->Describe();
  ASSERT_TRUE(described.ok());
  EXPECT_EQ((*described)[0].checkpoints().failures(), 1);
  EXPECT_EQ((*described)[0].checkpoints().last_step(), -1);
  EXPECT_THAT((*described)[0].checkpoints().last_error(), HasSubstr("step 1: "));
  EXPECT_TRUE(chief_client->JobDone("the chief").ok());
  EXPECT_TRUE(ps.process->WaitForLine("job done", absl::Seconds(10)));
}

TEST(PsClusterTest, CustomLoopExampleTrainsAgainstARealServer) {
  PsProcess ps = StartPs(0, 1, 1, {"--mode=async"});
  ASSERT_FALSE(ps.address.empty());
  ChildProcess example("custom_loop",
                       {RunfilePath("examples/custom_loop"), "--ps_hosts=" + ps.address});
  EXPECT_EQ(example.Wait(absl::Seconds(120)), 0);
  EXPECT_TRUE(example.WaitForLine("final max weight error", absl::Seconds(1)));
  // The example is the chief: it ended the job, so the server exits 0.
  EXPECT_EQ(ps.process->Wait(absl::Seconds(30)), 0);
}

}  // namespace
}  // namespace fulcrum
