// The gRPC transport on its own, against a real PsGrpcServer on loopback:
// unary and streamed pulls with values placed where the sink says, pushes
// sent from lent memory, errors converted, a server that is not there.
#include "client/grpc/grpc_ps_transport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client_test_util.h"
#include "common/loopback.h"
#include "common/row_push.h"
#include "common/slices.h"
#include "ps_server/grpc/ps_grpc_server.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// Places every slice of one variable into `values`, by row.
class VectorPlacer final : public SlicePlacer {
 public:
  VectorPlacer(int64_t row_elems, std::vector<float>* values)
      : row_elems_(row_elems), values_(values) {}
  float* Place(const ShardSlice& slice, size_t bytes) override {
    ++placed;
    if (bytes != static_cast<size_t>(SliceRows(slice) * row_elems_) * sizeof(float)) return nullptr;
    return values_->data() + slice.row_offset() * row_elems_;
  }
  int placed = 0;

 private:
  const int64_t row_elems_;
  std::vector<float>* const values_;
};

class GrpcPsTransportTest : public ::testing::Test {
 protected:
  GrpcPsTransportTest() : ps_(TestServerConfig(ASYNC, 1)) {
    auto server = PsGrpcServer::Start(&ps_, "127.0.0.1:0");
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    transport_ =
        std::make_unique<GrpcPsTransport>(absl::StrCat("127.0.0.1:", server_->port()), TlsFiles{});
  }
  ~GrpcPsTransportTest() override { server_->Shutdown(absl::Now() + absl::Seconds(1)); }

  // Creates `name` [rows, 256] in one shard, filled with `init`.
  void Create(const std::string& name, int64_t rows, float init) {
    CreateShardsRequest request;
    ShardSpec* shard = request.add_shards();
    *shard->mutable_variable() = TestVariable(name, {rows, 256}, 1, init);
    shard->set_num_shards(1);
    shard->set_rows(rows);
    auto created = transport_->CreateShards(request, Deadline());
    ASSERT_TRUE(created.ok()) << created.status();
    EXPECT_NE(created->incarnation(), 0u);
  }

  // Pulls `name`, its values placed into `values`; how many slices were
  // placed.
  int PullInto(const std::string& name, int64_t rows, std::vector<float>* values) {
    PullRequest pull;
    pull.add_shards()->set_variable(name);
    values->assign(rows * 256, -1.0f);
    VectorPlacer placer(256, values);
    auto pulled = transport_->Pull(pull, rows * 256 * 4, Deadline(), &placer);
    EXPECT_TRUE(pulled.ok()) << pulled.status();
    return placer.placed;
  }

  static absl::Time Deadline() { return absl::Now() + absl::Seconds(30); }

  ParameterServer ps_;
  std::unique_ptr<PsGrpcServer> server_;
  std::unique_ptr<GrpcPsTransport> transport_;
};

TEST_F(GrpcPsTransportTest, SmallPullsAreUnaryAndLargeOnesStreamedBothIntoPlace) {
  Create("small", 16, 2.5f);   // 16 KiB: one message each way
  Create("big", 8192, -1.5f);  // 8 MiB: a stream of 4 MiB chunks
  std::vector<float> values;
  EXPECT_EQ(PullInto("small", 16, &values), 1);
  EXPECT_EQ(values, std::vector<float>(size_t{16} * 256, 2.5f));
  EXPECT_GE(PullInto("big", 8192, &values), 2);
  EXPECT_EQ(values, std::vector<float>(size_t{8192} * 256, -1.5f));
}

