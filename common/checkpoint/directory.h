// Checkpoints on disk: names, manifests, and finding the newest complete
// checkpoint. A checkpoint is a directory `<root>/ckpt-<step>/` holding one
// file per parameter server (common/checkpoint_file.h) and, once every
// server has written its file, the chief's MANIFEST listing them: a
// checkpoint is complete exactly when its manifest is there and valid.
// Thread-compatible free functions.
#ifndef FULCRUM_COMMON_CHECKPOINT_DIRECTORY_H_
#define FULCRUM_COMMON_CHECKPOINT_DIRECTORY_H_

#include <google/protobuf/message.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint/file.h"
#include "common/file_system.h"
#include "proto/checkpoint.pb.h"

namespace fulcrum {

constexpr char kManifestName[] = "MANIFEST";

std::string CheckpointDirName(int64_t step);       // "ckpt-000000001234"
std::string PsFileName(int ps_index, int num_ps);  // "ps-00001-of-00002.ckpt"
// A server's own checkpoint at shutdown, beside the checkpoint directories:
// "final-ps-00001-of-00002.ckpt".
std::string FinalFileName(int ps_index, int num_ps);

// A complete checkpoint.
struct CheckpointInfo {
  int64_t step = 0;
  std::string dir;
  CheckpointManifest manifest;
};

// Complete checkpoints under `root`, newest first. Directories without a
// valid manifest are skipped; a manifest that exists but does not verify
// is reported in `problems`.
std::vector<CheckpointInfo> ListCompleteCheckpoints(FileSystem& fs, const std::string& root,
                                                    std::vector<std::string>* problems);

// The servers' files of a checkpoint, opened and verified.
using CheckpointFiles = std::vector<std::shared_ptr<const CheckpointFile>>;

// The files `info`'s manifest lists, each opened and verified against its
// entry; the first that fails says why (DATA_LOSS naming it).
absl::StatusOr<CheckpointFiles> OpenCheckpointFiles(FileSystem& fs, const CheckpointInfo& info);

// Every server's file of the newest complete checkpoint whose files all
// verify against its manifest and that `accept` accepts (the caller's
// check that it can use them); older checkpoints are tried when a newer
// one has a missing, truncated or corrupt file or is not accepted (each
// reported in `problems`). NOT_FOUND when there is none.
absl::StatusOr<CheckpointFiles> LoadNewestCheckpoint(
    FileSystem& fs, const std::string& root,
    const std::function<absl::Status(const CheckpointFiles&)>& accept,
    std::vector<std::string>* problems);

// What a chief keeps of its own in a manifest (CheckpointManifest.chief_state).
using ChiefState = std::map<std::string, std::string>;

// The chief's second phase: writes the manifest of checkpoint `step` from
// the servers' files, with `chief_state`, atomically.
absl::Status WriteManifest(FileSystem& fs, const std::string& root, int64_t step, int num_ps,
                           const std::vector<ManifestFile>& files,
                           const ChiefState& chief_state = {});

// Removes all but the newest `keep` complete checkpoints, and any incomplete
// checkpoint older than the newest complete one.
absl::Status PruneCheckpoints(FileSystem& fs, const std::string& root, int keep);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CHECKPOINT_DIRECTORY_H_
