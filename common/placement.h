// The placement table (proto/placement.proto): which servers hold the
// copies of each placement unit, which copy is the primary, and how the
// table changes when a server is lost, joins or leaves. Pure functions of
// their arguments; thread-safe.
//
// Every table these functions return is valid (ValidatePlacement) and,
// when it differs from the one given, has the next epoch.
//
// Choosing the server for a new copy of a unit: of the servers that are
// not draining and hold no copy of the unit, those whose zone none of the
// unit's other copies has are preferred (a server with no zone is a zone
// of its own; with fewer zones than copies, zones repeat); of those, the
// one holding the fewest bytes wins (for a primary, the fewest bytes of
// primaries), ties going round-robin from after the server chosen last.
// So with one copy per unit, units given in order land as they always
// have (PlaceVariables), and backups spread as evenly as primaries.
//
// Minimal moving: a change touches only the units it must: the lost
// server's, the drained server's, or those moved onto an added server. A
// move is a catching-up copy on the new server that `replaces` the old
// copy, which goes once the new one has caught up (CaughtUp).
#ifndef FULCRUM_COMMON_PLACEMENT_H_
#define FULCRUM_COMMON_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/placement.pb.h"

namespace fulcrum {

struct PlacementServer {
  std::string address;  // "": a server known by its index alone
  std::string zone;     // "": none
};

struct PlacementUnitSpec {
  std::string key;  // "variable/shard", "table#partition"
  int64_t bytes = 0;
};

// OK, or INVALID_ARGUMENT naming the first broken rule: replication >= 1;
// server ids unique and below next_server_id, addresses unique where
// given; unit keys unique and not empty, bytes >= 0; each unit's copies on
// distinct servers of the table, at least one, the first ready; a copy's
// `replaces` only on a catching-up copy, naming another, ready copy of the
// unit.
absl::Status ValidatePlacement(const Placement& placement);

// The first table (epoch 1) of `units` on `servers` (ids 0, 1, ... in
// order), `replication` copies each, chosen unit by unit in order.
// INVALID_ARGUMENT for fewer servers than copies, or what
// ValidatePlacement refuses.
absl::StatusOr<Placement> InitialPlacement(const std::vector<PlacementServer>& servers,
                                           const std::vector<PlacementUnitSpec>& units,
                                           int replication);

// `placement` with the units of `added` that it lacks (by key), their
// copies on the servers of the same addresses: how the units of variables
// created later join the cluster's table. `added` itself when `placement`
// has no servers yet (the first table). FAILED_PRECONDITION naming a copy
// on a server `placement` does not have (lost since `added` was made);
// INVALID_ARGUMENT when either table is invalid.
absl::StatusOr<Placement> WithUnits(const Placement& placement, const Placement& added);

// Server `id` is lost for good: its copies go. Where it held the primary,
// the first ready backup becomes the primary; a catching-up copy that was
// to replace its copy stays, as an added copy. DATA_LOSS naming the units
// it would leave with no ready copy (replication 1, or every copy lost),
// and nothing changes; NOT_FOUND for an id not in the table.
absl::StatusOr<Placement> WithoutServer(const Placement& placement, int32_t id);

// Each unit with fewer than `replication` copies that are staying (ready
// or catching up, not being replaced) gets catching-up copies on chosen
// servers, as many as the servers allow. The same table when none is
// missing.
Placement Repaired(const Placement& placement);

// A server joins with the next id. When `balance`, copies then move onto
// it as Balanced moves them; else it holds nothing yet (a restarted server,
// which Repaired then gives the copies it lost). INVALID_ARGUMENT for an
// address in the table already.
absl::StatusOr<Placement> WithServer(const Placement& placement, const PlacementServer& server,
                                     bool balance = true);

// Copies move onto server `id` (one that joined holding nothing, say) from
// the servers holding the most bytes, the largest units that fit first,
// while it holds at most the mean bytes per server (counting a copy being
// replaced as gone), each as a catching-up copy that replaces the one it
// moves. The same table when none moves. NOT_FOUND; FAILED_PRECONDITION
// for a draining server.
absl::StatusOr<Placement> Balanced(const Placement& placement, int32_t id);

// Server `id` is to leave: it is marked draining and each of its copies
// not yet being replaced gets a catching-up copy, on a chosen server, to
// replace it (a primary's by the primaries' rule). A server holding
// nothing leaves at once. NOT_FOUND; FAILED_PRECONDITION naming a unit no
// other server can take (nothing changes then).
absl::StatusOr<Placement> Draining(const Placement& placement, int32_t id);

// The catching-up copy of unit `key` on server `id` has caught up: it is
// ready, and the copy it replaces goes (a primary's place is taken by the
// new copy). A draining server left with no copies leaves the table.
// NOT_FOUND for no such copy; FAILED_PRECONDITION when it is not catching
// up.
absl::StatusOr<Placement> CaughtUp(const Placement& placement, absl::string_view key, int32_t id);

// The copies still moving onto the server at `address` by `placement`
// (catching up there), or, with `off`, off it (copies elsewhere that
// replace its own); -1 when no server of the table has that address.
int CopiesMoving(const Placement& placement, absl::string_view address, bool off);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_PLACEMENT_H_
