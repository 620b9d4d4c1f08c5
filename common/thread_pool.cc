#include "common/thread_pool.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/blocking_counter.h"

namespace fulcrum {

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void ThreadPool::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

bool ThreadPool::HasWorkOrStopping() const { return stopping_ || !queue_.empty(); }

void ThreadPool::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &ThreadPool::HasWorkOrStopping));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void ParallelFor(ThreadPool& pool, int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  // Each call is claimed once, by a pool thread or by the caller.
  struct Shared {
    explicit Shared(int n) : claimed(n), done(n) {}
    std::vector<std::atomic<bool>> claimed;
    absl::BlockingCounter done;
  };
  auto shared = std::make_shared<Shared>(n);
  auto run = [shared, &fn](int i) {
    if (shared->claimed[i].exchange(true)) return;
    fn(i);
    shared->done.DecrementCount();
  };
  // A task still queued after the caller returned finds its call claimed and
  // touches only `shared`, which it co-owns.
  for (int i = 1; i < n && pool.size() > 0; ++i) {
    pool.Schedule([run, i] { run(i); });
  }
  for (int i = 0; i < n; ++i) run(i);
  shared->done.Wait();
}

}  // namespace fulcrum
