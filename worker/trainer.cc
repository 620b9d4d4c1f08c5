#include "worker/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/partitioner.h"
#include "common/tensor.h"
#include "worker/binary_metrics.h"
#include "worker/data/batcher.h"

namespace fulcrum {
namespace {

// Rows [offset, offset + rows) of a batch.
Batch SubBatch(const Batch& batch, int64_t offset, int64_t rows) {
  Batch part;
  part.size = rows;
  part.feature_dim = batch.feature_dim;
  part.features.assign(batch.features.begin() + offset * batch.feature_dim,
                       batch.features.begin() + (offset + rows) * batch.feature_dim);
  part.labels.assign(batch.labels.begin() + offset, batch.labels.begin() + offset + rows);
  part.ids_per_example = batch.ids_per_example;
  part.ids.assign(batch.ids.begin() + offset * batch.ids_per_example,
                  batch.ids.begin() + (offset + rows) * batch.ids_per_example);
  return part;
}

// "gradient of 'dense_0/kernel' element 17 is nan", or "" when every
// gradient (those of the embedding inputs too) is finite.
std::string NonFiniteGradient(const TensorMap& grads, const std::vector<float>& input_grads) {
  for (const auto& [name, grad] : grads) {
    if (const int64_t bad = FirstNonFinite(grad.values); bad >= 0) {
      return absl::StrCat("gradient of '", name, "' element ", bad, " is ", grad.values[bad]);
    }
  }
  if (const int64_t bad = FirstNonFinite(input_grads); bad >= 0) {
    return absl::StrCat("gradient of embedding input ", bad, " is ", input_grads[bad]);
  }
  return "";
}

}  // namespace

Trainer::Trainer(Strategy* strategy, std::vector<Mlp*> replicas, LocalReducer* reducer,
                 const Dataset& train, const Dataset* test, TrainerOptions options)
    : strategy_(strategy),
      replicas_(std::move(replicas)),
      reducer_(reducer),
      train_(train),
      test_(test),
      options_(std::move(options)),
      log_(options_.fs, options_.metrics_jsonl, options_.summary_json) {
  CHECK(!replicas_.empty());
  CHECK(!options_.is_chief || test_ != nullptr);
}

absl::StatusOr<BatchStats> Trainer::ComputeStep(const Batch& batch, const TensorMap& weights,
                                                TensorMap* grads, std::vector<float>* input_grads) {
  const int n = static_cast<int>(replicas_.size());
  const std::vector<int64_t> rows = SplitRows(batch.size, n);
  std::vector<BatchStats> stats(n);
  std::vector<absl::Status> status(n);
  std::vector<float> shares(n);
  auto run = [&](int r, int64_t offset) {
    status[r] = replicas_[r]->SetParameters(weights);
    if (status[r].ok()) {
      stats[r] = n == 1 ? replicas_[r]->ComputeGradients(batch)
                        : replicas_[r]->ComputeGradients(SubBatch(batch, offset, rows[r]));
    }
  };
  std::vector<std::thread> threads;
  int64_t offset = rows[0];
  for (int r = 1; r < n; ++r) {
    threads.emplace_back(run, r, offset);
    offset += rows[r];
  }
  run(0, 0);
  for (auto& t : threads) t.join();
  BatchStats total;
  for (int r = 0; r < n; ++r) {
    if (!status[r].ok()) return status[r];
    shares[r] = static_cast<float>(rows[r]) / batch.size;
    total.loss += stats[r].loss * shares[r];
    total.correct += stats[r].correct;
    total.examples += stats[r].examples;
  }
  reducer_->Reduce(replicas_, shares, grads);
  if (options_.embeddings != nullptr) {
    // Each replica's rows, scaled from its part's mean loss to the batch's.
    input_grads->resize(batch.size * batch.feature_dim);
    float* out = input_grads->data();
    for (int r = 0; r < n; ++r) {
      replicas_[r]->CopyInputGradients(rows[r], out);
      for (int64_t i = 0; i < rows[r] * batch.feature_dim; ++i) out[i] *= shares[r];
      out += rows[r] * batch.feature_dim;
    }
  }
  return total;
}

absl::StatusOr<EpochResult> Trainer::Evaluate(int64_t epoch, const TensorMap& weights) {
  Mlp* model = replicas_[0];
  if (absl::Status s = model->SetParameters(weights); !s.ok()) return s;
  const int64_t eval_batch = std::max<int64_t>(1, options_.batch_size / replicas_.size());
  const bool binary = test_->num_classes == 2;
  double loss = 0;
  int64_t correct = 0;
  std::vector<float> probs, labels, logits;
  for (Batch& batch : SequentialBatches(*test_, eval_batch)) {
    if (options_.embeddings != nullptr) {
      if (absl::Status s = options_.embeddings->Gather(&batch); !s.ok()) return s;
    }
    const BatchStats stats = model->Evaluate(batch);
    loss += stats.loss * stats.examples;
    correct += stats.correct;
    if (binary) {
      // P(class 1) of two softmax logits: the sigmoid of their difference.
      logits.resize(batch.size * 2);
      model->CopyLogits(batch.size, logits.data());
      for (int64_t i = 0; i < batch.size; ++i) {
        probs.push_back(1.0f / (1.0f + std::exp(logits[2 * i] - logits[2 * i + 1])));
        labels.push_back(static_cast<float>(batch.labels[i]));
      }
    }
  }
  EpochResult result;
  result.epoch = epoch;
  result.test_loss = loss / test_->num_examples;
  result.test_accuracy = static_cast<double>(correct) / test_->num_examples;
  if (binary) result.test_auc = Auc(probs, labels);
  return result;
}

absl::StatusOr<TrainingSummary> Trainer::Run() {
  const int64_t split = static_cast<int64_t>(replicas_.size());
  if (options_.batch_size < split) {
    return absl::InvalidArgumentError(absl::StrCat("--batch_size ", options_.batch_size,
                                                   " is smaller than --local_replicas ", split));
  }
  const absl::Time start = absl::Now();
  TrainingSummary summary;
  TensorMap weights, grads;
  std::vector<float> input_grads;
  if (absl::Status s = strategy_->Start(&weights); !s.ok()) return s;
  // Of the first dealing, the same on every worker.
  const int64_t steps_per_epoch =
      StepsPerEpoch(train_.num_examples, options_.num_workers, options_.batch_size);
  const int64_t resume = strategy_->ResumedBatches(options_.num_workers, steps_per_epoch);
  const DealingOptions dealing{options_.shard_index,
                               options_.num_workers,
                               options_.batch_size,
                               options_.epochs,
                               options_.seed,
                               resume,
                               [this](int64_t epoch) { return strategy_->DealEpoch(epoch); }};
  const std::unique_ptr<Batcher> batcher =
      options_.stream == nullptr
          ? std::make_unique<Batcher>(train_, dealing)
          : std::make_unique<Batcher>(StreamBatches(*options_.stream, dealing));
  if (steps_per_epoch == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the training set (", train_.num_examples, " examples) is too small for ",
                     options_.num_workers, " workers with batches of ", options_.batch_size));
  }
  int64_t total_steps = steps_per_epoch * options_.epochs;  // until a re-dealing
  LOG_INFO("training {} epochs x {} steps, batch {} on {} local replica(s), {}", options_.epochs,
           steps_per_epoch, options_.batch_size, replicas_.size(), strategy_->name());
  if (resume > 0) {
    LOG_INFO("the job is at step {}: resuming at step {} of {} (epoch {})", strategy_->step(),
             std::min(resume, total_steps), total_steps,
             std::min(resume, total_steps) / steps_per_epoch + 1);
  } else if (absl::Status s = log_.StartAfresh(); !s.ok()) {
    return s;
  }

  double window_loss = 0;
  int64_t window_correct = 0, window_examples = 0, steps_done = std::min(resume, total_steps);
  int consecutive_skips = 0;
  int64_t saved_step = -1;  // the step of the last checkpoint this run wrote
  const int64_t first_step = steps_done;
  absl::Time window_start = absl::Now();
  while (std::optional<Batch> batch = batcher->Next()) {
    const absl::Time step_start = absl::Now();
    const int64_t step_number = summary.steps + 1;  // this worker's, in this run
    const bool traced = options_.trace != nullptr && step_number >= options_.trace_first &&
                        step_number <= options_.trace_last;
    if (traced) options_.trace->SetRecording(true);
    if (batch->step_in_epoch == 0) {
      total_steps = steps_done + batch->steps_in_epoch * (options_.epochs - batch->epoch);
    }
    StepParts parts;
    absl::Time part_start = absl::Now();
    // Ends part `part` of the step, which began at part_start.
    auto lap = [&](StepParts::Part part) {
      const absl::Time now = absl::Now();
      parts.time[part] += now - part_start;
      part_start = now;
    };
    if (options_.embeddings != nullptr) {
      if (absl::Status s = options_.embeddings->Gather(&*batch); !s.ok()) return s;
    }
    lap(StepParts::kRowsPull);
    auto stats = ComputeStep(*batch, weights, &grads, &input_grads);
    if (!stats.ok()) return stats.status();
    if (options_.compute_delay > absl::ZeroDuration()) absl::SleepFor(options_.compute_delay);
    const std::string nonfinite = NonFiniteGradient(grads, input_grads);
    lap(StepParts::kCompute);
    if (options_.embeddings != nullptr) {
      if (!nonfinite.empty()) {
        if (absl::Status s = options_.embeddings->PushNothing(); !s.ok()) return s;
      } else {
        auto pushed = options_.embeddings->Push(*batch, input_grads);
        if (!pushed.ok()) return pushed.status();
        summary.stale_gradients_dropped += pushed->stale;
      }
    }
    // Applied, it would be refused (or poison every replica); skipped,
    // the strategy goes on without this worker's batch.
    lap(StepParts::kRowsPush);
    // A checkpoint is planned before the step (a strategy whose state is
    // spread over the workers gathers it during the step): when one is
    // due, after the job's last batch, and before stopping as asked.
    const bool stopping = options_.stop != nullptr && options_.stop->load();
    const bool last_batch =
        batch->epoch + 1 == options_.epochs && batch->step_in_epoch + 1 == batch->steps_in_epoch;
    StepPlace place{batch->epoch, batch->step_in_epoch + 1 == batch->steps_in_epoch};
    place.checkpoint =
        options_.checkpointer != nullptr &&
        (options_.checkpointer->Due(strategy_->step() + 1) || last_batch || stopping);
    const int64_t step_before = strategy_->step();
    auto stale = strategy_->Step(nonfinite.empty() ? &grads : nullptr, place, &weights);
    if (!stale.ok()) return stale.status();
    lap(StepParts::kExchange);
    const absl::Duration waited =
        std::min(strategy_->last_wait(), parts.time[StepParts::kExchange]);
    parts.time[StepParts::kExchange] -= waited;
    parts.time[StepParts::kWait] += waited;
    if (traced) {
      options_.trace->SetRecording(false);
      TraceStep(*options_.trace, step_number, step_start, part_start, parts);
    }
    summary.parts += parts;
    ++summary.steps;
    if (options_.status != nullptr) options_.status->Step(parts);
    if (nonfinite.empty()) {
      consecutive_skips = 0;
      summary.stale_gradients_dropped += *stale;
      window_loss += stats->loss * batch->size;
      window_correct += stats->correct;
      window_examples += batch->size;
    } else {
      ++summary.nonfinite_gradients_skipped;
      LOG_WARN("step {}: {}; this batch's push is skipped ({} skipped so far)", steps_done + 1,
               nonfinite, summary.nonfinite_gradients_skipped);
      if (++consecutive_skips >= options_.max_consecutive_skips) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the gradients were not finite in ", consecutive_skips,
            " steps in a row (last: ", nonfinite, "); lower the learning rate or check the data"));
      }
    }
    ++steps_done;
    if (options_.on_step) {
      options_.on_step(
          {batch->size, absl::Now() - step_start, strategy_->step(), !nonfinite.empty(), parts});
    }
    if (place.checkpoint && strategy_->step() > step_before) {
      options_.checkpointer->Save(strategy_->step()).IgnoreError();  // logged; training goes on
      saved_step = strategy_->step();
    }
    summary.examples += batch->size;

    const bool epoch_end = batch->step_in_epoch + 1 == batch->steps_in_epoch;
    if (steps_done % options_.log_every_steps == 0 || epoch_end) {
      const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
      const double window_secs = absl::ToDoubleSeconds(absl::Now() - window_start);
      const double rate = window_examples / std::max(window_secs, 1e-9);
      // Over the batches pushed: a skipped one's loss is not a number.
      const double loss = window_loss / std::max<int64_t>(window_examples, 1);
      const double accuracy =
          static_cast<double>(window_correct) / std::max<int64_t>(window_examples, 1);
      const double eta_secs = elapsed / static_cast<double>(steps_done - first_step) *
                              static_cast<double>(total_steps - steps_done);
      LOG_INFO("epoch {}/{} step {}/{} loss {:.4f} accuracy {:.4f} examples/s {:.0f} ETA {}",
               batch->epoch + 1, options_.epochs, steps_done, total_steps, loss, accuracy, rate,
               FormatDuration(eta_secs));
      ProgressRecord progress;
      progress.set_type("progress");
      progress.set_epoch(static_cast<int32_t>(batch->epoch + 1));
      progress.set_step(static_cast<double>(steps_done));
      progress.set_wall_seconds(elapsed);
      progress.set_train_loss(loss);
      progress.set_train_accuracy(accuracy);
      progress.set_examples_per_sec(rate);
      log_.Append(progress);
      if (options_.status != nullptr) options_.status->Progress(progress, total_steps, eta_secs);
      window_loss = 0;
      window_correct = window_examples = 0;
      window_start = absl::Now();
    }
    if (epoch_end && options_.is_chief) {
      auto result = Evaluate(batch->epoch + 1, weights);
      if (!result.ok()) return result.status();
      LOG_INFO("epoch {} test loss {:.4f} test accuracy {:.4f}{} (global step {})", result->epoch,
               result->test_loss, result->test_accuracy,
               result->test_auc >= 0 ? absl::StrFormat(" test AUC %.4f", result->test_auc) : "",
               strategy_->step());
      EpochRecord record;
      record.set_type("epoch");
      record.set_epoch(static_cast<int32_t>(result->epoch));
      record.set_global_step(static_cast<double>(strategy_->step()));
      record.set_wall_seconds(absl::ToDoubleSeconds(absl::Now() - start));
      record.set_test_loss(result->test_loss);
      record.set_test_accuracy(result->test_accuracy);
      if (result->test_auc >= 0) {
        record.set_test_auc(result->test_auc);
        record.set_test_logloss(result->test_loss);
      }
      log_.Append(record);
      if (options_.status != nullptr) options_.status->Evaluated(record);
      summary.epochs.push_back(*result);
    }
    if (stopping) {
      LOG_INFO("stopping after step {} as asked", steps_done);
      summary.stopped = true;
      break;
    }
  }
  if (absl::Status s = batcher->status(); !s.ok()) return s;
  summary.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  summary.global_steps = strategy_->step();
  const std::optional<int64_t> batches = strategy_->ClusterBatches();
  const double cluster_examples =
      batches ? static_cast<double>(*batches * options_.batch_size)
              : static_cast<double>(summary.examples) * options_.num_workers;
  summary.examples_per_sec = cluster_examples / std::max(summary.wall_seconds, 1e-9);
  if (options_.checkpointer != nullptr && saved_step != strategy_->step()) {
    options_.checkpointer->Save(strategy_->step()).IgnoreError();
  }
  if (summary.stopped) return summary;  // the job goes on: a restarted worker resumes it
  if (absl::Status s = strategy_->Finish(); !s.ok()) return s;
  if (options_.is_chief) {
    if (auto stale = strategy_->ClusterStaleGradients(); stale.ok()) {
      summary.stale_gradients_dropped = *stale;
    }
    // A chief that came back after the last epoch began (it restarted and
    // rejoined) trained no epoch to its end: it evaluates what it holds,
    // so that the summary reports an accuracy.
    if (summary.epochs.empty() || summary.epochs.back().epoch < options_.epochs) {
      LOG_WARN(
          "the chief evaluated no final epoch (it rejoined late): evaluating its variables "
          "as of global step {}",
          strategy_->step());
      auto result = Evaluate(options_.epochs, weights);
      if (!result.ok()) return result.status();
      summary.epochs.push_back(*result);
    }
    if (absl::Status s = WriteSummary(summary); !s.ok()) return s;
    if (absl::Status s = strategy_->EndJob("the chief finished training"); !s.ok()) return s;
  }
  LOG_INFO("done: {} steps, {} examples in {:.1f}s", steps_done, summary.examples,
           summary.wall_seconds);
  LOG_INFO("where a step's time went, mean of {} steps: {}", summary.steps,
           FormatStepParts(summary.parts, summary.steps));
  return summary;
}

