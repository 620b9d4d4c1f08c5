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
//     kTable   TableCheckpoint (spec, version, counts); its records follow:
//     kRows    u64 n, then n ids (i64), then n rows of the table's values
//              and slots (float32), the least recently used first
//     kCandidates  u64 n, then n ids (i64), then their touches (u32)
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

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/file_system.h"
#include "proto/checkpoint.pb.h"

namespace fulcrum {

// Version 3 added embedding tables; version 2 files (no tables) still read.
constexpr uint32_t kCheckpointFileVersion = 3;
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

  // One embedding table: `table`, then as many AddTableRows and
  // AddTableCandidates as hold its counts, before the next shard or table.
  absl::Status AddTable(const TableCheckpoint& table);
  // Rows of the table begun last: ids.size() rows of its row floats.
  absl::Status AddTableRows(absl::Span<const int64_t> ids, absl::Span<const float> rows);
  absl::Status AddTableCandidates(absl::Span<const int64_t> ids,
                                  absl::Span<const uint32_t> touches);

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
  int32_t tables_ = 0;
  int64_t table_floats_ = 0;  // row floats of the table begun last
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

// Where one embedding table's records lie in its file.
struct CheckpointTable {
  TableCheckpoint meta;
  int64_t row_floats = 0;  // values and slots
  struct Records {
    bool rows;  // else candidates
    int64_t count;
    uint64_t offset;  // of the payload
    uint64_t length;
    uint32_t crc32;
  };
  std::vector<Records> records;
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
  const std::vector<CheckpointTable>& tables() const { return tables_; }

  // Every row (id, values and slots) and candidate (id, touches) of
  // `table` (one of tables()), rows in the order written. DATA_LOSS naming
  // the file when a read fails or a record no longer verifies.
  absl::Status ReadTable(const CheckpointTable& table,
                         absl::FunctionRef<void(int64_t id, absl::Span<const float> row)> row,
                         absl::FunctionRef<void(int64_t id, uint32_t touches)> candidate) const;

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
  std::vector<CheckpointTable> tables_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_CHECKPOINT_FILE_H_
