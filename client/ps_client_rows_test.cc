// PsClient's embedding tables over two in-process servers: rows routed by
// id, deduplicated, scattered back; gradients summed per id; sync steps; a
// restarted server given its tables again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "client/client_test_util.h"
#include "client/ps_client_impl.h"
#include "client/transport/forwarding_ps_transport.h"
#include "client/transport/in_process_ps_transport.h"
#include "common/embedding.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

constexpr int kServers = 2;
constexpr int64_t kWidth = 3;

EmbeddingTableSpec Table(const std::string& name) {
  EmbeddingTableSpec spec;
  spec.set_name(name);
  spec.set_width(kWidth);
  spec.mutable_initializer()->set_kind(InitializerSpec::RANDOM_UNIFORM);
  spec.mutable_initializer()->set_minval(-1.0f);
  spec.mutable_initializer()->set_maxval(1.0f);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

std::vector<float> Initial(const std::string& table, int64_t id) {
  std::vector<float> row(kWidth);
  InitialEmbeddingRow(Table(table), id, absl::MakeSpan(row));
  return row;
}

// Two servers, each told its place in the cluster, and a client per worker.
class Cluster {
 public:
  Cluster(ConsistencyMode mode, int workers) : mode_(mode), workers_(workers) {
    for (int i = 0; i < kServers; ++i) Restart(i);
    for (int w = 0; w < workers; ++w) {
      std::vector<std::unique_ptr<PsTransport>> transports;
      for (int i = 0; i < kServers; ++i) {
        transports.push_back(std::make_unique<Indirect>(this, i));
      }
      PsClientOptions options;
      options.worker_id = w;
      options.mode = mode;
      clients_.push_back(std::make_unique<PsClientImpl>(std::move(transports), options));
    }
  }
  PsClient& client(int w) { return *clients_[w]; }
  ParameterServer& server(int i) { return *servers_[i]; }
  // Server i loses everything, as a process restarted without checkpoints.
  void Restart(int i) {
    PsServerConfig config = TestServerConfig(mode_, workers_);
    for (int p = 0; p < kServers; ++p) config.mutable_cluster()->mutable_cluster()->add_ps("h:0");
    config.mutable_cluster()->mutable_task()->set_type("ps");
    config.mutable_cluster()->mutable_task()->set_index(i);
    servers_.resize(kServers);
    servers_[i] = std::make_unique<ParameterServer>(config);
  }

 private:
  // The calls on a client's state, to whichever server i is now (the
  // others go to the first).
  class Indirect : public ForwardingPsTransport {
   public:
    Indirect(Cluster* cluster, int i)
        : ForwardingPsTransport(std::make_unique<InProcessPsTransport>(&cluster->server(i))),
          cluster_(cluster),
          i_(i) {}
    absl::StatusOr<CreateShardsResponse> CreateShards(const CreateShardsRequest& request,
                                                      absl::Time deadline) override {
      return Now().CreateShards(request, deadline);
    }
    absl::StatusOr<PullRowsResponse> PullRows(const PullRowsRequest& request,
                                              absl::Time deadline) override {
      return Now().PullRows(request, deadline);
    }
    absl::StatusOr<PushRowsResponse> PushRows(const PushRowsRequest& request,
                                              absl::Time deadline) override {
      return Now().PushRows(request, deadline);
    }
    absl::StatusOr<PullResponse> Pull(const PullRequest& request, int64_t response_bytes,
                                      absl::Time deadline, SlicePlacer* sink) override {
      return Now().Pull(request, response_bytes, deadline, sink);
    }
    // Pages of at most 5 rows, so that a table takes several.
    absl::StatusOr<ReadRowsResponse> ReadRows(const ReadRowsRequest& request,
                                              absl::Time deadline) override {
      ReadRowsRequest small = request;
      small.set_max_rows(5);
      return Now().ReadRows(small, deadline);
    }
    absl::StatusOr<PullResponse> PushPull(std::shared_ptr<const OutgoingPush> push,
                                          const PullRequest& pull, int64_t response_bytes,
                                          absl::Time deadline, SlicePlacer* sink) override {
      return Now().PushPull(std::move(push), pull, response_bytes, deadline, sink);
    }

   private:
    InProcessPsTransport Now() { return InProcessPsTransport(&cluster_->server(i_)); }
    Cluster* const cluster_;
    const int i_;
  };
  const ConsistencyMode mode_;
  const int workers_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::unique_ptr<PsClient>> clients_;
};

// Repeated ids read the same row; each distinct id lives on one server;
// unseen ids read their initial rows whatever the number of servers; a
// push sums a repeated id's gradients.
TEST(PsClientRowsTest, RoutesDeduplicatesAndSumsPerId) {
  Cluster cluster(ASYNC, 1);
  PsClient& client = cluster.client(0);
  ASSERT_TRUE(client.CreateTables({Table("a"), Table("b")}).ok());
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < 40; ++id) ids.push_back(id * 7919);
  ids.push_back(ids[3]);
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client.PullRows({{"a", ids}, {"b", {5}}}, &rows).ok());
  ASSERT_EQ(rows[0].size(), ids.size() * kWidth);
  for (size_t k = 0; k < ids.size(); ++k) {
    EXPECT_EQ(std::vector<float>(rows[0].begin() + k * kWidth, rows[0].begin() + (k + 1) * kWidth),
              Initial("a", ids[k]))
        << k;
  }
  EXPECT_EQ(rows[1], Initial("b", 5));

  // id 7 twice (gradients 1 and 2), id 8 once (gradient 10).
  auto stats = client.PushRows({{"a", {7, 8, 7}}}, {{1, 1, 1, 10, 10, 10, 2, 2, 2}});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GE(stats->applied, 1);
  ASSERT_TRUE(client.PullRows({{"a", {8, 7}}}, &rows).ok());
  for (int j = 0; j < kWidth; ++j) {
    EXPECT_FLOAT_EQ(rows[0][j], Initial("a", 8)[j] - 10.0f);
    EXPECT_FLOAT_EQ(rows[0][kWidth + j], Initial("a", 7)[j] - 3.0f);
  }
  // Each server stores the rows it owns, and only those.
  for (int i = 0; i < kServers; ++i) {
    const int64_t expected =
        (EmbeddingOwner(7, kServers) == i) + (EmbeddingOwner(8, kServers) == i);
    EXPECT_EQ(cluster.server(i).Describe().tables(0).rows(), expected) << i;
  }
}

