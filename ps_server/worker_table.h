// The training workers' leases, as one parameter server sees them: which
// have not started yet, which are live, which have finished. Thread-safe.
//
// A worker that has not contacted this server yet is awaited (counts as
// active) until the start-up deadline, however long after the server's
// start the workers come; from its first contact on, its lease governs it.
#ifndef FULCRUM_PS_SERVER_WORKER_TABLE_H_
#define FULCRUM_PS_SERVER_WORKER_TABLE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

// What ExpireLeases changed.
struct LeaseChanges {
  std::vector<int> expired;     // seen workers whose lease ran out
  std::vector<int> never_seen;  // not started by the start-up deadline, passed now
  bool any() const { return !expired.empty() || !never_seen.empty(); }
  // "the lease of worker(s) 1 expired; ...", for the log.
  std::string ToString() const;
};

class WorkerTable {
 public:
  // Workers not seen yet are awaited until `startup_timeout` from now (0:
  // not at all); a seen one holds a lease of `lease_timeout` from its last
  // call. `now` is the clock (absl::Now in production).
  WorkerTable(int num_workers, absl::Duration lease_timeout, absl::Duration startup_timeout,
              std::function<absl::Time()> now = absl::Now);

  int num_workers() const { return num_workers_; }
  absl::Duration lease_timeout() const { return lease_timeout_; }

  // OK when 0 <= id < num_workers; else INVALID_ARGUMENT naming the range.
  absl::Status CheckWorkerId(int id) const;

  // Renews `id`'s lease; a dead worker becomes live again (it rejoins).
  // True when the worker arrived: first seen, or back from the dead.
  bool Renew(int id) ABSL_LOCKS_EXCLUDED(mu_);

  // `id` has finished training: it no longer counts as an active worker.
  void MarkFinished(int id) ABSL_LOCKS_EXCLUDED(mu_);

  // True when every worker that started has finished or is dead (one that
  // never came has nothing to finish).
  bool AllFinishedOrDead() const ABSL_LOCKS_EXCLUDED(mu_);

  // Marks workers whose lease has run out as dead and, once the start-up
  // deadline passes, stops awaiting those not seen yet.
  LeaseChanges ExpireLeases() ABSL_LOCKS_EXCLUDED(mu_);

  // The workers not seen yet while the start-up deadline has not passed:
  // those the job still waits for before it starts.
  std::vector<int> Awaited() const ABSL_LOCKS_EXCLUDED(mu_);

  // Time left until the start-up deadline (<= 0 once it passed).
  absl::Duration StartupRemaining() const { return startup_deadline_ - now_(); }

  // Workers that are awaited, or live and not finished: those a sync step
  // and an SSP wait count.
  int ActiveCount() const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether each worker is active, by id.
  std::vector<bool> Active() const ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<WorkerInfo> Describe() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Worker {
    absl::Time lease_expiry;
    bool live = false;  // seen, and its lease has not run out
    bool seen = false;
    bool finished = false;
  };
  // Not seen yet, and the start-up deadline has not passed.
  bool AwaitedLocked(const Worker& w) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return !w.seen && !w.finished && !startup_over_;
  }
  bool ActiveLocked(const Worker& w) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return (w.live && !w.finished) || AwaitedLocked(w);
  }

  const int num_workers_;
  const absl::Duration lease_timeout_;
  const absl::Time startup_deadline_;
  const std::function<absl::Time()> now_;
  mutable absl::Mutex mu_;
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  bool startup_over_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_WORKER_TABLE_H_
