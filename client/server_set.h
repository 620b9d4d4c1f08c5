// ServerSet: the parameter servers one client talks to, and the client's
// session with each of them -- the part of the client library that dense
// calls (dense_calls.h) and row calls (row_calls.h) share:
//  - the connections: one PsTransport per server, in task order;
//  - calls fanned out to the servers in parallel, UNAVAILABLE retried with
//    backoff, errors named by server;
//  - the incarnation of each server (which start of it this client's state
//    lives on), and what each server is given again when it restarts (its
//    shards and tables): a server that lost the client's state is recovered
//    on the spot, and a hook then forgets the versions learned from it;
//  - the worker's lease: heartbeats (on a thread of their own once
//    started), the wait for the job's start, the finish; and the job's
//    control calls (describe, checkpoint, job done);
//  - the worker's clock and its pushes' idempotency keys.
// Thread-safety: calls come from one thread at a time (the training loop),
// except the heartbeat thread's, which touch only the lease.
#ifndef FULCRUM_CLIENT_SERVER_SET_H_
#define FULCRUM_CLIENT_SERVER_SET_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/consistency/policy.h"
#include "client/transport/ps_transport.h"
#include "common/placement.h"
#include "common/thread_pool.h"
#include "fulcrum/ps_client.h"
#include "proto/placement.pb.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

// The most bytes of initial values one CreateShards call carries (a shard
// with more goes alone).
constexpr int64_t kCreatePartBytes = int64_t{32} << 20;
// The largest initial value of one shard that a call can carry, under the
// servers' default --max_message_mb.
constexpr int64_t kMaxInitialShardBytes = int64_t{255} << 20;

// What a client learns of a shard, or of a table's part on one server.
struct ShardVersions {
  int64_t pulled_version = 0;
  int64_t min_version = 0;  // the next pull waits for this (the policy says)
  // Its server restarted since pulled_version was read: gradients computed
  // on those values go as computed at version 0 until the next pull.
  bool restarted = false;
};

// A call's result kept in *out: OK, or the call's error (what the calls
// that ForEachServer fans out return).
template <typename T>
absl::Status Keep(absl::StatusOr<T> result, T* out) {
  if (!result.ok()) return result.status();
  *out = *std::move(result);
  return absl::OkStatus();
}

// Adds the outcomes of one server's answer to a push to `stats`.
PushStats AddPushResults(const google::protobuf::RepeatedPtrField<ShardPushResult>& results,
                         PushStats stats);

class ServerSet {
 public:
  // One call to server `ps`, within `deadline`.
  using ServerCall = std::function<absl::Status(int ps, absl::Time deadline)>;
  // Forgets what was learned from the servers marked in `recovered`.
  using ForgetHook = std::function<void(const std::vector<bool>& recovered)>;

  // Opens the connection to a server that joined the cluster later.
  using Connect = std::function<std::unique_ptr<PsTransport>(const std::string& address)>;

  // `servers`: one per PS task, in task order; not empty. `options` and
  // `policy` must outlive the set. `connect`, when given, lets the set
  // grow by the servers a placement table names (Add).
  ServerSet(std::vector<std::unique_ptr<PsTransport>> servers, const PsClientOptions& options,
            const ClientConsistencyPolicy& policy, Connect connect = nullptr);
  ~ServerSet();  // stops the heartbeats

  ServerSet(const ServerSet&) = delete;
  ServerSet& operator=(const ServerSet&) = delete;

  // Whether the options' trace file records now: pushes are then marked
  // for the servers to trace their handling.
  bool Tracing() const;
  // Servers are only ever added (Add), at the end, so an index stays
  // valid; a set that grew has the servers of its task list first.
  int size() const ABSL_LOCKS_EXCLUDED(servers_mu_);
  PsTransport& server(int ps) const ABSL_LOCKS_EXCLUDED(servers_mu_);
  std::string address(int ps) const { return server(ps).address(); }
  // The index of the server at `address`, connecting to it first when it
  // is not one of the set's (a server added to a running job: the
  // placement table names it); -1 when the set cannot connect (no
  // Connect). Called by the thread that makes the calls, between calls.
  int Add(const std::string& address) ABSL_LOCKS_EXCLUDED(servers_mu_);
  const PsClientOptions& options() const { return options_; }
  const ClientConsistencyPolicy& policy() const { return policy_; }
  // Whether every push goes to server `ps`, gradients for it or none (SSP:
  // each server keeps every worker's clock), since it has not left.
  bool EveryPushReaches(int ps) const { return policy_.PushReachesEveryServer() && !Left(ps); }

