#include "common/thread_pool.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/barrier.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

TEST(ParallelForTest, RunsEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> runs(50);
  for (int round = 0; round < 20; ++round) {
    ParallelFor(pool, 50, [&](int i) { runs[i].fetch_add(1); });
  }
  for (const auto& r : runs) EXPECT_EQ(r.load(), 20);
}

TEST(ParallelForTest, RunsInParallelOnAnIdlePool) {
  ThreadPool pool(3);
  // Every call waits for all four: only concurrent calls get past it.
  absl::Barrier* barrier = new absl::Barrier(4);
  std::atomic<int> passed{0};
  ParallelFor(pool, 4, [&](int) {
    if (barrier->Block()) delete barrier;
    passed.fetch_add(1);
  });
  EXPECT_EQ(passed.load(), 4);
}

TEST(ParallelForTest, WithoutThreadsRunsOnTheCaller) {
  ThreadPool pool(0);
  const std::thread::id caller = std::this_thread::get_id();
  int runs = 0;
  ParallelFor(pool, 5, [&](int) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    ++runs;
  });
  EXPECT_EQ(runs, 5);
}

TEST(ParallelForTest, DoesNotWaitOnABusyPool) {
  ThreadPool pool(1);
  absl::Notification release, started;
  pool.Schedule([&] {
    started.Notify();
    release.WaitForNotification();
  });
  started.WaitForNotification();
  // The only pool thread is busy: the caller runs all three itself.
  int runs = 0;
  ParallelFor(pool, 3, [&](int) { ++runs; });
  EXPECT_EQ(runs, 3);
  release.Notify();
}

}  // namespace
}  // namespace fulcrum
