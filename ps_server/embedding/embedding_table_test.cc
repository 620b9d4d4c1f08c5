#include "ps_server/embedding/embedding_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "common/embedding.h"
#include "common/optimizer/optimizer.h"
#include "common/tensor.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kWidth = 4;

// A push checked, then applied, as a server's TableCalls does.
absl::StatusOr<ShardPushResult> Push(EmbeddingTable& table, int worker, uint64_t push_id,
                                     absl::Span<const int64_t> ids, absl::Span<const float> grads) {
  absl::StatusOr<EmbeddingTable::CheckedRows> rows = table.CheckPush(ids, grads);
  if (!rows.ok()) return rows.status();
  return table.Push(worker, push_id, *rows);
}

absl::StatusOr<ShardPushResult> Accumulate(EmbeddingTable& table, int worker, uint64_t push_id,
                                           int64_t computed_at, absl::Span<const int64_t> ids,
                                           absl::Span<const float> grads, int required) {
  absl::StatusOr<EmbeddingTable::CheckedRows> rows = table.CheckPush(ids, grads);
  if (!rows.ok()) return rows.status();
  return table.Accumulate(worker, push_id, computed_at, *rows, required);
}

EmbeddingTableSpec Spec(OptimizerSpec::Kind kind) {
  EmbeddingTableSpec spec;
  spec.set_name("ads");
  spec.set_width(kWidth);
  spec.mutable_initializer()->set_kind(InitializerSpec::RANDOM_UNIFORM);
  spec.mutable_initializer()->set_minval(-0.05f);
  spec.mutable_initializer()->set_maxval(0.05f);
  spec.mutable_optimizer()->set_kind(kind);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.mutable_optimizer()->set_l1(0.01f);
  return spec;
}

std::unique_ptr<EmbeddingTable> Make(const EmbeddingTableSpec& spec) {
  auto table = EmbeddingTable::Create(spec);
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *std::move(table) : nullptr;
}

// An SGD table with these bounds.
std::unique_ptr<EmbeddingTable> Bounded(int64_t max_rows, int admit_after) {
  EmbeddingTableSpec spec = Spec(OptimizerSpec::SGD);
  spec.set_max_rows(max_rows);
  spec.set_admit_after(admit_after);
  return Make(spec);
}

std::vector<float> Pull(EmbeddingTable& table, const std::vector<int64_t>& ids) {
  std::vector<float> out(ids.size() * kWidth);
  EXPECT_TRUE(table.Pull(ids, absl::MakeSpan(out)).ok());
  return out;
}

// A row as the dense optimizer updates a one-row variable: the reference
// a table row must follow, step by step.
struct Reference {
  Reference(const EmbeddingTableSpec& spec, int64_t id)
      : opt(EmbeddingTable::Create(spec).value()->spec().optimizer()),
        values(kWidth),
        slots(MakeSlots(opt, kWidth)) {
    InitialEmbeddingRow(spec, id, absl::MakeSpan(values));
  }
  void Apply(int64_t step, const std::vector<float>& grad) {
    const FloatBytes whole = AsFloatBytes(grad);
    ApplyGradient(opt, step, 1, {whole}, absl::MakeSpan(values), slots);
  }
  OptimizerSpec opt;
  std::vector<float> values;
  OptimizerSlots slots;
};

TEST(EmbeddingTableTest, UnseenIdsPullTheirInitialRowsAndStoreNothing) {
  auto table = Make(Spec(OptimizerSpec::ADAGRAD));
  const std::vector<float> rows = Pull(*table, {5, -9});
  std::vector<float> five(kWidth), nine(kWidth);
  InitialEmbeddingRow(table->spec(), 5, absl::MakeSpan(five));
  InitialEmbeddingRow(table->spec(), -9, absl::MakeSpan(nine));
  EXPECT_EQ(std::vector<float>(rows.begin(), rows.begin() + kWidth), five);
  EXPECT_EQ(std::vector<float>(rows.begin() + kWidth, rows.end()), nine);
  EXPECT_EQ(table->stats().rows, 0);
}

