// TableCalls: one parameter server's calls on its embedding tables -- rows
// pulled by id, and row gradients pushed -- checked (tables, ids, sizes,
// the memory budget) and handed to the consistency policy. The server
// checks the caller first (incarnation, worker, lease) and records the
// outcomes. Thread-safe.
#ifndef FULCRUM_PS_SERVER_EMBEDDING_TABLE_CALLS_H_
#define FULCRUM_PS_SERVER_EMBEDDING_TABLE_CALLS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/config.pb.h"
#include "proto/ps_service.pb.h"
#include "ps_server/consistency/policy.h"
#include "ps_server/embedding/embedding_table.h"
#include "ps_server/variable_store.h"

namespace fulcrum {

class TableCalls {
 public:
  // A range of a table here (`table`, `partition`), or why not (NOT_FOUND;
  // FAILED_PRECONDITION naming its primary where it moved).
  using RangeFinder =
      std::function<absl::StatusOr<EmbeddingTable*>(const std::string& table, int partition)>;

  // All three must outlive this; `config` says this server's index among
  // how many, and the largest message. Ranges are found by `find`.
  TableCalls(const PsServerConfig& config, VariableStore* store, ConsistencyPolicy* policy,
             RangeFinder find)
      : config_(config), store_(*store), policy_(*policy), find_(std::move(find)) {}

  // Rows of embedding tables. Waits (until `deadline`) for what the policy
  // waits for of `waits` (the worker and its clock; none for a reader) and
  // for each table's requested version. Each TableRows names a range held
  // here and only ids of it (>= 0, EmbeddingOwner(id, partitions) its
  // partition); the answer at most
  // max_message_bytes of floats (RESOURCE_EXHAUSTED).
  absl::StatusOr<PullRowsResponse> Pull(const PullRowsRequest& request, const PullRequest& waits,
                                        absl::Time deadline);

  // Row gradients of `worker`, handled as the policy says. Checked whole
  // first (tables, ids, sizes, NaN/Inf, the memory budget): on any error
  // nothing changes. What it applied is answered once the range's copies
  // all have it (ReplicatedUnit::AwaitCommitted, until `commit_deadline`).
  absl::StatusOr<PushRowsResponse> Push(const PushRowsRequest& request, int worker,
                                        absl::Time commit_deadline);

  // A page of a range's stored rows (ReadRowsRequest), at most
  // kMaxIdsPerRequest and what fits max_message_bytes; what `find` says of
  // a range this server lacks, INVALID_ARGUMENT for a negative start or
  // max_rows.
  absl::StatusOr<ReadRowsResponse> Read(const ReadRowsRequest& request) const;

 private:
  // The range `rows` names and its ids, checked: the range is here, each
  // id is of it, the request names at most `max_ids` ids so far.
  absl::StatusOr<EmbeddingTable*> FindRows(const TableRows& rows, int64_t max_ids,
                                           int64_t* ids_so_far) const;

  const PsServerConfig& config_;
  VariableStore& store_;
  ConsistencyPolicy& policy_;
  const RangeFinder find_;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_EMBEDDING_TABLE_CALLS_H_
