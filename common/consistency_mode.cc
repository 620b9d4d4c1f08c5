#include "common/consistency_mode.h"

#include "absl/strings/str_cat.h"

namespace fulcrum {

absl::StatusOr<ConsistencyMode> ParseConsistencyMode(absl::string_view name) {
  if (name == "async") return ASYNC;
  if (name == "sync") return SYNC;
  if (name == "ssp") return SSP;
  return absl::InvalidArgumentError(
      absl::StrCat("--mode: '", name, "' is not one of async, sync, ssp"));
}

const char* ConsistencyModeName(ConsistencyMode mode) {
  switch (mode) {
    case SYNC:
      return "sync";
    case ASYNC:
      return "async";
    case SSP:
      return "ssp";
    default:
      return "unspecified";
  }
}

}  // namespace fulcrum