// Sparse Adagrad, lazy Adam and FTRL move exactly the rows a push touches,
// each as the dense rule moves a one-row variable; lazy Adam's untouched
// rows keep their slots while the table's step goes on (its bias
// correction takes the table's step, as TensorFlow's LazyAdam does).
class SparseOptimizerTest : public ::testing::TestWithParam<OptimizerSpec::Kind> {};

TEST_P(SparseOptimizerTest, TouchedRowsFollowTheDenseRule) {
  const EmbeddingTableSpec spec = Spec(GetParam());
  auto table = Make(spec);
  Reference one(spec, 1), two(spec, 2);
  const std::vector<float> g1 = {0.5f, -1.0f, 0.25f, 2.0f}, g2 = {-0.3f, 0.1f, 0.0f, 1.5f};
  // Step 1 touches both, steps 2 and 3 only id 1, step 4 only id 2.
  ASSERT_TRUE(Push(*table, 0, 0, {1, 2},
                   [&] {
                     std::vector<float> both = g1;
                     both.insert(both.end(), g2.begin(), g2.end());
                     return both;
                   }())
                  .ok());
  one.Apply(1, g1);
  two.Apply(1, g2);
  for (int64_t step : {2, 3}) {
    ASSERT_TRUE(Push(*table, 0, 0, {1}, g1).ok());
    one.Apply(step, g1);
  }
  ASSERT_TRUE(Push(*table, 0, 0, {2}, g2).ok());
  two.Apply(4, g2);
  const std::vector<float> rows = Pull(*table, {1, 2});
  for (int i = 0; i < kWidth; ++i) {
    EXPECT_FLOAT_EQ(rows[i], one.values[i]) << i;
    EXPECT_FLOAT_EQ(rows[kWidth + i], two.values[i]) << i;
  }
  EXPECT_EQ(table->stats().step, 4);
  EXPECT_EQ(table->stats().rows, 2);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, SparseOptimizerTest,
                         ::testing::Values(OptimizerSpec::ADAGRAD, OptimizerSpec::ADAM,
                                           OptimizerSpec::FTRL, OptimizerSpec::SGD));

// Bad pushes and pulls are refused with a status naming what was wrong,
// and the table is as it was.
TEST(EmbeddingTableTest, BadRequestsChangeNothing) {
  auto table = Make(Spec(OptimizerSpec::ADAGRAD));
  ASSERT_TRUE(Push(*table, 0, 0, {7}, {1, 1, 1, 1}).ok());
  const std::vector<float> before = Pull(*table, {7, 8});

  std::vector<float> out(3);
  EXPECT_THAT(table->Pull({7}, absl::MakeSpan(out)).message(), HasSubstr("not 1 rows of width 4"));
  EXPECT_THAT(Push(*table, 0, 0, {7, 8}, {1, 1, 1, 1}).status().message(),
              HasSubstr("2 ids with 4 floats"));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  absl::Status s = Push(*table, 0, 0, {8, 7}, {0, 0, 0, 0, 1, nan, 1, 1}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("gradient of id 7 is not finite"));
  EXPECT_THAT(Push(*table, 0, 0, {8, 8}, std::vector<float>(8, 1.0f)).status().message(),
              HasSubstr("id 8 twice"));
  std::vector<int64_t> many(EmbeddingTable::kMaxIdsPerRequest + 1);
  std::vector<float> many_rows(many.size() * kWidth);
  EXPECT_EQ(table->Pull(many, absl::MakeSpan(many_rows)).code(),
            absl::StatusCode::kResourceExhausted);

  EXPECT_EQ(Pull(*table, {7, 8}), before);
  EXPECT_EQ(table->stats().step, 1);
  EXPECT_EQ(table->stats().rows, 1);
}

