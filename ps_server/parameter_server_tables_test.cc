// ParameterServer's embedding tables: creation, sparse pulls and pushes in
// each consistency mode, placement checks, and bad requests that change
// nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/directory.h"
#include "common/embedding.h"
#include "common/file_system.h"
#include "ps_server/parameter_server.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kWidth = 2;

// Server `index` of `num_ps` in `mode` with `replicas` workers.
PsServerConfig Config(ConsistencyMode mode, int replicas, int index = 0, int num_ps = 1) {
  PsServerConfig config;
  config.set_mode(mode);
  config.set_num_replicas(replicas);
  config.set_replicas_to_aggregate(replicas);
  config.set_staleness_bound(1);
  config.set_max_staleness(-1);
  config.set_lease_timeout_ms(10000);
  config.set_startup_timeout_ms(200);
  config.set_max_message_bytes(64 << 20);
  for (int i = 0; i < num_ps; ++i) config.mutable_cluster()->mutable_cluster()->add_ps("h:0");
  config.mutable_cluster()->mutable_task()->set_type("ps");
  config.mutable_cluster()->mutable_task()->set_index(index);
  return config;
}

// Table "emb": zeros, SGD with learning rate 1 (a push subtracts the mean).
EmbeddingTableSpec Table(int64_t max_rows = 0) {
  EmbeddingTableSpec spec;
  spec.set_name("emb");
  spec.set_width(kWidth);
  spec.mutable_initializer()->set_kind(InitializerSpec::ZEROS);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  spec.set_max_rows(max_rows);
  return spec;
}

// The request creating range `partition` of `spec` (the range of the
// server of that index, without replicas).
CreateShardsRequest TableRequest(const EmbeddingTableSpec& spec, int partition = 0) {
  CreateShardsRequest request;
  *request.add_tables() = spec;
  TableRange* range = request.add_ranges();
  range->set_table(spec.name());
  range->set_partition(partition);
  return request;
}

void CreateTable(ParameterServer& ps, const EmbeddingTableSpec& spec = Table(), int partition = 0) {
  const CreateShardsRequest request = TableRequest(spec, partition);
  auto created = ps.CreateShards(request);
  ASSERT_TRUE(created.ok()) << created.status();
}

TableRows Rows(const std::vector<int64_t>& ids, const std::vector<float>& values = {},
               int64_t version = 0) {
  TableRows rows;
  rows.set_table("emb");
  rows.mutable_ids()->Assign(ids.begin(), ids.end());
  rows.mutable_values()->Assign(values.begin(), values.end());
  rows.set_version(version);
  return rows;
}

absl::StatusOr<PushRowsResponse> PushRows(ParameterServer& ps, int worker, const TableRows& rows) {
  PushRowsRequest request;
  request.set_worker_id(worker);
  *request.add_tables() = rows;
  return ps.PushRows(request);
}

// The values of `ids`, waiting for `version`.
std::vector<float> PullRows(ParameterServer& ps, const std::vector<int64_t>& ids,
                            int64_t version = 0) {
  PullRowsRequest request;
  *request.add_tables() = Rows(ids, {}, version);
  auto pulled = ps.PullRows(request, absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(pulled.ok()) << pulled.status();
  if (!pulled.ok()) return {};
  return {pulled->tables(0).values().begin(), pulled->tables(0).values().end()};
}

TEST(ParameterServerTablesTest, AsyncPushesApplyAtOnceAndDescribeCountsRows) {
  ParameterServer ps(Config(ASYNC, 2));
  CreateTable(ps);
  CreateTable(ps);  // the same spec again is fine
  auto pushed = PushRows(ps, 0, Rows({5, 9}, {1, 2, 3, 4}));
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->results(0).outcome(), ShardPushResult::APPLIED);
  EXPECT_EQ(PullRows(ps, {9, 5, 11}), (std::vector<float>{-3, -4, -1, -2, 0, 0}));
  const DescribeResponse d = ps.Describe();
  ASSERT_EQ(d.tables_size(), 1);
  EXPECT_EQ(d.tables(0).rows(), 2);
  EXPECT_EQ(d.tables(0).version(), 1);
  EXPECT_GT(d.memory_bytes(), 0);
}

