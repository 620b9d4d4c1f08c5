#include "common/checkpoint/file.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/embedding.h"
#include "common/optimizer/optimizer.h"
#include "common/slices.h"
#include "common/tensor.h"

namespace fulcrum {
namespace {

constexpr char kMagic[8] = {'F', 'U', 'L', 'C', 'K', 'P', 'T', '\n'};
constexpr char kManifestMagic[8] = {'F', 'U', 'L', 'C', 'M', 'A', 'N', '\n'};
constexpr size_t kFramedHeaderBytes = sizeof(kManifestMagic) + 4 + 8 + 4;
constexpr size_t kFileHeaderBytes = sizeof(kMagic) + 4;
constexpr size_t kRecordHeaderBytes = 4 + 8 + 4;
constexpr size_t kDataPrefixBytes = 4 + 8 + 8;
// Records other than data hold a few protobuf fields.
constexpr uint64_t kMaxMessageRecordBytes = 1 << 20;

enum RecordKind : uint32_t {
  kHeader = 1,
  kShard = 2,
  kData = 3,
  kEnd = 4,
  kTable = 5,
  kRows = 6,
  kCandidates = 7,
};

// Records of any length, read in pieces: all but their prefix is data.
bool IsBulk(uint32_t kind) { return kind == kData || kind == kRows || kind == kCandidates; }
size_t PrefixBytes(uint32_t kind) { return kind == kData ? kDataPrefixBytes : 8; }

// Bytes of a row or candidate record of `count` entries.
uint64_t TableRecordBytes(bool rows, int64_t count, int64_t row_floats) {
  const uint64_t n = static_cast<uint64_t>(count);
  return 8 + n * 8 + n * (rows ? static_cast<uint64_t>(row_floats) * sizeof(float) : 4);
}

template <typename T>
void Put(std::string* out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only
  out->append(bytes, sizeof(T));
}

template <typename T>
T Get(absl::string_view data, size_t offset) {
  T value;
  std::memcpy(&value, data.data() + offset, sizeof(T));
  return value;
}

absl::string_view FloatRecord(absl::Span<const float> values) {
  const FloatBytes bytes = AsFloatBytes(values);
  return absl::string_view(bytes.data(), bytes.size());
}

}  // namespace

uint32_t Crc32(absl::string_view data, uint32_t crc) {
  uLong value = crc;
  // zlib takes at most 4 GiB at a time.
  for (size_t done = 0; done < data.size();) {
    const size_t n = std::min<size_t>(data.size() - done, 1u << 30);
    value = crc32(value, reinterpret_cast<const Bytef*>(data.data() + done), static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(value);
}

absl::StatusOr<std::string> FrameMessage(const google::protobuf::Message& message) {
  std::string payload;
  if (!message.SerializeToString(&payload)) {
    return absl::InternalError(absl::StrCat("cannot serialize a ", message.GetTypeName(), " of ",
                                            message.ByteSizeLong(), " bytes"));
  }
  std::string out(kManifestMagic, sizeof(kManifestMagic));
  Put<uint32_t>(&out, kManifestFormatVersion);
  Put<uint64_t>(&out, payload.size());
  Put<uint32_t>(&out, Crc32(payload));
  out += payload;
  return out;
}

absl::Status UnframeMessage(absl::string_view data, const std::string& path,
                            google::protobuf::Message* out) {
  if (data.size() < kFramedHeaderBytes ||
      std::memcmp(data.data(), kManifestMagic, sizeof(kManifestMagic)) != 0) {
    return absl::DataLossError(
        absl::StrCat("'", path, "' is not a Fulcrum manifest (",
                     data.size() < kFramedHeaderBytes ? "too short" : "bad magic", ")"));
  }
  const uint32_t version = Get<uint32_t>(data, 8);
  if (version != kManifestFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("'", path, "' has format version ", version,
                                                      "; this build reads version ",
                                                      kManifestFormatVersion));
  }
  const uint64_t length = Get<uint64_t>(data, 12);
  const absl::string_view payload = data.substr(kFramedHeaderBytes);
  if (payload.size() != length) {
    return absl::DataLossError(absl::StrCat("'", path, "' is truncated: ", payload.size(),
                                            " bytes of data, expected ", length));
  }
  if (Crc32(payload) != Get<uint32_t>(data, 20)) {
    return absl::DataLossError(absl::StrCat("'", path, "' is corrupt: checksum mismatch"));
  }
  if (payload.size() > (1u << 30) ||
      !out->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError(
        absl::StrCat("'", path, "' does not parse as a ", out->GetTypeName()));
  }
  return absl::OkStatus();
}

uint32_t CombineCrc32(uint32_t first, uint32_t second, uint64_t second_bytes) {
  return static_cast<uint32_t>(
      crc32_combine64(first, second, static_cast<z_off64_t>(second_bytes)));
}

absl::StatusOr<std::unique_ptr<CheckpointFileWriter>> CheckpointFileWriter::Open(
    FileSystem& fs, const std::string& path, const PsCheckpointHeader& header,
    int64_t max_record_bytes) {
  auto file = AtomicFileWriter::Open(fs, path);
  if (!file.ok()) return file.status();
  std::unique_ptr<CheckpointFileWriter> writer(
      new CheckpointFileWriter(path, *std::move(file), max_record_bytes));
  std::string start(kMagic, sizeof(kMagic));
  Put<uint32_t>(&start, kCheckpointFileVersion);
  if (absl::Status s = writer->Write(start); !s.ok()) return s;
  if (absl::Status s = writer->AddMessage(kHeader, header); !s.ok()) return s;
  return writer;
}

absl::Status CheckpointFileWriter::Write(absl::string_view data, const uint32_t* crc) {
  if (!failed_.ok()) return failed_;
  failed_ = file_->Append(data);
  bytes_ += static_cast<int64_t>(data.size());
  crc_ = crc == nullptr ? Crc32(data, crc_) : CombineCrc32(crc_, *crc, data.size());
  return failed_;
}

absl::Status CheckpointFileWriter::AddRecord(uint32_t kind,
                                             const std::vector<absl::string_view>& parts) {
  uint64_t length = 0;
  uint32_t crc = 0;
  std::vector<uint32_t> part_crcs;
  for (absl::string_view part : parts) {
    length += part.size();
    part_crcs.push_back(Crc32(part));
    crc = CombineCrc32(crc, part_crcs.back(), part.size());
  }
  std::string header;
  Put<uint32_t>(&header, kind);
  Put<uint64_t>(&header, length);
  Put<uint32_t>(&header, crc);
  if (absl::Status s = Write(header); !s.ok()) return s;
  // The whole file's checksum follows from the parts' own: each payload
  // byte is checksummed once.
  for (size_t i = 0; i < parts.size(); ++i) {
    if (absl::Status s = Write(parts[i], &part_crcs[i]); !s.ok()) return s;
  }
  ++records_;
  return absl::OkStatus();
}

absl::Status CheckpointFileWriter::AddMessage(uint32_t kind,
                                              const google::protobuf::Message& message) {
  std::string payload;
  if (!message.SerializeToString(&payload) || payload.size() > kMaxMessageRecordBytes) {
    failed_ = absl::InternalError(absl::StrCat("checkpoint '", path_, "': cannot serialize its ",
                                               message.GetTypeName(), " (", message.ByteSizeLong(),
                                               " bytes)"));
    return failed_;
  }
  return AddRecord(kind, {payload});
}

absl::Status CheckpointFileWriter::AddShard(const ShardCheckpoint& shard,
                                            absl::Span<const float> values,
                                            const std::vector<absl::Span<const float>>& slots) {
  if (absl::Status s = ValidateShardSpec(shard.spec()); !s.ok()) {
    failed_ = s;
    return s;
  }
  const int64_t rows = shard.spec().rows();
  const int64_t row_elems = RowElements(shard.spec().variable().shape());
  bool sizes_ok = shard.num_slots() == static_cast<int>(slots.size()) &&
                  static_cast<int64_t>(values.size()) == rows * row_elems;
  for (absl::Span<const float> slot : slots) sizes_ok = sizes_ok && slot.size() == values.size();
  if (!sizes_ok) {
    failed_ = absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", path_, "': variable '", shard.spec().variable().name(), "' shard ",
        shard.spec().shard(), " has ", values.size(), " values and ", slots.size(),
        " slots; its spec says ", rows * row_elems, " and ", shard.num_slots()));
    return failed_;
  }
  if (absl::Status s = AddMessage(kShard, shard); !s.ok()) return s;
  const int64_t row_bytes = row_elems * static_cast<int64_t>(sizeof(float));
  const int64_t rows_per_record = std::max<int64_t>(1, max_record_bytes_ / row_bytes);
  for (uint32_t tensor = 0; tensor <= slots.size(); ++tensor) {
    const absl::Span<const float> data = tensor == 0 ? values : slots[tensor - 1];
    for (int64_t row = 0; row < rows; row += rows_per_record) {
      const int64_t n = std::min(rows_per_record, rows - row);
      std::string prefix;
      Put<uint32_t>(&prefix, tensor);
      Put<uint64_t>(&prefix, static_cast<uint64_t>(row));
      Put<uint64_t>(&prefix, static_cast<uint64_t>(n));
      if (absl::Status s =
              AddRecord(kData, {prefix, FloatRecord(data.subspan(row * row_elems, n * row_elems))});
          !s.ok()) {
        return s;
      }
    }
  }
  ++shards_;
  return absl::OkStatus();
}

