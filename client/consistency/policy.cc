#include "client/consistency/policy.h"

#include "absl/strings/str_cat.h"

namespace fulcrum {

absl::StatusOr<std::unique_ptr<ClientConsistencyPolicy>> MakeClientPolicy(ConsistencyMode mode) {
  for (auto make : {&MakeAsyncClientPolicy, &MakeSyncClientPolicy, &MakeSspClientPolicy}) {
    std::unique_ptr<ClientConsistencyPolicy> policy = make();
    if (policy->mode() == mode) return policy;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("mode: ", ConsistencyMode_Name(mode), " is not async, sync or ssp"));
}

}  // namespace fulcrum