// Sync: a step's pushes are summed per id and each id's sum divided by
// the workers that pushed it; the step applies once the required workers
// pushed, and a worker's second push in a step, or one of an old step,
// changes nothing.
TEST(EmbeddingTableTest, SyncStepsAverageEachIdOverItsPushers) {
  auto table = Bounded(/*max_rows=*/0, /*admit_after=*/0);  // SGD, rate 0.1
  const std::vector<float> initial = Pull(*table, {1, 2});
  auto outcome = [](const absl::StatusOr<ShardPushResult>& r) {
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->outcome() : ShardPushResult::STALE;
  };
  EXPECT_EQ(outcome(Accumulate(*table, 0, 0, 0, {1, 2}, {1, 1, 1, 1, 4, 4, 4, 4}, 2)),
            ShardPushResult::ACCUMULATED);
  EXPECT_EQ(outcome(Accumulate(*table, 0, 0, 0, {1}, {9, 9, 9, 9}, 2)), ShardPushResult::DUPLICATE);
  EXPECT_EQ(Pull(*table, {1, 2}), initial);
  EXPECT_EQ(table->version(), 0);
  EXPECT_EQ(outcome(Accumulate(*table, 1, 0, 0, {1}, {3, 3, 3, 3}, 2)), ShardPushResult::APPLIED);
  EXPECT_EQ(table->version(), 1);
  const std::vector<float> after = Pull(*table, {1, 2});
  EXPECT_FLOAT_EQ(after[0], initial[0] - 0.1f * 2.0f);            // id 1: (1 + 3) / 2
  EXPECT_FLOAT_EQ(after[kWidth], initial[kWidth] - 0.1f * 4.0f);  // id 2: 4 / 1
  EXPECT_EQ(outcome(Accumulate(*table, 1, 0, 0, {1}, {1, 1, 1, 1}, 2)), ShardPushResult::STALE);
  EXPECT_EQ(Accumulate(*table, 1, 0, 5, {1}, {1, 1, 1, 1}, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  // One worker left: its push alone completes the step.
  EXPECT_EQ(outcome(Accumulate(*table, 0, 0, 1, {2}, {1, 1, 1, 1}, 2)),
            ShardPushResult::ACCUMULATED);
  EXPECT_TRUE(table->CompleteIfReady(1));
  EXPECT_EQ(table->version(), 2);
}

// A push retried after its answer was lost (the same push_id) applies
// once, in either mode; another push_id applies again.
TEST(EmbeddingTableTest, ARetriedPushAppliesOnce) {
  auto table = Bounded(/*max_rows=*/0, /*admit_after=*/0);  // SGD, rate 0.1
  const std::vector<float> initial = Pull(*table, {1});
  ASSERT_EQ(Push(*table, 3, 77, {1}, {1, 1, 1, 1})->outcome(), ShardPushResult::APPLIED);
  EXPECT_EQ(Push(*table, 3, 77, {1}, {1, 1, 1, 1})->outcome(), ShardPushResult::DUPLICATE);
  EXPECT_FLOAT_EQ(Pull(*table, {1})[0], initial[0] - 0.1f);
  ASSERT_EQ(Push(*table, 3, 78, {1}, {1, 1, 1, 1})->outcome(), ShardPushResult::APPLIED);
  EXPECT_FLOAT_EQ(Pull(*table, {1})[0], initial[0] - 0.2f);
  // Sync: a retry of a push that completed its step is DUPLICATE too.
  ASSERT_EQ(Accumulate(*table, 3, 79, 2, {1}, {1, 1, 1, 1}, 1)->outcome(),
            ShardPushResult::APPLIED);
  EXPECT_EQ(Accumulate(*table, 3, 79, 3, {1}, {1, 1, 1, 1}, 1)->outcome(),
            ShardPushResult::DUPLICATE);
  EXPECT_EQ(table->version(), 3);
}

// The ids workers push most, counted once per push that is taken (a
// retry is not), async and sync alike.
TEST(EmbeddingTableTest, CountsTheMostPushedIds) {
  auto table = Bounded(/*max_rows=*/0, /*admit_after=*/0);
  const std::vector<float> two(2 * kWidth, 1.0f);
  uint64_t push = 0;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Push(*table, 0, ++push, {7, 3}, two).ok());
  ASSERT_TRUE(Push(*table, 0, push, {7, 3}, two).ok());  // DUPLICATE: not counted
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Push(*table, 0, ++push, {3, 9}, two).ok());
  ASSERT_EQ(Accumulate(*table, 1, 1, table->version(), {3, 5}, two, 1)->outcome(),
            ShardPushResult::APPLIED);
  const std::vector<HeavyHitters::Hitter> hottest = table->hottest();
  ASSERT_EQ(hottest.size(), 4u);
  EXPECT_EQ(hottest[0].id, 3);
  EXPECT_EQ(hottest[0].count, 7);
  EXPECT_EQ(hottest[1].id, 7);
  EXPECT_EQ(hottest[1].count, 4);
  EXPECT_EQ(hottest[2].id, 9);
  EXPECT_EQ(hottest[2].count, 2);
  EXPECT_EQ(hottest[3].id, 5);
}

