// A fixed set of threads that run closures, and ParallelFor over them: the
// parallel fan-out of the client (one call per server) and of the optimizer
// (one part per core) without starting threads on the hot path.
// Thread-safe.
#ifndef FULCRUM_COMMON_THREAD_POOL_H_
#define FULCRUM_COMMON_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace fulcrum {

class ThreadPool {
 public:
  // `threads` may be 0: then ParallelFor runs everything on its caller.
  explicit ThreadPool(int threads);
  // Runs what is queued, then joins the threads.
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> task);
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void Loop();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// Runs fn(0) .. fn(n - 1) in parallel on `pool` and the calling thread, and
// returns when all have run. The caller also runs the calls no pool thread
// has started, so it never waits on a busy pool: ParallelFor may be called
// from several threads at once, or from inside a pool task.
void ParallelFor(ThreadPool& pool, int n, const std::function<void(int)>& fn);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_THREAD_POOL_H_
