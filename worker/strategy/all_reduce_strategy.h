// The variables on every worker (TensorFlow's MultiWorkerMirroredStrategy,
// and MirroredStrategy when the group is one worker): each worker keeps a
// whole replica of the variables and their optimizer slots. The chief's
// (rank 0's) initial state -- from the initializers, or restored from a
// checkpoint of either strategy -- is broadcast; each step the workers'
// gradients are summed by one all-reduce of a fused buffer, and every
// worker applies the same optimizer (common/optimizer) to the same mean, so
// the replicas stay bit-identical.
//
// The fused buffer holds every variable's gradient, in spec order, then
// one float: 1 from a worker that contributed, 0 from one whose batch was
// skipped (not finite). Its sum is the number of gradients averaged, as a
// parameter server's sync step counts them.
//
// A lost member (dead, hung, cut off) fails the step's all-reduce on every
// other member within the collective timeout; the live members then
// regroup (worker/collective/regroup.h) and go on from the furthest
// member's replica, which it broadcasts: a member that had not completed
// the failed step takes that state, the others redo the step with the same
// gradients. Each epoch is dealt over the members of the group in force for
// it (the new members from the first epoch none of them had dealt).
//
// Checkpoints are the servers' format: the chief writes its replica as the
// file of a single server, each variable one whole shard, so that servers
// restore it on any number of servers, and an all-reduce chief restores
// theirs.
#ifndef FULCRUM_WORKER_STRATEGY_ALL_REDUCE_STRATEGY_H_
#define FULCRUM_WORKER_STRATEGY_ALL_REDUCE_STRATEGY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/file_system.h"
#include "common/optimizer/optimizer.h"
#include "proto/tensor.pb.h"
#include "worker/collective/all_reduce.h"
#include "worker/collective/peer_links.h"
#include "worker/strategy/strategy.h"

namespace fulcrum {

struct AllReduceStrategyOptions {
  std::string name = "multi_worker_mirrored";  // for logs and the summary
  AllReduceOptions collective;                 // its timeout: --collective_timeout_secs
  // How long the workers wait for the chief's initial state (they may
  // start minutes apart).
  absl::Duration startup_timeout = absl::Minutes(10);
  // Where the chief writes checkpoints and restores the newest complete
  // one from ("" = none); `fs` is needed with it.
  std::string checkpoint_dir;
  FileSystem* fs = nullptr;
};

class AllReduceStrategy final : public Strategy {
 public:
  // `links` (rank 0 is the chief) outlives this; every rank passes the
  // same `specs` (the model's variables).
  AllReduceStrategy(PeerLinks* links, const std::vector<VariableSpec>& specs,
                    AllReduceStrategyOptions options);

  std::string name() const override { return options_.name; }
  // The chief restores or initialises the variables, then broadcasts them
  // with their slots and step. Once. FAILED_PRECONDITION when a worker's model
  // differs from the chief's, or the chief's checkpoints hold another model.
  absl::Status Start(TensorMap* weights) override;
  int64_t ResumedBatches(int num_workers) const override { return restored_step_; }
  absl::StatusOr<int> Step(const TensorMap* gradients, TensorMap* weights) override;
  int64_t step() const override { return step_; }
  Dealing DealEpoch(int64_t epoch) override;
  // The chief only (the one given a checkpoint directory, while it leads
  // the group): FAILED_PRECONDITION elsewhere.
  absl::StatusOr<std::vector<SaveCheckpointResponse>> SaveCheckpoint(int64_t step) override;
  absl::Status Finish() override { return absl::OkStatus(); }
  absl::Status EndJob(const std::string& reason) override { return absl::OkStatus(); }
  absl::StatusOr<int64_t> ClusterStaleGradients() override { return 0; }

 private:
  struct Variable {
    VariableSpec spec;   // canonical
    int64_t offset = 0;  // of its gradient in fused_
    std::vector<float> values;
    OptimizerSlots slots;
  };

  // The members an epoch is dealt over, from `first_epoch` on.
  struct Generation {
    int64_t first_epoch = 0;
    std::vector<int> members;  // ranks of links_
  };

  // The chief's initial state: the newest complete checkpoint that holds
  // this model, else the initializers.
  absl::Status Restore();
  // Every variable's values, slots, the step and the completed collective
  // steps, rank `root` of group_'s, on every member; `options` bounds it.
  absl::Status BroadcastState(int root, const AllReduceOptions& options);
  // After a failed all-reduce: the live members re-form the group and take
  // the furthest member's state. Whether this member's step is done (it
  // had not completed it; the group had): else it is to be redone.
  absl::StatusOr<bool> Regroup(const absl::Status& failure);
  void CopyValues(TensorMap* weights) const;

  PeerLinks* const links_;
  const AllReduceStrategyOptions options_;
  std::unique_ptr<SubgroupLinks> group_;  // the live members
  std::vector<Variable> variables_;
  std::vector<float> fused_;   // gradients, then the count of contributors
  int64_t step_ = 0;           // updates applied
  int64_t completed_ = 0;      // all-reduces completed: one per Step
  int64_t restored_step_ = 0;  // the step Start found

  absl::Mutex mu_;  // DealEpoch (the prefetch thread) against regrouping
  std::vector<Generation> generations_ ABSL_GUARDED_BY(mu_);
  int64_t dealt_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool regrouping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_STRATEGY_ALL_REDUCE_STRATEGY_H_