TEST_F(GrpcPsTransportTest, PushesAndPushPullsApplyAndAnswer) {
  Create("w", 64, 1.0f);
  const std::vector<float> grad(size_t{64} * 256, 0.5f);
  auto push = std::make_shared<OutgoingPush>();
  push->request.set_worker_id(0);
  ASSERT_TRUE(AppendShardSlices("w", 0, 0, {64, 256}, grad, DT_FLOAT, kChunkBytes,
                                push->request.mutable_gradients(), &push->lent)
                  .ok());
  auto pushed = transport_->Push(push, Deadline());
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  ASSERT_EQ(pushed->results_size(), 1);
  EXPECT_EQ(pushed->results(0).outcome(), ShardPushResult::APPLIED);

  PullRequest pull;
  pull.add_shards()->set_variable("w");
  std::vector<float> values(size_t{64} * 256);
  VectorPlacer placer(256, &values);
  auto both = transport_->PushPull(push, pull, values.size() * 4, Deadline(), &placer);
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->push_results_size(), 1);
  EXPECT_EQ(both->push_results(0).version(), 2);
  EXPECT_EQ(values, std::vector<float>(size_t{64} * 256, 0.0f))
      << "1 - 0.5 - 0.5, read after the push";
  EXPECT_EQ(both->waited_us(), 0) << "async: nothing to wait for";
  // The server counted the bytes each way, for its share of the traffic.
  auto described = transport_->Describe(Deadline());
  ASSERT_TRUE(described.ok());
  EXPECT_EQ(described->bytes_pushed(), 2 * 64 * 256 * 4);
  EXPECT_EQ(described->bytes_pulled(), 64 * 256 * 4);
}

// A push of rows in parts streams and applies as one push; a page of the
// table reads them back; parts of two pushes are refused, changing nothing.
TEST_F(GrpcPsTransportTest, RowPushesInPartsApplyAsOneAndReadBack) {
  CreateShardsRequest create;
  EmbeddingTableSpec& table = *create.add_tables();
  table.set_name("t");
  table.set_width(2);
  table.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  table.mutable_optimizer()->set_learning_rate(1.0f);
  create.add_ranges()->set_table("t");
  ASSERT_TRUE(transport_->CreateShards(create, Deadline()).ok());
  PushRowsRequest push;
  push.set_worker_id(0);
  push.set_push_id(1);
  TableRows& rows = *push.add_tables();
  rows.set_table("t");
  for (int64_t id = 0; id < 10; ++id) {
    rows.add_ids(id);
    rows.add_values(1.0f);
    rows.add_values(2.0f);
  }
  std::vector<PushRowsRequest> parts = SplitRowPush(push, 3, 1 << 20);
  ASSERT_EQ(parts.size(), 4u);
  auto pushed = transport_->PushRowsInParts(parts, Deadline());
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  ASSERT_EQ(pushed->results_size(), 1);
  EXPECT_EQ(pushed->results(0).version(), 1);  // one step for the four parts
  parts[2].set_push_id(2);
  EXPECT_THAT(transport_->PushRowsInParts(parts, Deadline()).status().message(),
              HasSubstr("not of the same push"));

  ReadRowsRequest read;
  read.set_table("t");
  auto page = transport_->ReadRows(read, Deadline());
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->ids_size(), 10);
  EXPECT_EQ(std::vector<float>(page->values().begin(), page->values().begin() + 2),
            (std::vector<float>{-1.0f, -2.0f}));  // pushed once
}

TEST_F(GrpcPsTransportTest, TheServersErrorsArriveWithTheirCodeAndMessage) {
  PullRequest pull;
  pull.add_shards()->set_variable("nothing");
  auto pulled = transport_->Pull(pull, 1024, Deadline(), nullptr);
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(pulled.status().message()), HasSubstr("nothing"));
  HeartbeatRequest heartbeat;  // no worker id
  EXPECT_EQ(transport_->Heartbeat(heartbeat, Deadline()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GrpcPsTransportAloneTest, AServerThatIsNotThereIsUnavailableAtTheDeadline) {
  GrpcPsTransport nowhere(absl::StrCat("127.0.0.1:", FreeLoopbackPorts(1)[0]), TlsFiles{});
  const absl::Status status = nowhere.Describe(absl::Now() + absl::Milliseconds(300)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
}

}  // namespace
}  // namespace fulcrum
