// One shard of a variable: its values, optimizer slots, version and, in sync
// mode, the gradients accumulated for the current step. Thread-safe: each
// shard has its own lock, so pushes to different shards run in parallel.
#ifndef FULCRUM_PS_SERVER_SHARD_H_
#define FULCRUM_PS_SERVER_SHARD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/checkpoint/file.h"
#include "common/checkpoint/restored_variables.h"
#include "common/optimizer/optimizer.h"
#include "common/slices.h"
#include "common/tensor.h"
#include "proto/checkpoint.pb.h"
#include "proto/ps_service.pb.h"
#include "ps_server/last_push_ids.h"
#include "ps_server/replicated_unit.h"

namespace fulcrum {

// One shard's gradient in a push, checked by the caller: its parts are as
// long as the shard.
struct ShardGradient {
  int worker = 0;
  uint64_t push_id = 0;           // the push's idempotency key; 0: none
  int64_t computed_at = 0;        // the version the gradient was computed from
  std::vector<FloatBytes> parts;  // the shard's rows, in order
};

// The contents of a new shard of `spec` (valid, with a canonical variable
// spec): its rows of the checkpointed variable `restored`, with slots and
// version, when given (DATA_LOSS naming the file when they cannot be read),
// else `initial_values` (float32 bytes of its rows) when not empty, else the
// spec's initializer.
absl::StatusOr<ShardContents> NewShardContents(const ShardSpec& spec,
                                               const RestoredVariable* restored,
                                               absl::string_view initial_values);

// Its replication (roles, commits, the updates and snapshots its copies
// exchange) is ReplicatedUnit's.
class Shard : public ReplicatedUnit {
 public:
  // `spec` must be valid with a canonical variable spec, and `contents` its
  // size (NewShardContents).
  Shard(ShardSpec spec, ShardContents contents);

  const ShardSpec& spec() const { return spec_; }
  // [rows of this shard, trailing dims of the variable].
  const Shape& shape() const { return shape_; }

  // FAILED_PRECONDITION when a gradient claims a version this shard has not
  // reached (or a negative one). Versions only grow, so a gradient that
  // passes cannot fail the same check when it is applied.
  absl::Status CheckComputedAt(int64_t computed_at) const ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until the committed version is >= min_version (until
  // `deadline`), then appends the values in float `encoding` to `out` as
  // slices of at most max_slice_bytes (one row at the least), each saying
  // the committed version (the values may hold later updates not yet on
  // every backup). DT_FLOAT values are not copied:
  // the slices lend them from a snapshot of the shard that `out` holds,
  // and that later pushes leave alone (copy on write). DEADLINE_EXCEEDED
  // at the deadline; UNAVAILABLE once Cancel; OUT_OF_RANGE for values
  // float16 cannot encode.
  absl::Status Read(int64_t min_version, absl::Time deadline, DataType encoding,
                    int64_t max_slice_bytes, OutgoingPull* out) const ABSL_LOCKS_EXCLUDED(mu_);

  // A gradient whose push_id this shard already took from its worker is
  // DUPLICATE below, whatever else it is: a retried push applies once.

  // Applies `grad` now, unless max_staleness >= 0 and it is staler than
  // that (then STALE).
  absl::StatusOr<ShardPushResult> ApplyNow(const ShardGradient& grad, int64_t max_staleness)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Adds `grad` to the step being accumulated. Gradients of older steps are
  // STALE; a second gradient of one worker for one step is DUPLICATE; the
  // `required`-th gradient of the step applies their mean and bumps the
  // version (APPLIED); earlier ones are ACCUMULATED.
  absl::StatusOr<ShardPushResult> Accumulate(const ShardGradient& grad, int required)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Applies the accumulated mean when at least `required` gradients are in
  // (the live workers shrank). True when it applied.
  bool CompleteIfReady(int required) ABSL_LOCKS_EXCLUDED(mu_);

  ShardInfo Describe() const ABSL_LOCKS_EXCLUDED(mu_);

  // Adds spec, version, values and slots, as of one moment, to `writer`.
  // Pulls go on meanwhile; pushes to this shard wait.
  absl::Status WriteCheckpoint(CheckpointFileWriter& writer) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Status CheckNotFromFutureLocked(int64_t computed_at) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  ShardPushResult ResultLocked(ShardPushResult::Outcome outcome, int64_t staleness) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Makes values_ this shard's alone, copying them if a snapshot is out.
  void UnshareValuesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `grad` is the mean of `averaged` gradients, from `pushes`; hands the
  // update to the backups, or commits it.
  void ApplyLocked(GradientParts grad, int averaged, absl::Span<const Taken> pushes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyAccumulatedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ReplicatedUnit: the shard's whole state as parts of a snapshot
  // (ShardSnapshot); a backup's taking of them and of updates.
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

  const ShardSpec spec_;
  const Shape shape_;
  // For Describe: workers' gradients taken, and pulls answered.
  std::atomic<int64_t> pushes_{0};
  mutable std::atomic<int64_t> pulls_{0};

  // Shared with the pulls that still send a snapshot of them; a push
  // applies to a copy then (UnshareValuesLocked).
  std::shared_ptr<std::vector<float>> values_ ABSL_GUARDED_BY(mu_);
  OptimizerSlots slots_ ABSL_GUARDED_BY(mu_);
  // Sum of the gradients accumulated for step version_, and who sent them.
  std::vector<float> accumulated_ ABSL_GUARDED_BY(mu_);
  std::vector<Taken> accumulated_from_ ABSL_GUARDED_BY(mu_);
  // A backup's snapshot being received: its floats so far, of the version
  // it is at (-1: none being received).
  std::vector<float> filling_ ABSL_GUARDED_BY(mu_);
  int64_t filling_version_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_SHARD_H_
