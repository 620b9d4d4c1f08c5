// Consistency modes by the names users give them: "sync", "async", "ssp".
#ifndef FULCRUM_COMMON_CONSISTENCY_MODE_H_
#define FULCRUM_COMMON_CONSISTENCY_MODE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/config.pb.h"

namespace fulcrum {

// "sync" -> SYNC, ...; INVALID_ARGUMENT naming --mode otherwise.
absl::StatusOr<ConsistencyMode> ParseConsistencyMode(absl::string_view name);

// SYNC -> "sync", ...
const char* ConsistencyModeName(ConsistencyMode mode);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CONSISTENCY_MODE_H_
