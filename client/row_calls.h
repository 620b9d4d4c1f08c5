// RowCalls: the client library's embedding tables -- created on every
// server, their rows pulled and their row gradients pushed by id, each
// distinct id asked of the server that owns it (row_routing.h) once, the
// servers asked in parallel. It tracks the version of each table's part on
// each server, as the consistency mode needs. Over a ServerSet, which owns
// the connections, recovery and the worker's clock. Thread-safety as
// PsClient's: one call at a time.
#ifndef FULCRUM_CLIENT_ROW_CALLS_H_
#define FULCRUM_CLIENT_ROW_CALLS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/row_routing.h"
#include "client/server_set.h"
#include "fulcrum/ps_client.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

class RowCalls {
 public:
  // `servers` must outlive the calls.
  explicit RowCalls(ServerSet* servers) : servers_(*servers) {}

  RowCalls(const RowCalls&) = delete;
  RowCalls& operator=(const RowCalls&) = delete;

  // PsClient's row calls; see fulcrum/ps_client.h.
  absl::Status CreateTables(const std::vector<EmbeddingTableSpec>& specs);
  absl::Status PullRows(const std::vector<TableIds>& lookups,
                        std::vector<std::vector<float>>* rows);
  absl::Status PullRowsInto(const std::vector<TableIds>& lookups,
                            const std::vector<absl::Span<float>>& out);
  absl::StatusOr<PushStats> PushRows(const std::vector<TableIds>& lookups,
                                     const std::vector<absl::Span<const float>>& grads);

  absl::Status ReadTable(const std::string& table, bool slots,
                         absl::FunctionRef<absl::Status(const ReadRowsResponse& page)> visit);

  // The tables created through this client.
  std::vector<EmbeddingTableSpec> TableSpecs() const;

  // Forgets the versions learned from the servers in `recovered`.
  void ForgetVersions(const std::vector<bool>& recovered);

 private:
  // The table's width, or NOT_FOUND when this client did not create it.
  absl::StatusOr<int64_t> TableWidth(const std::string& table) const;
  // Routes each lookup's ids (RouteIds); checks the tables and that
  // rows[i] holds a row per id of lookups[i] (`what` names them: "gradient",
  // "output").
  absl::StatusOr<std::vector<RoutedIds>> RouteLookups(const std::vector<TableIds>& lookups,
                                                      const std::vector<size_t>& row_floats,
                                                      const std::string& what) const;

  ServerSet& servers_;
  std::map<std::string, EmbeddingTableSpec> tables_;                  // created by this client
  std::map<std::pair<std::string, int>, ShardVersions> table_state_;  // (table, ps)
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_ROW_CALLS_H_
