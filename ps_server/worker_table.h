// Leases and SSP clocks of the training workers, as one parameter server sees
// them. Thread-safe.
#ifndef FULCRUM_PS_SERVER_WORKER_TABLE_H_
#define FULCRUM_PS_SERVER_WORKER_TABLE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

class WorkerTable {
 public:
  // Every worker starts live, holding a lease of `lease_timeout` from now, so
  // a step waits that long for a worker that has not started yet. `now` is
  // the clock (absl::Now in production).
  WorkerTable(int num_workers, absl::Duration lease_timeout,
              std::function<absl::Time()> now = absl::Now);

  int num_workers() const { return static_cast<int>(workers_.size()); }
  absl::Duration lease_timeout() const { return lease_timeout_; }

  // OK when 0 <= id < num_workers; else INVALID_ARGUMENT naming the range.
  absl::Status CheckWorkerId(int id) const;

  // Renews `id`'s lease; a dead worker becomes live again (it rejoins).
  void Renew(int id) ABSL_LOCKS_EXCLUDED(mu_);

  // `id` has finished training: it no longer counts as an active worker.
  void MarkFinished(int id) ABSL_LOCKS_EXCLUDED(mu_);

  // True when every worker has finished or is dead.
  bool AllFinishedOrDead() const ABSL_LOCKS_EXCLUDED(mu_);

  // Marks workers whose lease has run out as dead. True when any was marked.
  bool ExpireLeases() ABSL_LOCKS_EXCLUDED(mu_);

  // Workers that are live and have not finished: those a sync step and an
  // SSP wait count.
  int ActiveCount() const ABSL_LOCKS_EXCLUDED(mu_);

  // SSP: `id` finished the step computed at `clock`; its clock becomes at
  // least clock + 1.
  void AdvanceClock(int id, int64_t clock) ABSL_LOCKS_EXCLUDED(mu_);

  // SSP: waits until every active worker's clock is >= min_clock, the
  // deadline passes, or Cancel. True when the condition holds.
  bool AwaitMinClock(int64_t min_clock, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // Wakes every waiter; AwaitMinClock returns false from now on.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_);

  // Active workers whose clock is below min_clock (for error messages).
  std::vector<int> WorkersBehind(int64_t min_clock) const ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<WorkerInfo> Describe() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Worker {
    absl::Time lease_expiry;
    bool live = true;
    bool seen = false;
    bool finished = false;
    int64_t clock = 0;
    bool active() const { return live && !finished; }
  };

  bool MinClockReachedLocked(int64_t min_clock) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const absl::Duration lease_timeout_;
  const std::function<absl::Time()> now_;
  mutable absl::Mutex mu_;
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_WORKER_TABLE_H_