absl::Status CheckpointFileWriter::AddTable(const TableCheckpoint& table) {
  if (absl::Status s = ValidateEmbeddingTableSpec(table.spec()); !s.ok()) {
    failed_ = s;
    return s;
  }
  if (absl::Status s = AddMessage(kTable, table); !s.ok()) return s;
  table_floats_ = table.spec().width() * (1 + NumSlots(table.spec().optimizer()));
  ++tables_;
  return absl::OkStatus();
}

absl::Status CheckpointFileWriter::AddTableRows(absl::Span<const int64_t> ids,
                                                absl::Span<const float> rows) {
  if (table_floats_ == 0 || rows.size() != ids.size() * table_floats_) {
    failed_ = absl::InvalidArgumentError(absl::StrCat("checkpoint '", path_, "': ", ids.size(),
                                                      " table rows with ", rows.size(), " floats"));
    return failed_;
  }
  std::string prefix;
  Put<uint64_t>(&prefix, ids.size());
  const absl::string_view id_bytes(reinterpret_cast<const char*>(ids.data()),
                                   ids.size() * sizeof(int64_t));
  return AddRecord(kRows, {prefix, id_bytes, FloatRecord(rows)});
}

absl::Status CheckpointFileWriter::AddTableCandidates(absl::Span<const int64_t> ids,
                                                      absl::Span<const uint32_t> touches) {
  if (table_floats_ == 0 || touches.size() != ids.size()) {
    failed_ = absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", path_, "': ", ids.size(), " candidates with ", touches.size(), " counts"));
    return failed_;
  }
  std::string prefix;
  Put<uint64_t>(&prefix, ids.size());
  return AddRecord(kCandidates, {prefix,
                                 absl::string_view(reinterpret_cast<const char*>(ids.data()),
                                                   ids.size() * sizeof(int64_t)),
                                 absl::string_view(reinterpret_cast<const char*>(touches.data()),
                                                   touches.size() * sizeof(uint32_t))});
}

