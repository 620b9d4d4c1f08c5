// How a consistency mode behaves on a parameter server: what a push of one
// shard's gradient does, when a pull may be served, and what a worker's
// arrival, death or finish changes. One implementation per mode, each in a
// file of its own (async.cc, sync.cc, ssp.cc), listed in kModes (policy.cc).
// ParameterServer calls it; the policy knows nothing of gRPC.
// Implementations are thread-safe.
#ifndef FULCRUM_PS_SERVER_CONSISTENCY_POLICY_H_
#define FULCRUM_PS_SERVER_CONSISTENCY_POLICY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/config.pb.h"
#include "proto/ps_service.pb.h"
#include "ps_server/shard.h"
#include "ps_server/variable_store.h"
#include "ps_server/worker_table.h"

namespace fulcrum {

// What a policy acts on; all outlive it.
struct PolicyContext {
  const PsServerConfig* config = nullptr;
  VariableStore* store = nullptr;
  WorkerTable* workers = nullptr;
};

class ConsistencyPolicy {
 public:
  virtual ~ConsistencyPolicy() = default;

  // Checks the mode's fields of a push (SSP: its clock) before anything of
  // it is applied.
  virtual absl::Status CheckPush(const PushRequest& push) const { return absl::OkStatus(); }

  // What one shard's gradient does: apply now, accumulate, or drop.
  virtual absl::StatusOr<ShardPushResult> PushShard(Shard& shard, const ShardGradient& grad) = 0;

  // What one table's row gradients (`rows`, checked by it) of `worker`'s
  // push `push_id`, computed at `computed_at`, do. Async and SSP apply
  // them at once (SSP's clock moves with the dense push of the step).
  virtual absl::StatusOr<ShardPushResult> PushRows(EmbeddingTable& table, int worker,
                                                   uint64_t push_id, int64_t computed_at,
                                                   const EmbeddingTable::CheckedRows& rows) {
    return table.Push(worker, push_id, rows);
  }

  // After every shard of an accepted push was handled.
  virtual void AfterPush(const PushRequest& push) {}

  // Waits, until `deadline`, until `pull` may be served (the shards' own
  // versions are waited for by the caller). DEADLINE_EXCEEDED says for
  // what; UNAVAILABLE once Cancel. With `checked_by` (>= 0), the epoch of
  // the placement table by which the caller found the pull's shards here:
  // ABORTED once a newer table is applied (OnPlacementApplied), since the
  // shards may have moved, and the caller checks them again. With
  // `waited`, how long it held the pull is added there.
  virtual absl::Status AwaitPull(const PullRequest& pull, absl::Time deadline,
                                 int64_t checked_by = -1, absl::Duration* waited = nullptr) {
    return absl::OkStatus();
  }

  // Whether a push-pull's pulled shard may be answered as soon as the push
  // has applied it, while the rest of the push still arrives. Not when a
  // pull waits for what the whole push does (SSP: the worker's own clock;
  // sync: the step).
  virtual bool PullsOverlapPush() const { return false; }

  // Workers arrived, died or finished (the worker table says which are
  // active now).
  virtual void OnWorkersChanged() {}

  // The placement table of `epoch` promoted shards here to primary: what
  // their lost primary may have acknowledged to no one yet (SSP: each
  // worker's last push) is awaited by the pulls routed by it.
  virtual void OnPromoted(int64_t epoch) {}

  // The placement table of `epoch` was applied here: the pulls waiting in
  // AwaitPull that were checked by an older one end (ABORTED).
  virtual void OnPlacementApplied(int64_t epoch) {}

  // Floats per element a shard keeps besides its values and optimizer
  // slots, for the memory budget.
  virtual int ExtraFloatsPerElement() const { return 0; }

  // Wakes every waiter of AwaitPull (shutdown).
  virtual void Cancel() {}

  // The mode's part of Describe: its bounds, the workers' clocks.
  virtual void Describe(DescribeResponse* out) const {}
};

// A consistency mode on the server side.
struct ModeDefinition {
  ConsistencyMode mode;
  // Checks the config's fields for this mode; errors name the field.
  absl::Status (*validate)(const PsServerConfig& config);
  std::unique_ptr<ConsistencyPolicy> (*make)(const PolicyContext& context);
};

// Defined by async.cc, sync.cc and ssp.cc.
extern const ModeDefinition kAsyncMode;
extern const ModeDefinition kSyncMode;
extern const ModeDefinition kSspMode;

// The definition of `mode`, or INVALID_ARGUMENT naming it.
absl::StatusOr<const ModeDefinition*> FindMode(ConsistencyMode mode);

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_CONSISTENCY_POLICY_H_