// A step pushes the gradients of the rows it pulled, whose routing the
// client keeps from the pull; a push of other ids, or of the same ids to
// another table, is routed as itself.
TEST(PsClientRowsTest, APushRoutesItsOwnIdsAfterAPullOfOthers) {
  Cluster cluster(ASYNC, 1);
  PsClient& client = cluster.client(0);
  ASSERT_TRUE(client.CreateTables({Table("a"), Table("b")}).ok());
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client.PullRows({{"a", {7, 8, 7}}}, &rows).ok());
  ASSERT_TRUE(client.PushRows({{"a", {7, 8, 7}}}, {{1, 1, 1, 10, 10, 10, 2, 2, 2}}).ok());
  ASSERT_TRUE(client.PushRows({{"a", {8, 9}}}, {{1, 1, 1, 4, 4, 4}}).ok());
  ASSERT_TRUE(client.PushRows({{"b", {8, 9}}}, {{5, 5, 5, 6, 6, 6}}).ok());
  ASSERT_TRUE(client.PullRows({{"a", {7, 8, 9}}, {"b", {8, 9}}}, &rows).ok());
  const std::map<int64_t, float> a_moved = {{7, 3.0f}, {8, 11.0f}, {9, 4.0f}};
  const std::map<int64_t, float> b_moved = {{8, 5.0f}, {9, 6.0f}};
  int k = 0;
  for (const auto& [id, moved] : a_moved) {
    for (int j = 0; j < kWidth; ++j) {
      EXPECT_FLOAT_EQ(rows[0][k * kWidth + j], Initial("a", id)[j] - moved) << "a " << id;
    }
    ++k;
  }
  k = 0;
  for (const auto& [id, moved] : b_moved) {
    for (int j = 0; j < kWidth; ++j) {
      EXPECT_FLOAT_EQ(rows[1][k * kWidth + j], Initial("b", id)[j] - moved) << "b " << id;
    }
    ++k;
  }
}

