// ssp: pushes apply at once; every pull and push carries this worker's clock
// (its pushes so far), and every server hears of each push, so that each
// keeps the clock its pulls are held to.
#include "absl/strings/str_cat.h"
#include "client/consistency/policy.h"

namespace fulcrum {
namespace {

class SspClientPolicy final : public ClientConsistencyPolicy {
 public:
  ConsistencyMode mode() const override { return SSP; }

  bool CarriesClock() const override { return true; }

  bool PushReachesEveryServer() const override { return true; }

  bool AwaitsEveryWorker() const override { return true; }

  int64_t ResumedBatches(int64_t global_step, int num_workers) const override {
    return global_step / num_workers;
  }

  absl::Status CheckServer(const DescribeResponse& server,
                           const ModeBounds& expected) const override {
    if (expected.staleness >= 0 && server.staleness_bound() != expected.staleness) {
      return absl::FailedPreconditionError(
          absl::StrCat("this worker expects staleness ", expected.staleness,
                       " but the server runs with staleness ", server.staleness_bound()));
    }
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<ClientConsistencyPolicy> MakeSspClientPolicy() {
  return std::make_unique<SspClientPolicy>();
}

}  // namespace fulcrum