absl::Status Trainer::WriteSummary(const TrainingSummary& summary) {
  const EpochResult last = summary.epochs.empty() ? EpochResult{} : summary.epochs.back();
  SummaryRecord record;
  record.set_test_accuracy(last.test_accuracy);
  record.set_test_loss(last.test_loss);
  record.set_epochs(static_cast<int32_t>(options_.epochs));
  record.set_global_steps(static_cast<double>(summary.global_steps));
  record.set_examples_per_sec(summary.examples_per_sec);
  record.set_mode(strategy_->name());
  record.set_num_workers(options_.num_workers);
  record.set_num_ps(options_.num_ps);
  record.set_stale_gradients_dropped(static_cast<double>(summary.stale_gradients_dropped));
  record.set_wall_seconds(summary.wall_seconds);
  record.set_batch_size(static_cast<double>(options_.batch_size));
  record.set_local_replicas(static_cast<int32_t>(replicas_.size()));
  record.set_model(options_.model_name);
  record.set_device(options_.device_name);
  record.set_nonfinite_gradients_skipped(static_cast<double>(summary.nonfinite_gradients_skipped));
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    record.set_peak_rss_mib(static_cast<double>(usage.ru_maxrss) / 1024);  // KiB on Linux
  }
  StepPartsRecord* parts = record.mutable_chief_step_seconds();
  const double steps = static_cast<double>(std::max<int64_t>(summary.steps, 1));
  parts->set_rows_pull(absl::ToDoubleSeconds(summary.parts.time[StepParts::kRowsPull]) / steps);
  parts->set_compute(absl::ToDoubleSeconds(summary.parts.time[StepParts::kCompute]) / steps);
  parts->set_rows_push(absl::ToDoubleSeconds(summary.parts.time[StepParts::kRowsPush]) / steps);
  parts->set_exchange(absl::ToDoubleSeconds(summary.parts.time[StepParts::kExchange]) / steps);
  parts->set_wait(absl::ToDoubleSeconds(summary.parts.time[StepParts::kWait]) / steps);
  if (last.test_auc >= 0) {
    record.set_test_auc(last.test_auc);
    record.set_test_logloss(last.test_loss);
  }
  if (test_ != nullptr && test_->oracle_auc >= 0) record.set_ground_truth_auc(test_->oracle_auc);
  return log_.WriteSummary(record);
}

}  // namespace fulcrum
