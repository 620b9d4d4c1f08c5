#include "ps_server/embedding/row_store.h"

#include <gtest/gtest.h>

#include <list>
#include <map>
#include <random>
#include <vector>

namespace fulcrum {
namespace {

// Fills a new row with its id, so that rows can be told apart.
void ById(int64_t id, absl::Span<float> row) {
  for (float& v : row) v = static_cast<float>(id);
}

TEST(RowStoreTest, ATouchCreatesTheRowOnceAndFindReturnsIt) {
  RowStore store({/*width=*/4, /*num_slots=*/2});
  EXPECT_EQ(store.row_floats(), 12);
  EXPECT_EQ(store.Find(42), nullptr);
  int inits = 0;
  float* row = store.Touch(42, [&](int64_t id, absl::Span<float> r) {
    ++inits;
    ById(id, r);
  });
  ASSERT_NE(row, nullptr);
  row[11] = -1.0f;  // the last slot's last float
  EXPECT_EQ(store.Touch(42, [&](int64_t, absl::Span<float>) { ++inits; }), row);
  EXPECT_EQ(store.Find(42), row);
  EXPECT_EQ(inits, 1);
  EXPECT_EQ(row[0], 42.0f);
  EXPECT_EQ(row[11], -1.0f);
  EXPECT_EQ(store.size(), 1);
}

// Past max_rows the least recently used row goes; a read is a use.
TEST(RowStoreTest, TheLeastRecentlyUsedRowIsEvicted) {
  RowStore store({/*width=*/2, /*num_slots=*/0, /*max_rows=*/3});
  for (int64_t id : {1, 2, 3}) store.Touch(id, ById);
  ASSERT_NE(store.Find(1), nullptr);  // 2 is now the least recently used
  store.Touch(4, ById);
  EXPECT_EQ(store.Find(2), nullptr);
  EXPECT_EQ(store.evictions(), 1);
  EXPECT_EQ(store.size(), 3);
  for (int64_t id : {1, 3, 4}) {
    const float* row = store.Find(id);
    ASSERT_NE(row, nullptr) << id;
    EXPECT_EQ(row[0], static_cast<float>(id));  // an evicted row's slot is refilled
  }
}

// The same ids under random touches as a plain LRU list keeps them.
TEST(RowStoreTest, EvictionsFollowAReferenceLru) {
  RowStore store({/*width=*/1, /*num_slots=*/1, /*max_rows=*/50});
  std::list<int64_t> order;  // most recent first
  std::map<int64_t, std::list<int64_t>::iterator> where;
  int64_t evictions = 0;
  std::mt19937 gen(3);
  std::uniform_int_distribution<int64_t> ids(-100, 100);
  for (int i = 0; i < 20000; ++i) {
    const int64_t id = ids(gen);
    const bool read = i % 3 == 0;
    const float* row = read ? store.Find(id) : store.Touch(id, ById);
    auto it = where.find(id);
    EXPECT_EQ(row != nullptr, it != where.end() || !read) << "step " << i;
    if (it != where.end()) {
      order.erase(it->second);
    } else if (read) {
      continue;
    } else if (where.size() == 50) {
      where.erase(order.back());
      order.pop_back();
      ++evictions;
    }
    order.push_front(id);
    where[id] = order.begin();
    EXPECT_EQ(row[0], static_cast<float>(id));
  }
  EXPECT_EQ(store.evictions(), evictions);
  std::vector<int64_t> stored;
  store.ForEachRow([&](int64_t id, absl::Span<const float>) { stored.push_back(id); });
  EXPECT_EQ(stored, std::vector<int64_t>(order.rbegin(), order.rend()));  // least recent first
}

// TouchAll and FindAll (lookups started ahead) do what Touch and Find do
// one id at a time: the same rows, evictions, admissions and order of use,
// with ids repeated within a batch.
TEST(RowStoreTest, BatchesTouchAndFindAsSingleCallsDo) {
  const RowStore::Options options = {/*width=*/1, /*num_slots=*/1, /*max_rows=*/40,
                                     /*admit_after=*/2};
  RowStore batched(options), single(options);
  std::mt19937 gen(5);
  std::uniform_int_distribution<int64_t> draw(0, 120);
  for (int round = 0; round < 200; ++round) {
    std::vector<int64_t> ids(1 + round % 37);
    for (int64_t& id : ids) id = draw(gen);
    const bool find = round % 4 == 0;
    std::vector<float*> touched(ids.size());
    std::vector<const float*> found(ids.size());
    if (find) {
      batched.FindAll(ids, /*peek=*/round % 8 == 0, absl::MakeSpan(found));
    } else {
      batched.TouchAll(ids, ById, absl::MakeSpan(touched));
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      const float* expected = find ? (round % 8 == 0 ? single.Peek(ids[i]) : single.Find(ids[i]))
                                   : single.Touch(ids[i], ById);
      const float* got = find ? found[i] : touched[i];
      ASSERT_EQ(got == nullptr, expected == nullptr) << "round " << round << " id " << ids[i];
      if (got != nullptr) {
        EXPECT_EQ(got[0], expected[0]);
      }
    }
  }
  EXPECT_GT(batched.evictions(), 0);
  EXPECT_EQ(batched.evictions(), single.evictions());
  EXPECT_EQ(batched.admissions(), single.admissions());
  std::vector<int64_t> order_batched, order_single;
  batched.ForEachRow([&](int64_t id, absl::Span<const float>) { order_batched.push_back(id); });
  single.ForEachRow([&](int64_t id, absl::Span<const float>) { order_single.push_back(id); });
  EXPECT_EQ(order_batched, order_single);
}

// With admit_after = 3 an id is stored at its third touch; until then it
// costs only a counter.
TEST(RowStoreTest, AnIdIsAdmittedAtItsFthTouch) {
  RowStore store({/*width=*/2, /*num_slots=*/0, /*max_rows=*/0, /*admit_after=*/3});
  EXPECT_EQ(store.Touch(7, ById), nullptr);
  EXPECT_EQ(store.Touch(7, ById), nullptr);
  EXPECT_EQ(store.Find(7), nullptr);
  EXPECT_EQ(store.candidates(), 1);
  EXPECT_EQ(store.size(), 0);
  ASSERT_NE(store.Touch(7, ById), nullptr);
  EXPECT_EQ(store.candidates(), 0);
  EXPECT_EQ(store.admissions(), 1);
  EXPECT_EQ(store.size(), 1);
}

// The counters are bounded: past the bound they are forgotten.
TEST(RowStoreTest, CandidateCountersAreBounded) {
  RowStore store({/*width=*/1, /*num_slots=*/0, /*max_rows=*/0, /*admit_after=*/2});
  for (int64_t id = 0; id <= (1 << 16); ++id) EXPECT_EQ(store.Touch(id, ById), nullptr);
  EXPECT_EQ(store.candidates(), 1);  // the 2^16 before it were forgotten
  EXPECT_EQ(store.Touch(0, ById), nullptr);
  EXPECT_NE(store.Touch(1 << 16, ById), nullptr);
}

// Without a bound nothing is evicted, and rows are visited in the order
// they were stored, whatever was used since.
TEST(RowStoreTest, AnUnboundedStoreKeepsTheOrderOfCreation) {
  RowStore store({/*width=*/1, /*num_slots=*/0, /*max_rows=*/0});
  for (int64_t id : {5, 6, 7}) store.Touch(id, ById);
  ASSERT_NE(store.Find(5), nullptr);
  std::vector<int64_t> stored;
  store.ForEachRow([&](int64_t id, absl::Span<const float>) { stored.push_back(id); });
  EXPECT_EQ(stored, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(store.evictions(), 0);
}

// Rows and counters put back in the order ForEachRow gives come back as
// they were, the order of use included.
TEST(RowStoreTest, PutRestoresRowsCountersAndTheOrderOfUse) {
  RowStore::Options options{/*width=*/3, /*num_slots=*/1, /*max_rows=*/4, /*admit_after=*/2};
  RowStore store(options);
  for (int64_t id : {10, 10, 11, 11, 12, 12, 13, 13, 14}) store.Touch(id, ById);
  store.Find(10);
  float* row = store.Find(12);
  row[5] = 0.5f;
  RowStore restored(options);
  store.ForEachRow([&](int64_t id, absl::Span<const float> r) { restored.Put(id, r); });
  store.ForEachCandidate([&](int64_t id, uint32_t touches) { restored.PutCandidate(id, touches); });
  EXPECT_EQ(restored.size(), 4);
  EXPECT_EQ(restored.candidates(), 1);
  EXPECT_EQ(restored.Find(12)[5], 0.5f);
  // 14's second touch admits it and evicts the least recently used, 11.
  ASSERT_NE(restored.Touch(14, ById), nullptr);
  EXPECT_EQ(restored.Find(11), nullptr);
  EXPECT_NE(restored.Find(13), nullptr);
}

// A row costs its floats and little more: issue 15's bound is 1.5x the
// values plus slots.
TEST(RowStoreTest, MemoryPerRowIsCloseToItsFloats) {
  RowStore store({/*width=*/16, /*num_slots=*/1});
  constexpr int64_t kRows = 200000;
  for (int64_t id = 0; id < kRows; ++id) store.Touch(id * 7919, ById);
  const double per_row = static_cast<double>(store.MemoryBytes()) / kRows;
  const double floats = 16.0 * 2 * sizeof(float);
  EXPECT_LE(per_row, 1.5 * floats) << per_row << " bytes a row";
  EXPECT_GE(per_row, floats);
}

}  // namespace
}  // namespace fulcrum
