// async: pushes apply at once, so a pull waits for nothing, and the servers'
// step counts every worker's pushes.
#include "client/consistency/policy.h"

namespace fulcrum {
namespace {

class AsyncClientPolicy final : public ClientConsistencyPolicy {
 public:
  ConsistencyMode mode() const override { return ASYNC; }

  int64_t ResumedBatches(int64_t global_step, int num_workers) const override {
    return global_step / num_workers;
  }
};

}  // namespace

std::unique_ptr<ClientConsistencyPolicy> MakeAsyncClientPolicy() {
  return std::make_unique<AsyncClientPolicy>();
}

}  // namespace fulcrum
