// The training loop of one worker: per step, forward/backward on the local
// replicas, local reduce, then the strategy's step (push and pull to the
// parameter servers, or all-reduce and a local update). The chief also
// evaluates on the test set after every epoch, saves checkpoints, writes
// the metrics and the summary, and ends the job. In a job under way, a
// worker continues where the job is, skipping the batches the strategy says
// it has done.
#ifndef FULCRUM_WORKER_TRAINER_H_
#define FULCRUM_WORKER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/checkpoint/checkpointer.h"
#include "proto/config.pb.h"
#include "worker/data/batcher.h"
#include "worker/data/dataset.h"
#include "worker/data/stream_batcher.h"
#include "worker/embedding_inputs.h"
#include "worker/job_page.h"
#include "worker/local_reducer.h"
#include "worker/model.h"
#include "worker/step_parts.h"
#include "worker/strategy/strategy.h"
#include "worker/training_log.h"

namespace fulcrum {

// One step, as TrainerOptions::on_step sees it.
struct StepInfo {
  int64_t examples = 0;
  absl::Duration time;
  int64_t global_step = 0;  // the strategy's step after it
  bool skipped = false;     // its gradients were not finite: not pushed
  StepParts parts;          // where `time` went
};

struct TrainerOptions {
  int64_t epochs = 10;
  int64_t batch_size = 64;  // per worker; split over the local replicas
  uint64_t seed = 0;        // of the per-epoch shuffles
  int64_t log_every_steps = 100;
  bool is_chief = false;
  int shard_index = 0;  // this worker's share of the training set
  int num_workers = 1;
  int num_ps = 1;
  std::string summary_json;              // chief: the run's summary, written at the end ("" = none)
  std::string metrics_jsonl;             // chief: progress and per-epoch metrics ("" = none)
  std::string model_name;                // for the summary
  std::string device_name;               // for the summary
  Checkpointer* checkpointer = nullptr;  // chief: saves checkpoints as it trains
  FileSystem* fs = nullptr;              // chief: what the summary and metrics go through
  const std::atomic<bool>* stop = nullptr;  // set (SIGTERM): stop after the current step
  JobStatus* status = nullptr;  // what the status page shows: recorded as it trains (null: none)
  // A batch whose gradients are not finite (NaN, infinity) is not pushed:
  // it is logged, counted and skipped. This many in a row end the run
  // (FAILED_PRECONDITION): the model has diverged.
  int max_consecutive_skips = 100;
  // Called after every step (for metrics).
  std::function<void(const StepInfo& step)> on_step;
  // The model's embedding inputs (--model=ctr): each batch's rows are
  // pulled before its step and their gradients pushed after it. The
  // replicas must then compute input gradients.
  EmbeddingInputs* embeddings = nullptr;
  // Streamed training data (--stream_data): batches are read from here,
  // and the training set passed holds only its shape. Null: in memory.
  const ExampleStream* stream = nullptr;
  // For tests and drills: each step's compute takes this much longer, as
  // on a slow device or a loaded machine (a straggler).
  absl::Duration compute_delay;
  // --trace_file: this worker's steps first..last (counted from 1 in this
  // run) are recorded in `trace`, which records its calls to the servers
  // meanwhile (TraceFile::SetRecording). Null: none.
  TraceFile* trace = nullptr;
  int64_t trace_first = 0;
  int64_t trace_last = -1;
};

struct EpochResult {
  int64_t epoch = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  // Two-class test sets: the AUC of the predicted probabilities; else
  // negative. (test_loss is then the log loss.)
  double test_auc = -1;
};

struct TrainingSummary {
  std::vector<EpochResult> epochs;  // chief only
  int64_t global_steps = 0;
  int64_t examples = 0;         // this worker's
  double examples_per_sec = 0;  // the cluster's: this worker's rate x workers
  int64_t stale_gradients_dropped = 0;
  int64_t nonfinite_gradients_skipped = 0;  // this worker's batches not pushed
  double wall_seconds = 0;
  bool stopped = false;  // by `stop`, before the last step
  int64_t steps = 0;     // this worker's, in this run
  StepParts parts;       // their parts, summed
};

class Trainer {
 public:
  // `strategy`, `replicas` (one per local device, all the same model),
  // `reducer` and the data sets outlive the trainer. `test` is needed by
  // the chief only.
  Trainer(Strategy* strategy, std::vector<Mlp*> replicas, LocalReducer* reducer,
          const Dataset& train, const Dataset* test, TrainerOptions options);

  absl::StatusOr<TrainingSummary> Run();

 private:
  // Each replica computes gradients on its part of `batch` (in parallel);
  // their weighted mean goes to `grads`, and with embeddings the gradient
  // of the batch's mean loss with respect to its inputs to `input_grads`.
  // Returns the batch's mean loss and correct count.
  absl::StatusOr<BatchStats> ComputeStep(const Batch& batch, const TensorMap& weights,
                                         TensorMap* grads, std::vector<float>* input_grads);
  absl::StatusOr<EpochResult> Evaluate(int64_t epoch, const TensorMap& weights);
  absl::Status WriteSummary(const TrainingSummary& summary);

  Strategy* const strategy_;
  const std::vector<Mlp*> replicas_;
  LocalReducer* const reducer_;
  const Dataset& train_;
  const Dataset* const test_;
  const TrainerOptions options_;
  TrainingLog log_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_TRAINER_H_
