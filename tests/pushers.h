// Workers that push ones to a variable w, each to its own quarter of its
// rows, counting their acknowledged pushes; and the check that every
// element ends at exactly minus its worker's acknowledged pushes: nothing
// lost, nothing applied twice. What the replication tests run against
// servers killed, frozen, moved or cut off by a network partition
// (tests:replication_test, and exactness_pusher in tests:multihost_test).
#ifndef FULCRUM_TESTS_PUSHERS_H_
#define FULCRUM_TESTS_PUSHERS_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fulcrum/ps_client.h"
#include "gtest/gtest.h"

namespace fulcrum {

// w [64, 8] in `shards` shards, zeros, SGD at rate 1: each push of ones
// takes 1 from every element.
VariableSpec Ones(int shards = 4);

// Workers of a job in `mode`, each pushing ones to its own quarter of w's
// rows (pulling first), on threads of their own: `steps` pushes each, or
// with `until_stopped` as many more as it takes each to reach, after Stop,
// two more than the most any had then (all the same number: sync steps
// wait for every worker). They count their acknowledged pushes, and in
// ssp the pulls that missed a push their staleness bound requires.
class Pushers {
 public:
  static constexpr int kWorkers = 4;
  // The ssp staleness bound the servers must have (--staleness): a pull
  // at clock c must see every worker's first c - kStaleness pushes.
  static constexpr int kStaleness = 1;
  static constexpr size_t kElements = size_t{64} * 8;  // of w

  Pushers(std::vector<std::unique_ptr<PsClient>>* clients, ConsistencyMode mode, int steps,
          bool until_stopped = false)
      : acknowledged_(kWorkers, 0), failed_(kWorkers) {
    for (int w = 0; w < kWorkers; ++w) {
      threads_.emplace_back([this, client = (*clients)[w].get(), mode, steps, until_stopped, w] {
        Run(client, mode, steps, until_stopped, w);
      });
    }
  }
  ~Pushers() { Join(); }

  // Whether every worker has `n` pushes acknowledged (or failed) within
  // `timeout`.
  bool AwaitEach(int64_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto each = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (int w = 0; w < kWorkers; ++w) {
        if (acknowledged_[w] < n && failed_[w].ok()) return false;
      }
      return true;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&each), timeout);
  }
  void Stop() {
    absl::MutexLock lock(&mu_);
    stop_at_ = *std::max_element(acknowledged_.begin(), acknowledged_.end()) + 2;
  }
  void Join() {
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  // The fewest pushes a worker has had acknowledged so far.
  int64_t Fewest() {
    absl::MutexLock lock(&mu_);
    return *std::min_element(acknowledged_.begin(), acknowledged_.end());
  }
  // After Join.
  const std::vector<int64_t>& acknowledged() const { return acknowledged_; }
  const std::vector<absl::Status>& failed() const { return failed_; }
  const std::vector<std::string>& too_stale() const { return too_stale_; }

 private:
  void Run(PsClient* client, ConsistencyMode mode, int steps, bool until_stopped, int w);

  absl::Mutex mu_;
  std::vector<int64_t> acknowledged_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> failed_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> too_stale_ ABSL_GUARDED_BY(mu_);
  int64_t stop_at_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<int64_t>::max();
  std::vector<std::thread> threads_;
};

// Whether every element of w, as `reader` pulls it, is minus the pushes
// `acknowledged` of its row's worker (each applied once), a quarter of
// them in sync (each step applies the mean of the four workers' pushes).
::testing::AssertionResult EachPushAppliedOnce(PsClient& reader, ConsistencyMode mode,
                                               const std::vector<int64_t>& acknowledged);

}  // namespace fulcrum

#endif  // FULCRUM_TESTS_PUSHERS_H_
