#include "ps_server/variable_store.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/embedding.h"
#include "common/memory_size.h"
#include "common/optimizer/optimizer.h"
#include "common/partitioner.h"
#include "common/slices.h"
#include "common/tensor.h"

namespace fulcrum {
namespace {

bool SameMessage(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

}  // namespace

absl::StatusOr<bool> VariableStore::Create(const ShardSpec& raw, const RestoredVariable* restored,
                                           absl::string_view initial_values,
                                           int extra_floats_per_element) {
  if (absl::Status s = ValidateShardSpec(raw); !s.ok()) return s;
  // At most 2^34 elements (ValidateShardSpec): no overflow in bytes.
  const int64_t elements = raw.rows() * RowElements(raw.variable().shape());
  if (!initial_values.empty() && static_cast<int64_t>(initial_values.size()) !=
                                     elements * static_cast<int64_t>(sizeof(float))) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", raw.variable().name(), "' shard ", raw.shard(),
                     ": initial values of ", initial_values.size(), " bytes; its ", elements,
                     " float32 elements take ", elements * static_cast<int64_t>(sizeof(float))));
  }
  ShardSpec spec = raw;
  *spec.mutable_variable() = CanonicalSpec(raw.variable());
  const std::string& name = spec.variable().name();
  const Key key(name, spec.shard());
  absl::MutexLock lock(&mu_);
  if (AnyTableLocked(name) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("variable '", name, "': an embedding table has that name"));
  }
  auto existing = variables_.find(name);
  if (existing != variables_.end() && !SameMessage(existing->second, spec.variable())) {
    return absl::AlreadyExistsError(absl::StrCat(
        "variable '", name, "' exists with spec {", existing->second.ShortDebugString(),
        "}; the request has spec {", spec.variable().ShortDebugString(), "}"));
  }
  auto it = shards_.find(key);
  if (it != shards_.end()) {
    if (!SameMessage(it->second->spec(), spec)) {
      return absl::AlreadyExistsError(
          absl::StrCat(it->second->label(), " exists as {", it->second->spec().ShortDebugString(),
                       "}; the request has {", spec.ShortDebugString(), "}"));
    }
    return false;
  }
  // Checked sizes: at most 2^34 elements, each of a few floats; and what a
  // shard keeps besides, its spec (a peer chooses the name's length).
  const int64_t bytes = elements * static_cast<int64_t>(sizeof(float)) *
                            (1 + NumSlots(spec.variable().optimizer()) + extra_floats_per_element) +
                        static_cast<int64_t>(spec.ByteSizeLong()) + kShardOverheadBytes;
  const int64_t held = HeldBytesLocked();
  if (bytes > max_memory_bytes_ - held) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "variable '", name, "' shard ", spec.shard(), " (", spec.rows(), " of ",
        ShapeString(spec.variable().shape()), ") needs ", FormatBytes(bytes),
        " (values and optimizer slots); this server holds ", FormatBytes(held), " of its ",
        FormatBytes(max_memory_bytes_), " budget (ps_server --max_memory_mb)"));
  }
  auto contents = NewShardContents(spec, restored, initial_values);
  if (!contents.ok()) return contents.status();
  memory_bytes_ += bytes;
  variables_.emplace(name, spec.variable());
  auto shard = std::make_unique<Shard>(std::move(spec), *std::move(contents));
  value_bytes_ += NumElements(shard->shape()) * static_cast<int64_t>(sizeof(float));
  shards_.emplace(key, std::move(shard));
  counted_bytes_[key] = bytes;
  return true;
}

bool VariableStore::Remove(const std::string& variable, int shard) {
  absl::MutexLock lock(&mu_);
  const Key key(variable, shard);
  auto it = shards_.find(key);
  if (it == shards_.end()) return false;
  it->second->Retire();
  memory_bytes_ -= counted_bytes_[key];
  counted_bytes_.erase(key);
  value_bytes_ -= NumElements(it->second->shape()) * static_cast<int64_t>(sizeof(float));
  retired_.push_back(std::move(it->second));
  shards_.erase(it);
  return true;
}

std::vector<ReplicatedUnit*> VariableStore::Units() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<ReplicatedUnit*> out;
  for (const auto& [key, shard] : shards_) out.push_back(shard.get());
  for (const auto& [key, table] : tables_) out.push_back(table.get());
  return out;
}