// A table is read page by page, stored rows only, with their slots when
// asked; reading waits for nothing and refuses what it cannot serve.
TEST(ParameterServerTablesTest, ReadRowsPagesThroughTheStoredRows) {
  ParameterServer ps(Config(ASYNC, 1));
  EmbeddingTableSpec adagrad = Table();
  adagrad.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  CreateTable(ps, adagrad);
  ASSERT_TRUE(PushRows(ps, 0, Rows({7, 3, 5}, {1, 1, 2, 2, 3, 3})).ok());
  EXPECT_EQ(PullRows(ps, {100}).size(), 2u);  // a pull stores nothing
  ReadRowsRequest request;
  request.set_table("emb");
  request.set_max_rows(2);
  request.set_slots(true);
  std::vector<int64_t> ids;
  std::vector<float> values, slots;
  for (int pages = 1;; ++pages) {
    auto page = ps.ReadRows(request);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_EQ(page->rows(), 3);
    EXPECT_EQ(page->width(), kWidth);
    EXPECT_EQ(page->num_slots(), 1);
    EXPECT_EQ(page->incarnation(), ps.Describe().incarnation());
    ids.insert(ids.end(), page->ids().begin(), page->ids().end());
    values.insert(values.end(), page->values().begin(), page->values().end());
    slots.insert(slots.end(), page->slots().begin(), page->slots().end());
    request.set_start(page->next());
    if (page->next() == page->rows()) {
      EXPECT_EQ(pages, 2);
      break;
    }
  }
  EXPECT_EQ(ids, (std::vector<int64_t>{7, 3, 5}));
  ASSERT_EQ(values.size(), 6u);
  EXPECT_LT(values[2], 0.0f);   // id 3 took its gradient
  EXPECT_EQ(slots.size(), 6u);  // Adagrad's accumulator: the squares added
  EXPECT_GT(slots[4], slots[0]);

  ReadRowsRequest unknown;
  unknown.set_table("nope");
  EXPECT_EQ(ps.ReadRows(unknown).status().code(), absl::StatusCode::kNotFound);
  ReadRowsRequest negative;
  negative.set_table("emb");
  negative.set_start(-1);
  EXPECT_THAT(ps.ReadRows(negative).status().message(), HasSubstr("must be >= 0"));
  ReadRowsRequest other_start;
  other_start.set_table("emb");
  other_start.set_incarnation(ps.Describe().incarnation() + 1);
  EXPECT_EQ(ps.ReadRows(other_start).status().code(), absl::StatusCode::kAborted);
  ReadRowsRequest past_the_end;
  past_the_end.set_table("emb");
  past_the_end.set_start(99);
  auto empty = ps.ReadRows(past_the_end);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->ids_size(), 0);
  EXPECT_EQ(empty->next(), 3);
}

// Sync: a step applies once both workers pushed, each id averaged over the
// workers that pushed it; a pull for the next version waits for it.
TEST(ParameterServerTablesTest, SyncAveragesEachIdOverTheStepsPushers) {
  ParameterServer ps(Config(SYNC, 2));
  CreateTable(ps);
  std::vector<float> pulled;
  std::thread reader([&] { pulled = PullRows(ps, {1, 2}, /*version=*/1); });
  auto first = PushRows(ps, 0, Rows({1, 2}, {2, 2, 4, 4}));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->results(0).outcome(), ShardPushResult::ACCUMULATED);
  auto second = PushRows(ps, 1, Rows({1}, {4, 4}));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->results(0).outcome(), ShardPushResult::APPLIED);
  reader.join();
  EXPECT_EQ(pulled, (std::vector<float>{-3, -3, -4, -4}));
}

// SSP: a pull of rows waits, as a dense pull does, for the slowest worker
// to come within the bound of the puller's clock.
TEST(ParameterServerTablesTest, SspPullsOfRowsWaitForTheSlowestWorker) {
  ParameterServer ps(Config(SSP, 2));  // bound 1
  CreateTable(ps);
  PullRowsRequest ahead;
  ahead.set_worker_id(0);
  ahead.set_clock(3);  // worker 1 is at clock 0
  *ahead.add_tables() = Rows({1});
  auto waited = ps.PullRows(ahead, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(waited.status().message()), HasSubstr("waits for worker(s)"));
  ahead.set_clock(1);
  EXPECT_TRUE(ps.PullRows(ahead, absl::Now() + absl::Seconds(10)).ok());
}

// Each id lives on one server: another server refuses it, naming the owner.
TEST(ParameterServerTablesTest, IdsOfAnotherServerAreRefused) {
  ParameterServer ps0(Config(ASYNC, 1, 0, 2));
  CreateTable(ps0);
  int64_t foreign = 0;
  while (EmbeddingOwner(foreign, 2) == 0) ++foreign;
  PullRowsRequest request;
  *request.add_tables() = Rows({foreign});
  auto pulled = ps0.PullRows(request, absl::Now() + absl::Seconds(1));
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pulled.status().message(), HasSubstr("belongs to range 1, not 0 (of 2)"));
}

