// sync: a push joins the step its gradients were computed at, and the next
// pull waits (long poll) until that step's mean is applied. Steps are global:
// each is one batch of every worker.
#include "absl/strings/str_cat.h"
#include "client/consistency/policy.h"

namespace fulcrum {
namespace {

class SyncClientPolicy final : public ClientConsistencyPolicy {
 public:
  ConsistencyMode mode() const override { return SYNC; }

  int64_t MinVersionAfterPush(int64_t pulled_version) const override { return pulled_version + 1; }

  int64_t ResumedBatches(int64_t global_step, int num_workers) const override {
    return global_step;
  }

  bool AwaitsEveryWorker() const override { return true; }

  absl::Status CheckServer(const DescribeResponse& server,
                           const ModeBounds& expected) const override {
    if (expected.replicas_to_aggregate > 0 &&
        server.replicas_to_aggregate() != expected.replicas_to_aggregate) {
      return absl::FailedPreconditionError(
          absl::StrCat("this worker expects replicas_to_aggregate ", expected.replicas_to_aggregate,
                       " but the server aggregates ", server.replicas_to_aggregate()));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<ClientConsistencyPolicy> MakeSyncClientPolicy() {
  return std::make_unique<SyncClientPolicy>();
}

}  // namespace fulcrum