TEST(PsClientRowsTest, MistakesAreRefusedBeforeSending) {
  Cluster cluster(ASYNC, 1);
  PsClient& client = cluster.client(0);
  std::vector<std::vector<float>> rows;
  EXPECT_EQ(client.PullRows({{"a", {1}}}, &rows).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(client.CreateTables({Table("a")}).ok());
  auto pushed = client.PushRows({{"a", {1, 2}}}, {{1, 1, 1}});
  EXPECT_EQ(pushed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pushed.status().message(), HasSubstr("3 gradient floats for 2 ids of width 3"));
  auto negative = client.PushRows({{"a", {-1}}}, {{1, 1, 1}});
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.status().message(), HasSubstr("key space"));
  std::vector<float> out(5);
  absl::Status short_out = client.PullRowsInto({{"a", {1, 2}}}, {absl::MakeSpan(out)});
  EXPECT_EQ(short_out.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_out.message(), HasSubstr("5 output floats for 2 ids of width 3"));
  EXPECT_EQ(client.PullRowsInto({{"a", {1}}}, {}).code(), absl::StatusCode::kInvalidArgument);
}

// Sync over two servers: each step's rows are averaged per id over the
// workers that pushed them, and a worker that pushes no id of a server
// still completes that server's step.
TEST(PsClientRowsTest, SyncStepsCompleteOnEveryServer) {
  Cluster cluster(SYNC, 2);
  for (int w = 0; w < 2; ++w) ASSERT_TRUE(cluster.client(w).CreateTables({Table("a")}).ok());
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> rows[2];
    std::thread other([&] {
      ASSERT_TRUE(cluster.client(1).PullRows({{"a", {4}}}, &rows[1]).ok());
      ASSERT_TRUE(cluster.client(1).PushRows({{"a", {4}}}, {{3, 3, 3}}).ok());
    });
    ASSERT_TRUE(cluster.client(0).PullRows({{"a", {4, 9}}}, &rows[0]).ok());
    ASSERT_TRUE(cluster.client(0).PushRows({{"a", {4, 9}}}, {{1, 1, 1, 6, 6, 6}}).ok());
    other.join();
    // Both read the same rows at the same step.
    EXPECT_EQ(std::vector<float>(rows[0][0].begin(), rows[0][0].begin() + kWidth), rows[1][0]);
    for (int j = 0; j < kWidth; ++j) {
      EXPECT_FLOAT_EQ(rows[0][0][j], Initial("a", 4)[j] - 2.0f * step);           // mean of 1 and 3
      EXPECT_FLOAT_EQ(rows[0][0][kWidth + j], Initial("a", 9)[j] - 6.0f * step);  // 6 alone
    }
  }
}

// A server that restarted is given its tables again by the next call.
TEST(PsClientRowsTest, ARestartedServerGetsItsTablesAgain) {
  Cluster cluster(ASYNC, 1);
  PsClient& client = cluster.client(0);
  ASSERT_TRUE(client.CreateTables({Table("a")}).ok());
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < 16; ++id) ids.push_back(id);
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client.PullRows({{"a", ids}}, &rows).ok());
  cluster.Restart(1);
  ASSERT_TRUE(client.PullRows({{"a", ids}}, &rows).ok());
  ASSERT_EQ(cluster.server(1).Describe().tables_size(), 1);
  EXPECT_EQ(std::vector<float>(rows[0].begin(), rows[0].begin() + kWidth), Initial("a", 0));
}

// A pull of more ids than one call may name on a server is split by the
// client, not refused, and every row lands in its place.
// More ids than one call takes on each server: 0, 1, 2, ...
std::vector<int64_t> IdsPastOneCall() {
  std::vector<int64_t> ids(kServers * kMaxIdsPerRowCall + 1000);
  for (size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<int64_t>(k);
  return ids;
}

TEST(PsClientRowsTest, APullOfMoreIdsThanOneCallTakesIsSplit) {
  Cluster cluster(ASYNC, 1);
  PsClient& client = cluster.client(0);
  ASSERT_TRUE(client.CreateTables({Table("a")}).ok());
  const std::vector<int64_t> ids = IdsPastOneCall();
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client.PullRows({{"a", ids}}, &rows).ok());
  ASSERT_EQ(rows[0].size(), ids.size() * kWidth);
  for (size_t k : {size_t{0}, size_t{kMaxIdsPerRowCall} + 7, ids.size() - 1}) {
    EXPECT_EQ(std::vector<float>(rows[0].begin() + k * kWidth, rows[0].begin() + (k + 1) * kWidth),
              Initial("a", ids[k]))
        << k;
  }
}

