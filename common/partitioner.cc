#include "common/partitioner.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/placement.h"
#include "common/tensor.h"

namespace fulcrum {

std::vector<int64_t> SplitRows(int64_t rows, int num_shards) {
  CHECK(num_shards >= 1 && num_shards <= rows);
  std::vector<int64_t> sizes(num_shards, rows / num_shards);
  for (int64_t i = 0; i < rows % num_shards; ++i) ++sizes[i];
  return sizes;
}

int NumShards(const VariableSpec& raw_spec) {
  const VariableSpec spec = CanonicalSpec(raw_spec);
  const PartitionerSpec& p = spec.partitioner();
  const int64_t rows = spec.shape(0);
  const int64_t row_bytes = RowElements(spec.shape()) * static_cast<int64_t>(sizeof(float));
  int64_t shards = 1;
  switch (p.kind()) {
    case PartitionerSpec::FIXED_SHARDS:
      shards = p.num_shards();
      break;
    case PartitionerSpec::MIN_SIZE:
      shards = std::min<int64_t>(p.max_shards(), rows * row_bytes / p.min_shard_bytes());
      break;
    case PartitionerSpec::MAX_SIZE: {
      const int64_t rows_per_shard = std::max<int64_t>(1, p.max_shard_bytes() / row_bytes);
      shards = (rows + rows_per_shard - 1) / rows_per_shard;
      if (p.max_shards() > 0) shards = std::min<int64_t>(shards, p.max_shards());
      break;
    }
    default:
      break;
  }
  return static_cast<int>(std::clamp<int64_t>(shards, 1, rows));
}

absl::StatusOr<std::vector<VariablePlacement>> PlaceVariables(
    const std::vector<VariableSpec>& specs, int num_ps) {
  if (num_ps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("placing variables needs at least one parameter server, got ", num_ps));
  }
  std::set<std::string> names;
  std::vector<VariablePlacement> out;
  std::vector<PlacementUnitSpec> units;
  for (const VariableSpec& spec : specs) {
    if (absl::Status s = ValidateVariableSpec(spec); !s.ok()) return s;
    if (!names.insert(spec.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", spec.name(), "' is specified twice"));
    }
    VariablePlacement placement;
    placement.spec = CanonicalSpec(spec);
    const int64_t row_bytes = RowElements(spec.shape()) * static_cast<int64_t>(sizeof(float));
    int64_t offset = 0;
    const std::vector<int64_t> sizes = SplitRows(spec.shape(0), NumShards(spec));
    for (int shard = 0; shard < static_cast<int>(sizes.size()); ++shard) {
      placement.shards.push_back({shard, offset, sizes[shard], 0});
      units.push_back({ShardKey(spec.name(), shard), sizes[shard] * row_bytes});
      offset += sizes[shard];
    }
    out.push_back(std::move(placement));
  }
  // One copy of each shard, by the placement table's rule: to the server
  // holding the fewest bytes so far, ties round-robin.
  absl::StatusOr<Placement> table =
      InitialPlacement(std::vector<PlacementServer>(num_ps), units, /*replication=*/1);
  if (!table.ok()) return table.status();
  int unit = 0;
  for (VariablePlacement& placement : out) {
    for (ShardPlacement& shard : placement.shards) {
      shard.ps = table->units(unit++).copies(0).server();
    }
  }
  return out;
}

std::string ShardKey(absl::string_view variable, int shard) {
  return absl::StrCat(variable, "/", shard);
}

bool ParseShardKey(absl::string_view key, std::string* variable, int* shard) {
  const size_t slash = key.rfind('/');
  if (slash == absl::string_view::npos || !absl::SimpleAtoi(key.substr(slash + 1), shard)) {
    return false;
  }
  *variable = std::string(key.substr(0, slash));
  return true;
}

}  // namespace fulcrum
