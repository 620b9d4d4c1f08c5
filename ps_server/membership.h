// A parameter server's membership of a job whose shards are replicated,
// held in etcd (common/etcd) under the job's prefix:
//  - <prefix>servers/<address>: the server is alive while this key is
//    there. It lives under the server's lease, renewed every third of its
//    time to live; a server that dies, or is cut off from etcd, loses it.
//  - <prefix>placement: the cluster's placement table
//    (proto/placement.proto). Every server watches it and hands each new
//    epoch to the server (ParameterServer::ApplyPlacement); any server
//    changes it, by compare-and-put so that of two writers one wins and
//    the other reads again: when a server's key goes, its shards' backups
//    are promoted (WithoutServer) and the copies it held are made again,
//    catching up, on the others (Repaired); the chief's tables join it
//    (WithUnits); a primary's copy that has caught up is counted ready
//    (CaughtUp).
// A server that starts, or lost its lease, and finds itself in the table
// takes itself out of it as it registers: it holds nothing of what the
// table says it holds, and its backups take over. It joins the table
// again as a new server, and the copies the table lacks then are made on
// it (the fewest bytes), catching up from their primaries. Asked to
// (Rebalance), it takes its share of the others' copies, or hands its own
// to them and leaves.
//
// No split brain: a server takes no writes once its lease may have run
// out (CheckServing), and a backup takes updates only from the primary
// its table names; a primary answers a push only once its backups have
// it, so a cut-off primary cannot acknowledge what its promoted backup
// lacks. Thread-safe.
#ifndef FULCRUM_PS_SERVER_MEMBERSHIP_H_
#define FULCRUM_PS_SERVER_MEMBERSHIP_H_

#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/etcd/etcd_client.h"
#include "proto/placement.pb.h"
#include "ps_server/coordination.h"

namespace fulcrum {

class Membership : public Coordination {
 public:
  struct Options {
    std::string prefix;                     // the job's keys: "/fulcrum/<job>/"
    std::string address;                    // this server's, as the cluster spec names it
    std::string zone;                       // its --zone, which it rejoins the table with
    absl::Duration ttl = absl::Seconds(3);  // of the lease (whole seconds)
  };
  using TableCallback = std::function<void(const Placement&)>;

  // Registers the server (out of the table first, if it is there), then
  // watches: each newer table goes to `on_table`, from a thread of the
  // membership's own. UNAVAILABLE when etcd cannot be reached.
  static absl::StatusOr<std::unique_ptr<Membership>> Join(std::unique_ptr<Etcd> etcd,
                                                          Options options, TableCallback on_table);
  // Stops renewing and watching; the lease runs out on its own (a server
  // that ends with the job leaves the table as it is).
  ~Membership() override;

  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  absl::Status AddUnits(const Placement& table) override;
  absl::Status CheckServing() const override ABSL_LOCKS_EXCLUDED(mu_);
  void CaughtUp(const std::string& key, const std::string& address) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<Placement> Rebalance(bool drain) override ABSL_LOCKS_EXCLUDED(mu_);

  // The table as last seen; epoch 0 before the first.
  Placement table() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Membership(std::unique_ptr<Etcd> etcd, Options options, TableCallback on_table);

  std::string ServerKey(const std::string& address) const;
  std::string TableKey() const;
  // Out of the table, then a new lease and the server's key under it.
  absl::Status Register() ABSL_LOCKS_EXCLUDED(mu_);
  // Changes the table by `change` (of the current one, empty when there is
  // none) until its compare-and-put wins; a change that returns the table
  // as it was writes nothing. The table then, in *written when given.
  absl::Status ChangeTable(const std::function<absl::StatusOr<Placement>(const Placement&)>& change,
                           Placement* written = nullptr);
  // The server at `address` is lost for good: out of the table, and the
  // copies it held made again on the others.
  void Remove(const std::string& address);
  // This server joins a table that has servers (not the first, which the
  // chief makes), out of it first if it is there.
  void JoinTable();
  // Hands `table` on if it is newer than the last.
  void Seen(const Placement& table) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits `timeout`, or less if stopping: whether stopping.
  bool Stopping(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // The threads: renewing the lease; listing and watching, again after a
  // watch breaks; marking caught-up copies ready.
  void Renew();
  void Watch();
  void MarkCaughtUp();

  const std::unique_ptr<Etcd> etcd_;
  const Options options_;
  const TableCallback on_table_;

  mutable absl::Mutex mu_;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time serving_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  Placement table_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool watch_broken_ ABSL_GUARDED_BY(mu_) = false;
  // Rebalance(drain): the server leaves the table and never joins it again.
  bool drained_ ABSL_GUARDED_BY(mu_) = false;
  // Copies reported caught up, not yet marked in the table: unit key, and
  // the address of the copy's server.
  std::deque<std::pair<std::string, std::string>> caught_up_ ABSL_GUARDED_BY(mu_);

  std::thread renewer_;
  std::thread watcher_;
  std::thread marker_;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_MEMBERSHIP_H_