bool VariableStore::RemoveUnit(const std::string& key) {
  std::string name;
  int index = 0;
  if (ParseShardKey(key, &name, &index)) return Remove(name, index);
  if (!ParseTableKey(key, &name, &index)) return false;
  absl::MutexLock lock(&mu_);
  auto it = tables_.find(Key(name, index));
  if (it == tables_.end()) return false;
  it->second->Retire();
  retired_.push_back(std::move(it->second));
  tables_.erase(it);
  return true;
}

bool VariableStore::Holds(const std::string& key) const {
  std::string name;
  int index = 0;
  if (ParseShardKey(key, &name, &index)) return Find(name, index).ok();
  return ParseTableKey(key, &name, &index) && FindTable(name, index).ok();
}

int64_t VariableStore::HeldBytesLocked() const {
  int64_t bytes = memory_bytes_;
  for (const auto& [name, table] : tables_) bytes += table->stats().bytes;
  return bytes;
}

int64_t VariableStore::memory_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return HeldBytesLocked();
}

absl::StatusOr<bool> VariableStore::CreateTable(const EmbeddingTableSpec& spec, int partition) {
  auto table = EmbeddingTable::Create(spec, partition);
  if (!table.ok()) return table.status();
  absl::MutexLock lock(&mu_);
  if (variables_.count(spec.name()) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("embedding table '", spec.name(), "': a variable has that name"));
  }
  const EmbeddingTable* existing = AnyTableLocked(spec.name());
  if (existing != nullptr && !SameMessage(existing->spec(), (*table)->spec())) {
    return absl::AlreadyExistsError(
        absl::StrCat("embedding table '", spec.name(), "' exists with spec {",
                     existing->spec().ShortDebugString(), "}; the request has spec {",
                     (*table)->spec().ShortDebugString(), "}"));
  }
  return tables_.emplace(Key(spec.name(), partition), *std::move(table)).second;
}

const EmbeddingTable* VariableStore::AnyTableLocked(const std::string& name) const {
  auto it = tables_.lower_bound(Key(name, std::numeric_limits<int>::min()));
  return it != tables_.end() && it->first.first == name ? it->second.get() : nullptr;
}

absl::StatusOr<EmbeddingTable*> VariableStore::FindTable(const std::string& name,
                                                         int partition) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = tables_.find(Key(name, partition));
  if (it != tables_.end()) return it->second.get();
  if (AnyTableLocked(name) == nullptr) {
    return absl::NotFoundError(absl::StrCat("embedding table '", name, "' does not exist"));
  }
  return absl::NotFoundError(
      absl::StrCat("embedding table '", name, "' has no partition ", partition, " here"));
}

std::vector<EmbeddingTable*> VariableStore::AllTables() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<EmbeddingTable*> out;
  for (const auto& [name, table] : tables_) out.push_back(table.get());
  return out;
}

absl::Status VariableStore::AdmitRows(
    const std::vector<std::pair<const EmbeddingTable*, int64_t>>& growth) const {
  const int64_t held = memory_bytes();
  int64_t wanted = 0;
  for (const auto& [table, ids] : growth) {
    const int64_t max_rows = table->spec().max_rows();
    const int64_t new_rows = max_rows > 0 ? std::min(ids, max_rows - table->stats().rows) : ids;
    wanted += new_rows * table->BytesPerRow();
    if (wanted > max_memory_bytes_ - held) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "embedding table '", table->spec().name(), "': up to ", new_rows, " new rows need ",
          FormatBytes(new_rows * table->BytesPerRow()), "; this server holds ", FormatBytes(held),
          " of its ", FormatBytes(max_memory_bytes_),
          " budget (ps_server --max_memory_mb; bound the table with max_rows)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Shard*> VariableStore::Find(const std::string& variable, int shard) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = shards_.find(Key(variable, shard));
  if (it == shards_.end()) {
    if (variables_.count(variable) == 0) {
      return absl::NotFoundError(absl::StrCat("variable '", variable, "' does not exist"));
    }
    return absl::NotFoundError(
        absl::StrCat("variable '", variable, "' shard ", shard, " is not on this server"));
  }
  return it->second.get();
}

std::vector<Shard*> VariableStore::All() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<Shard*> out;
  for (const auto& [key, shard] : shards_) out.push_back(shard.get());
  return out;
}

}  // namespace fulcrum
