// sync (SyncReplicasOptimizer's semantics): a shard accumulates the
// gradients of its current step; the replicas_to_aggregate-th applies their
// mean (an embedding table's, each id's mean over the pushes that had it). Gradients of older steps
// are stale. When workers die or finish, a step completes with the active workers' gradients
// instead of waiting.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "ps_server/consistency/policy.h"

namespace fulcrum {
namespace {

class SyncPolicy final : public ConsistencyPolicy {
 public:
  explicit SyncPolicy(const PolicyContext& context)
      : replicas_to_aggregate_(context.config->replicas_to_aggregate()),
        store_(*context.store),
        workers_(*context.workers) {}

  absl::StatusOr<ShardPushResult> PushShard(Shard& shard, const ShardGradient& grad) override {
    return shard.Accumulate(grad, RequiredReplicas());
  }

  absl::StatusOr<ShardPushResult> PushRows(EmbeddingTable& table, int worker, uint64_t push_id,
                                           int64_t computed_at,
                                           const EmbeddingTable::CheckedRows& rows) override {
    return table.Accumulate(worker, push_id, computed_at, rows, RequiredReplicas());
  }

  void OnWorkersChanged() override {
    const int required = RequiredReplicas();
    for (Shard* shard : store_.All()) {
      if (shard->CompleteIfReady(required)) {
        LOG_INFO("{}: step completed with {} active worker(s)", shard->label(), required);
      }
    }
    for (EmbeddingTable* table : store_.AllTables()) {
      if (table->CompleteIfReady(required)) {
        LOG_INFO("embedding table '{}': step completed with {} active worker(s)",
                 table->spec().name(), required);
      }
    }
  }

  // The step's sum of gradients.
  int ExtraFloatsPerElement() const override { return 1; }

  void Describe(DescribeResponse* out) const override {
    out->set_replicas_to_aggregate(replicas_to_aggregate_);
  }

 private:
  // Gradients that complete a step: replicas_to_aggregate, or fewer when
  // fewer workers are active (at least 1).
  int RequiredReplicas() const {
    return std::max(1, std::min(replicas_to_aggregate_, workers_.ActiveCount()));
  }

  const int replicas_to_aggregate_;
  VariableStore& store_;
  WorkerTable& workers_;
};

absl::Status Validate(const PsServerConfig& config) {
  if (config.replicas_to_aggregate() < 1 ||
      config.replicas_to_aggregate() > config.num_replicas()) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas_to_aggregate: must be in [1, ", config.num_replicas(),
                     "] (the training workers), got ", config.replicas_to_aggregate()));
  }
  return absl::OkStatus();
}

std::unique_ptr<ConsistencyPolicy> Make(const PolicyContext& context) {
  return std::make_unique<SyncPolicy>(context);
}

}  // namespace

const ModeDefinition kSyncMode = {SYNC, &Validate, &Make};

}  // namespace fulcrum
