#include "common/checkpoint/exported.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/checkpoint/directory.h"

namespace fulcrum {
namespace {

constexpr int64_t kPieceBytes = int64_t{4} << 20;

std::string Describe(const RestorePoint& point, const std::string& what) {
  return absl::StrCat(what, " (", point.files.size(), " file", point.files.size() == 1 ? "" : "s",
                      ")");
}

// The files of complete checkpoint `step` in `dir`.
absl::StatusOr<RestorePoint> OpenStep(FileSystem& fs, const std::string& dir, int64_t step,
                                      std::string* description) {
  std::vector<std::string> problems;
  for (const CheckpointInfo& info : ListCompleteCheckpoints(fs, dir, &problems)) {
    if (info.step != step) continue;
    auto files = OpenCheckpointFiles(fs, info);
    if (!files.ok()) return files.status();
    auto point = MakeRestorePoint(*std::move(files), nullptr, nullptr);
    if (point.ok())
      *description = Describe(*point, absl::StrCat("checkpoint ", CheckpointDirName(step)));
    return point;
  }
  return absl::NotFoundError(absl::StrCat("no complete checkpoint of step ", step, " in '", dir,
                                          "'", problems.empty() ? "" : ": ",
                                          absl::StrJoin(problems, "; ")));
}

// The numbers of servers whose final files are in `dir`.
std::set<int> FinalFileClusters(FileSystem& fs, const std::string& dir) {
  std::set<int> sizes;
  auto names = fs.ListDir(dir);
  if (!names.ok()) return sizes;
  for (absl::string_view name : *names) {
    if (!absl::ConsumePrefix(&name, "final-ps-") || !absl::ConsumeSuffix(&name, ".ckpt")) continue;
    const size_t of = name.find("-of-");
    int num_ps = 0;
    if (of != absl::string_view::npos && absl::SimpleAtoi(name.substr(of + 4), &num_ps) &&
        num_ps > 0) {
      sizes.insert(num_ps);
    }
  }
  return sizes;
}

// The job's last state in `dir`: the newest complete checkpoint with newer
// final files in place, else the newest whole set of final files.
absl::StatusOr<RestorePoint> OpenLast(FileSystem& fs, const std::string& dir,
                                      std::string* description) {
  const AdjustFiles newer_finals = [&](CheckpointFiles* files) {
    bool any = false;
    for (int ps = 0; ps < static_cast<int>(files->size()); ++ps) {
      any = UseNewerFinalFile(fs, dir, ps, files) || any;
    }
    return any;
  };
  std::vector<std::string> problems;
  auto point = LoadRestorePoint(fs, dir, newer_finals, nullptr, &problems);
  if (point.ok()) {
    *description = Describe(*point, absl::StrCat("checkpoint ", CheckpointDirName(point->step),
                                                 point->adjusted ? " with newer final files" : ""));
    return point;
  }
  std::optional<RestorePoint> best;
  int64_t best_ms = -1;
  for (int num_ps : FinalFileClusters(fs, dir)) {
    CheckpointFiles files = FinalFiles(fs, dir, num_ps);
    if (static_cast<int>(files.size()) != num_ps) continue;  // a server's is missing
    int64_t newest_ms = 0;
    for (const auto& file : files) {
      newest_ms = std::max(newest_ms, file->header().created_unix_ms());
    }
    auto finals = MakeRestorePoint(std::move(files), nullptr, nullptr);
    if (finals.ok() && newest_ms > best_ms) {
      best = *std::move(finals);
      best_ms = newest_ms;
    }
  }
  if (!best) {
    return absl::NotFoundError(
        absl::StrCat("no complete checkpoint and no whole set of final "
                     "checkpoint files in '",
                     dir, "'"));
  }
  *description = Describe(*best, "the servers' final checkpoint files");
  return *std::move(best);
}

}  // namespace

absl::StatusOr<ExportedCheckpoint> ExportedCheckpoint::Open(FileSystem& fs, const std::string& dir,
                                                            const ExportOptions& options) {
  ExportedCheckpoint out;
  auto point = options.step >= 0 ? OpenStep(fs, dir, options.step, &out.description_)
                                 : OpenLast(fs, dir, &out.description_);
  if (!point.ok()) return point.status();
  out.point_ = *std::move(point);
  for (const auto& [name, variable] : out.point_.variables) {
    const Shape shape(variable.spec.shape().begin(), variable.spec.shape().end());
    for (int tensor = 0; tensor <= (options.slots ? variable.num_slots : 0); ++tensor) {
      out.tensors_.push_back(
          {tensor == 0 ? name : absl::StrCat(name, ".slot", tensor - 1), false, shape});
      Source& source = out.sources_.emplace_back();
      source.variable = &variable;
      source.tensor = static_cast<uint32_t>(tensor);
    }
  }
  std::map<std::string, Source> tables;
  std::map<std::string, int64_t> rows, slot_floats;
  for (const auto& file : out.point_.files) {
    for (const CheckpointTable& part : file->tables()) {
      const std::string& name = part.meta.spec().name();
      Source& table = tables[name];
      table.width = part.meta.spec().width();
      table.parts.emplace_back(file.get(), &part);
      rows[name] += part.meta.rows();
      slot_floats[name] = part.row_floats - table.width;
    }
  }
  for (const auto& [name, table] : tables) {
    const int64_t n = rows[name];
    std::vector<std::pair<Source::Column, ExportedTensor>> columns = {
        {Source::Column::kIds, {name + ".ids", true, {n}}},
        {Source::Column::kRows, {name + ".rows", false, {n, table.width}}}};
    if (options.slots && slot_floats[name] > 0) {
      columns.push_back({Source::Column::kSlots, {name + ".slots", false, {n, slot_floats[name]}}});
    }
    for (auto& [column, tensor] : columns) {
      out.tensors_.push_back(std::move(tensor));
      Source& source = out.sources_.emplace_back(table);
      source.column = column;
    }
  }
  return out;
}

absl::Status ExportedCheckpoint::Read(size_t i, BytesSink sink) const {
  const ExportedTensor& tensor = tensors_[i];
  int64_t read = 0;
  // What the files hold must be as long as the tensor's shape says: never
  // more reaches the sink.
  const auto checked = [&](absl::string_view bytes) {
    read += static_cast<int64_t>(bytes.size());
    return read > tensor.bytes() ? absl::OkStatus() : sink(bytes);
  };
  const Source& source = sources_[i];
  absl::Status status =
      source.variable != nullptr ? ReadVariable(source, checked) : ReadTable(source, checked);
  if (status.ok() && read != tensor.bytes()) {
    return absl::DataLossError(absl::StrCat("tensor '", tensor.name, "' of ", description_, ": ",
                                            read, " bytes read where its shape needs ",
                                            tensor.bytes()));
  }
  return status;
}

absl::Status ExportedCheckpoint::ReadVariable(const Source& source, BytesSink sink) const {
  const RestoredVariable& variable = *source.variable;
  const int64_t row_elems = variable.row_elems;
  const int64_t chunk = std::max<int64_t>(1, kPieceBytes / (row_elems * 4));
  std::vector<float> buffer;
  for (const RestoredVariable::Piece& piece : variable.pieces) {
    const int64_t rows = piece.shard->meta.spec().rows();
    for (int64_t first = 0; first < rows; first += chunk) {
      const int64_t n = std::min(chunk, rows - first);
      buffer.resize(n * row_elems);
      if (absl::Status s =
              piece.file->ReadRows(*piece.shard, source.tensor, first, absl::MakeSpan(buffer));
          !s.ok()) {
        return s;
      }
      if (absl::Status s = sink(absl::string_view(reinterpret_cast<const char*>(buffer.data()),
                                                  buffer.size() * sizeof(float)));
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ExportedCheckpoint::ReadTable(const Source& source, BytesSink sink) const {
  std::string pending;
  absl::Status status;
  const auto flush = [&] {
    if (status.ok() && !pending.empty()) status = sink(pending);
    pending.clear();
  };
  const auto append = [&](const void* data, size_t bytes) {
    if (!status.ok()) return;
    pending.append(static_cast<const char*>(data), bytes);
    if (static_cast<int64_t>(pending.size()) >= kPieceBytes) flush();
  };
  for (const auto& [file, part] : source.parts) {
    absl::Status read = file->ReadTable(
        *part,
        [&](int64_t id, absl::Span<const float> row) {
          switch (source.column) {
            case Source::Column::kIds:
              append(&id, sizeof(id));
              break;
            case Source::Column::kRows:
              append(row.data(), source.width * sizeof(float));
              break;
            case Source::Column::kSlots:
              append(row.data() + source.width, (row.size() - source.width) * sizeof(float));
              break;
          }
        },
        [](int64_t, uint32_t) {});
    if (!read.ok()) return read;
    if (!status.ok()) return status;
  }
  flush();
  return status;
}

}  // namespace fulcrum
