// Fuzz target: a parameter server's checkpoint file (checkpoint_file.h),
// as a restarting server opens and restores it: opened and verified,
// every table and shard read, its variables regrouped and read whole.
// Before it is written, every record's CRC-32 is made right, so inputs get
// past the checksums to what they protect.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/checkpoint/file.h"
#include "common/checkpoint/restored_variables.h"
#include "fuzz/fuzz_input.h"

namespace fulcrum::fuzz {
namespace {

// Reads of more floats than this are left out: a restore reads what the
// server's memory budget allowed it to save.
constexpr int64_t kMaxReadFloats = 1 << 20;

// The file's layout (see checkpoint_file.h): magic and version, then
// records of u32 kind, u64 length, u32 CRC-32, payload.
constexpr size_t kFileHeaderBytes = 12;
constexpr size_t kRecordHeaderBytes = 16;

void FixChecksums(std::string* file) {
  size_t at = kFileHeaderBytes;
  while (at + kRecordHeaderBytes <= file->size()) {
    uint64_t length;
    std::memcpy(&length, file->data() + at + 4, sizeof(length));
    if (length > file->size() - at - kRecordHeaderBytes) return;
    const uint32_t crc = Crc32(absl::string_view(*file).substr(at + kRecordHeaderBytes, length));
    std::memcpy(file->data() + at + 12, &crc, sizeof(crc));
    at += kRecordHeaderBytes + length;
  }
}

void ReadAll(const std::shared_ptr<const CheckpointFile>& file) {
  for (const CheckpointTable& table : file->tables()) {
    (void)file->ReadTable(
        table, [](int64_t, absl::Span<const float>) {}, [](int64_t, uint32_t) {});
  }
  for (const CheckpointShard& shard : file->shards()) {
    const int64_t rows = shard.meta.spec().rows();
    if (shard.row_elems <= 0 || rows > kMaxReadFloats / shard.row_elems) continue;
    std::vector<float> out(rows * shard.row_elems);
    for (int tensor = 0; tensor <= shard.meta.num_slots(); ++tensor) {
      (void)file->ReadRows(shard, tensor, 0, absl::MakeSpan(out));
    }
  }
  auto variables = RegroupCheckpoint({file});
  if (!variables.ok()) return;
  for (const auto& [name, variable] : *variables) {
    const int64_t rows = variable.spec.shape().empty() ? 1 : variable.spec.shape(0);
    if (variable.row_elems <= 0 || rows > kMaxReadFloats / variable.row_elems) continue;
    ShardContents contents;
    contents.values.resize(rows * variable.row_elems);
    contents.slots.resize(variable.num_slots, std::vector<float>(contents.values.size()));
    (void)variable.Read(0, rows, &contents);
  }
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fulcrum;  // NOLINT(google-build-using-namespace)
  std::string bytes(reinterpret_cast<const char*>(data), size);
  fuzz::FixChecksums(&bytes);
  static std::unique_ptr<FileSystem> fs = MakeLocalFileSystem();
  auto file = CheckpointFile::Open(*fs, fuzz::WriteScratchFile("ps.ckpt", bytes));
  if (file.ok()) fuzz::ReadAll(*file);
  return 0;
}
