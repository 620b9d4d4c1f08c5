#include "fulcrum/live_export.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/tensor_files.h"
#include "common/checkpoint/tensor_source.h"
#include "common/file_system.h"

namespace fulcrum {
namespace {

constexpr size_t kPieceBytes = size_t{4} << 20;

// `bytes` to `sink` in pieces of at most kPieceBytes.
absl::Status SinkInPieces(absl::string_view bytes, BytesSink sink) {
  for (size_t at = 0; at < bytes.size(); at += kPieceBytes) {
    if (absl::Status s = sink(bytes.substr(at, kPieceBytes)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// A table's column, spooled to a temporary file in `dir` (where the tensor
// file goes, so where there is room for it), unlinked at once: gone when
// closed, whatever happens.
class Spool {
 public:
  static absl::StatusOr<std::unique_ptr<Spool>> Create(const std::string& dir) {
    std::string path = dir + "/.fulcrum-export-spool-XXXXXX";
    const int fd = mkstemp(path.data());
    if (fd < 0) {
      return absl::InternalError(absl::StrCat(
          "cannot make a file in ", dir, " to spool a table's rows in: ", std::strerror(errno)));
    }
    unlink(path.c_str());
    std::FILE* file = fdopen(fd, "w+b");
    if (file == nullptr) {
      close(fd);
      return absl::InternalError("cannot open the file a table's rows are spooled in");
    }
    return std::unique_ptr<Spool>(new Spool(file));
  }
  ~Spool() { std::fclose(file_); }
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  absl::Status Append(const void* data, size_t bytes) {
    if (std::fwrite(data, 1, bytes, file_) != bytes) {
      return absl::ResourceExhaustedError(
          "cannot spool a table's rows beside the export (is its file system full?)");
    }
    return absl::OkStatus();
  }

  // Everything appended, to `sink` from the start.
  absl::Status ReadAll(BytesSink sink) const {
    if (std::fflush(file_) != 0 || std::fseek(file_, 0, SEEK_SET) != 0) {
      return absl::InternalError("cannot read back a table's spooled rows");
    }
    std::vector<char> piece(kPieceBytes);
    for (;;) {
      const size_t read = std::fread(piece.data(), 1, piece.size(), file_);
      if (read > 0) {
        if (absl::Status s = sink(absl::string_view(piece.data(), read)); !s.ok()) return s;
      }
      if (read < piece.size()) break;
    }
    if (std::ferror(file_) != 0) return absl::InternalError("cannot read a table's spooled rows");
    return std::fseek(file_, 0, SEEK_END) == 0
               ? absl::OkStatus()
               : absl::InternalError("cannot seek in a table's spooled rows");
  }

 private:
  explicit Spool(std::FILE* file) : file_(file) {}
  std::FILE* const file_;
};

// The servers' variables (pulled when read) and tables (spooled when
// opened) as named tensors.
class LiveModel final : public TensorSource {
 public:
  // Tables are spooled in `dir`.
  static absl::StatusOr<std::unique_ptr<LiveModel>> Open(PsClient& client, const std::string& dir) {
    absl::StatusOr<std::vector<DescribeResponse>> described = client.Describe();
    if (!described.ok()) return described.status();
    auto model = std::unique_ptr<LiveModel>(new LiveModel(client, dir));
    model->description_ = absl::StrCat("live model of ", described->size(), " server(s)");
    if (absl::Status s = model->AddVariables(*described); !s.ok()) return s;
    std::map<std::string, int64_t> tables;  // name -> width
    for (const DescribeResponse& server : *described) {
      for (const TableInfo& table : server.tables()) tables[table.name()] = table.width();
    }
    for (const auto& [name, width] : tables) {
      if (absl::Status s = model->AddTable(name, width); !s.ok()) return s;
    }
    return model;
  }

  const std::string& description() const override { return description_; }
  const std::vector<ExportedTensor>& tensors() const override { return tensors_; }

  absl::Status Read(size_t i, BytesSink sink) const override {
    if (i >= variables_.size()) return spools_[i - variables_.size()]->ReadAll(sink);
    TensorMap pulled;
    const std::string& name = tensors_[i].name;
    if (absl::Status s = client_.Pull({name}, &pulled); !s.ok()) return s;
    const std::vector<float>& values = pulled[name].values;
    return SinkInPieces(absl::string_view(reinterpret_cast<const char*>(values.data()),
                                          values.size() * sizeof(float)),
                        sink);
  }

 private:
  LiveModel(PsClient& client, std::string dir) : client_(client), dir_(std::move(dir)) {}

  // Each variable's shape: its shards' rows one after another.
  absl::Status AddVariables(const std::vector<DescribeResponse>& described) {
    struct Shards {
      int num_shards = 0;
      std::map<int, Shape> shapes;  // by shard
    };
    std::map<std::string, Shards> variables;
    for (const DescribeResponse& server : described) {
      for (const ShardInfo& shard : server.shards()) {
        Shards& v = variables[shard.variable()];
        v.num_shards = shard.num_shards();
        v.shapes[shard.shard()] = Shape(shard.shape().begin(), shard.shape().end());
      }
    }
    for (const auto& [name, v] : variables) {
      if (static_cast<int>(v.shapes.size()) != v.num_shards) {
        return absl::FailedPreconditionError(
            absl::StrCat("variable '", name, "': the servers hold ", v.shapes.size(), " of its ",
                         v.num_shards, " shards (is one of them restarting?)"));
      }
      Shape shape = v.shapes.begin()->second;
      if (!shape.empty()) {
        shape[0] = 0;
        for (const auto& [index, part] : v.shapes) shape[0] += part.empty() ? 0 : part[0];
      }
      tensors_.push_back({name, false, shape});
      variables_.push_back(name);
    }
    return absl::OkStatus();
  }

  // Reads every row of table `name` into spools for "<name>.ids" and
  // "<name>.rows".
  absl::Status AddTable(const std::string& name, int64_t width) {
    absl::StatusOr<std::unique_ptr<Spool>> ids = Spool::Create(dir_);
    if (!ids.ok()) return ids.status();
    absl::StatusOr<std::unique_ptr<Spool>> rows = Spool::Create(dir_);
    if (!rows.ok()) return rows.status();
    int64_t count = 0;
    absl::Status read = client_.ReadTable(name, false, [&](const ReadRowsResponse& page) {
      if (page.width() != width || page.values_size() != page.ids_size() * width) {
        return absl::DataLossError(absl::StrCat(
            "table '", name, "': a page of ", page.ids_size(), " rows came with ",
            page.values_size(), " values where width ", width, " needs ", page.ids_size() * width));
      }
      count += page.ids_size();
      if (absl::Status s = (*ids)->Append(page.ids().data(), page.ids_size() * sizeof(int64_t));
          !s.ok()) {
        return s;
      }
      return (*rows)->Append(page.values().data(), page.values_size() * sizeof(float));
    });
    if (!read.ok()) return read;
    tensors_.push_back({absl::StrCat(name, ".ids"), true, {count}});
    tensors_.push_back({absl::StrCat(name, ".rows"), false, {count, width}});
    spools_.push_back(*std::move(ids));
    spools_.push_back(*std::move(rows));
    return absl::OkStatus();
  }

  PsClient& client_;
  const std::string dir_;
  std::string description_;
  std::vector<ExportedTensor> tensors_;  // variables first, then two per table
  std::vector<std::string> variables_;
  std::vector<std::unique_ptr<Spool>> spools_;  // the tables' tensors, in order
};

}  // namespace

absl::StatusOr<LiveExportSummary> ExportLive(PsClient& client, const LiveExportOptions& options) {
  absl::StatusOr<TensorFileFormat> format = ChooseTensorFileFormat(options.format, options.path);
  if (!format.ok()) return format.status();
  if (options.path.empty()) return absl::InvalidArgumentError("export: no file to write given");
  absl::StatusOr<std::unique_ptr<LiveModel>> model = LiveModel::Open(client, DirName(options.path));
  if (!model.ok()) return model.status();
  auto fs = MakeLocalFileSystem();
  if (absl::Status s = WriteTensorFile(**model, *format, *fs, options.path); !s.ok()) return s;
  LiveExportSummary summary;
  summary.format = TensorFileFormatName(*format);
  summary.tensors = static_cast<int64_t>((*model)->tensors().size());
  for (const ExportedTensor& tensor : (*model)->tensors()) summary.bytes += tensor.bytes();
  return summary;
}

}  // namespace fulcrum
