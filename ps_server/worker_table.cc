#include "ps_server/worker_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fulcrum {

std::string LeaseChanges::ToString() const {
  std::string out;
  if (!expired.empty()) {
    absl::StrAppend(&out, "the lease of worker(s) ", absl::StrJoin(expired, ", "), " expired");
  }
  if (!never_seen.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : "; ", "worker(s) ", absl::StrJoin(never_seen, ", "),
                    " had not started by the start-up deadline (--startup_timeout_secs): the "
                    "job goes on without them until they come");
  }
  return out;
}

WorkerTable::WorkerTable(int num_workers, absl::Duration lease_timeout,
                         absl::Duration startup_timeout, std::function<absl::Time()> now)
    : num_workers_(num_workers),
      lease_timeout_(lease_timeout),
      startup_deadline_(now() + startup_timeout),
      now_(std::move(now)),
      startup_over_(startup_timeout <= absl::ZeroDuration()) {
  workers_.assign(num_workers, Worker{});
}

absl::Status WorkerTable::CheckWorkerId(int id) const {
  if (id < 0 || id >= num_workers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_id ", id, " is out of range [0, ", num_workers(), ")"));
  }
  return absl::OkStatus();
}

bool WorkerTable::Renew(int id) {
  const absl::Time expiry = now_() + lease_timeout_;
  absl::MutexLock lock(&mu_);
  Worker& w = workers_[id];
  const bool arrived = !w.live;  // first seen, or back from the dead
  w.lease_expiry = expiry;
  w.live = true;
  w.seen = true;
  return arrived;
}

void WorkerTable::MarkFinished(int id) {
  absl::MutexLock lock(&mu_);
  workers_[id].finished = true;
}

bool WorkerTable::AllFinishedOrDead() const {
  absl::ReaderMutexLock lock(&mu_);
  return std::none_of(workers_.begin(), workers_.end(),
                      [](const Worker& w) { return w.live && !w.finished; });
}

LeaseChanges WorkerTable::ExpireLeases() {
  const absl::Time now = now_();
  absl::MutexLock lock(&mu_);
  LeaseChanges changes;
  for (int i = 0; i < num_workers_; ++i) {
    Worker& w = workers_[i];
    if (w.live && w.lease_expiry <= now) {
      w.live = false;
      changes.expired.push_back(i);
    }
  }
  if (!startup_over_ && now >= startup_deadline_) {
    for (int i = 0; i < num_workers_; ++i) {
      if (AwaitedLocked(workers_[i])) changes.never_seen.push_back(i);
    }
    startup_over_ = true;
  }
  return changes;
}

std::vector<int> WorkerTable::Awaited() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<int> awaited;
  for (int i = 0; i < num_workers_; ++i) {
    if (AwaitedLocked(workers_[i])) awaited.push_back(i);
  }
  return awaited;
}

int WorkerTable::ActiveCount() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int>(std::count_if(
      workers_.begin(), workers_.end(),
      [this](const Worker& w) ABSL_SHARED_LOCKS_REQUIRED(mu_) { return ActiveLocked(w); }));
}

std::vector<bool> WorkerTable::Active() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<bool> active(workers_.size());
  for (size_t i = 0; i < workers_.size(); ++i) active[i] = ActiveLocked(workers_[i]);
  return active;
}

std::vector<WorkerInfo> WorkerTable::Describe() const {
  const absl::Time now = now_();
  absl::ReaderMutexLock lock(&mu_);
  std::vector<WorkerInfo> out;
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i) {
    const Worker& w = workers_[i];
    WorkerInfo info;
    info.set_worker_id(i);
    info.set_live(w.live);
    info.set_seen(w.seen);
    info.set_finished(w.finished);
    info.set_awaited(AwaitedLocked(w));
    info.set_lease_remaining_ms(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(w.lease_expiry - now)));
    out.push_back(info);
  }
  return out;
}

}  // namespace fulcrum