absl::StatusOr<CheckpointFileWriter::Written> CheckpointFileWriter::Commit() {
  PsCheckpointEnd end;
  end.set_shards(shards_);
  end.set_tables(tables_);
  end.set_records(records_);
  if (absl::Status s = AddMessage(kEnd, end); !s.ok()) return s;
  if (absl::Status s = file_->Commit(); !s.ok()) return s;
  return Written{bytes_, crc_, shards_};
}

absl::StatusOr<std::shared_ptr<const CheckpointFile>> CheckpointFile::Open(
    FileSystem& fs, const std::string& path, const ManifestFile* expected) {
  auto file = fs.NewRandomAccessFile(path);
  if (!file.ok()) return file.status();
  std::shared_ptr<CheckpointFile> opened(new CheckpointFile(path, *std::move(file)));
  if (absl::Status s = opened->Scan(expected); !s.ok()) return s;
  return std::shared_ptr<const CheckpointFile>(std::move(opened));
}

absl::Status CheckpointFile::Scan(const ManifestFile* expected) {
  auto loss = [this](auto... what) {
    return absl::DataLossError(absl::StrCat("'", path_, "' ", what...));
  };
  const uint64_t size = file_->Size();
  if (expected != nullptr && static_cast<int64_t>(size) != expected->bytes()) {
    return loss("does not match its manifest: ", size, " bytes, expected ", expected->bytes());
  }
  std::string scratch(kFileHeaderBytes, '\0');
  auto start = file_->Read(0, kFileHeaderBytes, scratch.data());
  if (!start.ok()) return start.status();
  if (start->size() < kFileHeaderBytes || std::memcmp(start->data(), kMagic, 8) != 0) {
    return loss("is not a Fulcrum checkpoint file (",
                start->size() < kFileHeaderBytes ? "too short" : "bad magic", ")");
  }
  const uint32_t version = Get<uint32_t>(*start, 8);
  if (version != kCheckpointFileVersion && version != 2) {
    return absl::FailedPreconditionError(absl::StrCat("'", path_, "' has format version ", version,
                                                      "; this build reads version ",
                                                      kCheckpointFileVersion));
  }
  uint32_t file_crc = Crc32(*start);
  uint64_t offset = kFileHeaderBytes;
  int64_t records = 0;
  bool ended = false;
  std::vector<int64_t> next_row;  // of each tensor of the last shard
  auto shard_complete = [&]() {
    return shards_.empty() || std::all_of(next_row.begin(), next_row.end(), [&](int64_t row) {
             return row == shards_.back().meta.spec().rows();
           });
  };
  // Of the last table: rows and candidates read so far. A table is
  // complete when they are its counts.
  int64_t table_rows = 0, table_candidates = 0;
  bool in_table = false;  // the last shard or table record was a table's
  auto table_complete = [&]() {
    return tables_.empty() || (table_rows == tables_.back().meta.rows() &&
                               table_candidates == tables_.back().meta.candidates());
  };
  while (offset < size) {
    if (ended) return loss("has data after its end record, at byte ", offset);
    char head[kRecordHeaderBytes];
    auto read = file_->Read(offset, kRecordHeaderBytes, head);
    if (!read.ok()) return read.status();
    if (read->size() < kRecordHeaderBytes) return loss("is truncated at byte ", offset);
    const uint32_t kind = Get<uint32_t>(*read, 0);
    const uint64_t length = Get<uint64_t>(*read, 4);
    const uint32_t crc = Get<uint32_t>(*read, 12);
    // Data is read in pieces, whatever its length; the other records whole.
    if ((!IsBulk(kind) && length > kMaxMessageRecordBytes) ||
        length > size - offset - kRecordHeaderBytes) {
      return loss("is truncated or corrupt: record ", records, " at byte ", offset, " claims ",
                  length, " bytes");
    }
    file_crc = Crc32(*read, file_crc);
    // Data records are read, checked and dropped piece by piece.
    uint32_t payload_crc = 0;
    std::string payload;
    const uint64_t payload_offset = offset + kRecordHeaderBytes;
    for (uint64_t done = 0; done < length;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(length - done, 16 << 20));
      scratch.resize(n);
      auto piece = file_->Read(payload_offset + done, n, scratch.data());
      if (!piece.ok()) return piece.status();
      if (piece->size() < n) return loss("is truncated at byte ", payload_offset + done);
      payload_crc = Crc32(*piece, payload_crc);
      if (!IsBulk(kind)) {
        payload.append(piece->data(), n);
      } else if (done < PrefixBytes(kind)) {
        payload.append(piece->data(), std::min<size_t>(n, PrefixBytes(kind) - done));
      }
      done += n;
    }
    if (payload_crc != crc) {
      return loss("is corrupt: record ", records, " at byte ", offset, " fails its checksum");
    }
    file_crc = CombineCrc32(file_crc, payload_crc, length);
    const std::string where = absl::StrCat("record ", records, " at byte ", offset);
    if (records == 0 && kind != kHeader) return loss("does not start with its header record");
    switch (kind) {
      case kHeader:
        if (records != 0 || !header_.ParseFromString(payload)) {
          return loss("has a bad header: ", where);
        }
        break;
      case kShard: {
        if (!shard_complete()) return loss("has a shard with missing rows before ", where);
        if (!table_complete()) return loss("has a table with missing rows before ", where);
        in_table = false;
        CheckpointShard shard;
        if (!shard.meta.ParseFromString(payload)) return loss("has a bad shard: ", where);
        if (absl::Status s = ValidateShardSpec(shard.meta.spec()); !s.ok()) {
          return loss("has a bad shard: ", where, ": ", s.message());
        }
        if (shard.meta.num_slots() < 0 || shard.meta.num_slots() > 8) {
          return loss("has a bad shard: ", where, ": ", shard.meta.num_slots(), " slots");
        }
        shard.row_elems = RowElements(shard.meta.spec().variable().shape());
        next_row.assign(1 + shard.meta.num_slots(), 0);
        shards_.push_back(std::move(shard));
        break;
      }
      case kTable: {
        if (!shard_complete()) return loss("has a shard with missing rows before ", where);
        if (!table_complete()) return loss("has a table with missing rows before ", where);
        CheckpointTable table;
        if (!table.meta.ParseFromString(payload)) return loss("has a bad table: ", where);
        if (absl::Status s = ValidateEmbeddingTableSpec(table.meta.spec()); !s.ok()) {
          return loss("has a bad table: ", where, ": ", s.message());
        }
        if (table.meta.rows() < 0 || table.meta.candidates() < 0) {
          return loss("has a bad table: ", where, ": negative counts");
        }
        table.row_floats =
            table.meta.spec().width() * (1 + NumSlots(table.meta.spec().optimizer()));
        tables_.push_back(std::move(table));
        table_rows = table_candidates = 0;
        in_table = true;
        break;
      }
      case kRows:
      case kCandidates: {
        if (!in_table || length < 8) return loss("has a stray ", where);
        CheckpointTable& table = tables_.back();
        const bool rows = kind == kRows;
        const auto count = static_cast<int64_t>(Get<uint64_t>(payload, 0));
        int64_t& so_far = rows ? table_rows : table_candidates;
        const int64_t limit = rows ? table.meta.rows() : table.meta.candidates();
        if (count < 1 || count > limit - so_far ||
            length != TableRecordBytes(rows, count, table.row_floats)) {
          return loss("has table data that does not fit its table: ", where);
        }
        so_far += count;
        table.records.push_back({rows, count, payload_offset, length, crc});
        break;
      }
      case kData: {
        if (shards_.empty() || in_table || length < kDataPrefixBytes) {
          return loss("has a stray ", where);
        }
        CheckpointShard& shard = shards_.back();
        CheckpointShard::Data data;
        data.tensor = Get<uint32_t>(payload, 0);
        data.first_row = static_cast<int64_t>(Get<uint64_t>(payload, 4));
        data.rows = static_cast<int64_t>(Get<uint64_t>(payload, 12));
        data.offset = payload_offset + kDataPrefixBytes;
        data.crc32 = crc;
        const int64_t shard_rows = shard.meta.spec().rows();
        if (data.tensor >= next_row.size() || data.first_row != next_row[data.tensor] ||
            data.rows < 1 || data.rows > shard_rows - data.first_row ||
            length - kDataPrefixBytes !=
                static_cast<uint64_t>(data.rows * shard.row_elems) * sizeof(float)) {
          return loss("has data that does not fit its shard: ", where);
        }
        next_row[data.tensor] += data.rows;
        shard.data.push_back(data);
        break;
      }
      case kEnd: {
        PsCheckpointEnd end;
        if (!end.ParseFromString(payload) || !shard_complete() || !table_complete() ||
            end.shards() != static_cast<int32_t>(shards_.size()) ||
            end.tables() != static_cast<int32_t>(tables_.size()) || end.records() != records) {
          return loss("has an end record that does not match its contents: ", where);
        }
        ended = true;
        break;
      }
      default:
        return loss("has a record of unknown kind ", kind, ": ", where);
    }
    ++records;
    offset = payload_offset + length;
  }
  if (!ended) return loss("is truncated: no end record");
  if (expected != nullptr && file_crc != expected->crc32()) {
    return loss("does not match its manifest: its checksum differs");
  }
  return absl::OkStatus();
}

