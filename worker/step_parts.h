// Where a training step's time goes, part by part: what a straggling
// worker, a slow server or a table evicting its working set shows in.
#ifndef FULCRUM_WORKER_STEP_PARTS_H_
#define FULCRUM_WORKER_STEP_PARTS_H_

#include <array>
#include <string>

#include "absl/time/time.h"
#include "common/trace.h"

namespace fulcrum {

// One step's parts, or their sums over many steps.
struct StepParts {
  // The order of `time` and kStepPartNames: the rows of the batch's ids
  // pulled from the servers' tables; the forward and backward passes (and
  // the local replicas' reduce); the rows' gradients pushed; the
  // strategy's exchange: the push-pull with the servers or all-reduce's
  // reduce; and, in sync and SSP, the wait for the other workers the
  // servers held the push-pull's pull for (taken out of the exchange).
  enum Part { kRowsPull, kCompute, kRowsPush, kExchange, kWait, kParts };
  std::array<absl::Duration, kParts> time{};

  StepParts& operator+=(const StepParts& other) {
    for (int p = 0; p < kParts; ++p) time[p] += other.time[p];
    return *this;
  }
};

// Each part's name, for metrics labels, logs and the status page.
inline constexpr std::array<const char*, StepParts::kParts> kStepPartNames = {
    "rows_pull", "compute", "rows_push", "exchange", "wait"};

// "rows_pull 0.0 ms, compute 5.1 ms, rows_push 0.0 ms, exchange 12.3 ms":
// `sums` over `steps` steps, as means per step.
std::string FormatStepParts(const StepParts& sums, int64_t steps);

// Records step `step` (this worker's, counted from 1 in this run), which
// ran from `start` to `end`, and its parts in order, on the track "step"
// of `trace` (--trace_file).
void TraceStep(TraceFile& trace, int64_t step, absl::Time start, absl::Time end,
               const StepParts& parts);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_STEP_PARTS_H_