// A push of more ids than the table holds: each stored row ends with its
// own id's update, none with another's that was evicted meanwhile.
TEST(EmbeddingTableTest, APushOfMoreIdsThanTheTableHoldsUpdatesEachRowOnce) {
  auto table = Bounded(/*max_rows=*/3, /*admit_after=*/0);
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6, 7};
  const std::vector<float> initial = Pull(*table, ids);  // nothing stored: the initial rows
  std::vector<float> grads;
  for (int64_t id : ids) grads.insert(grads.end(), kWidth, static_cast<float>(id));
  ASSERT_TRUE(Push(*table, 0, 1, ids, grads).ok());
  EXPECT_EQ(table->stats().rows, 3);
  const std::vector<float> last = Pull(*table, {5, 6, 7});
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < kWidth; ++j) {
      EXPECT_FLOAT_EQ(last[i * kWidth + j], initial[(4 + i) * kWidth + j] - 0.1f * (5 + i))
          << "id " << 5 + i;
    }
  }
}

// A push of more ids than the sketch counts one by one is sampled: every
// stride-th id, each counted as stride ids, so that counting stays cheap.
TEST(EmbeddingTableTest, CountsALargePushBySample) {
  auto table = Bounded(/*max_rows=*/0, /*admit_after=*/0);
  const int64_t n = 4 * static_cast<int64_t>(EmbeddingTable::kHotSampled);  // a stride of 4
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 1000);
  ASSERT_TRUE(Push(*table, 0, 1, ids, std::vector<float>(n * kWidth, 1.0f)).ok());
  const std::vector<HeavyHitters::Hitter> sampled = table->hottest();
  ASSERT_FALSE(sampled.empty());
  // 512 samples of weight 4 in a sketch of 256: each held id counts 4, or
  // 8 where it took the place of one counted before.
  for (const HeavyHitters::Hitter& hit : sampled) {
    EXPECT_TRUE(hit.count == 4 || hit.count == 8) << "id " << hit.id << ": " << hit.count;
  }
  // Then one id pushed alone, 9 times: it comes first, its count over the
  // truth by no more than its error.
  for (uint64_t push = 2; push < 11; ++push) {
    ASSERT_TRUE(Push(*table, 0, push, {5}, std::vector<float>(kWidth, 1.0f)).ok());
  }
  const HeavyHitters::Hitter first = table->hottest()[0];
  EXPECT_EQ(first.id, 5);
  EXPECT_EQ(first.count - first.error, 9);
}

// After its first kHotExact ids the sketch counts one id in two (then
// three, ...), each standing for the ids it was picked from: an id pushed
// alone 41 times counts 40 or 42, and still comes first.
TEST(EmbeddingTableTest, SamplesOnceItHasCountedItsFirstIds) {
  auto table = Bounded(/*max_rows=*/0, /*admit_after=*/0);
  constexpr int64_t kPush = 512;
  uint64_t push = 0;
  for (int64_t start = 0; start < static_cast<int64_t>(EmbeddingTable::kHotExact); start += kPush) {
    std::vector<int64_t> ids(kPush);
    std::iota(ids.begin(), ids.end(), 1000 + start);
    ASSERT_TRUE(Push(*table, 0, ++push, ids, std::vector<float>(kPush * kWidth, 1.0f)).ok());
  }
  for (int i = 0; i < 41; ++i) {
    ASSERT_TRUE(Push(*table, 0, ++push, {5}, std::vector<float>(kWidth, 1.0f)).ok());
  }
  const HeavyHitters::Hitter first = table->hottest()[0];
  EXPECT_EQ(first.id, 5);
  const int64_t counted = first.count - first.error;
  EXPECT_TRUE(counted == 40 || counted == 42) << counted;
}

