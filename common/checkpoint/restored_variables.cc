#include "common/checkpoint/restored_variables.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/tensor.h"

namespace fulcrum {

absl::Status RestoredVariable::Read(int64_t first_row, int64_t rows, ShardContents* out) const {
  const int64_t end_row = first_row + rows;
  out->version = 0;
  for (const Piece& piece : pieces) {
    const ShardSpec& spec = piece.shard->meta.spec();
    const int64_t from = std::max(first_row, spec.row_offset());
    const int64_t to = std::min(end_row, spec.row_offset() + spec.rows());
    if (from >= to) continue;
    // Rows regrouped from shards of different versions take the newest.
    out->version = std::max(out->version, piece.shard->meta.version());
    const size_t begin = static_cast<size_t>((from - first_row) * row_elems);
    const size_t count = static_cast<size_t>((to - from) * row_elems);
    for (int tensor = 0; tensor <= num_slots; ++tensor) {
      std::vector<float>& into = tensor == 0 ? out->values : out->slots[tensor - 1];
      if (absl::Status s = piece.file->ReadRows(*piece.shard, static_cast<uint32_t>(tensor),
                                                from - spec.row_offset(),
                                                absl::MakeSpan(into).subspan(begin, count));
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

bool RestoredVariable::Covers(int64_t first_row, int64_t rows) const {
  int64_t next = first_row;  // the first row not yet found
  for (const Piece& piece : pieces) {
    const ShardSpec& spec = piece.shard->meta.spec();
    if (spec.row_offset() > next) break;
    next = std::max(next, spec.row_offset() + spec.rows());
  }
  return next >= first_row + rows;
}

absl::StatusOr<RestoredVariables> RegroupCheckpoint(const CheckpointFiles& files, bool partial) {
  RestoredVariables out;
  for (const std::shared_ptr<const CheckpointFile>& file : files) {
    for (const CheckpointShard& shard : file->shards()) {
      const ShardSpec& spec = shard.meta.spec();
      const std::string& name = spec.variable().name();
      RestoredVariable& variable = out[name];
      if (variable.pieces.empty()) {
        variable.spec = spec.variable();
        variable.row_elems = shard.row_elems;
        variable.num_slots = shard.meta.num_slots();
      } else if (!std::equal(spec.variable().shape().begin(), spec.variable().shape().end(),
                             variable.spec.shape().begin(), variable.spec.shape().end()) ||
                 shard.meta.num_slots() != variable.num_slots) {
        return absl::DataLossError(
            absl::StrCat("checkpoint of variable '", name, "': shard ", spec.shard(), " in '",
                         file->path(), "' has shape ", ShapeString(spec.variable().shape()),
                         " and ", shard.meta.num_slots(), " slots; another has ",
                         ShapeString(variable.spec.shape()), " and ", variable.num_slots));
      }
      variable.pieces.push_back({file, &shard});
    }
  }
  for (auto& [name, variable] : out) {
    std::sort(variable.pieces.begin(), variable.pieces.end(),
              [](const RestoredVariable::Piece& a, const RestoredVariable::Piece& b) {
                return a.shard->meta.spec().row_offset() < b.shard->meta.spec().row_offset();
              });
    int64_t next_row = 0;
    for (const RestoredVariable::Piece& piece : variable.pieces) {
      const ShardSpec& spec = piece.shard->meta.spec();
      if (spec.row_offset() < next_row || (spec.row_offset() > next_row && !partial)) {
        return absl::DataLossError(
            absl::StrCat("checkpoint of variable '", name,
                         "': ", spec.row_offset() < next_row ? "row " : "rows from ",
                         std::min(next_row, spec.row_offset()),
                         spec.row_offset() < next_row ? " is held twice" : " are missing"));
      }
      next_row = spec.row_offset() + spec.rows();
    }
    if (next_row > variable.spec.shape(0) || (next_row < variable.spec.shape(0) && !partial)) {
      return absl::DataLossError(absl::StrCat("checkpoint of variable '", name, "' holds ",
                                              next_row, " of its ", variable.spec.shape(0),
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
