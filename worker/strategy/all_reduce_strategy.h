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
// parameter server's sync step counts them. Three more floats sum the
// batch's place: its epoch, 1 if it ends the epoch, and 1 from each
// member that tells (all but a joiner catching up).
//
// A lost member (dead, hung, cut off) fails the step's all-reduce on every
// other member within the collective timeout; the live members then
// regroup (worker/collective/regroup.h) and go on from the furthest
// member's replica, which it broadcasts: a member that had not completed
// the failed step takes that state, the others redo the step with the same
// gradients. Each epoch is dealt over the members of the group in force for
// it (the new members from the first epoch none of them had dealt).
//
// A worker that restarts (same command) rejoins the running group: its new
// links tell the leader, which admits it at the next step boundary; it
// takes the furthest member's state, then takes part in every all-reduce
// with no gradients until the group reaches the first epoch dealt over it,
// where its own data begins. Each step's fused buffer therefore also
// carries where the members' batches lie (StepPlace).
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
#include "worker/collective/regroup.h"
#include "worker/strategy/strategy.h"

namespace fulcrum {

struct AllReduceStrategyOptions {
  std::string name = "multi_worker_mirrored";  // for logs and the summary
  AllReduceOptions collective;                 // its timeout: --collective_timeout_secs
  // How long the chief waits for every worker to start (they may start
  // minutes apart) before it starts without those missing; the others
  // wait twice as long for its state.
  absl::Duration startup_timeout = absl::Minutes(10);
  // The job's epochs: a worker that joins in the last one has no data
  // left, and follows the group to its end.
  int64_t epochs = 1;
  // Where the chief writes checkpoints and restores the newest complete
  // one from ("" = none); `fs` is needed with it.
  std::string checkpoint_dir;
  FileSystem* fs = nullptr;
  // The chief's: values that replace the initializers of the variables
  // they name when no checkpoint is restored (a Python program's own
  // initial variables); each must have its variable's element count.
  TensorMap initial_values;
};

class AllReduceStrategy final : public Strategy {
 public:
  // `links` (rank 0 is the chief) outlives this; every rank passes the
  // same `specs` (the model's variables).
  AllReduceStrategy(PeerLinks* links, const std::vector<VariableSpec>& specs,
                    AllReduceStrategyOptions options);

  std::string name() const override { return options_.name; }
  // The chief restores or initialises the variables, then broadcasts them
  // with their slots and step; or, when the group is running already
  // (this worker restarted), joins it. Once. FAILED_PRECONDITION when a
  // worker's model differs from the chief's, or the chief's checkpoints
  // hold another model.
  absl::Status Start(TensorMap* weights) override;
  int64_t ResumedBatches(int num_workers, int64_t steps_per_epoch) const override;
  absl::StatusOr<int> Step(const TensorMap* gradients, const StepPlace& place,
                           TensorMap* weights) override;
  int64_t step() const override { return step_; }
  Dealing DealEpoch(int64_t epoch) override;
  // The chief only (the one given a checkpoint directory, while it leads
  // the group): FAILED_PRECONDITION elsewhere.
  absl::StatusOr<std::vector<SaveCheckpointResponse>> SaveCheckpoint(int64_t step) override;
  absl::Status Finish() override { return absl::OkStatus(); }
  absl::Status EndJob(const std::string& reason) override { return absl::OkStatus(); }
  absl::StatusOr<int64_t> ClusterStaleGradients() override { return 0; }
  // Every member's batches averaged (each step's count of contributors),
  // so a group that shrank or grew is counted as it was.
  std::optional<int64_t> ClusterBatches() const override { return batches_averaged_; }

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
  // One all-reduce of `gradients` (none: this worker's batch was skipped,
  // or it is catching up) and the update, regrouping when it fails or
  // ranks ask to join. `place` (nullptr: catching up) is told to the
  // others. False when the group had completed the step without this
  // member, whose state it then took.
  absl::StatusOr<bool> Reduce(const TensorMap* gradients, const StepPlace* place);
  // After a failed all-reduce, or when ranks asked to join (`joiners`, the
  // leader's only): the live members re-form the group and take the
  // furthest member's state. Whether this member's step is done (it had
  // not completed it; the group had): else it is to be redone.
  absl::StatusOr<bool> Regroup(const absl::Status& failure, const std::vector<int>& joiners);
  // The group's members become `decision.members`, and they take the
  // source's state.
  absl::Status TakeState(const Regrouping& decision);
  // A running group sent this worker a notice of `round` from `leader`:
  // joins it by `deadline`, asking again when left out, then catches up.
  absl::Status Join(int leader, uint64_t round, absl::Time deadline);
  void CopyValues(TensorMap* weights) const;

  PeerLinks* const links_;
  const AllReduceStrategyOptions options_;
  std::unique_ptr<SubgroupLinks> group_;  // the live members
  std::vector<Variable> variables_;
  std::vector<float> fused_;      // gradients, then the count of contributors
  int64_t step_ = 0;              // updates applied
  int64_t completed_ = 0;         // all-reduces completed: one per Step
  int64_t batches_averaged_ = 0;  // by those all-reduces
  int64_t restored_step_ = 0;     // the step Start found
  int64_t first_epoch_ = 0;       // where this worker's data begins: > 0 once it joined

  absl::Mutex mu_;  // DealEpoch (the prefetch thread) against regrouping
  std::vector<Generation> generations_ ABSL_GUARDED_BY(mu_);
  int64_t dealt_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool regrouping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_STRATEGY_ALL_REDUCE_STRATEGY_H_
