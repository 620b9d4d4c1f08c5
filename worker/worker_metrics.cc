#include "worker/worker_metrics.h"

#include <algorithm>

namespace fulcrum {
namespace {

// From a millisecond to ten seconds.
prometheus::Histogram::BucketBoundaries StepBuckets() {
  return {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
          5e-2, 0.1,    0.25, 0.5,  1,      2.5,  5,    10};
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry)
    : steps_(prometheus::BuildCounter()
                 .Name("fulcrum_worker_steps_total")
                 .Help("Training steps this worker finished.")
                 .Register(registry)
                 .Add({})),
      examples_(prometheus::BuildCounter()
                    .Name("fulcrum_worker_examples_total")
                    .Help("Training examples this worker processed.")
                    .Register(registry)
                    .Add({})),
      step_seconds_(prometheus::BuildHistogram()
                        .Name("fulcrum_worker_step_duration_seconds")
                        .Help("Time of one step: compute, reduce, push and pull.")
                        .Register(registry)
                        .Add({}, StepBuckets())),
      global_step_(prometheus::BuildGauge()
                       .Name("fulcrum_worker_global_step")
                       .Help("The servers' step, as this worker last pulled it.")
                       .Register(registry)
                       .Add({})),
      rate_(prometheus::BuildGauge()
                .Name("fulcrum_worker_examples_per_second")
                .Help("This worker's examples per second over its last step.")
                .Register(registry)
                .Add({})),
      skipped_(prometheus::BuildCounter()
                   .Name("fulcrum_worker_nonfinite_gradients_skipped_total")
                   .Help("Batches whose gradients were not finite, so not pushed.")
                   .Register(registry)
                   .Add({})) {
  auto& family = prometheus::BuildHistogram()
                     .Name("fulcrum_worker_step_part_seconds")
                     .Help(
                         "Each part of a step: rows_pull (the batch's table rows), compute "
                         "(forward, backward, local reduce), rows_push, exchange (push-pull "
                         "with the servers, sync's wait for the others in it, or all-reduce).")
                     .Register(registry);
  for (int p = 0; p < StepParts::kParts; ++p) {
    parts_[p] = &family.Add({{"part", kStepPartNames[p]}}, StepBuckets());
  }
}

void WorkerMetrics::OnStep(const StepInfo& step) {
  steps_.Increment();
  examples_.Increment(static_cast<double>(step.examples));
  if (step.skipped) skipped_.Increment();
  step_seconds_.Observe(absl::ToDoubleSeconds(step.time));
  for (int p = 0; p < StepParts::kParts; ++p) {
    parts_[p]->Observe(absl::ToDoubleSeconds(step.parts.time[p]));
  }
  global_step_.Set(static_cast<double>(step.global_step));
  rate_.Set(static_cast<double>(step.examples) / std::max(1e-9, absl::ToDoubleSeconds(step.time)));
}

}  // namespace fulcrum
