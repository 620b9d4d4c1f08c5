// One embedding table's rows on one server (EmbeddingTableSpec): sparse
// pulls of rows by id, sparse pushes of row gradients applied by the
// table's optimizer to the rows touched only, within the bounds of its
// RowStore. Checks what a peer sends: a bad request changes nothing.
//
// It holds one range of the table's ids (a partition: the ids whose
// EmbeddingOwner among the table's partitions is its own), a unit of the
// placement table that may have copies (ReplicatedUnit): each step it
// applies goes to them as the ids and the step's gradients, and they apply
// it as it did, so that copies stay bit-identical, their rows, slots,
// candidates and order of use alike. While a copy is being sent updates,
// pulls do not count as a use of the rows they read (only pushes do,
// which the copies see too), else the copies would evict differently.
// Thread-safe.
#ifndef FULCRUM_PS_SERVER_EMBEDDING_EMBEDDING_TABLE_H_
#define FULCRUM_PS_SERVER_EMBEDDING_EMBEDDING_TABLE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/checkpoint/file.h"
#include "common/embedding.h"
#include "common/row_push.h"
#include "proto/ps_service.pb.h"
#include "proto/tensor.pb.h"
#include "ps_server/embedding/heavy_hitters.h"
#include "ps_server/embedding/row_store.h"
#include "ps_server/last_push_ids.h"
#include "ps_server/replicated_unit.h"

namespace fulcrum {

class EmbeddingTable : public ReplicatedUnit {
 public:
  // Most ids one pull may name, and one push (in all its parts): past
  // them, RESOURCE_EXHAUSTED.
  static constexpr int64_t kMaxIdsPerRequest = kMaxIdsPerRowCall;
  static constexpr int64_t kMaxIdsPerPush = kMaxIdsPerRowPush;

  // Partition `partition` of the table of `spec`. INVALID_ARGUMENT when
  // `spec` is not a valid table (ValidateEmbeddingTableSpec).
  static absl::StatusOr<std::unique_ptr<EmbeddingTable>> Create(const EmbeddingTableSpec& spec,
                                                                int partition = 0);

  // The canonical spec (the optimizer's defaults filled in).
  const EmbeddingTableSpec& spec() const { return spec_; }
  int partition() const { return partition_; }

  // The rows of `ids` into `out` (ids.size() x width floats): stored rows
  // as they are, the others their initial rows (nothing is stored).
  // FAILED_PRECONDITION at a backup copy (CheckPrimary).
  absl::Status Pull(absl::Span<const int64_t> ids, absl::Span<float> out);

  // Up to `max_rows` stored rows from position `start` of the store's
  // order (RowStore::ForEachRowAt) into `out`: ids, values, with `slots`
  // the slots, and where the next page starts.
  void Read(int64_t start, int64_t max_rows, bool slots, ReadRowsResponse* out) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // A push's rows that CheckPush accepted for this table: only CheckPush
  // makes one, so that Push and Accumulate apply it without checking it
  // again (a request's tables are all checked before any applies).
  class CheckedRows {
   public:
    absl::Span<const int64_t> ids() const { return ids_; }
    absl::Span<const float> grads() const { return grads_; }

   private:
    friend class EmbeddingTable;
    CheckedRows(const EmbeddingTable* table, absl::Span<const int64_t> ids,
                absl::Span<const float> grads)
        : table_(table), ids_(ids), grads_(grads) {}
    const EmbeddingTable* table_;
    absl::Span<const int64_t> ids_;
    absl::Span<const float> grads_;
  };

  // Checks a push of `grads` (ids.size() x width floats, one row gradient
  // per id) for `ids`, which it lends: INVALID_ARGUMENT for a size that
  // does not fit, a repeated id or a gradient that is not finite, naming
  // it; RESOURCE_EXHAUSTED past kMaxIdsPerPush.
  absl::StatusOr<CheckedRows> CheckPush(absl::Span<const int64_t> ids,
                                        absl::Span<const float> grads) const;

  // Applies `rows` (checked by this table) now as one step of the table
  // (lazy Adam's t, the version), creating rows as admitted; an id not
  // admitted yet has its gradient dropped. APPLIED, with the new version;
  // DUPLICATE, changing nothing, when `push_id` (not 0) is `worker`'s last
  // push here (a retry).
  absl::StatusOr<ShardPushResult> Push(int worker, uint64_t push_id, const CheckedRows& rows)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Sync: adds `worker`'s `rows` (checked by this table), computed at
  // version `computed_at`, to the step being accumulated. An older step's
  // are STALE; a second push of one worker in a step is DUPLICATE; the
  // `required`-th worker's push applies the step (APPLIED): each id's
  // gradients averaged over the workers that pushed it, the learning rate
  // scaled for the step's workers. Earlier pushes are ACCUMULATED. A retry
  // is DUPLICATE, as for Push.
  absl::StatusOr<ShardPushResult> Accumulate(int worker, uint64_t push_id, int64_t computed_at,
                                             const CheckedRows& rows, int required)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Applies the step being accumulated when at least `required` workers
  // pushed to it (the live workers shrank). True when it applied.
  bool CompleteIfReady(int required) ABSL_LOCKS_EXCLUDED(mu_);