  // The incarnation this client's state lives on at `ps`; 0: not known yet.
  uint64_t incarnation(int ps) const { return incarnations_[ps]; }

  // The worker's clock: its pushes so far, which SSP calls carry.
  int64_t clock() const { return clock_; }
  void set_clock(int64_t clock) { clock_ = clock; }
  // A push's idempotency key, never 0: the same on every retry and part.
  uint64_t NewPushId();

  // Replicated shards whose servers coordinate through etcd: from now on,
  // a server that does not answer (or answers that it lost this client's
  // state) is looked up in the cluster's placement table, asking the other
  // servers, and once the table no longer has it, calls to it fail at once
  // (UNAVAILABLE, saying it left; its shards are elsewhere: placement())
  // and it is left out of the calls to every server.
  void FollowPlacement();
  bool following() const { return following_; }
  // The newest placement table learned from the servers; epoch 0: none.
  Placement placement() const ABSL_LOCKS_EXCLUDED(placement_mu_);
  // Asks the servers that have not left, but `skip`, for their table (the
  // first to answer), and keeps it when it is newer.
  void RefreshPlacement(absl::Time deadline, int skip = -1) ABSL_LOCKS_EXCLUDED(placement_mu_);
  // A client that starts after a server was lost for good (a restarted or
  // late worker) finds the cluster's table first, asking each server for a
  // moment at most, and follows it when there is one: the lost server is
  // left out of what follows instead of being waited for.
  void FindTable();
  // Server `ps` is not in the newest table.
  bool Left(int ps) const ABSL_LOCKS_EXCLUDED(placement_mu_);
  // The index of the server at `address`; -1: not one of this client's.
  int IndexOf(const std::string& address) const;

  // Runs call(ps) for every server `involved` (one flag per server), in
  // parallel; retries UNAVAILABLE and CANCELLED with backoff for up to the
  // options' retry_timeout (a server that left: see FollowPlacement). The
  // first error, named by server and `what`.
  absl::Status ForEachServer(const std::vector<bool>& involved, const std::string& what,
                             const ServerCall& call);
  // ForEachServer on every server that has not left. One lost for good
  // while it was being called (its calls failed until the table dropped
  // it) is left out, and the servers that did not answer are called again,
  // a few times at most; those that answered are not. `sized`, when given,
  // is told the number of servers before each round (for answers kept by
  // server: a server lost for good leaves its entry as it was).
  absl::Status ForEveryServer(const std::string& what, const ServerCall& call,
                              const std::function<void(size_t servers)>& sized = nullptr);
  // One flag per server: whether it has not left.
  std::vector<bool> NotLeft() const;

  // ForEachServer for calls on the client's state. A server that answers
  // that it lost it (it restarted) is recovered: its shards and tables are
  // created again, it is marked in *recovered, and its result is then
  // after_recovery(ps) when given, else OK (what the call carried is lost).
  // Following a placement table, a restarted server rejoined it holding
  // none of the shards' copies: its result is ABORTED then, for the call to
  // be made again by the newer table. Afterwards the versions learned from
  // the recovered servers are forgotten (the hook).
  absl::Status ForEachServerRecovering(const std::vector<bool>& involved, const std::string& what,
                                       const ServerCall& call, const ServerCall& after_recovery,
                                       std::vector<bool>* recovered);

  // The hook that forgets the versions the call families learned.
  void SetForgetHook(ForgetHook forget) { forget_ = std::move(forget); }

  // The copies of `units` (shards or tables' ranges) on this set's servers,
  // asked by the creation of variables and of tables: where the servers
  // replicate, or coordinate through etcd, a table of R copies each by
  // InitialPlacement (server ids are this set's indices); else an empty
  // one (one server, or --replication=1 without etcd). With more than one
  // server it first asks them for the cluster's placement table and
  // follows it when there is one (servers that left get no copy); then for
  // their --replication (FAILED_PRECONDITION when they disagree).
  absl::StatusOr<Placement> PlaceCopies(const std::vector<PlacementUnitSpec>& units);
  // The servers holding `unit` of PlaceCopies' table, each with the copy it
  // is told it holds: the primary told its backups, a backup its primary.
  std::vector<std::pair<int, ShardCopy>> CopiesOf(const PlacedUnit& unit) const;
  // Sends each server its part of a creation (`requests`, one per server;
  // those with no shard and no range, and servers that left, are not
  // asked), with `table` when it has units, and then follows the servers'
  // table. Returns the incarnations met (0 where not asked). `what` names
  // the calls in errors.
  absl::StatusOr<std::vector<uint64_t>> CreateEverywhere(std::vector<CreateShardsRequest>* requests,
                                                         const Placement& table,
                                                         const std::string& what);

