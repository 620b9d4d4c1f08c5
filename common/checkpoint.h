// Checkpoint files on disk: framing with a checksum, names, manifests, and
// finding the newest complete checkpoint. A checkpoint is a directory
// `<root>/ckpt-<step>/` holding one file per parameter server and, once
// every server has written its file, the chief's MANIFEST listing them: a
// checkpoint is complete exactly when its manifest is there and valid.
// Thread-compatible free functions.
#ifndef FULCRUM_COMMON_CHECKPOINT_H_
#define FULCRUM_COMMON_CHECKPOINT_H_

#include <google/protobuf/message.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_system.h"
#include "proto/checkpoint.pb.h"

namespace fulcrum {

// The file format this build writes and reads.
constexpr uint32_t kCheckpointFormatVersion = 1;
constexpr char kManifestName[] = "MANIFEST";

uint32_t Crc32(absl::string_view data);

// magic "FULCKPT\n", format version (u32), payload length (u64) and CRC-32
// (u32), little-endian, then the serialized message.
std::string FrameMessage(const google::protobuf::Message& message);

// Checks and parses a framed file; errors name `path` and the fault: not a
// checkpoint file, another format version, truncated, checksum mismatch.
absl::Status UnframeMessage(absl::string_view data, const std::string& path,
                            google::protobuf::Message* out);

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

// Every server's file of the newest complete checkpoint whose files all
// verify against its manifest; older checkpoints are tried when a newer
// one has a missing, truncated or corrupt file (each reported in
// `problems`). NOT_FOUND when there is none.
absl::StatusOr<std::vector<PsCheckpoint>> LoadNewestCheckpoint(FileSystem& fs,
                                                               const std::string& root,
                                                               std::vector<std::string>* problems);

// The chief's second phase: writes the manifest of checkpoint `step` from
// the servers' files, atomically.
absl::Status WriteManifest(FileSystem& fs, const std::string& root, int64_t step, int num_ps,
                           const std::vector<ManifestFile>& files);

// Removes all but the newest `keep` complete checkpoints, and any incomplete
// checkpoint older than the newest complete one.
absl::Status PruneCheckpoints(FileSystem& fs, const std::string& root, int keep);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CHECKPOINT_H_
