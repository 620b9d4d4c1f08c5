// The chief's side of checkpoints: has the variables written (phase one:
// every parameter server writes its file, or an all-reduce chief writes
// its replica as one), then writes the manifest that makes the checkpoint
// complete (phase two), and keeps the newest few. A failed checkpoint
// (a full disk, an unreachable server) is logged and leaves the previous
// complete one valid; training goes on. Thread-compatible.
#ifndef FULCRUM_COMMON_CHECKPOINT_CHECKPOINTER_H_
#define FULCRUM_COMMON_CHECKPOINT_CHECKPOINTER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checkpoint/directory.h"
#include "common/file_system.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

struct CheckpointOptions {
  std::string dir;          // shared with the servers' --checkpoint_dir
  int64_t every_steps = 0;  // 0: not by steps
  int64_t every_secs = 0;   // 0: not by time
  int keep = 5;             // complete checkpoints kept
};

// INVALID_ARGUMENT naming them when the intervals are negative or keep < 1.
absl::Status CheckCheckpointOptions(const CheckpointOptions& options);

// Phase one of checkpoint `step`: the files written, in task order.
using WriteCheckpointFiles =
    std::function<absl::StatusOr<std::vector<SaveCheckpointResponse>>(int64_t step)>;

class Checkpointer {
 public:
  // `fs` outlives it. `now` is the clock `every_secs` is measured on.
  Checkpointer(WriteCheckpointFiles write_files, FileSystem* fs, CheckpointOptions options,
               std::function<absl::Time()> now = absl::Now);

  // Whether `every_steps` steps or `every_secs` seconds have passed since
  // the last checkpoint, at `step`.
  bool Due(int64_t step) const;
  // After a step: saves checkpoint `step` when Due.
  void MaybeSave(int64_t step);

  // Saves checkpoint `step` now, with `chief_state` in its manifest; the
  // error (also logged) when it failed.
  absl::Status Save(int64_t step, const ChiefState& chief_state = {});

 private:
  const WriteCheckpointFiles write_files_;
  FileSystem* const fs_;
  const CheckpointOptions options_;
  const std::function<absl::Time()> now_;
  int64_t last_step_ = 0;
  absl::Time last_time_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CHECKPOINT_CHECKPOINTER_H_
