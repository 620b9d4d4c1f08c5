#include "ps_server/restored_variables.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/tensor.h"
#include "ps_server/variable_store.h"

namespace fulcrum {

absl::StatusOr<RestoredVariables> RegroupCheckpoint(const std::vector<PsCheckpoint>& files) {
  RestoredVariables out;
  std::map<std::string, int64_t> rows_filled;
  for (const PsCheckpoint& file : files) {
    for (const ShardCheckpoint& shard : file.shards()) {
      const ShardSpec& spec = shard.spec();
      const std::string& name = spec.variable().name();
      const std::string where =
          absl::StrCat("checkpoint of variable '", name, "' shard ", spec.shard());
      if (absl::Status s = ValidateShardSpec(spec); !s.ok()) {
        return absl::DataLossError(absl::StrCat(where, ": ", s.message()));
      }
      RestoredVariable& variable = out[name];
      const int64_t rows = spec.variable().shape(0);
      if (variable.values.empty()) {
        variable.spec = spec.variable();
        variable.row_elems = RowElements(spec.variable().shape());
        variable.values.assign(rows * variable.row_elems, 0.0f);
        variable.row_versions.assign(rows, -1);
        variable.slots.assign(shard.slots_size(), std::vector<float>(variable.values.size()));
      }
      const int64_t count = spec.rows() * variable.row_elems;
      const size_t bytes = static_cast<size_t>(count) * sizeof(float);
      bool sizes_ok = shard.values().size() == bytes &&
                      shard.slots_size() == static_cast<int>(variable.slots.size()) &&
                      std::equal(spec.variable().shape().begin(), spec.variable().shape().end(),
                                 variable.spec.shape().begin(), variable.spec.shape().end());
      for (const std::string& slot : shard.slots()) sizes_ok = sizes_ok && slot.size() == bytes;
      if (!sizes_ok) {
        return absl::DataLossError(absl::StrCat(where, ": sizes do not match its spec"));
      }
      const int64_t first = spec.row_offset() * variable.row_elems;
      for (int64_t r = spec.row_offset(); r < spec.row_offset() + spec.rows(); ++r) {
        if (variable.row_versions[r] >= 0) {
          return absl::DataLossError(absl::StrCat(where, ": row ", r, " is held twice"));
        }
        variable.row_versions[r] = shard.version();
      }
      std::memcpy(&variable.values[first], shard.values().data(), bytes);
      for (int s = 0; s < shard.slots_size(); ++s) {
        std::memcpy(&variable.slots[s][first], shard.slots(s).data(), bytes);
      }
      rows_filled[name] += spec.rows();
    }
  }
  for (const auto& [name, variable] : out) {
    if (rows_filled[name] != variable.spec.shape(0)) {
      return absl::DataLossError(absl::StrCat("checkpoint of variable '", name, "' holds ",
                                              rows_filled[name], " of its ", variable.spec.shape(0),
                                              " rows"));
    }
  }
  return out;
}

absl::Status CheckRestorable(const VariableSpec& restored, const VariableSpec& wanted) {
  VariableSpec a = restored, b = wanted;
  for (VariableSpec* spec : {&a, &b}) {
    spec->clear_partitioner();
    spec->clear_initializer();
  }
  a = CanonicalSpec(a);
  b = CanonicalSpec(b);
  if (!google::protobuf::util::MessageDifferencer::Equals(a, b)) {
    return absl::FailedPreconditionError(
        absl::StrCat("variable '", wanted.name(), "': the checkpoint holds {", a.ShortDebugString(),
                     "} but the job creates {", b.ShortDebugString(),
                     "}; use a new --checkpoint_dir or the same model"));
  }
  return absl::OkStatus();
}

}  // namespace fulcrum
