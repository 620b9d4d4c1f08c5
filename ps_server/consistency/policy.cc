#include "ps_server/consistency/policy.h"

#include "absl/strings/str_cat.h"

namespace fulcrum {

absl::StatusOr<const ModeDefinition*> FindMode(ConsistencyMode mode) {
  static const ModeDefinition* const kModes[] = {&kAsyncMode, &kSyncMode, &kSspMode};
  for (const ModeDefinition* definition : kModes) {
    if (definition->mode == mode) return definition;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("mode: ", ConsistencyMode_Name(mode), " is not async, sync or ssp"));
}

}  // namespace fulcrum
