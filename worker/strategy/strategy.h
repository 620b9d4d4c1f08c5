// Where the variables live and how a step's gradients become the next
// step's variables: the parameter servers (ParameterServerStrategy, over a
// PsClient), or every worker's own replica, kept equal by all-reducing the
// gradients (AllReduceStrategy: TensorFlow's MultiWorkerMirroredStrategy
// and, on one worker, MirroredStrategy). The trainer sees only this.
// Called from the training thread, except DealEpoch (the data prefetch
// thread's).
#ifndef FULCRUM_WORKER_STRATEGY_STRATEGY_H_
#define FULCRUM_WORKER_STRATEGY_STRATEGY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fulcrum/tensor.h"
#include "proto/ps_service.pb.h"
#include "worker/data/batcher.h"

namespace fulcrum {

// Where a step's batch lies in the data: what a worker that joins a
// running group waits for (it takes part from the next epoch dealt).
struct StepPlace {
  int64_t epoch = 0;
  bool ends_epoch = false;  // the epoch's last batch
  // The chief checkpoints after this step: a strategy whose state is
  // spread over the workers gathers it.
  bool checkpoint = false;
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  // For logs and the summary: the consistency mode ("sync", "async",
  // "ssp") or the all-reduce strategy's name.
  virtual std::string name() const = 0;

  // The variables to start from, into `weights`; once, before the first
  // step.
  virtual absl::Status Start(TensorMap* weights) = 0;

  // The batches this worker has done already in a job under way (it
  // restarted, or the job resumed from a checkpoint), of `num_workers`
  // with `steps_per_epoch` each; 0 in a new job. A worker that joined a
  // running group starts at an epoch's first batch.
  virtual int64_t ResumedBatches(int num_workers, int64_t steps_per_epoch) const = 0;

  // One step: applies this worker's `gradients` of the batch at `place`,
  // or none when its batch was skipped (nullptr), as the strategy says,
  // and leaves the variables the next step starts from in `weights`. The
  // gradients dropped as stale.
  virtual absl::StatusOr<int> Step(const TensorMap* gradients, const StepPlace& place,
                                   TensorMap* weights) = 0;
  // How long the last Step waited for the other workers, as the servers
  // measured it (sync's step, SSP's bound); zero where the strategy does
  // not tell it apart.
  virtual absl::Duration last_wait() const { return absl::ZeroDuration(); }

  // The global step: updates applied to the variables so far.
  virtual int64_t step() const = 0;

  // The share of `epoch`'s examples this worker takes: its own, or a share
  // of the examples of the workers still there when some are gone for
  // good, so that the model still sees every example.
  virtual Dealing DealEpoch(int64_t epoch) = 0;

  // Phase one of checkpoint `step`: the variables written, as the files
  // the chief's manifest lists (common/checkpoint.h).
  virtual absl::StatusOr<std::vector<SaveCheckpointResponse>> SaveCheckpoint(int64_t step) = 0;

  // After this worker's last step.
  virtual absl::Status Finish() = 0;

  // The chief, after its summary: the job is over.
  virtual absl::Status EndJob(const std::string& reason) = 0;

  // The chief: gradients the whole cluster dropped as stale.
  virtual absl::StatusOr<int64_t> ClusterStaleGradients() = 0;

  // The batches of every worker that went into the variables while this
  // one ran, where the strategy counts them; none: this worker's own,
  // times the workers, is the estimate.
  virtual std::optional<int64_t> ClusterBatches() const = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_STRATEGY_STRATEGY_H_
