// RowCalls: the client library's embedding tables -- each dealt into
// ranges of its ids (EmbeddingTableSpec.partitions, one per server by
// default), created on the servers (with their copies where the servers
// replicate, placed as common/placement.h says), their rows pulled and
// their row gradients pushed by id, each distinct id asked once of the
// primary of its range (row_routing.h), the servers asked in parallel. It
// follows the placement table when ranges move, and tracks the version of
// each range, as the consistency mode needs. Over a ServerSet, which owns
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

  // Forgets the versions learned from the servers in `recovered`.
  void ForgetVersions(const std::vector<bool>& recovered);

 private:
  // A table of a request to one server: of which lookup, which range.
  struct Part {
    size_t lookup;
    int partition;
  };

  // The table's spec, or NOT_FOUND when this client did not create it.
  absl::StatusOr<const EmbeddingTableSpec*> Table(const std::string& table) const;
  // Routes each table's ranges to their primaries by the newest placement
  // table (range p to server p where it names none: unreplicated).
  void Route();
  // Route, when the placement table is newer than the one routed by (see
  // ServerSet::PlacementMovedOn): whether it was, and a call that `failed`
  // may be made again.
  bool Reroute(const absl::Status& failed);
  // One attempt of each call, by the ranges' routes as they are; a push
  // carries `push_id` on every attempt, `sums` its rows per distinct id.
  absl::Status PullOnce(const std::vector<TableIds>& lookups, const std::vector<RoutedIds>& routed,
                        const std::vector<absl::Span<float>>& out);
  absl::StatusOr<PushStats> PushOnce(const std::vector<TableIds>& lookups,
                                     const std::vector<RoutedIds>& routed,
                                     const std::vector<std::vector<float>>& sums, uint64_t push_id);
  // Routes each lookup's ids (RouteIds); checks the tables and that
  // rows[i] holds a row per id of lookups[i] (`what` names them: "gradient",
  // "output"). Valid until the next call.
  absl::StatusOr<const std::vector<RoutedIds>*> RouteLookups(const std::vector<TableIds>& lookups,
                                                             const std::vector<size_t>& row_floats,
                                                             const std::string& what);

  ServerSet& servers_;
  std::map<std::string, EmbeddingTableSpec> tables_;       // created by this client, partitions set
  std::map<std::string, std::vector<int>> range_servers_;  // each range's primary, by table
  int64_t routed_epoch_ = 0;  // of the placement table range_servers_ follows
  std::map<std::pair<std::string, int>, ShardVersions> table_state_;  // (table, partition)
  // The lookups routed last, and their routing: a step pushes the
  // gradients of the rows it pulled, whose ids are routed once.
  std::vector<TableIds> routed_lookups_;
  std::vector<RoutedIds> routed_;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_ROW_CALLS_H_
