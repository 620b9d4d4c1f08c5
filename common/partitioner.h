// Splitting variables into shards along axis 0 (TensorFlow's partitioners)
// and placing the shards on parameter servers. Pure functions; thread-safe.
#ifndef FULCRUM_COMMON_PARTITIONER_H_
#define FULCRUM_COMMON_PARTITIONER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/tensor.pb.h"

namespace fulcrum {

// `rows` split into `num_shards` near-equal parts, the first ones one row
// larger: 13 over 5 gives 3, 3, 3, 2, 2. Requires 1 <= num_shards <= rows.
std::vector<int64_t> SplitRows(int64_t rows, int num_shards);

// How many shards the spec's partitioner makes (float32 elements):
//   NONE: 1.
//   FIXED_SHARDS(n): min(n, rows).
//   MIN_SIZE(min_shard_bytes, max_shards): as many shards of at least
//     min_shard_bytes as fit, between 1 and min(max_shards, rows).
//   MAX_SIZE(max_shard_bytes, max_shards): the fewest shards of at most
//     max_shard_bytes (one row per shard at the least), capped by max_shards.
// The spec must be valid (ValidateVariableSpec).
int NumShards(const VariableSpec& spec);

// One shard of a variable and the parameter server that holds it.
struct ShardPlacement {
  int shard = 0;
  int64_t row_offset = 0;
  int64_t rows = 0;
  int ps = 0;
};

struct VariablePlacement {
  VariableSpec spec;
  std::vector<ShardPlacement> shards;
};

// Partitions every variable and places the shards on `num_ps` servers, one
// copy each (common/placement.h's InitialPlacement). Shards are taken in
// order (variables as given, shards by index); each goes to the server
// holding the fewest bytes so far, ties broken round-robin, so equal
// shards go round-robin and unequal ones balance by bytes. Deterministic:
// every worker computes the same placement from the same specs. Errors
// name an invalid spec or a duplicate name.
absl::StatusOr<std::vector<VariablePlacement>> PlaceVariables(
    const std::vector<VariableSpec>& specs, int num_ps);

// A shard's key in the placement table: "variable/shard".
std::string ShardKey(absl::string_view variable, int shard);
// The variable and shard of a ShardKey; false for a key that is not one.
bool ParseShardKey(absl::string_view key, std::string* variable, int* shard);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_PARTITIONER_H_
