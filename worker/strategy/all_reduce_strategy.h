// The variables on every worker (TensorFlow's MultiWorkerMirroredStrategy,
// and MirroredStrategy when the group is one worker): each worker keeps a
// whole replica of the variables. The chief's (rank 0's) initial state --
// from the initializers, or restored from a checkpoint of either strategy
// -- is broadcast; each step the workers' gradients are summed over the
// group, and the mean is applied by the optimizer (common/optimizer).
//
// The optimizer's slots may be sharded (ZeRO stage 1,
// --shard_optimizer): the model's floats, in spec order, are cut into one
// part per member; a ring reduce-scatter leaves each member the summed
// gradient of its own part, it updates that part's variables and slots,
// and a ring all-gather gives every member every part's new values. The
// bytes on the wire are those of an all-reduce, while the slots' memory
// on each member falls by the group's size (its optimizer work by half
// that: two passes, below); every value is computed once, so the
// replicas are bit-identical.
// Unsharded, the gradients are all-reduced and every member applies the
// optimizer to the whole model, holding every slot.
//
// The fused buffer holds each part's gradients then a tail of five
// floats, the same in every part (so the reduce-scatter sums it into each
// member's own part): 1 from a worker that contributed, 0 from one whose
// batch was skipped (not finite), whose sum is the number of gradients
// averaged, as a parameter server's sync step counts them; the batch's
// place (summed epoch, summed ends-the-epoch, and 1 from each member that
// tells: all but a joiner catching up); and 1 from the chief when it
// checkpoints after the step, so that every member hands over its slots.
//
// A lost member (dead, hung, cut off) fails the step's collective on every
// other member within the collective timeout; the live members then
// regroup (worker/collective/regroup.h) and go on from the furthest
// member's values, which it broadcasts: a member that had not completed
// the failed step takes them, the others redo the step with the same
// gradients. A sharded member updates its slots only once the all-gather
// completes, or at the regrouping when the furthest member completed the
// step (its part's gradient is kept until then); the slots are then dealt
// over the new group, and a lost member's part of them starts again from
// the optimizer's initial slots (a warning says how many). Each epoch is dealt
// over the members of the group in force for it (the new members from the
// first epoch none of them had dealt).
//
// A worker that restarts (same command) rejoins the running group: its new
// links tell the leader, which admits it at the next step boundary; it
// takes the furthest member's state, then takes part in every step with no
// gradients until the group reaches the first epoch dealt over it, where
// its own data begins.
//
// Checkpoints are the servers' format: the chief writes the replica as the
// file of a single server, each variable one whole shard, so that servers
// restore it on any number of servers, and an all-reduce chief restores
// theirs. Sharded, the slots are gathered at a step whose place asks for a
// checkpoint (StepPlace::checkpoint).
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
  // ZeRO-1 (above): each member keeps and updates its part of the slots.
  // Unsharded, a lost member loses nothing of the optimizer's state.
  bool shard_optimizer = false;
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
  // Step on the caller's own buffers (a Python program's), with no copy
  // of them in between: `gradients` (every variable's, of its element
  // count; nullptr: this worker's batch was skipped) are read where they
  // lie, and the values after the step are written into `values` (those it
  // names, each of its variable's element count). Both are checked before
  // the step: INVALID_ARGUMENT or NOT_FOUND naming the variable.
  absl::Status StepInPlace(const ConstTensorViews* gradients, const StepPlace& place,
                           const TensorViews& values);
  // The current values of the variables `values` names into its buffers,
  // checked first as StepInPlace checks them (after Start: a Python
  // program's first values).
  absl::Status ReadValues(const TensorViews& values) const;
  int64_t step() const override { return step_; }
  Dealing DealEpoch(int64_t epoch) override;
  // The chief only (the one given a checkpoint directory, while it leads
  // the group): FAILED_PRECONDITION elsewhere, and where the slots are
  // sharded over several members and were not gathered at this step.
  absl::StatusOr<std::vector<SaveCheckpointResponse>> SaveCheckpoint(int64_t step) override;
  absl::Status Finish() override { return absl::OkStatus(); }
  absl::Status EndJob(const std::string& reason) override { return absl::OkStatus(); }
  absl::StatusOr<int64_t> ClusterStaleGradients() override { return 0; }
  // Every member's batches averaged (each step's count of contributors),
  // so a group that shrank or grew is counted as it was.
  std::optional<int64_t> ClusterBatches() const override { return batches_averaged_; }

  // The optimizer's slot floats this worker holds: the model's slots, or
  // about 1/n of them sharded over n members.
  int64_t slot_floats() const;

 private:
  struct Variable {
    VariableSpec spec;   // canonical
    int64_t offset = 0;  // of its first float in the model's
    std::vector<float> values;
    // The slots of its elements [own_begin, own_end): those in this
    // member's part (all of them unsharded).
    int64_t own_begin = 0;
    int64_t own_end = 0;
    OptimizerSlots slots;  // as of the last completed step
  };

  // How the model's floats lie in fused_: `parts` parts (the group's size
  // sharded, else one) of `part` floats (the last padded with zeros), each
  // followed by the tail; this member's is part `own`.
  struct Layout {
    int parts = 1;
    int64_t part = 0;
    int own = 0;
    int64_t stride() const;
    int64_t Position(int64_t model_float) const;  // in fused_
  };

  // The members an epoch is dealt over, from `first_epoch` on.
  struct Generation {
    int64_t first_epoch = 0;
    std::vector<int> members;  // ranks of links_
  };

  // The chief's initial state: the newest complete checkpoint that holds
  // this model, else the initializers.
  absl::Status Restore();
  // Every variable's values, the step and the completed collective steps,
  // rank `root` of group_'s, on every member; `options` bounds it.
  absl::Status BroadcastState(int root, const AllReduceOptions& options);
  // Lays fused_ out for group_, and deals the slots over its members, each
  // keeping its part: `root` broadcasts its own, which are all of them (a
  // new group's chief, or unsharded); or (`all_give`) the members' are
  // summed, each giving those it holds, and slots no member held start
  // again as the optimizer's initial ones.
  absl::Status DealSlots(int root, bool all_give, const AllReduceOptions& options);
  // The step's gradients (none: skipped) and tail into fused_.
  void Fill(const ConstTensorViews* gradients, const StepPlace* place);
  // The tail summed over the group, in this member's part.
  const float* Tail() const;
  // Sharded over more than one member (else the optimizer runs in place).
  bool sharded() const { return layout_.parts > 1; }
  // Sharded, once the reduce-scatter left this member its part's summed
  // gradients: updates the part's values in fused_, then gathers every
  // part (and every slot, for a checkpoint).
  absl::Status UpdateOwnPart();
  // Unsharded: the mean of the summed gradients in fused_ applied to the
  // replica.
  void ApplyOwnPart(int64_t iteration, int averaged);
  // Sharded: the part's mean gradient moves to scratch_ and its new values
  // take its place in fused_; the slots are left as they were (updated
  // copies of them, a chunk at a time, give the values), so that a step
  // that fails leaves them at the last completed step.
  void UpdateOwnValues(int64_t iteration, int averaged);
  // The pending step's update of `v`'s slots of this member's part, where
  // slots[j] points at slot j's first float of it, from the part's values
  // before the step (`before`) and its gradient in scratch_.
  void UpdateSlots(const Variable& v, absl::Span<const float> before,
                   absl::Span<float* const> slots) const;
  // Where `v`'s floats of this member's part lie in scratch_.
  int64_t OwnIndex(const Variable& v) const;
  // Every member's slots as the step in flight leaves them to every
  // member; the leader keeps them for the checkpoint after the step.
  absl::Status GatherSlots();
  // Sharded, the step done: the slots updated, the gathered values into
  // the replica.
  void Commit();
  // One all-reduce of `gradients` (none: this worker's batch was skipped,
  // or it is catching up) and the update, regrouping when it fails or
  // ranks ask to join. `place` (nullptr: catching up) is told to the
  // others. False when the group had completed the step without this
  // member, whose state it then took.
  absl::StatusOr<bool> Reduce(const ConstTensorViews* gradients, const StepPlace* place);
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
  // Every variable's values into `weights`, each entry shaped as its spec.
  void CopyValues(TensorMap* weights) const;
  // NOT_FOUND or INVALID_ARGUMENT, naming the variable, when `values`
  // names one that is not in the group or a buffer not of its size.
  absl::Status CheckOutputs(const TensorViews& values) const;
  // The values of the variables `values` names into its buffers.
  void WriteValues(const TensorViews& values) const;

  PeerLinks* const links_;
  const AllReduceStrategyOptions options_;
  std::unique_ptr<SubgroupLinks> group_;  // the live members
  std::vector<Variable> variables_;
  int64_t model_floats_ = 0;  // every variable's
  Layout layout_;
  std::vector<float> fused_;  // as layout_ says
  // Sharded, the step in flight: this member's part of its mean gradient,
  // and how it is applied.
  std::vector<float> scratch_;
  int64_t pending_completed_ = 0;  // > 0: the collective step its values were updated for
  int64_t pending_iteration_ = 0;
  int pending_averaged_ = 0;
  // The leader's, sharded: every variable's slots at checkpoint_step_.
  std::vector<OptimizerSlots> checkpoint_slots_;
  int64_t checkpoint_step_ = -1;
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
