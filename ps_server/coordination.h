// What a parameter server asks of the cluster's coordination of replicated
// shards: the placement table's keeper, which etcd is (membership.h). The
// table's changes come back to the server as ParameterServer::
// ApplyPlacement.
#ifndef FULCRUM_PS_SERVER_COORDINATION_H_
#define FULCRUM_PS_SERVER_COORDINATION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/placement.pb.h"

namespace fulcrum {

class Coordination {
 public:
  virtual ~Coordination() = default;
  // Adds the units of `table` (the chief's, of the shards it creates) that
  // the cluster's table lacks (WithUnits).
  virtual absl::Status AddUnits(const Placement& table) = 0;
  // OK while this server may take writes: it holds its lease, so no other
  // server can have been promoted in its place. UNAVAILABLE saying why not.
  virtual absl::Status CheckServing() const = 0;
  // The catching-up copy of unit `key` on the server at `address` has
  // applied this primary's snapshot: the table may count it ready
  // (CaughtUp), which it does in the background.
  virtual void CaughtUp(const std::string& key, const std::string& address) = 0;
  // This server takes its share of the cluster's copies, each moved onto
  // it live from a server holding more (Balanced); or, with `drain`, hands
  // each copy it holds to another server (Draining) and leaves the table
  // once they have all caught up, and does not join it again. The table
  // that says so.
  virtual absl::StatusOr<Placement> Rebalance(bool drain) = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_COORDINATION_H_