// Every bad request gets a status naming what was wrong, and the table
// holds what it held.
TEST(ParameterServerTablesTest, BadRequestsChangeNothing) {
  ParameterServer ps(Config(ASYNC, 1));
  CreateTable(ps);
  ASSERT_TRUE(PushRows(ps, 0, Rows({1}, {1, 1})).ok());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    TableRows rows;
    absl::StatusCode code;
    const char* says;
  };
  TableRows unknown = Rows({1}, {1, 1});
  unknown.set_table("nope");
  const std::vector<Case> cases = {
      {unknown, absl::StatusCode::kNotFound, "'nope' does not exist"},
      {Rows({-4}, {1, 1}), absl::StatusCode::kInvalidArgument, "outside the key space"},
      {Rows({1, 2}, {1, 1, 1}), absl::StatusCode::kInvalidArgument, "not 2 rows of width 2"},
      {Rows({2, 1}, {1, 1, nan, 1}), absl::StatusCode::kInvalidArgument, "id 1 is not finite"},
      {Rows({3, 3}, {1, 1, 1, 1}), absl::StatusCode::kInvalidArgument, "id 3 twice"},
  };
  for (const Case& c : cases) {
    auto pushed = PushRows(ps, 0, c.rows);
    EXPECT_EQ(pushed.status().code(), c.code) << c.says;
    EXPECT_THAT(pushed.status().message(), HasSubstr(c.says));
  }
  std::vector<int64_t> many(EmbeddingTable::kMaxIdsPerPush + 1, 0);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i);
  EXPECT_EQ(PushRows(ps, 0, Rows(many)).status().code(), absl::StatusCode::kResourceExhausted);
  many.resize(EmbeddingTable::kMaxIdsPerRequest + 1);  // a pull takes fewer
  PullRowsRequest pull;
  *pull.add_tables() = Rows(many);
  EXPECT_EQ(ps.PullRows(pull, absl::Now() + absl::Seconds(10)).status().code(),
            absl::StatusCode::kResourceExhausted);
  PushRowsRequest anonymous;
  *anonymous.add_tables() = Rows({1}, {1, 1});
  EXPECT_EQ(ps.PushRows(anonymous).status().code(), absl::StatusCode::kInvalidArgument);
  EmbeddingTableSpec other = Table();
  other.set_width(3);
  EXPECT_EQ(ps.CreateShards(TableRequest(other)).status().code(), absl::StatusCode::kAlreadyExists);

  EXPECT_EQ(PullRows(ps, {1, 2}), (std::vector<float>{-1, -1, 0, 0}));
  EXPECT_EQ(ps.Describe().tables(0).version(), 1);
  EXPECT_EQ(ps.Describe().tables(0).rows(), 1);
}