absl::Status CheckpointFile::ReadTable(
    const CheckpointTable& table,
    absl::FunctionRef<void(int64_t id, absl::Span<const float> row)> row,
    absl::FunctionRef<void(int64_t id, uint32_t touches)> candidate) const {
  std::string scratch;
  for (const CheckpointTable::Records& records : table.records) {
    scratch.resize(records.length);
    auto read = file_->Read(records.offset, scratch.size(), scratch.data());
    if (!read.ok()) return read.status();
    if (read->size() != scratch.size() || Crc32(*read) != records.crc32) {
      return absl::DataLossError(absl::StrCat("'", path_,
                                              "' changed since it was verified: "
                                              "embedding table '",
                                              table.meta.spec().name(), "' fails its checksum"));
    }
    const absl::string_view data = *read;
    const size_t ids_at = 8, values_at = 8 + records.count * sizeof(int64_t);
    std::vector<float> values;
    if (records.rows) {
      values.resize(records.count * table.row_floats);
      std::memcpy(values.data(), data.data() + values_at, values.size() * sizeof(float));
    }
    for (int64_t i = 0; i < records.count; ++i) {
      const auto id = Get<int64_t>(data, ids_at + i * sizeof(int64_t));
      if (records.rows) {
        row(id, absl::MakeConstSpan(values).subspan(i * table.row_floats, table.row_floats));
      } else {
        candidate(id, Get<uint32_t>(data, values_at + i * sizeof(uint32_t)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointFile::ReadRows(const CheckpointShard& shard, uint32_t tensor,
                                      int64_t first_row, absl::Span<float> out) const {
  const int64_t rows = static_cast<int64_t>(out.size()) / shard.row_elems;
  const int64_t end_row = first_row + rows;
  std::string scratch;
  for (const CheckpointShard::Data& data : shard.data) {
    if (data.tensor != tensor || data.first_row + data.rows <= first_row ||
        data.first_row >= end_row) {
      continue;
    }
    // The whole record, so that its checksum is checked again.
    const size_t bytes = static_cast<size_t>(data.rows * shard.row_elems) * sizeof(float);
    scratch.resize(kDataPrefixBytes + bytes);
    auto read = file_->Read(data.offset - kDataPrefixBytes, scratch.size(), scratch.data());
    if (!read.ok()) return read.status();
    if (read->size() != scratch.size() || Crc32(*read) != data.crc32) {
      return absl::DataLossError(absl::StrCat("'", path_,
                                              "' changed since it was verified: "
                                              "variable '",
                                              shard.meta.spec().variable().name(), "' shard ",
                                              shard.meta.spec().shard(), " fails its checksum"));
    }
    const int64_t from = std::max(first_row, data.first_row);
    const int64_t to = std::min(end_row, data.first_row + data.rows);
    std::memcpy(out.data() + (from - first_row) * shard.row_elems,
                read->data() + kDataPrefixBytes +
                    static_cast<size_t>((from - data.first_row) * shard.row_elems) * sizeof(float),
                static_cast<size_t>((to - from) * shard.row_elems) * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace fulcrum
