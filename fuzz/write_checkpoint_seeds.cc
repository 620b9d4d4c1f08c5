// Writes the checkpoint fuzz targets' seeds (checkpoint_seed.h): a server's
// checkpoint file and its manifest.
//
//   write_checkpoint_seeds FILE MANIFEST
#include <cstdio>
#include <memory>

#include "common/file_system.h"
#include "fuzz/checkpoint_seed.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s FILE MANIFEST\n", argv[0]);
    return 2;
  }
  std::unique_ptr<fulcrum::FileSystem> fs = fulcrum::MakeLocalFileSystem();
  absl::Status status = fulcrum::fuzz::WriteSeedCheckpoint(*fs, argv[1]);
  if (status.ok()) status = fulcrum::fuzz::WriteSeedManifest(*fs, argv[1], argv[2]);
  if (!status.ok()) {
    std::fprintf(stderr, "write_checkpoint_seeds: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