  // The version is the steps applied. Waits until the committed version
  // (every copy has it) is >= min_version: DEADLINE_EXCEEDED at
  // `deadline`, UNAVAILABLE once Cancel.
  absl::Status AwaitVersion(int64_t min_version, absl::Time deadline) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Adds the table (spec, version, rows least recently used first,
  // candidates), as of one moment, to `writer`. Pushes wait meanwhile.
  absl::Status WriteCheckpoint(CheckpointFileWriter& writer) const ABSL_LOCKS_EXCLUDED(mu_);

  // Adds the rows and candidates of `part` (a table of `file`) that `keep`
  // says are this server's; the version becomes the newest restored.
  // FAILED_PRECONDITION when the checkpointed table's width or optimizer
  // differ from this one's; DATA_LOSS naming the file when it cannot be
  // read.
  absl::Status Restore(const CheckpointFile& file, const CheckpointTable& part,
                       absl::FunctionRef<bool(int64_t id)> keep) ABSL_LOCKS_EXCLUDED(mu_);

  // Bytes a stored row takes at most: its floats and its share of the
  // index and the order of use (a bound for budgets).
  int64_t BytesPerRow() const;

  struct Stats {
    int64_t rows = 0;
    int64_t candidates = 0;
    int64_t evictions = 0;
    int64_t admissions = 0;
    int64_t bytes = 0;
    int64_t step = 0;  // pushes applied
  };
  // The ids the sketch of most-pushed ids holds, and those Stats shows.
  static constexpr int kHotCapacity = 256;
  static constexpr int kHottestShown = 5;
  // The most ids of one push the sketch counts: a larger push's are
  // sampled evenly, each standing for as many as it was picked from.
  static constexpr size_t kHotSampled = 512;
  // The sketch counts every id of the first kHotExact ids pushed; after
  // that one in stride, the stride growing by one every kHotExact ids to
  // kHotMaxStride: in a long job it costs that much less (its updates
  // miss the caches), and the ids pushed most are still found.
  static constexpr uint64_t kHotExact = 1 << 12;
  static constexpr uint64_t kHotMaxStride = 64;
  // Cheap: the servers ask on every push, for the memory budget.
  Stats stats() const;
  // The ids workers pushed most here, most first (kHottestShown at most;
  // estimates, see HeavyHitters).
  std::vector<HeavyHitters::Hitter> hottest() const;

 private:
  EmbeddingTable(const EmbeddingTableSpec& spec, int partition);
  absl::Status CheckIds(absl::Span<const int64_t> ids, size_t floats, const char* what,
                        int64_t max_ids) const;
  // Applies `grads` (each the mean of its id's gradients) as one step that
  // averaged `averaged` workers' pushes, `pushes`.
  void ApplyLocked(absl::Span<const int64_t> ids, absl::Span<const float> grads, int averaged,
                   absl::Span<const Taken> pushes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyAccumulatedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts a push's ids in hot_ (a sample: kHotSampled, kHotExact).
  void CountPushedLocked(absl::Span<const int64_t> ids) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ShardPushResult ResultLocked(ShardPushResult::Outcome outcome, int64_t staleness) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // ReplicatedUnit: the rows as parts of a snapshot (TableSnapshot), a
  // backup's taking of them and of updates.
  std::vector<ShardUpdate> SnapshotLocked(int64_t part_bytes) const override
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool IsOfThisUnit(const ShardUpdate& update) const override;
  absl::StatusOr<int64_t> ApplySnapshotPartLocked(const ShardUpdate& update) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckUpdateLocked(const ShardUpdate& update) const override
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void ApplyUpdateLocked(const ShardUpdate& update) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropPendingLocked() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeLocked() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  RowStore::Options StoreOptions() const;

  const EmbeddingTableSpec spec_;
  const int partition_;
  const EmbeddingRowInitializer initializer_;
  std::vector<float> initial_slots_;                      // a new row's slots, one after another
  std::unique_ptr<RowStore> store_ ABSL_GUARDED_BY(mu_);  // never null
  // Sync: the step being accumulated: each id's summed gradient (at
  // index_ * width in sums_) and how many workers pushed it; who pushed.
  absl::flat_hash_map<int64_t, int32_t> pending_index_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> pending_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<float> pending_sums_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> pending_counts_ ABSL_GUARDED_BY(mu_);
  std::vector<Taken> pending_from_ ABSL_GUARDED_BY(mu_);
  // A backup's snapshot being received: the store it fills, the entries
  // so far, the version it is of (-1: none being received).
  std::unique_ptr<RowStore> filling_ ABSL_GUARDED_BY(mu_);
  int64_t filled_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t filling_version_ ABSL_GUARDED_BY(mu_) = -1;
  // The ids workers push most here (not replicated: a backup counts none).
  HeavyHitters hot_ ABSL_GUARDED_BY(mu_){kHotCapacity};
  size_t hot_offset_ ABSL_GUARDED_BY(mu_) = 0;  // where the next sample starts
  uint64_t hot_seen_ ABSL_GUARDED_BY(mu_) = 0;  // ids pushed so far
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_EMBEDDING_EMBEDDING_TABLE_H_
