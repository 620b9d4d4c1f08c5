#include "ps_server/replicated_unit.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fulcrum {

ReplicatedUnit::ReplicatedUnit(std::string key, std::string label, int64_t version)
    : version_(version),
      committed_version_(version),
      key_(std::move(key)),
      label_(std::move(label)) {}

void ReplicatedUnit::AddPushes(absl::Span<const Taken> pushes, ShardUpdate* update) {
  for (const Taken& push : pushes) {
    PushTaken* taken = update->add_pushes();
    taken->set_worker(push.worker);
    taken->set_push_id(push.push_id);
  }
}

std::vector<ReplicatedUnit::Taken> ReplicatedUnit::PushesOf(const ShardUpdate& update) {
  std::vector<Taken> pushes;
  for (const PushTaken& push : update.pushes()) pushes.push_back({push.worker(), push.push_id()});
  return pushes;
}

int64_t ReplicatedUnit::version() const {
  absl::ReaderMutexLock lock(&mu_);
  return version_;
}

void ReplicatedUnit::ForwardUpdates(Forwarding forwarding) {
  absl::MutexLock lock(&mu_);
  forward_ = std::move(forwarding.forward);
  commits_wait_ = forward_ && forwarding.commits_wait;
  // A primary made a backup keeps its uncommitted versions uncommitted:
  // the pushes waiting for them fail (AwaitCommitted).
  if (!commits_wait_ && primary_.empty()) committed_version_ = version_;
}

void ReplicatedUnit::Snapshot(int64_t part_bytes,
                              absl::FunctionRef<void(std::vector<ShardUpdate>)> take) {
  absl::MutexLock lock(&mu_);
  take(SnapshotLocked(part_bytes));
}

void ReplicatedUnit::WaitForCommits() {
  absl::MutexLock lock(&mu_);
  if (forward_) commits_wait_ = true;
}

void ReplicatedUnit::MadeVersionLocked(absl::FunctionRef<ShardUpdate()> update) {
  if (!commits_wait_) committed_version_ = version_;
  if (forward_) forward_(update());
}

void ReplicatedUnit::Committed(int64_t version) {
  absl::MutexLock lock(&mu_);
  committed_version_ = std::max(committed_version_, std::min(version, version_));
}

int64_t ReplicatedUnit::committed_version() const {
  absl::ReaderMutexLock lock(&mu_);
  return committed_version_;
}

absl::Status ReplicatedUnit::AwaitCommitted(int64_t version, absl::Time deadline) const {
  absl::ReaderMutexLock lock(&mu_);
  auto committed = [this, version]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return cancelled_ || committed_version_ >= version || !primary_.empty();
  };
  mu_.AwaitWithDeadline(absl::Condition(&committed), deadline);
  if (!primary_.empty()) {
    // Its copies may lack the version, and the new primary refuses it
    // from here: the push is made again there, by its push id.
    return absl::FailedPreconditionError(
        absl::StrCat(label_, " moved to the primary ", primary_, " before version ", version,
                     " was on every copy; the push goes to it again"));
  }
  if (committed_version_ >= version) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(label_, ": version ", version,
                                             " is not yet on every backup (they have ",
                                             committed_version_, ")"));
}

std::string ReplicatedUnit::primary() const {
  absl::MutexLock lock(&mu_);
  return primary_;
}

void ReplicatedUnit::MakeBackup(const std::string& primary) {
  absl::MutexLock lock(&mu_);
  primary_ = primary;
  // A step's gradients accumulated here are the new primary's to take
  // again (clients push them again by the table).
  DropPendingLocked();
}

void ReplicatedUnit::Retire() {
  absl::MutexLock lock(&mu_);
  if (primary_.empty()) primary_ = "(none)";
  retired_ = true;
  forward_ = nullptr;
  commits_wait_ = false;
  DropPendingLocked();
  FreeLocked();
}

absl::Status ReplicatedUnit::RetiredError() const {
  return absl::FailedPreconditionError(
      absl::StrCat(label_, " has no copy here any more: it moved to other servers"));
}

void ReplicatedUnit::Promote() {
  absl::MutexLock lock(&mu_);
  primary_.clear();
}

bool ReplicatedUnit::IsBackup() const {
  absl::ReaderMutexLock lock(&mu_);
  return !primary_.empty();
}

absl::Status ReplicatedUnit::CheckPrimary() const {
  absl::ReaderMutexLock lock(&mu_);
  return CheckPrimaryLocked();
}

absl::Status ReplicatedUnit::CheckPrimaryLocked() const {
  if (retired_) return RetiredError();
  if (primary_.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(label_, " here is a backup copy; its primary is ", primary_));
}

absl::StatusOr<int64_t> ReplicatedUnit::ApplyReplicated(const ShardUpdate& update,
                                                        absl::string_view from) {
  absl::MutexLock lock(&mu_);
  if (retired_) return RetiredError();
  if (primary_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        label_, " here is not a backup copy: it takes no updates from another server"));
  }
  if (from != primary_) {
    return absl::FailedPreconditionError(absl::StrCat(
        label_, " here takes updates only from its primary ", primary_, ", not ", from));
  }
  if (!IsOfThisUnit(update)) {
    return absl::InvalidArgumentError(absl::StrCat(label_, ": given an update of variable '",
                                                   update.variable(), "' shard ", update.shard(),
                                                   ", which is not one of it"));
  }
  if (IsSnapshotPart(update)) return ApplySnapshotPartLocked(update);
  if (absl::Status s = CheckUpdateLocked(update); !s.ok()) return s;
  if (update.version() <= version_) return version_;  // applied already
  if (update.version() != version_ + 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        label_, ": at version ", version_, ", given the update to version ", update.version()));
  }
  for (const PushTaken& push : update.pushes()) {
    last_push_ids_.Seen(push.worker(), push.push_id());
  }
  ApplyUpdateLocked(update);
  return version_;
}

void ReplicatedUnit::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
}

}  // namespace fulcrum
