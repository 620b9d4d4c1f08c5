// The worker daemon's Prometheus series (fulcrum_worker_*), registered in
// one place and updated after every training step. Thread-compatible: the
// trainer's thread updates them, the metrics server reads them.
#ifndef FULCRUM_WORKER_WORKER_METRICS_H_
#define FULCRUM_WORKER_WORKER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>

#include "worker/step_parts.h"
#include "worker/trainer.h"

namespace fulcrum {

class WorkerMetrics {
 public:
  // Registers the series in `registry`, which must outlive this.
  explicit WorkerMetrics(prometheus::Registry& registry);

  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // After each step (TrainerOptions::on_step).
  void OnStep(const StepInfo& step);

 private:
  prometheus::Counter& steps_;
  prometheus::Counter& examples_;
  prometheus::Histogram& step_seconds_;
  prometheus::Gauge& global_step_;
  prometheus::Gauge& rate_;
  prometheus::Counter& skipped_;
  // fulcrum_worker_step_part_seconds, one histogram per part.
  std::array<prometheus::Histogram*, StepParts::kParts> parts_{};
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_WORKER_METRICS_H_
