#include "worker/strategy/parameter_server_strategy.h"

#include <vector>

#include "absl/strings/str_join.h"
#include "common/consistency_mode.h"
#include "common/logging.h"
#include "worker/data/dealing.h"

namespace fulcrum {

ParameterServerStrategy::ParameterServerStrategy(PsClient* client, int worker, int num_workers,
                                                 bool resume)
    : client_(client), worker_(worker), num_workers_(num_workers), resume_(resume) {}

std::string ParameterServerStrategy::name() const { return ConsistencyModeName(client_->mode()); }

absl::Status ParameterServerStrategy::Start(TensorMap* weights) {
  return client_->Pull({}, weights);
}

int64_t ParameterServerStrategy::ResumedBatches(int num_workers, int64_t) const {
  return resume_ ? client_->ResumedBatches(num_workers) : 0;
}

absl::StatusOr<int> ParameterServerStrategy::Step(const TensorMap* gradients, const StepPlace&,
                                                  TensorMap* weights) {
  last_wait_ = absl::ZeroDuration();
  if (gradients == nullptr) {
    // Nothing pushed; in sync mode the next batch takes this one's place
    // in the same step.
    if (absl::Status s = client_->Pull({}, weights); !s.ok()) return s;
    return 0;
  }
  auto pushed = client_->PushPull(*gradients, {}, weights);
  if (!pushed.ok()) return pushed.status();
  last_wait_ = pushed->waited;
  return pushed->stale;
}

int64_t ParameterServerStrategy::step() const { return client_->step(); }

Dealing ParameterServerStrategy::DealEpoch(int64_t epoch) {
  auto described = client_->Describe();
  if (!described.ok()) {
    LOG_WARN("epoch {}: cannot ask the servers who is left ({}); keeping this worker's share",
             epoch + 1, described.status().message());
    return Dealing{worker_, num_workers_};
  }
  std::vector<int> gone;
  const Dealing dealing = DealOverWorkersLeft(*described, worker_, num_workers_, &gone);
  if (!gone.empty()) {
    LOG_WARN(
        "epoch {}: worker(s) {} gone for good; their share of the data is re-dealt over the "
        "{} worker(s) left",
        epoch + 1, absl::StrJoin(gone, ", "), dealing.num_shards);
  }
  return dealing;
}

absl::StatusOr<std::vector<SaveCheckpointResponse>> ParameterServerStrategy::SaveCheckpoint(
    int64_t step) {
  return client_->SaveCheckpoint(step);
}

absl::Status ParameterServerStrategy::Finish() { return client_->Finish(); }

absl::Status ParameterServerStrategy::EndJob(const std::string& reason) {
  return client_->JobDone(reason);
}

absl::StatusOr<int64_t> ParameterServerStrategy::ClusterStaleGradients() {
  auto described = client_->Describe();
  if (!described.ok()) return described.status();
  int64_t stale = 0;
  for (const DescribeResponse& d : *described) stale += d.stale_gradients_dropped();
  return stale;
}

}  // namespace fulcrum
