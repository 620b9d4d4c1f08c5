// The training workers' leases, as one parameter server sees them: which
// are live, which have finished. Thread-safe.
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

  int num_workers() const { return num_workers_; }
  absl::Duration lease_timeout() const { return lease_timeout_; }

  // OK when 0 <= id < num_workers; else INVALID_ARGUMENT naming the range.
  absl::Status CheckWorkerId(int id) const;

  // Renews `id`'s lease; a dead worker becomes live again (it rejoins).
  // True when the worker arrived: first seen, or back from the dead.
  bool Renew(int id) ABSL_LOCKS_EXCLUDED(mu_);

  // `id` has finished training: it no longer counts as an active worker.
  void MarkFinished(int id) ABSL_LOCKS_EXCLUDED(mu_);

  // True when every worker has finished or is dead.
  bool AllFinishedOrDead() const ABSL_LOCKS_EXCLUDED(mu_);

  // Marks workers whose lease has run out as dead. True when any was marked.
  bool ExpireLeases() ABSL_LOCKS_EXCLUDED(mu_);

  // Workers that are live and have not finished: those a sync step and an
  // SSP wait count.
  int ActiveCount() const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether each worker is active, by id.
  std::vector<bool> Active() const ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<WorkerInfo> Describe() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Worker {
    absl::Time lease_expiry;
    bool live = true;
    bool seen = false;
    bool finished = false;
    bool active() const { return live && !finished; }
  };

  const int num_workers_;
  const absl::Duration lease_timeout_;
  const std::function<absl::Time()> now_;
  mutable absl::Mutex mu_;
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_WORKER_TABLE_H_
