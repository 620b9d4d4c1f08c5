// Restoring from checkpoints, and writing one server's file of a
// checkpoint: what a parameter server and an all-reduce worker both do,
// written once. Thread-compatible free functions.
#ifndef FULCRUM_COMMON_CHECKPOINT_RESTORE_H_
#define FULCRUM_COMMON_CHECKPOINT_RESTORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint/directory.h"
#include "common/checkpoint/file.h"
#include "common/checkpoint/restored_variables.h"
#include "common/file_system.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

// A checkpoint to restore from: its files, as used, and their variables
// regrouped (RegroupCheckpoint).
struct RestorePoint {
  CheckpointFiles files;
  RestoredVariables variables;
  int64_t step = 0;       // the newest step among the files; 0 for a final file alone
  bool adjusted = false;  // whether AdjustFiles changed the files
};

// May put other files in place of some of a checkpoint's (a server's newer
// final file); true when it changed them.
using AdjustFiles = std::function<bool(CheckpointFiles* files)>;
// OK when the regrouped variables will do; else why not.
using AcceptVariables = std::function<absl::Status(const RestoredVariables& variables)>;

// `files`, after `adjust` (when given), regrouped into variables that
// `accept` (when given) takes; `partial` as RegroupCheckpoint takes it (the
// files of some servers only).
absl::StatusOr<RestorePoint> MakeRestorePoint(CheckpointFiles files, const AdjustFiles& adjust,
                                              const AcceptVariables& accept, bool partial = false);

// The newest complete checkpoint under `root` that MakeRestorePoint makes a
// restore point of, falling back past those with missing, truncated or
// corrupt files or that will not do; each problem met is logged and kept in
// *problems. NOT_FOUND when none will do.
absl::StatusOr<RestorePoint> LoadRestorePoint(FileSystem& fs, const std::string& root,
                                              const AdjustFiles& adjust,
                                              const AcceptVariables& accept,
                                              std::vector<std::string>* problems);

// Server `ps_index`'s final file (of `num_ps` servers) in `dir`, or null
// when there is none or it is unreadable (logged).
std::shared_ptr<const CheckpointFile> OpenFinalFile(FileSystem& fs, const std::string& dir,
                                                    int ps_index, int num_ps);

// Every final file of `num_ps` servers there is in `dir`, in task order.
CheckpointFiles FinalFiles(FileSystem& fs, const std::string& dir, int num_ps);

// Puts server `ps_index`'s final file in place of its file in `files` (a
// complete checkpoint of as many servers) when it is newer. True when it did.
bool UseNewerFinalFile(FileSystem& fs, const std::string& dir, int ps_index,
                       CheckpointFiles* files);

// Adds a server's shards and tables to its file.
using AddToFile = std::function<absl::Status(CheckpointFileWriter& writer)>;

// Writes the file of server `ps_index` of `num_ps` at `path`, atomically:
// its header (at `step`; -1 for a final file), then what `add` adds.
absl::StatusOr<CheckpointFileWriter::Written> WriteServerFile(FileSystem& fs,
                                                              const std::string& path, int ps_index,
                                                              int num_ps, int64_t step,
                                                              const AddToFile& add);

// Phase one of checkpoint `step` (>= 0) for server `ps_index` of `num_ps`: its
// file in <root>/ckpt-<step>/ (WriteServerFile), and what the manifest needs
// of it.
absl::StatusOr<SaveCheckpointResponse> SaveServerFile(FileSystem& fs, const std::string& root,
                                                      int64_t step, int ps_index, int num_ps,
                                                      const AddToFile& add);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CHECKPOINT_RESTORE_H_
