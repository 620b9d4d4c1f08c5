// A parameter server's checkpoint file: framed, checksummed records, so
// that a server holding any amount of data -- far past protobuf's 2 GiB
// message limit -- writes it in bounded pieces, a fault is found and named
// by record, and a restore reads only the rows it needs.
//
//   "FULCKPT\n", u32 format version (kCheckpointFileVersion)
//   records, each: u32 kind, u64 payload length, u32 CRC-32 of the payload,
//   the payload:
//     kHeader  PsCheckpointHeader, first
//     kShard   ShardCheckpoint (spec, version, slots); the shard's data follows
//     kData    u32 tensor (0: values, 1 + i: slot i), u64 first row,
//              u64 rows, then those rows as float32 (by default at most
//              about kMaxDataRecordBytes a record; each tensor's rows in
//              order)
//     kEnd     PsCheckpointEnd, last: the file is whole
//
// All integers and floats little-endian (x86-64 and arm64 hosts).
// Writers and readers are thread-compatible; an open CheckpointFile may be
// read from several threads.
#ifndef FULCRUM_COMMON_CHECKPOINT_FILE_H_
#define FULCRUM_COMMON_CHECKPOINT_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/file_system.h"
#include "proto/checkpoint.pb.h"

namespace fulcrum {

constexpr uint32_t kCheckpointFileVersion = 2;
constexpr int64_t kMaxDataRecordBytes = 64 << 20;

// CRC-32 (zlib's) of `data`, continuing `crc` (0 to start).
uint32_t Crc32(absl::string_view data, uint32_t crc = 0);
// The CRC-32 of data A then data B, from theirs and B's length.
uint32_t CombineCrc32(uint32_t first, uint32_t second, uint64_t second_bytes);

// A small message alone in a file (a checkpoint's manifest): magic
// "FULCMAN\n", format version (u32, kManifestFormatVersion), payload length
// (u64) and CRC-32 (u32), then the serialized message. INTERNAL when it
// cannot be serialized.
constexpr uint32_t kManifestFormatVersion = 1;
absl::StatusOr<std::string> FrameMessage(const google::protobuf::Message& message);

// Checks and parses a framed message; errors name `path` and the fault: not
// a manifest, another format version, truncated, checksum mismatch.
absl::Status UnframeMessage(absl::string_view data, const std::string& path,
                            google::protobuf::Message* out);

// Writes a checkpoint file atomically (AtomicFileWriter): nothing is at
// `path` until Commit, and a failure leaves what was there.
class CheckpointFileWriter {
 public:
  // Opens the file and writes its header record. Data records hold about
  // `max_record_bytes` of floats (one row at the least).
  static absl::StatusOr<std::unique_ptr<CheckpointFileWriter>> Open(
      FileSystem& fs, const std::string& path, const PsCheckpointHeader& header,
      int64_t max_record_bytes = kMaxDataRecordBytes);

  // One shard: `shard` (its num_slots as many as `slots`), then its values
  // and slots, each rows x the variable's row elements. INVALID_ARGUMENT
  // when the sizes disagree; the writer is then unusable.
  absl::Status AddShard(const ShardCheckpoint& shard, absl::Span<const float> values,
                        const std::vector<absl::Span<const float>>& slots);

  // The end record, then the file in place. The whole file's size and
  // CRC-32, for the manifest.
  struct Written {
    int64_t bytes = 0;
    uint32_t crc32 = 0;
    int32_t shards = 0;
  };
  absl::StatusOr<Written> Commit();

 private:
  CheckpointFileWriter(std::string path, std::unique_ptr<AtomicFileWriter> file,
                       int64_t max_record_bytes)
      : path_(std::move(path)), file_(std::move(file)), max_record_bytes_(max_record_bytes) {}
  // A record of `kind` whose payload is `parts` joined.
  absl::Status AddRecord(uint32_t kind, const std::vector<absl::string_view>& parts);
  absl::Status AddMessage(uint32_t kind, const google::protobuf::Message& message);
  // Appends `data`, whose CRC-32 is `*crc` when given.
  absl::Status Write(absl::string_view data, const uint32_t* crc = nullptr);

  const std::string path_;
  std::unique_ptr<AtomicFileWriter> file_;
  const int64_t max_record_bytes_;
  absl::Status failed_;  // the first error; Commit returns it
  int64_t bytes_ = 0;
  uint32_t crc_ = 0;
  int32_t shards_ = 0;
  int64_t records_ = 0;
};

// Where one shard's data lies in its file.
struct CheckpointShard {
  ShardCheckpoint meta;
  int64_t row_elems = 0;
  struct Data {
    uint32_t tensor;  // 0: values, 1 + i: slot i
    int64_t first_row;
    int64_t rows;
    uint64_t offset;  // of the floats in the file
    uint32_t crc32;   // of the record's payload
  };
  std::vector<Data> data;  // by tensor, each tensor's rows in order
};

// An opened checkpoint file, verified whole, that reads its data on demand.
class CheckpointFile {
 public:
  // Opens `path` and verifies every record (checksums, order, sizes, the
  // end record) and, with `expected` (its manifest entry), its size and
  // CRC-32. DATA_LOSS naming the file and the fault: truncated, corrupt,
  // not a checkpoint file; FAILED_PRECONDITION for another format version.
  // The file stays readable while this lives, even if it is removed.
  static absl::StatusOr<std::shared_ptr<const CheckpointFile>> Open(
      FileSystem& fs, const std::string& path, const ManifestFile* expected = nullptr);

  const std::string& path() const { return path_; }
  const PsCheckpointHeader& header() const { return header_; }
  const std::vector<CheckpointShard>& shards() const { return shards_; }

  // Rows [first_row, first_row + out.size() / row_elems) of tensor `tensor`
  // of `shard` (one of shards()) into `out`. DATA_LOSS naming the file when
  // a read fails or a record no longer verifies.
  absl::Status ReadRows(const CheckpointShard& shard, uint32_t tensor, int64_t first_row,
                        absl::Span<float> out) const;

 private:
  CheckpointFile(std::string path, std::unique_ptr<RandomAccessFile> file)
      : path_(std::move(path)), file_(std::move(file)) {}
  // Reads and checks every record.
  absl::Status Scan(const ManifestFile* expected);

  const std::string path_;
  const std::unique_ptr<RandomAccessFile> file_;
  PsCheckpointHeader header_;
  std::vector<CheckpointShard> shards_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CHECKPOINT_FILE_H_