// A push of more ids than one call takes goes in parts that apply as one
// push: one sync step, every id updated once.
TEST(PsClientRowsTest, APushOfMoreIdsThanOneCallTakesAppliesAsOne) {
  Cluster cluster(SYNC, 1);
  PsClient& client = cluster.client(0);
  ASSERT_TRUE(client.CreateTables({Table("a")}).ok());
  const std::vector<int64_t> ids = IdsPastOneCall();
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client.PullRows({{"a", ids}}, &rows).ok());
  auto stats = client.PushRows({{"a", ids}}, {std::vector<float>(ids.size() * kWidth, 0.5f)});
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->applied, kServers);  // one table, one push on each server
  for (int i = 0; i < kServers; ++i) {
    ASSERT_EQ(cluster.server(i).Describe().tables(0).version(), 1);
    EXPECT_GT(cluster.server(i).Describe().tables(0).rows(), kMaxIdsPerRowCall);
  }
  ASSERT_TRUE(client.PullRows({{"a", {0, ids.back()}}}, &rows).ok());
  for (int j = 0; j < kWidth; ++j) {
    EXPECT_FLOAT_EQ(rows[0][j], Initial("a", 0)[j] - 0.5f);
    EXPECT_FLOAT_EQ(rows[0][kWidth + j], Initial("a", ids.back())[j] - 0.5f);
  }
}

// A table read whole: every stored row once, from the server that holds it,
// as a pull reads it; pages follow one another; a server that restarts
// during the read ends it.
TEST(PsClientRowsTest, ReadTableGivesEveryStoredRowOnce) {
  Cluster cluster(ASYNC, 1);
  PsClient& client = cluster.client(0);
  ASSERT_TRUE(client.CreateTables({Table("a")}).ok());
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < 23; ++id) ids.push_back(id * 104729);
  ASSERT_TRUE(client.PushRows({{"a", ids}}, {std::vector<float>(ids.size() * kWidth, 1.0f)}).ok());
  std::map<int64_t, std::vector<float>> read;
  int pages = 0, server = 0;  // the servers come in task order
  absl::Status s = client.ReadTable("a", false, [&](const ReadRowsResponse& page) {
    ++pages;
    EXPECT_LE(page.ids_size(), 5);
    if (page.ids_size() > 0) server = std::max(server, EmbeddingOwner(page.ids(0), kServers));
    for (int k = 0; k < page.ids_size(); ++k) {
      EXPECT_EQ(EmbeddingOwner(page.ids(k), kServers), server) << page.ids(k);
      EXPECT_TRUE(
          read.emplace(page.ids(k), std::vector<float>(page.values().begin() + k * kWidth,
                                                       page.values().begin() + (k + 1) * kWidth))
              .second);
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(read.size(), ids.size());
  EXPECT_GE(pages, 5);
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client.PullRows({{"a", ids}}, &rows).ok());
  for (size_t k = 0; k < ids.size(); ++k) {
    EXPECT_EQ(read[ids[k]],
              std::vector<float>(rows[0].begin() + k * kWidth, rows[0].begin() + (k + 1) * kWidth));
  }

  s = client.ReadTable("a", false, [&](const ReadRowsResponse&) {
    cluster.Restart(1);
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_EQ(
      client.ReadTable("nope", false, [](const ReadRowsResponse&) { return absl::OkStatus(); })
          .code(),
      absl::StatusCode::kNotFound);
}

// A server recovered by a row call: the next dense push, of gradients
// computed on values the server no longer holds, is taken as computed at
// version 0 (not refused as coming from the future), and the pull after it
// reads what the restarted server holds.
TEST(PsClientRowsTest, ADensePushAfterARowCallRecoveredTheServerIsNotRefused) {
  Cluster cluster(ASYNC, 1);
  PsClient& client = cluster.client(0);
  ASSERT_TRUE(client.CreateVariables({TestVariable("w", {4, 2}, kServers, 1.0f)}).ok());
  ASSERT_TRUE(client.CreateTables({Table("a")}).ok());
  TensorMap values;
  for (int step = 0; step < 3; ++step) {
    auto pushed = client.PushPull({{"w", Filled({4, 2}, 0.25f)}}, {"w"}, &values);
    ASSERT_TRUE(pushed.ok()) << pushed.status();
  }
  cluster.Restart(1);
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(client.PullRows({{"a", {0, 1, 2, 3}}}, &rows).ok());  // recovers server 1
  auto pushed = client.PushPull({{"w", Filled({4, 2}, 0.25f)}}, {"w"}, &values);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  // Server 1's shard, rows [2, 4), started again from the initializer.
  EXPECT_EQ(values["w"].values[0], 1.0f - 4 * 0.25f);
  EXPECT_EQ(values["w"].values[7], 1.0f - 0.25f);
}

}  // namespace
}  // namespace fulcrum