  // What each server is given again when it restarts, as the variables'
  // creation made it (one request per server), and the incarnations that
  // creation met.
  void RememberCreated(std::vector<CreateShardsRequest> requests,
                       std::vector<uint64_t> incarnations);
  // Tables' ranges created (one request per server, of tables and
  // ranges): added to what each server is given again; `incarnations` are
  // taken where none is known.
  void RememberTables(const std::vector<CreateShardsRequest>& requests,
                      const std::vector<uint64_t>& incarnations);
  // Whether the placement table is newer than `routed_epoch` (the one a
  // client's calls were routed by), after asking the servers for theirs
  // when a call `failed` because a unit moved (FAILED_PRECONDITION) and
  // this client knows of no newer table.
  bool PlacementMovedOn(const absl::Status& failed, int64_t routed_epoch);

  // Creates what `request` names on server `ps`, in calls of at most about
  // kCreatePartBytes of initial values each (a shard at a time, the tables
  // with the first): so a model larger than one message can be made. The
  // answers summed; one incarnation, or UNAVAILABLE if the server kept
  // restarting between the parts.
  absl::StatusOr<CreateShardsResponse> CreateOn(int ps, const CreateShardsRequest& request,
                                                absl::Time deadline);

  // The lease and the job; see fulcrum/ps_client.h.
  absl::Status Heartbeat() { return SendHeartbeat(false).status(); }
  absl::Status Finish();
  absl::Status AwaitJobStart(const std::atomic<bool>* stop);
  void StartHeartbeats(absl::Duration interval);
  absl::StatusOr<std::vector<DescribeResponse>> Describe();
  absl::StatusOr<std::vector<SaveCheckpointResponse>> SaveCheckpoint(int64_t step);
  absl::Status JobDone(const std::string& reason);

 private:
  // Whether server `ps`, which failed a call, has left the cluster (asking
  // the others for the table when following it).
  bool HasLeft(int ps, absl::Time deadline);
  // The error a call to a server that left fails with.
  absl::Status LeftError(int ps) const;
  // Renews the lease (and says `finished`) on every server; their answers.
  absl::StatusOr<std::vector<HeartbeatResponse>> SendHeartbeat(bool finished);
  // What server `ps`, restarted, is given again: its shards and tables'
  // ranges but, where the servers keep a placement table, those the table
  // places (a restarted server rejoined it holding nothing, and its copies
  // are filled from their primaries) except those whose primary the table
  // says it is (their only copy, --replication=1: created again, from the
  // checkpoint, wherever the client first created them).
  CreateShardsRequest RecoveryRequest(int ps) const;
  // Whether server `ps`, restarted, is still the primary of some shard in
  // the placement table (its only copy: it kept its place).
  bool KeptItsPlace(int ps) const;
  // Creates this client's shards and tables on server `ps` again.
  absl::Status Recover(int ps, absl::Time deadline);
  // `transport` to server `ps`, its calls recorded in options' trace file
  // if there is one (TracingPsTransport).
  std::unique_ptr<PsTransport> Traced(std::unique_ptr<PsTransport> transport, int ps) const;

  mutable absl::Mutex servers_mu_;
  // A deque: what server() returned stays where it is as the set grows.
  std::deque<std::unique_ptr<PsTransport>> servers_ ABSL_GUARDED_BY(servers_mu_);
  const Connect connect_;
  const PsClientOptions& options_;
  const ClientConsistencyPolicy& policy_;
  ThreadPool fan_out_;  // ForEachServer's calls beside the caller's own
  std::vector<uint64_t> incarnations_;
  std::vector<CreateShardsRequest> create_requests_;  // per server, for Recover
  ForgetHook forget_;
  int64_t clock_ = 0;
  std::mt19937_64 push_ids_;
  std::atomic<bool> following_{false};
  mutable absl::Mutex placement_mu_;
  Placement placement_ ABSL_GUARDED_BY(placement_mu_);

  // Notified as the set is destroyed: heartbeats stop, retries give up.
  absl::Notification closing_;
  std::atomic<bool> finished_{false};  // Finish succeeded: no lease left to renew
  std::thread heartbeat_thread_;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_SERVER_SET_H_
