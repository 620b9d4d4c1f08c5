// Fuzz target: a checkpoint's manifest (checkpoint.h), as a restarting
// server finds the newest complete checkpoint: the input is the manifest
// of a checkpoint directory that holds one valid server file
// (checkpoint_seed.h), which the server then opens as the manifest says
// and regroups. The manifest's CRC-32 is made right before it is written,
// so inputs get past it to the message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/checkpoint/directory.h"
#include "common/checkpoint/restored_variables.h"
#include "fuzz/checkpoint_seed.h"
#include "fuzz/fuzz_input.h"

namespace fulcrum::fuzz {
namespace {

// The manifest's layout (see checkpoint_file.h): magic, version, u64
// payload length, u32 CRC-32, payload.
constexpr size_t kCrcAt = 20;
constexpr size_t kPayloadAt = 24;

void FixChecksum(std::string* manifest) {
  if (manifest->size() < kPayloadAt) return;
  const uint32_t crc = Crc32(absl::string_view(*manifest).substr(kPayloadAt));
  std::memcpy(manifest->data() + kCrcAt, &crc, sizeof(crc));
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fulcrum;  // NOLINT(google-build-using-namespace)
  static std::unique_ptr<FileSystem> fs = MakeLocalFileSystem();
  const std::string dir = "checkpoints/" + CheckpointDirName(7);
  static const std::string root = [&] {
    const std::string file = fuzz::WriteScratchFile(dir + "/" + fuzz::kSeedFileName, "");
    fuzz::Check(fuzz::WriteSeedCheckpoint(*fs, file).ok(), "writing the seed checkpoint");
    return DirName(DirName(file));
  }();
  std::string manifest(reinterpret_cast<const char*>(data), size);
  fuzz::FixChecksum(&manifest);
  fuzz::WriteScratchFile(dir + "/" + kManifestName, manifest);
  std::vector<std::string> problems;
  (void)LoadNewestCheckpoint(
      *fs, root, [](const CheckpointFiles& files) { return RegroupCheckpoint(files).status(); },
      &problems);
  return 0;
}
