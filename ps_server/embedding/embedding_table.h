// One embedding table's rows on one server (EmbeddingTableSpec): sparse
// pulls of rows by id, sparse pushes of row gradients applied by the
// table's optimizer to the rows touched only, within the bounds of its
// RowStore. Checks what a peer sends: a bad request changes nothing.
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
#include "ps_server/embedding/row_store.h"
#include "ps_server/last_push_ids.h"

namespace fulcrum {

class EmbeddingTable {
 public:
  // Most ids one pull may name, and one push (in all its parts): past
  // them, RESOURCE_EXHAUSTED.
  static constexpr int64_t kMaxIdsPerRequest = kMaxIdsPerRowCall;
  static constexpr int64_t kMaxIdsPerPush = kMaxIdsPerRowPush;

  // INVALID_ARGUMENT when `spec` is not a valid table
  // (ValidateEmbeddingTableSpec).
  static absl::StatusOr<std::unique_ptr<EmbeddingTable>> Create(const EmbeddingTableSpec& spec);

  // The canonical spec (the optimizer's defaults filled in).
  const EmbeddingTableSpec& spec() const { return spec_; }

  // The rows of `ids` into `out` (ids.size() x width floats): stored rows
  // as they are, the others their initial rows (nothing is stored).
  absl::Status Pull(absl::Span<const int64_t> ids, absl::Span<float> out);

  // Up to `max_rows` stored rows from position `start` of the store's
  // order (RowStore::ForEachRowAt) into `out`: ids, values, with `slots`
  // the slots, and where the next page starts.
  void Read(int64_t start, int64_t max_rows, bool slots, ReadRowsResponse* out) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Checks a push of `grads` (ids.size() x width floats, one row gradient
  // per id) for `ids`: INVALID_ARGUMENT for a size that does not fit, a
  // repeated id or a gradient that is not finite, naming it;
  // RESOURCE_EXHAUSTED past kMaxIdsPerPush. Push and Accumulate check
  // the same, and on an error change nothing.
  absl::Status CheckPush(absl::Span<const int64_t> ids, absl::Span<const float> grads) const;

  // Applies `grads` to the rows of `ids` now as one step of the table
  // (lazy Adam's t, the version), creating rows as admitted; an id not
  // admitted yet has its gradient dropped. APPLIED, with the new version;
  // DUPLICATE, changing nothing, when `push_id` (not 0) is `worker`'s last
  // push here (a retry).
  absl::StatusOr<ShardPushResult> Push(int worker, uint64_t push_id, absl::Span<const int64_t> ids,
                                       absl::Span<const float> grads) ABSL_LOCKS_EXCLUDED(mu_);

  // Sync: adds `worker`'s gradients, computed at version `computed_at`, to
  // the step being accumulated. An older step's are STALE; a second push
  // of one worker in a step is DUPLICATE; the `required`-th worker's push
  // applies the step (APPLIED): each id's gradients averaged over the
  // workers that pushed it, the learning rate scaled for the step's
  // workers. Earlier pushes are ACCUMULATED. A retry is DUPLICATE, as for
  // Push.
  absl::StatusOr<ShardPushResult> Accumulate(int worker, uint64_t push_id, int64_t computed_at,
                                             absl::Span<const int64_t> ids,
                                             absl::Span<const float> grads, int required)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Applies the step being accumulated when at least `required` workers
  // pushed to it (the live workers shrank). True when it applied.
  bool CompleteIfReady(int required) ABSL_LOCKS_EXCLUDED(mu_);

  // Steps applied.
  int64_t version() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until version() >= min_version: DEADLINE_EXCEEDED at `deadline`,
  // UNAVAILABLE once Cancel.
  absl::Status AwaitVersion(int64_t min_version, absl::Time deadline) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes the waiters of AwaitVersion.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

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
  Stats stats() const;

 private:
  explicit EmbeddingTable(const EmbeddingTableSpec& spec);
  absl::Status CheckIds(absl::Span<const int64_t> ids, size_t floats, const char* what,
                        int64_t max_ids) const;
  // Applies `grads` (each the mean of its id's gradients) as one step that
  // averaged `averaged` workers' pushes.
  void ApplyLocked(absl::Span<const int64_t> ids, absl::Span<const float> grads, int averaged)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyAccumulatedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ShardPushResult ResultLocked(ShardPushResult::Outcome outcome, int64_t staleness) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const EmbeddingTableSpec spec_;
  const EmbeddingRowInitializer initializer_;
  std::vector<float> initial_slots_;  // a new row's slots, one after another
  mutable absl::Mutex mu_;
  RowStore store_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;  // the version
  // Sync: the step being accumulated: each id's summed gradient (at
  // index_ * width in sums_) and how many workers pushed it; who pushed.
  absl::flat_hash_map<int64_t, int32_t> pending_index_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> pending_ids_ ABSL_GUARDED_BY(mu_);
  std::vector<float> pending_sums_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> pending_counts_ ABSL_GUARDED_BY(mu_);
  std::vector<int> pending_from_ ABSL_GUARDED_BY(mu_);
  LastPushIds last_push_ids_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  mutable absl::CondVar version_changed_;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_EMBEDDING_EMBEDDING_TABLE_H_
