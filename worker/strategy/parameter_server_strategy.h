// The variables on the parameter servers (TensorFlow's
// ParameterServerStrategy): a step pushes this worker's gradients and pulls
// the values the servers' optimizer made of them, in the servers'
// consistency mode (kept by the PsClient).
#ifndef FULCRUM_WORKER_STRATEGY_PARAMETER_SERVER_STRATEGY_H_
#define FULCRUM_WORKER_STRATEGY_PARAMETER_SERVER_STRATEGY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fulcrum/ps_client.h"
#include "worker/strategy/strategy.h"

namespace fulcrum {

class ParameterServerStrategy final : public Strategy {
 public:
  // `client` (its variables created) outlives this. `worker` is this
  // worker's replica id, of `num_workers`. `resume`: the job is under way
  // (the servers know this worker, which restarted, or restored a
  // checkpoint), so this worker continues at the servers' step.
  ParameterServerStrategy(PsClient* client, int worker, int num_workers, bool resume);

  std::string name() const override;
  absl::Status Start(TensorMap* weights) override;
  int64_t ResumedBatches(int num_workers, int64_t steps_per_epoch) const override;
  absl::StatusOr<int> Step(const TensorMap* gradients, const StepPlace& place,
                           TensorMap* weights) override;
  absl::Duration last_wait() const override { return last_wait_; }
  int64_t step() const override;
  // Gone for good: a worker whose lease ran out (or that never came) on
  // every server.
  Dealing DealEpoch(int64_t epoch) override;
  absl::StatusOr<std::vector<SaveCheckpointResponse>> SaveCheckpoint(int64_t step) override;
  absl::Status Finish() override;
  absl::Status EndJob(const std::string& reason) override;
  absl::StatusOr<int64_t> ClusterStaleGradients() override;
  std::optional<int64_t> ClusterBatches() const override { return std::nullopt; }

 private:
  PsClient* const client_;
  const int worker_;
  const int num_workers_;
  const bool resume_;
  absl::Duration last_wait_;  // of the last Step's push-pull
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_STRATEGY_PARAMETER_SERVER_STRATEGY_H_
