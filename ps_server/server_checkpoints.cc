#include "ps_server/server_checkpoints.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/embedding.h"
#include "common/logging.h"
#include "common/memory_size.h"
#include "ps_server/shard.h"

namespace fulcrum {

absl::Status ServerCheckpoints::Enable(FileSystem* fs) {
  const std::string& dir = config_.checkpoint_dir();
  CHECK(fs_ == nullptr && !dir.empty());
  if (absl::Status s = CheckWritableDir(*fs, dir); !s.ok()) return s;
  fs_ = fs;
  const AdjustFiles use_final = [&](CheckpointFiles* files) {
    return UseNewerFinalFile(*fs, dir, index(), files);
  };
  std::vector<std::string> problems;
  auto restored = LoadRestorePoint(*fs, dir, use_final, nullptr, &problems);
  if (restored.ok()) {
    restored_ = *std::move(restored);
    restored_step_ = restored_.step;
    if (restored_.adjusted) {
      LOG_INFO("restoring this server's shards from its final checkpoint: nothing is lost");
    } else {
      LOG_INFO(
          "restoring from checkpoint {} ({} variables written by {} server(s)); updates "
          "applied after it are lost",
          CheckpointDirName(restored_step_), restored_.variables.size(),
          restored_.files.front()->header().num_ps());
    }
    return absl::OkStatus();
  }
  // No complete checkpoint: the final files the servers wrote as they were
  // stopped, whichever of them there are (each server takes its own shards).
  auto finals = MakeRestorePoint(FinalFiles(*fs, dir, num_ps()), nullptr, nullptr,
                                 /*partial=*/true);
  if (!finals.ok()) LOG_ERROR("checkpoint: {}", finals.status().message());
  if (!finals.ok() || finals->files.empty()) {
    LOG_INFO("no complete checkpoint in {}: starting from the initializers", dir);
    return absl::OkStatus();
  }
  const bool own = std::any_of(finals->files.begin(), finals->files.end(), [&](const auto& file) {
    return file->header().ps_index() == index();
  });
  restored_ = *std::move(finals);
  restored_step_ = restored_.step;  // 0: final files carry no step
  LOG_INFO(
      "no complete checkpoint in {}: restoring from the final checkpoints of {} of {} "
      "server(s){}",
      dir, restored_.files.size(), num_ps(),
      own ? ", this server's among them: nothing is lost"
          : "; this server's is missing, so its shards start from the initializers");
  return absl::OkStatus();
}

const RestoredVariable* ServerCheckpoints::Find(const ShardSpec& shard) const {
  auto it = restored_.variables.find(shard.variable().name());
  if (it == restored_.variables.end()) return nullptr;
  if (!it->second.Covers(shard.row_offset(), shard.rows())) {
    LOG_WARN("variable '{}' shard {}: not in the final checkpoints found; from its initializer",
             shard.variable().name(), shard.shard());
    return nullptr;
  }
  return &it->second;
}

absl::StatusOr<int64_t> ServerCheckpoints::RestoreTable(EmbeddingTable& table) const {
  const std::string& name = table.spec().name();
  const int owner = table.partition();
  const int partitions = TablePartitions(table.spec(), num_ps());
  int64_t parts = 0;
  for (const auto& file : restored_.files) {
    for (const CheckpointTable& part : file->tables()) {
      if (part.meta.spec().name() != name) continue;
      if (absl::Status s = table.Restore(
              *file, part, [&](int64_t id) { return EmbeddingOwner(id, partitions) == owner; });
          !s.ok()) {
        return s;
      }
      ++parts;
    }
  }
  if (parts > 0) {
    LOG_INFO("embedding table '{}': {} rows restored from {} checkpoint file(s)", name,
             table.stats().rows, parts);
  }
  return parts;
}

absl::Status ServerCheckpoints::AddStore(CheckpointFileWriter& writer,
                                         const UnitFilter& writes) const {
  for (const Shard* shard : store_.All()) {
    // Each shard once: a backup's values are its primary's.
    if (writes ? !writes(*shard) : shard->IsBackup()) continue;
    if (absl::Status s = shard->WriteCheckpoint(writer); !s.ok()) return s;
  }
  for (const EmbeddingTable* table : store_.AllTables()) {
    if (writes ? !writes(*table) : table->IsBackup()) continue;
    if (absl::Status s = table->WriteCheckpoint(writer); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<SaveCheckpointResponse> ServerCheckpoints::Save(int64_t step,
                                                               const UnitFilter& writes) const {
  if (fs_ == nullptr) {
    return absl::FailedPreconditionError("this parameter server has no --checkpoint_dir");
  }
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("checkpoint step ", step, " < 0"));
  const absl::Time start = absl::Now();
  auto saved =
      SaveServerFile(*fs_, config_.checkpoint_dir(), step, index(), num_ps(),
                     [&](CheckpointFileWriter& writer) { return AddStore(writer, writes); });
  if (!saved.ok()) {
    LOG_ERROR("checkpoint {} failed: {}", CheckpointDirName(step), saved.status().message());
    return saved.status();
  }
  LOG_INFO("checkpoint {}: wrote {} shards, {} in {}", CheckpointDirName(step), saved->shards(),
           FormatBytes(saved->bytes()), absl::FormatDuration(absl::Now() - start));
  return saved;
}

absl::Status ServerCheckpoints::SaveFinal() const {
  if (fs_ == nullptr) return absl::OkStatus();
  const std::string name = FinalFileName(index(), num_ps());
  auto written =
      WriteServerFile(*fs_, absl::StrCat(config_.checkpoint_dir(), "/", name), index(), num_ps(),
                      -1, [this](CheckpointFileWriter& writer) { return AddStore(writer); });
  if (!written.ok()) {
    LOG_ERROR("final checkpoint {} failed: {}", name, written.status().message());
    return written.status();
  }
  LOG_INFO("final checkpoint {}: {} shards, {}", name, written->shards,
           FormatBytes(written->bytes));
  return absl::OkStatus();
}

}  // namespace fulcrum