// Long after the stride reached kHotMaxStride, an id in every push (1 in
// 128 ids, past the sketch's 1/256) still comes first among ids pushed
// once each, its estimate near its true count: each sampled id stands for
// the stride it was picked from.
TEST(EmbeddingTableTest, FindsTheHottestIdAtTheLargestStride) {
  auto table = Bounded(/*max_rows=*/0, /*admit_after=*/0);
  constexpr int64_t kPush = 128;
  const int64_t pushes =
      2 * static_cast<int64_t>(EmbeddingTable::kHotExact * EmbeddingTable::kHotMaxStride) / kPush;
  std::mt19937_64 random(3);
  int64_t next_cold = 1000;
  std::vector<int64_t> ids(kPush);
  const std::vector<float> grads(kPush * kWidth, 1.0f);
  for (int64_t push = 1; push <= pushes; ++push) {
    for (int64_t& id : ids) id = next_cold++;
    ids[random() % kPush] = 5;
    ASSERT_TRUE(Push(*table, 0, static_cast<uint64_t>(push), ids, grads).ok());
  }
  const HeavyHitters::Hitter first = table->hottest()[0];
  EXPECT_EQ(first.id, 5);
  EXPECT_NEAR(static_cast<double>(first.count - first.error), static_cast<double>(pushes),
              0.25 * static_cast<double>(pushes));
}

