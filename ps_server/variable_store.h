// The shards one parameter server holds, by (variable, shard index), and
// its embedding tables, by name.
// Thread-safe: the map takes a reader lock on lookups; each shard has its
// own lock for its data, so the hot path holds no global lock.
#ifndef FULCRUM_PS_SERVER_VARIABLE_STORE_H_
#define FULCRUM_PS_SERVER_VARIABLE_STORE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/ps_service.pb.h"
#include "ps_server/embedding/embedding_table.h"
#include "ps_server/shard.h"

namespace fulcrum {

class VariableStore {
 public:
  // What a shard takes besides its values, slots and spec (locks, maps),
  // about; counted against the budget.
  static constexpr int64_t kShardOverheadBytes = 512;

  // The shards together may take at most `max_memory_bytes`.
  explicit VariableStore(int64_t max_memory_bytes) : max_memory_bytes_(max_memory_bytes) {}

  // Creates the shard, or accepts it when the same shard already exists with
  // an equal spec (true: created, false: existed). A different spec under the
  // same variable name is ALREADY_EXISTS naming both specs. Validates `spec`.
  // A new shard takes its values from `restored` when given, else from
  // `initial_values` when not empty (float32 bytes of the shard's rows;
  // another size is INVALID_ARGUMENT), else from its initializer. It takes its
  // values and slots and `extra_floats_per_element` more floats per element
  // of memory; RESOURCE_EXHAUSTED, with nothing allocated, when that would
  // pass the budget.
  absl::StatusOr<bool> Create(const ShardSpec& spec, const RestoredVariable* restored,
                              absl::string_view initial_values, int extra_floats_per_element)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The shard, or NOT_FOUND naming the variable and shard. Shards live as
  // long as the store, removed or not.
  absl::StatusOr<Shard*> Find(const std::string& variable, int shard) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The shard goes (its copy moved away): it is retired (Shard::Retire:
  // its memory freed, every call on it failing), leaves Find and All, and
  // no longer counts against the budget; the object itself stays, for the
  // calls that hold it. A later Create makes a new one. False when there
  // is no such shard.
  bool Remove(const std::string& variable, int shard) ABSL_LOCKS_EXCLUDED(mu_);

  // Every shard, ordered by variable name and shard index.
  std::vector<Shard*> All() const ABSL_LOCKS_EXCLUDED(mu_);

  // Every unit of the placement table held here: the shards, then the
  // tables' ranges.
  std::vector<ReplicatedUnit*> Units() const ABSL_LOCKS_EXCLUDED(mu_);
  // The unit of `key` (a ShardKey or a TableKey) goes, as Remove says of a
  // shard. False when there is no such unit.
  bool RemoveUnit(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the unit of `key` is held here.
  bool Holds(const std::string& key) const ABSL_LOCKS_EXCLUDED(mu_);

  // Creates the table's range of ids `partition` (EmbeddingTable), or
  // accepts it when it exists with an equal spec (true: created, false:
  // existed); another spec under its name (of any range here) is
  // ALREADY_EXISTS. Validates `spec`. Its rows take memory as they come
  // (AdmitRows).
  absl::StatusOr<bool> CreateTable(const EmbeddingTableSpec& spec, int partition)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The table's range `partition`, or NOT_FOUND naming it. Tables live as
  // long as the store.
  absl::StatusOr<EmbeddingTable*> FindTable(const std::string& name, int partition) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every range of every table, by name and partition.
  std::vector<EmbeddingTable*> AllTables() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether each table of `growth` may store up to its count of new rows,
  // all together within the budget with what the shards and every table
  // hold now: RESOURCE_EXHAUSTED naming the table that would pass it.
  absl::Status AdmitRows(const std::vector<std::pair<const EmbeddingTable*, int64_t>>& growth) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Bytes of all shards' values (float32), excluding optimizer slots.
  int64_t value_bytes() const { return value_bytes_.load(); }
  // Bytes the shards take, as Create counted them, and the tables' rows;
  // and the budget.
  int64_t memory_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t max_memory_bytes() const { return max_memory_bytes_; }

 private:
  using Key = std::pair<std::string, int>;
  // The shards' bytes, as Create counted them, and the tables' rows.
  int64_t HeldBytesLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  const int64_t max_memory_bytes_;
  mutable absl::Mutex mu_;
  int64_t memory_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<Key, std::unique_ptr<Shard>> shards_ ABSL_GUARDED_BY(mu_);
  std::map<Key, int64_t> counted_bytes_ ABSL_GUARDED_BY(mu_);  // of each shard, by Create
  std::vector<std::unique_ptr<ReplicatedUnit>> retired_ ABSL_GUARDED_BY(mu_);  // removed
  std::atomic<int64_t> value_bytes_{0};
  // The spec every shard of a variable was created with.
  std::map<std::string, VariableSpec> variables_ ABSL_GUARDED_BY(mu_);
  // The first range here of table `name`; null when there is none.
  const EmbeddingTable* AnyTableLocked(const std::string& name) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::map<Key, std::unique_ptr<EmbeddingTable>> tables_ ABSL_GUARDED_BY(mu_);  // by partition
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_VARIABLE_STORE_H_
