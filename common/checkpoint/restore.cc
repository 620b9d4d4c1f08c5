#include "common/checkpoint/restore.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace fulcrum {

absl::StatusOr<RestorePoint> MakeRestorePoint(CheckpointFiles files, const AdjustFiles& adjust,
                                              const AcceptVariables& accept, bool partial) {
  RestorePoint point;
  point.adjusted = adjust && adjust(&files);
  auto regrouped = RegroupCheckpoint(files, partial);
  if (!regrouped.ok()) return regrouped.status();
  if (accept) {
    if (absl::Status s = accept(*regrouped); !s.ok()) return s;
  }
  point.variables = *std::move(regrouped);
  for (const auto& file : files) point.step = std::max(point.step, file->header().step());
  point.files = std::move(files);
  return point;
}

absl::StatusOr<RestorePoint> LoadRestorePoint(FileSystem& fs, const std::string& root,
                                              const AdjustFiles& adjust,
                                              const AcceptVariables& accept,
                                              std::vector<std::string>* problems) {
  RestorePoint chosen;
  auto loaded = LoadNewestCheckpoint(
      fs, root,
      [&](const CheckpointFiles& files) {
        auto point = MakeRestorePoint(files, adjust, accept);
        if (!point.ok()) return point.status();
        chosen = *std::move(point);
        return absl::OkStatus();
      },
      problems);
  for (const std::string& problem : *problems) LOG_ERROR("checkpoint: {}", problem);
  if (!loaded.ok()) return loaded.status();
  return chosen;
}

std::shared_ptr<const CheckpointFile> OpenFinalFile(FileSystem& fs, const std::string& dir,
                                                    int ps_index, int num_ps) {
  auto file = CheckpointFile::Open(fs, absl::StrCat(dir, "/", FinalFileName(ps_index, num_ps)));
  if (!file.ok()) {
    if (file.status().code() != absl::StatusCode::kNotFound) {
      LOG_ERROR("checkpoint: {}; not using it", file.status().message());
    }
    return nullptr;
  }
  return *std::move(file);
}

CheckpointFiles FinalFiles(FileSystem& fs, const std::string& dir, int num_ps) {
  CheckpointFiles files;
  for (int ps = 0; ps < num_ps; ++ps) {
    if (auto file = OpenFinalFile(fs, dir, ps, num_ps)) files.push_back(std::move(file));
  }
  return files;
}

bool UseNewerFinalFile(FileSystem& fs, const std::string& dir, int ps_index,
                       CheckpointFiles* files) {
  for (std::shared_ptr<const CheckpointFile>& file : *files) {
    const PsCheckpointHeader& header = file->header();
    if (header.ps_index() != ps_index) continue;
    auto final_file = OpenFinalFile(fs, dir, ps_index, header.num_ps());
    if (final_file == nullptr ||
        final_file->header().created_unix_ms() <= header.created_unix_ms()) {
      return false;
    }
    file = std::move(final_file);
    return true;
  }
  return false;
}

absl::StatusOr<CheckpointFileWriter::Written> WriteServerFile(FileSystem& fs,
                                                              const std::string& path, int ps_index,
                                                              int num_ps, int64_t step,
                                                              const AddToFile& add) {
  PsCheckpointHeader header;
  header.set_ps_index(ps_index);
  header.set_num_ps(num_ps);
  header.set_step(step);
  header.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  auto writer = CheckpointFileWriter::Open(fs, path, header);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = add(**writer); !s.ok()) return s;
  return (*writer)->Commit();
}

absl::StatusOr<SaveCheckpointResponse> SaveServerFile(FileSystem& fs, const std::string& root,
                                                      int64_t step, int ps_index, int num_ps,
                                                      const AddToFile& add) {
  const std::string dir = absl::StrCat(root, "/", CheckpointDirName(step));
  if (absl::Status s = fs.MakeDirs(dir); !s.ok()) return s;
  SaveCheckpointResponse response;
  response.set_file(PsFileName(ps_index, num_ps));
  auto written =
      WriteServerFile(fs, absl::StrCat(dir, "/", response.file()), ps_index, num_ps, step, add);
  if (!written.ok()) return written.status();
  response.set_bytes(written->bytes);
  response.set_crc32(written->crc32);
  response.set_shards(written->shards);
  return response;
}

}  // namespace fulcrum