// Rows past the server's memory budget are refused; a table bounded by
// max_rows within it goes on, evicting.
TEST(ParameterServerTablesTest, RowsStayWithinTheMemoryBudget) {
  PsServerConfig config = Config(ASYNC, 1);
  config.set_max_memory_bytes(64 << 10);
  ParameterServer ps(config);
  CreateTable(ps);
  std::vector<int64_t> ids(10000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  auto pushed = PushRows(ps, 0, Rows(ids, std::vector<float>(ids.size() * kWidth, 1.0f)));
  EXPECT_EQ(pushed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(pushed.status().message(), HasSubstr("max_rows"));
  EXPECT_EQ(ps.Describe().tables(0).rows(), 0);

  ParameterServer bounded(config);
  EmbeddingTableSpec spec = Table(/*max_rows=*/100);
  CreateTable(bounded, spec);
  for (int round = 0; round < 3; ++round) {
    std::vector<int64_t> some(ids.begin() + round * int64_t{100},
                              ids.begin() + (round + 1) * int64_t{100});
    ASSERT_TRUE(PushRows(bounded, 0, Rows(some, std::vector<float>(200, 1.0f))).ok());
  }
  EXPECT_EQ(bounded.Describe().tables(0).rows(), 100);
  EXPECT_EQ(bounded.Describe().tables(0).evictions(), 200);
  EXPECT_LE(bounded.Describe().memory_bytes(), config.max_memory_bytes());
}

// A checkpoint written by two servers restores onto one and onto three:
// every row lands on the server that owns it now, with its optimizer
// slots, and admission counts and versions carry over.
TEST(ParameterServerTablesTest, CheckpointsRestoreOntoAnyNumberOfServers) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/tables_ckpt");
  auto fs = MakeLocalFileSystem();
  EmbeddingTableSpec spec = Table();
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  spec.set_admit_after(2);
  auto config = [&](int index, int num_ps) {
    PsServerConfig c = Config(ASYNC, 1, index, num_ps);
    c.set_checkpoint_dir(dir);
    return c;
  };
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < 200; ++id) ids.push_back(id * 131);
  const std::vector<float> grads(ids.size() * kWidth, 0.5f);
  std::vector<float> expected;  // every id's row as the two servers hold it
  {
    std::vector<std::unique_ptr<ParameterServer>> servers;
    std::vector<ManifestFile> files;
    for (int i = 0; i < 2; ++i) {
      servers.push_back(std::make_unique<ParameterServer>(config(i, 2)));
      ASSERT_TRUE(servers[i]->EnableCheckpoints(fs.get()).ok());
      CreateTable(*servers[i], spec, i);
    }
    // Twice each id (admitted at the second), once more the first half.
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 2; ++i) {
        std::vector<int64_t> own;
        for (size_t k = 0; k < (round < 2 ? ids.size() : ids.size() / 2); ++k) {
          if (EmbeddingOwner(ids[k], 2) == i) own.push_back(ids[k]);
        }
        ASSERT_TRUE(
            PushRows(*servers[i], 0, Rows(own, std::vector<float>(own.size() * kWidth, 0.5f)))
                .ok());
      }
    }
    // One id seen once: a candidate.
    const int64_t once = 999983;
    const int owner = EmbeddingOwner(once, 2);
    ASSERT_TRUE(PushRows(*servers[owner], 0, Rows({once}, {1, 1})).ok());
    for (int64_t id : ids) {
      const std::vector<float> row = PullRows(*servers[EmbeddingOwner(id, 2)], {id});
      expected.insert(expected.end(), row.begin(), row.end());
    }
    for (int i = 0; i < 2; ++i) {
      SaveCheckpointRequest request;
      request.set_step(3);
      EXPECT_EQ(servers[i]->Describe().checkpoints().last_step(), -1);
      auto saved = servers[i]->SaveCheckpoint(request);
      ASSERT_TRUE(saved.ok()) << saved.status();
      // Kept for the status page: the step written, its time, no failure.
      const CheckpointHistory written = servers[i]->Describe().checkpoints();
      EXPECT_EQ(written.last_step(), 3);
      EXPECT_GT(written.last_unix_secs(), 0);
      EXPECT_EQ(written.failures(), 0);
      ManifestFile file;
      file.set_name(saved->file());
      file.set_bytes(saved->bytes());
      file.set_crc32(saved->crc32());
      files.push_back(file);
    }
    ASSERT_TRUE(WriteManifest(*fs, dir, 3, 2, files).ok());
  }
  for (int num_ps : {1, 3}) {
    std::vector<std::unique_ptr<ParameterServer>> servers;
    int64_t rows = 0, candidates = 0;
    for (int i = 0; i < num_ps; ++i) {
      servers.push_back(std::make_unique<ParameterServer>(config(i, num_ps)));
      ASSERT_TRUE(servers[i]->EnableCheckpoints(fs.get()).ok());
      auto created = servers[i]->CreateShards(TableRequest(spec, i));
      ASSERT_TRUE(created.ok()) << created.status();
      EXPECT_EQ(created->tables_restored(), 1);
      const TableInfo info = servers[i]->Describe().tables(0);
      rows += info.rows();
      candidates += info.candidates();
      EXPECT_EQ(info.version(), 4) << num_ps;  // the newest server's
    }
    EXPECT_EQ(rows, static_cast<int64_t>(ids.size())) << num_ps;
    EXPECT_EQ(candidates, 1) << num_ps;
    std::vector<float> restored;
    for (int64_t id : ids) {
      const std::vector<float> row = PullRows(*servers[EmbeddingOwner(id, num_ps)], {id});
      restored.insert(restored.end(), row.begin(), row.end());
    }
    EXPECT_EQ(restored, expected) << num_ps;
    // The slots came too: one more push moves a row as Adagrad would from
    // its accumulated state, identically on any number of servers.
    const int64_t id = ids[0];
    ParameterServer& owner = *servers[EmbeddingOwner(id, num_ps)];
    ASSERT_TRUE(PushRows(owner, 0, Rows({id}, {0.5f, 0.5f})).ok());
    const float moved = PullRows(owner, {id})[0] - expected[0];
    // Admitted at its second push: accumulator 0.1 + 2 * 0.25, then + 0.25
    // now: a step of 0.5 / sqrt(0.85) at learning rate 1.
    EXPECT_NEAR(moved, -0.5f / std::sqrt(0.85f), 1e-5) << num_ps;
  }
}

}  // namespace
}  // namespace fulcrum
