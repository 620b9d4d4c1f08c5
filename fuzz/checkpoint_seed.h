// A small, valid checkpoint (a server's file and the chief's manifest of
// it), always the same bytes: the checkpoint fuzz targets' seeds, and the
// file the manifest target's manifests describe.
#ifndef FULCRUM_FUZZ_CHECKPOINT_SEED_H_
#define FULCRUM_FUZZ_CHECKPOINT_SEED_H_

#include <string>

#include "absl/status/status.h"
#include "common/file_system.h"

namespace fulcrum::fuzz {

// The file's name in its checkpoint directory, as the manifest names it.
constexpr char kSeedFileName[] = "ps-00000-of-00001.ckpt";

// Writes the checkpoint file to `path`: a variable of 2 shards with Adam's
// 2 slots, and an embedding table with rows and candidates, in records
// small enough that each tensor spans several.
absl::Status WriteSeedCheckpoint(FileSystem& fs, const std::string& path);

// Writes the manifest of that file (as written at `file_path`) to `path`.
absl::Status WriteSeedManifest(FileSystem& fs, const std::string& file_path,
                               const std::string& path);

}  // namespace fulcrum::fuzz

#endif  // FULCRUM_FUZZ_CHECKPOINT_SEED_H_
