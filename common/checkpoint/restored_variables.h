// Variables as a checkpoint holds them, regrouped by variable from however
// many servers wrote it, so that shards of a new placement (M servers, not
// N) can be filled from any rows. The data stays in the checkpoint files
// (kept open) and is read when a shard is created. Thread-safe once built.
#ifndef FULCRUM_COMMON_CHECKPOINT_RESTORED_VARIABLES_H_
#define FULCRUM_COMMON_CHECKPOINT_RESTORED_VARIABLES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint/directory.h"
#include "common/checkpoint/file.h"
#include "common/optimizer/optimizer.h"

namespace fulcrum {

// What a shard holds: values, optimizer slots, version.
struct ShardContents {
  std::vector<float> values;
  OptimizerSlots slots;
  int64_t version = 0;
};

struct RestoredVariable {
  VariableSpec spec;
  int64_t row_elems = 0;
  int num_slots = 0;
  // The checkpointed shards of the variable, by first row; they tile its rows.
  struct Piece {
    std::shared_ptr<const CheckpointFile> file;
    const CheckpointShard* shard;  // of `file`
  };
  std::vector<Piece> pieces;

  // Rows [first_row, first_row + rows) into `out` (values and slots sized
  // for them): the newest version of the shards they come from. DATA_LOSS
  // naming the file when it cannot be read.
  absl::Status Read(int64_t first_row, int64_t rows, ShardContents* out) const;
  // Whether the pieces hold every row of [first_row, first_row + rows)
  // (always, unless regrouped `partial`).
  bool Covers(int64_t first_row, int64_t rows) const;
};

using RestoredVariables = std::map<std::string, RestoredVariable>;

// Regroups every server's shards by variable. The shards of a variable must
// agree on its spec and slots and tile its rows exactly once; else
// DATA_LOSS naming the variable. With `partial` (the files of some servers
// only) rows may be missing, but none held twice.
absl::StatusOr<RestoredVariables> RegroupCheckpoint(const CheckpointFiles& files,
                                                    bool partial = false);

// OK when a checkpointed variable can fill `wanted`: same shape, dtype and
// optimizer (the partitioner and initializer may differ). Else
// FAILED_PRECONDITION showing both.
absl::Status CheckRestorable(const VariableSpec& restored, const VariableSpec& wanted);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CHECKPOINT_RESTORED_VARIABLES_H_
