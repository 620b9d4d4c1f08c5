#include "ps_server/embedding/table_calls.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/embedding.h"
#include "common/optimizer/optimizer.h"

namespace fulcrum {

absl::StatusOr<EmbeddingTable*> TableCalls::FindRows(const TableRows& rows, int64_t max_ids,
                                                     int64_t* ids_so_far) const {
  // Unnamed: the range of this server's index (an unreplicated table).
  const int partition = rows.has_partition() ? rows.partition() : config_.cluster().task().index();
  absl::StatusOr<EmbeddingTable*> table = find_(rows.table(), partition);
  if (!table.ok()) return table.status();
  *ids_so_far += rows.ids_size();
  if (*ids_so_far > max_ids) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a request names over ", max_ids, " ids; split it"));
  }
  const int partitions = TablePartitions((*table)->spec(), config_.cluster().cluster().ps_size());
  for (int64_t id : rows.ids()) {
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("embedding table '", rows.table(), "': id ",
                                                     id, " is outside the key space [0, 2^63)"));
    }
    if (const int owner = EmbeddingOwner(id, partitions); owner != partition) {
      return absl::InvalidArgumentError(absl::StrCat("embedding table '", rows.table(), "': id ",
                                                     id, " belongs to range ", owner, ", not ",
                                                     partition, " (of ", partitions, ")"));
    }
  }
  return table;
}

absl::StatusOr<PullRowsResponse> TableCalls::Pull(const PullRowsRequest& request,
                                                  const PullRequest& waits, absl::Time deadline) {
  std::vector<EmbeddingTable*> tables;
  int64_t ids = 0, bytes = 0;
  for (const TableRows& rows : request.tables()) {
    absl::StatusOr<EmbeddingTable*> table = FindRows(rows, EmbeddingTable::kMaxIdsPerRequest, &ids);
    if (!table.ok()) return table.status();
    tables.push_back(*table);
    bytes += rows.ids_size() * (*table)->spec().width() * static_cast<int64_t>(sizeof(float));
  }
  if (bytes > config_.max_message_bytes()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("pull of rows: answers ", bytes, " bytes; a message carries at most ",
                     config_.max_message_bytes(), " (ask for fewer ids at a time)"));
  }
  if (absl::Status s = policy_.AwaitPull(waits, deadline); !s.ok()) return s;
  PullRowsResponse response;
  for (size_t i = 0; i < tables.size(); ++i) {
    const TableRows& rows = request.tables(i);
    if (absl::Status s = tables[i]->AwaitVersion(rows.version(), deadline); !s.ok()) return s;
    TableRows* out = response.add_tables();
    out->set_table(rows.table());
    // The committed version, which every copy has (as a shard answers).
    out->set_version(tables[i]->committed_version());
    google::protobuf::RepeatedField<float>& values = *out->mutable_values();
    values.Resize(rows.ids_size() * tables[i]->spec().width(), 0.0f);
    if (absl::Status s =
            tables[i]->Pull(rows.ids(), absl::MakeSpan(values.mutable_data(), values.size()));
        !s.ok()) {
      return s;
    }
  }
  return response;
}

absl::StatusOr<PushRowsResponse> TableCalls::Push(const PushRowsRequest& request, int worker,
                                                  absl::Time commit_deadline) {
  // Check the whole request before touching any table.
  std::vector<EmbeddingTable*> tables;
  std::vector<EmbeddingTable::CheckedRows> checked;
  std::vector<std::pair<const EmbeddingTable*, int64_t>> growth;
  int64_t ids = 0;
  for (const TableRows& rows : request.tables()) {
    absl::StatusOr<EmbeddingTable*> table = FindRows(rows, EmbeddingTable::kMaxIdsPerPush, &ids);
    if (!table.ok()) return table.status();
    if (std::find(tables.begin(), tables.end(), *table) != tables.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("embedding table '", rows.table(), "' twice in one push"));
    }
    absl::StatusOr<EmbeddingTable::CheckedRows> rows_checked =
        (*table)->CheckPush(rows.ids(), rows.values());
    if (!rows_checked.ok()) return rows_checked.status();
    checked.push_back(*rows_checked);
    tables.push_back(*table);
    growth.emplace_back(*table, rows.ids_size());
  }
  if (absl::Status s = store_.AdmitRows(growth); !s.ok()) return s;
  PushRowsResponse response;
  for (size_t i = 0; i < tables.size(); ++i) {
    absl::StatusOr<ShardPushResult> result = policy_.PushRows(
        *tables[i], worker, request.push_id(), request.tables(i).version(), checked[i]);
    if (!result.ok()) return result.status();
    result->set_shard(config_.cluster().task().index());
    *response.add_results() = *std::move(result);
  }
  // What this push applied is answered once every copy has it (a retry's
  // DUPLICATE too: its push may be applied but not yet there).
  for (size_t i = 0; i < tables.size(); ++i) {
    const ShardPushResult& result = response.results(static_cast<int>(i));
    if (result.outcome() != ShardPushResult::APPLIED &&
        result.outcome() != ShardPushResult::DUPLICATE) {
      continue;
    }
    if (absl::Status s = tables[i]->AwaitCommitted(result.version(), commit_deadline); !s.ok()) {
      return s;
    }
  }
  return response;
}

absl::StatusOr<ReadRowsResponse> TableCalls::Read(const ReadRowsRequest& request) const {
  absl::StatusOr<EmbeddingTable*> table =
      find_(request.table(),
            request.has_partition() ? request.partition() : config_.cluster().task().index());
  if (!table.ok()) return table.status();
  if (request.start() < 0 || request.max_rows() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("read of table '", request.table(), "': start ",
                                                   request.start(), " and max_rows ",
                                                   request.max_rows(), " must be >= 0"));
  }
  const EmbeddingTableSpec& spec = (*table)->spec();
  const int64_t row_bytes = static_cast<int64_t>(sizeof(int64_t)) +
                            spec.width() *
                                (1 + (request.slots() ? NumSlots(spec.optimizer()) : 0)) *
                                static_cast<int64_t>(sizeof(float));
  // A page's bytes are well inside the largest message (the encoding's own
  // bytes on top).
  int64_t max_rows = std::clamp<int64_t>(config_.max_message_bytes() / 2 / row_bytes, 1,
                                         EmbeddingTable::kMaxIdsPerRequest);
  if (request.max_rows() > 0) max_rows = std::min(max_rows, request.max_rows());
  ReadRowsResponse response;
  (*table)->Read(request.start(), max_rows, request.slots(), &response);
  return response;
}

}  // namespace fulcrum
