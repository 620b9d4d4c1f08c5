#include "common/checkpoint/checkpointer.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint/directory.h"
#include "common/logging.h"

namespace fulcrum {

absl::Status CheckCheckpointOptions(const CheckpointOptions& options) {
  if (options.every_steps < 0 || options.every_secs < 0 || options.keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoints every ", options.every_steps, " steps and ", options.every_secs,
                     " seconds, keeping ", options.keep, ": intervals must be >= 0 and keep >= 1"));
  }
  return absl::OkStatus();
}

Checkpointer::Checkpointer(WriteCheckpointFiles write_files, FileSystem* fs,
                           CheckpointOptions options, std::function<absl::Time()> now)
    : write_files_(std::move(write_files)),
      fs_(fs),
      options_(std::move(options)),
      now_(std::move(now)),
      last_time_(now_()) {}

bool Checkpointer::Due(int64_t step) const {
  const bool by_steps = options_.every_steps > 0 && step - last_step_ >= options_.every_steps;
  const bool by_time =
      options_.every_secs > 0 && now_() - last_time_ >= absl::Seconds(options_.every_secs);
  return by_steps || by_time;
}

void Checkpointer::MaybeSave(int64_t step) {
  if (Due(step)) Save(step).IgnoreError();  // logged; training goes on
}

absl::Status Checkpointer::Save(int64_t step, const ChiefState& chief_state) {
  last_step_ = step;
  last_time_ = now_();
  const absl::Time start = last_time_;
  const std::string name = CheckpointDirName(step);
  absl::Status status;
  auto files = write_files_(step);
  if (files.ok()) {
    std::vector<ManifestFile> entries;
    int64_t bytes = 0;
    for (const SaveCheckpointResponse& file : *files) {
      ManifestFile& entry = entries.emplace_back();
      entry.set_name(file.file());
      entry.set_bytes(file.bytes());
      entry.set_crc32(file.crc32());
      bytes += file.bytes();
    }
    status = WriteManifest(*fs_, options_.dir, step, static_cast<int>(entries.size()), entries,
                           chief_state);
    if (status.ok()) {
      LOG_INFO("checkpoint {} complete: {} file(s), {} bytes in {}", name, entries.size(), bytes,
               absl::FormatDuration(now_() - start));
      if (absl::Status s = PruneCheckpoints(*fs_, options_.dir, options_.keep); !s.ok()) {
        LOG_WARN("pruning old checkpoints: {}", s.message());
      }
      return absl::OkStatus();
    }
  } else {
    status = files.status();
  }
  LOG_ERROR("checkpoint {} failed: {}; the previous complete checkpoint stays valid", name,
            status.message());
  fs_->RemoveAll(absl::StrCat(options_.dir, "/", name)).IgnoreError();
  return status;
}

}  // namespace fulcrum
