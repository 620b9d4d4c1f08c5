// Variables as a checkpoint holds them, regrouped by variable from however
// many servers wrote it, so that shards of a new placement (M servers, not
// N) can be filled from any rows. Thread-compatible.
#ifndef FULCRUM_PS_SERVER_RESTORED_VARIABLES_H_
#define FULCRUM_PS_SERVER_RESTORED_VARIABLES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"

namespace fulcrum {

struct RestoredVariable {
  VariableSpec spec;
  int64_t row_elems = 0;
  std::vector<float> values;              // all rows
  std::vector<std::vector<float>> slots;  // the optimizer's, each all rows
  std::vector<int64_t> row_versions;      // the version of the shard each row was in
};

using RestoredVariables = std::map<std::string, RestoredVariable>;

// Regroups every server's shards by variable. The shards of a variable must
// tile its rows exactly once, with values and slots of the right sizes;
// else DATA_LOSS naming the variable.
absl::StatusOr<RestoredVariables> RegroupCheckpoint(const std::vector<PsCheckpoint>& files);

// OK when a checkpointed variable can fill `wanted`: same shape, dtype and
// optimizer (the partitioner and initializer may differ). Else
// FAILED_PRECONDITION showing both.
absl::Status CheckRestorable(const VariableSpec& restored, const VariableSpec& wanted);

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_RESTORED_VARIABLES_H_