TEST(EmbeddingTableTest, AwaitVersionWaitsForAStepOrTheDeadline) {
  auto table = Bounded(/*max_rows=*/0, /*admit_after=*/0);
  EXPECT_EQ(table->AwaitVersion(1, absl::Now() + absl::Milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
  std::thread pusher([&] { ASSERT_TRUE(Push(*table, 0, 0, {1}, {1, 1, 1, 1}).ok()); });
  EXPECT_TRUE(table->AwaitVersion(1, absl::InfiniteFuture()).ok());
  pusher.join();
  table->Cancel();
  EXPECT_EQ(table->AwaitVersion(2, absl::InfiniteFuture()).code(), absl::StatusCode::kUnavailable);
}

// admit_after = 2: an id's first push is dropped (it reads as its initial
// row), its second creates and updates the row.
TEST(EmbeddingTableTest, RowsAreAdmittedAfterTheirFthPush) {
  auto table = Bounded(/*max_rows=*/0, /*admit_after=*/2);
  const std::vector<float> initial = Pull(*table, {3});
  ASSERT_TRUE(Push(*table, 0, 0, {3}, {1, 1, 1, 1}).ok());
  EXPECT_EQ(Pull(*table, {3}), initial);
  EXPECT_EQ(table->stats().candidates, 1);
  ASSERT_TRUE(Push(*table, 0, 0, {3}, {1, 1, 1, 1}).ok());
  const std::vector<float> after = Pull(*table, {3});
  EXPECT_FLOAT_EQ(after[0], initial[0] - 0.1f);  // one SGD step, not two
  EXPECT_EQ(table->stats().admissions, 1);
}

// max_rows = 2: a third row evicts the least recently used, which then
// reads as its initial row again.
TEST(EmbeddingTableTest, PastMaxRowsTheLeastRecentlyUsedRowGoes) {
  auto table = Bounded(/*max_rows=*/2, /*admit_after=*/0);
  const std::vector<float> initial = Pull(*table, {1});
  for (int64_t id : {1, 2}) ASSERT_TRUE(Push(*table, 0, 0, {id}, {1, 1, 1, 1}).ok());
  Pull(*table, {1});  // 2 is now the least recently used
  ASSERT_TRUE(Push(*table, 0, 0, {3}, {1, 1, 1, 1}).ok());
  EXPECT_EQ(table->stats().evictions, 1);
  EXPECT_NE(Pull(*table, {1}), initial);
  std::vector<float> two(kWidth);
  InitialEmbeddingRow(table->spec(), 2, absl::MakeSpan(two));
  EXPECT_EQ(Pull(*table, {2}), two);
}

TEST(EmbeddingTableTest, BadSpecsAreRefused) {
  EmbeddingTableSpec spec = Spec(OptimizerSpec::ADAM);
  spec.set_width(0);
  EXPECT_EQ(EmbeddingTable::Create(spec).status().code(), absl::StatusCode::kInvalidArgument);
}

// Replication: the ids and values a table holds, with slots, by id.
std::map<int64_t, std::vector<float>> Rows(const EmbeddingTable& table) {
  ReadRowsResponse page;
  table.Read(0, 1 << 20, /*slots=*/true, &page);
  std::map<int64_t, std::vector<float>> rows;
  const int64_t slot_floats = page.num_slots() * kWidth;
  for (int i = 0; i < page.ids_size(); ++i) {
    std::vector<float>& row = rows[page.ids(i)];
    row.assign(page.values().begin() + i * kWidth, page.values().begin() + (i + 1) * kWidth);
    row.insert(row.end(), page.slots().begin() + i * slot_floats,
               page.slots().begin() + (i + 1) * slot_floats);
  }
  return rows;
}

// A bounded lazy-Adam table that admits an id at its second push: partition
// 1 of "ads", as a primary and as its backup at "backup:1".
class TableCopiesTest : public ::testing::Test {
 protected:
  TableCopiesTest() {
    EmbeddingTableSpec spec = Spec(OptimizerSpec::ADAM);
    spec.set_max_rows(40);
    spec.set_admit_after(2);
    primary_ = EmbeddingTable::Create(spec, 1).value();
    backup_ = EmbeddingTable::Create(spec, 1).value();
    backup_->MakeBackup("primary:1");
  }

  // Random pushes of `workers` workers over 100 ids, each step followed
  // by a pull of ids the table holds (which must not change what it
  // evicts next), in async or, with `sync`, sync steps.
  void Train(int steps, bool sync, int workers = 1) {
    for (int step = 0; step < steps; ++step) {
      for (int w = 0; w < workers; ++w) {
        std::vector<int64_t> ids;
        std::vector<float> grads;
        for (int64_t id = 0; id < 100; ++id) {
          if (random_() % 8 != 0) continue;
          ids.push_back(id);
          for (int j = 0; j < kWidth; ++j) grads.push_back(static_cast<float>(random_() % 7) - 3);
        }
        const uint64_t push_id = ++push_ids_;
        absl::StatusOr<ShardPushResult> pushed =
            sync ? Accumulate(*primary_, w, push_id, primary_->version(), ids, grads, workers)
                 : Push(*primary_, w, push_id, ids, grads);
        ASSERT_TRUE(pushed.ok()) << pushed.status();
      }
      std::vector<int64_t> held;
      for (const auto& [id, row] : Rows(*primary_)) {
        if (id % 3 == step % 3) held.push_back(id);
      }
      Pull(*primary_, held);
    }
  }

  // The updates forwarded so far, applied by the backup in order.
  void Deliver() {
    for (const ShardUpdate& update : forwarded_) {
      absl::StatusOr<int64_t> applied = backup_->ApplyReplicated(update, "primary:1");
      ASSERT_TRUE(applied.ok()) << applied.status();
    }
    forwarded_.clear();
  }

  ReplicatedUnit::Forwarding Forwarding() {
    ReplicatedUnit::Forwarding forwarding;
    forwarding.forward = [this](ShardUpdate update) { forwarded_.push_back(std::move(update)); };
    forwarding.commits_wait = false;
    return forwarding;
  }

  std::unique_ptr<EmbeddingTable> primary_, backup_;
  std::vector<ShardUpdate> forwarded_;
  std::mt19937 random_{7};
  uint64_t push_ids_ = 0;
};

// The copies start alike and the backup applies each step: rows, slots,
// candidates and what each evicted stay identical, bit for bit, though
// the primary's pulls would reorder its rows' use.
TEST_F(TableCopiesTest, ABackupApplyingEachStepStaysBitIdentical) {
  primary_->ForwardUpdates(Forwarding());
  Train(60, /*sync=*/false);
  Train(20, /*sync=*/true, /*workers=*/3);
  ASSERT_GT(primary_->stats().evictions, 50);
  ASSERT_GT(primary_->stats().candidates, 0);
  Deliver();
  EXPECT_EQ(backup_->version(), primary_->version());
  EXPECT_EQ(Rows(*backup_), Rows(*primary_));
  EXPECT_EQ(backup_->stats().candidates, primary_->stats().candidates);
  // A worker's call at a backup is refused, naming its primary.
  std::vector<float> out(kWidth);
  EXPECT_THAT(backup_->Pull({1}, absl::MakeSpan(out)).message(), HasSubstr("primary:1"));
  EXPECT_EQ(Push(*backup_, 0, 1000, {1}, {1, 1, 1, 1}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// A copy new to the primary takes its snapshot, in parts, then the steps
// after it; promoted, it knows the pushes it took (a retry is DUPLICATE).
TEST_F(TableCopiesTest, ANewCopyFilledFromTheSnapshotTakesTheStepsAfterIt) {
  Train(40, /*sync=*/false);
  primary_->ForwardUpdates(Forwarding());
  std::vector<ShardUpdate> parts;
  primary_->Snapshot(512, [&](std::vector<ShardUpdate> snapshot) { parts = std::move(snapshot); });
  ASSERT_GT(parts.size(), 3u);
  ASSERT_GT(primary_->stats().candidates, 0);
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::StatusOr<int64_t> applied = backup_->ApplyReplicated(parts[i], "primary:1");
    ASSERT_TRUE(applied.ok()) << applied.status();
    EXPECT_EQ(*applied, i + 1 < parts.size() ? -1 : primary_->version()) << "part " << i;
  }
  // A part sent again after the stream broke changes nothing.
  EXPECT_EQ(*backup_->ApplyReplicated(parts[1], "primary:1"), primary_->version());
  Train(30, /*sync=*/false);
  Deliver();
  EXPECT_EQ(Rows(*backup_), Rows(*primary_));
  EXPECT_EQ(backup_->stats().candidates, primary_->stats().candidates);
  backup_->Promote();
  EXPECT_EQ(Push(*backup_, 0, push_ids_, {1}, {1, 1, 1, 1})->outcome(), ShardPushResult::DUPLICATE);
}

TEST_F(TableCopiesTest, UpdatesThatDoNotFitAreRefusedAndChangeNothing) {
  primary_->ForwardUpdates(Forwarding());
  Train(5, /*sync=*/false);
  ShardUpdate bad = forwarded_[0];
  bad.mutable_gradient()->pop_back();
  EXPECT_EQ(backup_->ApplyReplicated(bad, "primary:1").status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = forwarded_[0];
  bad.set_partition(0);
  EXPECT_EQ(backup_->ApplyReplicated(bad, "primary:1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backup_->ApplyReplicated(forwarded_[1], "primary:1").status().code(),
            absl::StatusCode::kFailedPrecondition);  // skips a version
  EXPECT_EQ(backup_->ApplyReplicated(forwarded_[0], "elsewhere:1").status().code(),
            absl::StatusCode::kFailedPrecondition);
  ShardUpdate part;
  part.set_table("ads");
  part.set_partition(1);
  part.mutable_table_snapshot()->set_rows(2);
  part.mutable_table_snapshot()->set_ids(std::string(8, '\0'));  // a row without its floats
  EXPECT_EQ(backup_->ApplyReplicated(part, "primary:1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backup_->version(), 0);
  Deliver();
  EXPECT_EQ(Rows(*backup_), Rows(*primary_));
}

}  // namespace
}  // namespace fulcrum
