#include "ps_server/worker_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fulcrum {

WorkerTable::WorkerTable(int num_workers, absl::Duration lease_timeout,
                         std::function<absl::Time()> now)
    : num_workers_(num_workers), lease_timeout_(lease_timeout), now_(std::move(now)) {
  const absl::Time expiry = now_() + lease_timeout_;
  workers_.assign(num_workers, Worker{expiry});
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
  const bool arrived = !w.live || !w.seen;
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
  return std::none_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.active(); });
}

bool WorkerTable::ExpireLeases() {
  const absl::Time now = now_();
  absl::MutexLock lock(&mu_);
  bool changed = false;
  for (Worker& w : workers_) {
    if (w.live && w.lease_expiry <= now) {
      w.live = false;
      changed = true;
    }
  }
  return changed;
}

int WorkerTable::ActiveCount() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int>(
      std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.active(); }));
}

std::vector<bool> WorkerTable::Active() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<bool> active(workers_.size());
  for (size_t i = 0; i < workers_.size(); ++i) active[i] = workers_[i].active();
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
    info.set_lease_remaining_ms(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(w.lease_expiry - now)));
    out.push_back(info);
  }
  return out;
}

}  // namespace fulcrum
