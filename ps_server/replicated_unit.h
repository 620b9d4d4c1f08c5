// What every unit of the placement table (a variable's shard, a range of
// an embedding table's ids) does alike as one of its copies: its version
// and the version every backup has (committed), its role (primary, backup
// of a named primary, or retired), the updates a primary forwards to its
// backups and the snapshot it fills a new copy from, and a backup's taking
// of them. The unit's own state (values, rows, slots) and how an update
// or a snapshot's part applies to it are the derived class's, under the
// same lock. Thread-safe.
#ifndef FULCRUM_PS_SERVER_REPLICATED_UNIT_H_
#define FULCRUM_PS_SERVER_REPLICATED_UNIT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/ps_service.pb.h"
#include "ps_server/last_push_ids.h"

namespace fulcrum {

// Whether `update` is a part of a snapshot, of a shard or of a table.
inline bool IsSnapshotPart(const ShardUpdate& update) {
  return update.has_snapshot() || update.has_table_snapshot();
}

// The bytes of data `update` carries (gradients, ids, a snapshot's).
inline size_t UpdateBytes(const ShardUpdate& update) {
  return update.gradient().size() + update.ids().size() + update.snapshot().data().size() +
         update.table_snapshot().ids().size() + update.table_snapshot().data().size() +
         update.table_snapshot().candidate_ids_size() * (sizeof(int64_t) + sizeof(uint32_t));
}

class ReplicatedUnit {
 public:
  virtual ~ReplicatedUnit() = default;

  // The unit's key in the placement table ("variable/shard",
  // "table#partition").
  const std::string& key() const { return key_; }
  // "variable 'w' shard 1", for messages.
  const std::string& label() const { return label_; }

  int64_t version() const ABSL_LOCKS_EXCLUDED(mu_);

  // Replication. A primary that has backups hands each update it applies
  // to `forwarding.forward`, in version order and under its lock (so it
  // must only queue it), and a version it made counts as committed, so
  // that pulls waiting for it are served, only once Committed says every
  // backup has applied it. Without `forward` (null, the default), or with
  // `commits_wait` false (no backup a commit waits for), each version is
  // committed as it is made.
  struct Forwarding {
    std::function<void(ShardUpdate)> forward;
    bool commits_wait = true;
  };
  void ForwardUpdates(Forwarding forwarding) ABSL_LOCKS_EXCLUDED(mu_);
  // Hands `take` the unit's whole state as it is (parts of about
  // `part_bytes`), under the lock the updates are forwarded under: what a
  // copy new to this primary takes before the updates after it.
  static constexpr int64_t kSnapshotPartBytes = int64_t{4} << 20;
  void Snapshot(int64_t part_bytes, absl::FunctionRef<void(std::vector<ShardUpdate>)> take)
      ABSL_LOCKS_EXCLUDED(mu_);
  // From now on a version is committed only once Committed says so, though
  // the forwarding was set without a backup to wait for: a copy that caught
  // up, to take this one's place, has every version acknowledged from here.
  void WaitForCommits() ABSL_LOCKS_EXCLUDED(mu_);
  // Every backup has applied the updates up to `version`.
  void Committed(int64_t version) ABSL_LOCKS_EXCLUDED(mu_);
  int64_t committed_version() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until `version` is committed: OK, or at `deadline` UNAVAILABLE
  // saying the backups have not applied it, or FAILED_PRECONDITION once
  // the unit is made a backup (its primary moved) before then.
  absl::Status AwaitCommitted(int64_t version, absl::Time deadline) const ABSL_LOCKS_EXCLUDED(mu_);

