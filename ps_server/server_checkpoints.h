// ServerCheckpoints: one parameter server's checkpoints. At start it
// chooses what to restore from: the newest complete checkpoint whose files
// regroup into whole variables, with this server's final file (written at
// its last shutdown) in place of its own file when newer; without a
// complete checkpoint, the final files of the servers (those there are).
// Then it fills shards and tables created later from it, and writes this
// server's file of each checkpoint and its final file. Knows nothing of calls or consistency.
// Thread-safe once enabled: Save and SaveFinal read the store as pushes change it.
#ifndef FULCRUM_PS_SERVER_SERVER_CHECKPOINTS_H_
#define FULCRUM_PS_SERVER_SERVER_CHECKPOINTS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "common/checkpoint/restore.h"
#include "common/file_system.h"
#include "proto/config.pb.h"
#include "proto/ps_service.pb.h"
#include "ps_server/embedding/embedding_table.h"
#include "ps_server/variable_store.h"

namespace fulcrum {

class ServerCheckpoints {
 public:
  // `config` (its checkpoint_dir, this server's index and the number of
  // servers) and `store` (what is written) must outlive this.
  ServerCheckpoints(const PsServerConfig& config, const VariableStore* store)
      : config_(config), store_(*store) {}

  ServerCheckpoints(const ServerCheckpoints&) = delete;
  ServerCheckpoints& operator=(const ServerCheckpoints&) = delete;

  // Checks that config().checkpoint_dir is writable (creating it) and
  // chooses what to restore from, falling back past corrupt checkpoints.
  // Call once, before serving. Errors name the directory.
  absl::Status Enable(FileSystem* fs);
  bool enabled() const { return fs_ != nullptr; }

  // The restored checkpoint's variable that holds every row of `shard`, or
  // null.
  const RestoredVariable* Find(const ShardSpec& shard) const;
  // Fills the new `table` with the rows this server owns now from every
  // file of the restored checkpoint (so the number of servers may change);
  // how many files held the table.
  absl::StatusOr<int64_t> RestoreTable(EmbeddingTable& table) const;
  // The step restored from; -1: none.
  int64_t restored_step() const { return restored_step_; }

  // Writes every shard and table range that `writes` takes (default: all
  // but backup copies: each once, by its primary), with slots and
  // versions, to <checkpoint_dir>/ckpt-<step>/ps-<i>-of-<n>.ckpt
  // atomically. FAILED_PRECONDITION when not enabled.
  using UnitFilter = std::function<bool(const ReplicatedUnit& unit)>;
  absl::StatusOr<SaveCheckpointResponse> Save(int64_t step, const UnitFilter& writes = {}) const;

  // Writes this server's final file, <checkpoint_dir>/final-ps-<i>-of-<n>.ckpt.
  // When this server restarts with the same placement, it restores its
  // shards from it if it is newer than the newest complete checkpoint,
  // losing nothing. OK and nothing written when not enabled.
  absl::Status SaveFinal() const;

 private:
  int index() const { return config_.cluster().task().index(); }
  int num_ps() const { return config_.cluster().cluster().ps_size(); }
  // Adds every shard and table range of the store `writes` takes (all but
  // backups by default) to `writer`.
  absl::Status AddStore(CheckpointFileWriter& writer, const UnitFilter& writes = {}) const;

  const PsServerConfig& config_;
  const VariableStore& store_;
  FileSystem* fs_ = nullptr;  // set by Enable
  RestorePoint restored_;
  int64_t restored_step_ = -1;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_SERVER_CHECKPOINTS_H_