  // Makes this a backup copy of the primary at `primary`: it takes that
  // primary's updates (ApplyReplicated) and no worker's push or pull. The
  // gradients a sync step accumulated here are dropped.
  void MakeBackup(const std::string& primary) ABSL_LOCKS_EXCLUDED(mu_);
  // A backup's primary's address; "" for a primary.
  std::string primary() const ABSL_LOCKS_EXCLUDED(mu_);
  // The placement table has no copy of the unit here any more (it moved,
  // or this server left the table): its memory goes, and every call on it
  // from now on, or waiting, fails FAILED_PRECONDITION saying it moved.
  void Retire() ABSL_LOCKS_EXCLUDED(mu_);
  // Makes a backup copy the primary, its primary being lost: it takes
  // workers' pushes and pulls from now on, from the version it has.
  void Promote() ABSL_LOCKS_EXCLUDED(mu_);
  // FAILED_PRECONDITION naming the primary when this is a backup copy (or
  // retired). Workers' pushes check it too, under the unit's lock.
  absl::Status CheckPrimary() const ABSL_LOCKS_EXCLUDED(mu_);
  bool IsBackup() const ABSL_LOCKS_EXCLUDED(mu_);

  // A backup applies its primary's `update` as the primary did, so the
  // two stay bit-identical, and takes its pushes (a retry of one is
  // DUPLICATE here after). The parts of a snapshot fill a copy of the
  // primary's state, which replaces this one's (a version back or ahead)
  // once whole. The version to answer: the unit's, or -1 for a part of a
  // snapshot not yet whole. An update it has applied already changes
  // nothing; FAILED_PRECONDITION for one that skips a version or a
  // snapshot's part, or given to a retired copy; INVALID_ARGUMENT for one
  // of another unit or size, or given to a copy that is not a backup;
  // FAILED_PRECONDITION when `from` (the sender's address) is not its
  // primary (the primary changed, or a server the table dropped goes on
  // sending).
  absl::StatusOr<int64_t> ApplyReplicated(const ShardUpdate& update, absl::string_view from)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Wakes the calls waiting on the unit; they return UNAVAILABLE.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

 protected:
  ReplicatedUnit(std::string key, std::string label, int64_t version);

  // A push a step took: its worker and push_id.
  struct Taken {
    int worker;
    uint64_t push_id;
  };
  // `pushes` into `update`, and back.
  static void AddPushes(absl::Span<const Taken> pushes, ShardUpdate* update);
  static std::vector<Taken> PushesOf(const ShardUpdate& update);

  // The unit's whole state as parts of a snapshot.
  virtual std::vector<ShardUpdate> SnapshotLocked(int64_t part_bytes) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) = 0;
  // Whether `update` names this unit.
  virtual bool IsOfThisUnit(const ShardUpdate& update) const = 0;
  // A backup takes a part of its primary's snapshot (named this unit).
  virtual absl::StatusOr<int64_t> ApplySnapshotPartLocked(const ShardUpdate& update)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // INVALID_ARGUMENT naming what in `update` (named this unit) does not
  // fit it.
  virtual absl::Status CheckUpdateLocked(const ShardUpdate& update) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) = 0;
  // Applies `update`, checked, as the next version; its pushes are
  // recorded as taken already.
  virtual void ApplyUpdateLocked(const ShardUpdate& update) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // The gradients of the sync step being accumulated go (a backup's).
  virtual void DropPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // The unit's memory goes (Retire).
  virtual void FreeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;

  // The version just made (version_) is committed now when no backup
  // holds commits back, and `update`, which made it, goes to the backups
  // when they are forwarded to; `update` is called only then.
  void MadeVersionLocked(absl::FunctionRef<ShardUpdate()> update)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether updates go to copies now.
  bool ForwardingLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return forward_ != nullptr; }
  absl::Status CheckPrimaryLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status RetiredError() const;

  mutable absl::Mutex mu_;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t committed_version_ ABSL_GUARDED_BY(mu_) = 0;  // <= version_
  std::string primary_ ABSL_GUARDED_BY(mu_);            // a backup's primary; "": not a backup
  LastPushIds last_push_ids_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool retired_ ABSL_GUARDED_BY(mu_) = false;

 private:
  const std::string key_;
  const std::string label_;
  std::function<void(ShardUpdate)> forward_ ABSL_GUARDED_BY(mu_);
  bool commits_wait_ ABSL_GUARDED_BY(mu_) = false;  // for backups to apply forwarded versions
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_REPLICATED_UNIT_H_
