// The parameter server: variables, optimizers and consistency modes, as a
// plain C++ class that knows nothing of gRPC (grpc/ adapts it). Thread-safe.
#ifndef FULCRUM_PS_SERVER_PARAMETER_SERVER_H_
#define FULCRUM_PS_SERVER_PARAMETER_SERVER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/file_system.h"
#include "common/slices.h"
#include "proto/config.pb.h"
#include "proto/ps_service.pb.h"
#include "ps_server/consistency/policy.h"
#include "ps_server/coordination.h"
#include "ps_server/embedding/table_calls.h"
#include "ps_server/replicator.h"
#include "ps_server/server_checkpoints.h"
#include "ps_server/variable_store.h"
#include "ps_server/worker_table.h"

namespace fulcrum {

// Checks a server config; errors name the field.
absl::Status ValidatePsServerConfig(const PsServerConfig& config);

// What one call may carry, as the way it travels sets it; ParameterServer
// enforces them, so every transport meets the same limits. Pulled shards
// travel in slices of at most max_slice_bytes (one row at the least); a
// push carries at most max_push_bytes of gradients and a pull answers at
// most max_pull_bytes of tensor data, else RESOURCE_EXHAUSTED.
struct CallLimits {
  int64_t max_slice_bytes = kChunkBytes;
  int64_t max_push_bytes = std::numeric_limits<int64_t>::max();
  int64_t max_pull_bytes = std::numeric_limits<int64_t>::max();
};

// A streamed call's: slices of a message each, any total.
inline CallLimits StreamedCallLimits() { return CallLimits(); }
// A unary call's: one message of at most kChunkBytes each way.
inline CallLimits SmallCallLimits() { return {kChunkBytes, kChunkBytes, kChunkBytes}; }

class ParameterServer {
 public:
  // `config` must pass ValidatePsServerConfig. Starts a thread that expires
  // worker leases every lease_timeout / 4. `now` is the clock.
  // `replicas` opens the links to the servers holding backups of this
  // server's shards; without it, CreateShards refuses shards with backups.
  explicit ParameterServer(const PsServerConfig& config,
                           std::function<absl::Time()> now = absl::Now,
                           ReplicaLinkFactory replicas = nullptr);
  ~ParameterServer();

  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  // The address this server is reached at, when its cluster-spec entry
  // has port 0 (picked as it started listening): its replication calls
  // name it. Call before the address is given to anyone.
  void ServeAt(const std::string& address);

  // Replicated shards coordinated through `coordination` (which must
  // outlive this server): the chief's tables go to it, and worker calls are
  // refused while it says this server may not take writes. With an
  // etcd_endpoint configured, creating replicated shards and worker calls
  // are UNAVAILABLE until this is called. Call once.
  void SetCoordination(Coordination* coordination) { coordination_.store(coordination); }

  // The cluster's placement table changed: each shard here becomes what
  // it is in `table` (a backup whose primary was lost is promoted, a
  // primary's updates go to the backups the table lists, a backup follows
  // its new primary). A table no newer than the last one changes nothing.
  // Tables applied on several threads at once take effect one at a time.
  void ApplyPlacement(const Placement& table) ABSL_LOCKS_EXCLUDED(apply_mu_);

  // Shards move live onto this server (its share of the cluster's copies)
  // or, with `drain`, off it, after which it leaves the placement table
  // (Coordination::Rebalance). FAILED_PRECONDITION without coordination,
  // or when a drained server holds embedding tables (their rows do not
  // move yet).
  absl::StatusOr<RebalanceResponse> Rebalance(const RebalanceRequest& request);

  // Checks that config().checkpoint_dir is writable (creating it) and loads
  // its newest complete checkpoint, falling back past corrupt ones; shards
  // created from then on are filled from it. Call once, before serving.
  // Errors name the directory.
  absl::Status EnableCheckpoints(FileSystem* fs);

  // Creates shards and tables; a shard of a checkpointed variable is filled
  // from the checkpoint (FAILED_PRECONDITION if its shape, dtype or
  // optimizer differ), a new table with the checkpointed rows this server
  // owns now, from every server's file (so the number of servers may
  // change; FAILED_PRECONDITION if its width or optimizer differ). A new
  // shard's copy (the request's `copies`) makes it a backup, or a primary
  // whose updates go to its backups: a push that applies one is answered
  // once they all have it.
  absl::StatusOr<CreateShardsResponse> CreateShards(const CreateShardsRequest& request);

  // Writes every shard it is the primary of, with slots and versions, to
  // <checkpoint_dir>/ckpt-<step>/ps-<i>-of-<n>.ckpt atomically. Under a
  // placement table, the shards that table (as this server holds it when
  // the call starts) makes this server the primary of, whatever their copy
  // here is by then, and the response names its epoch: files written by
  // one table hold each shard once, though shards moved meanwhile.
  // FAILED_PRECONDITION naming a shard the table places here that this
  // server lacks (it restarted, and its clients have not made it again).
  // Its outcome and time are kept for Describe (CheckpointHistory).
  absl::StatusOr<SaveCheckpointResponse> SaveCheckpoint(const SaveCheckpointRequest& request)
      ABSL_LOCKS_EXCLUDED(placement_mu_, checkpoints_mu_);

  // At shutdown: writes this server's own checkpoint,
  // <checkpoint_dir>/final-ps-<i>-of-<n>.ckpt. When this server restarts
  // with the same placement, it restores its shards from that file if it
  // is newer than the newest complete checkpoint, losing nothing.
  absl::Status SaveFinalCheckpoint();

  // Reads the requested shards, in slices, within `limits`. Waits (until
  // `deadline`) for each shard's min_version and for what the mode's policy
  // waits for (SSP: the slowest active worker to come within
  // staleness_bound of the pull's clock). Without a worker_id it reads
  // without a lease or clock (tools, evaluators).
  absl::StatusOr<PullResponse> Pull(const PullRequest& request, absl::Time deadline,
                                    const CallLimits& limits = StreamedCallLimits());
  // Pull, with DT_FLOAT values lent from snapshots of the shards instead of
  // copied (see OutgoingPull): what a transport that sends them from where
  // they lie calls. Pushes meanwhile leave the snapshots alone.
  absl::StatusOr<OutgoingPull> PullLending(const PullRequest& request, absl::Time deadline,
                                           const CallLimits& limits = StreamedCallLimits());

  // Applies or accumulates gradients as the mode's policy says. A shard's
  // gradient may arrive as several slices of rows, which must tile it
  // exactly. The request is checked whole first (its bytes against
  // `limits` and AdmitPushBytes, worker, variables, shapes, dtypes,
  // NaN/Inf, versions): on any error nothing is applied. `received`: the
  // data of those of its slices that do not hold it.
  absl::StatusOr<PushResponse> Push(const PushRequest& request,
                                    const CallLimits& limits = StreamedCallLimits(),
                                    const ReceivedBytes& received = {});

  // A push that arrives in parts (a stream's messages), applied shard by
  // shard: after each part, the shards whose slices are all in are checked
  // and applied as Push applies a request (all of them, or on an error
  // none), and the others wait for their remaining slices. So a streamed
  // push never sits whole in memory, and its first shards are applied while
  // the rest arrive. An error ends the push and leaves the shards applied
  // before it applied: each shard is all or nothing, and a retry with the
  // same push_id applies only the others. Not thread-safe; one per stream.
  class IncomingPush {
   public:
    IncomingPush(ParameterServer* ps, const CallLimits& limits) : ps_(ps), limits_(limits) {}
    // The next part, with the first part's header; its slices are moved
    // out. `received`: the data of those of its slices that do not hold it.
    absl::Status Add(PushRequest* part, ReceivedBytes received = {});
    // After the last part: every shard whole, then what the mode does at the
    // end of a push (SSP: the worker's clock moves); the shards' outcomes.
    absl::StatusOr<PushResponse> Finish();
    // Tensor bytes received so far.
    int64_t bytes() const { return bytes_; }
    // Whether this push has handed `ref`'s shard to the policy (applied,
    // accumulated or dropped: its gradient is done with).
    bool Applied(const ShardRef& ref) const;

   private:
    // `status`, saying on an error that `applied` shards went before it.
    static absl::Status EarlierShardsStay(absl::Status status, size_t applied);

    ParameterServer* const ps_;
    const CallLimits limits_;
    bool started_ = false;
    PushRequest pending_;             // the header, and the slices of shards not yet whole
    ReceivedBytes pending_received_;  // of each of pending_'s slices
    std::vector<const Shard*> pending_shards_;  // of each of pending_'s slices
    std::map<const Shard*, int64_t> pending_rows_;
    absl::flat_hash_set<const Shard*> applied_;  // or failed: handed to the policy
    int64_t bytes_ = 0;
    PushResponse response_;
  };

  // Whether a push of `bytes` of gradients, made for `incarnation`, may go
  // on arriving. A restart is said first, so that a client can tell it and
  // recover even while a restarted server is being refilled: ABORTED for an
  // earlier incarnation, NOT_FOUND when this server holds no variables.
  // Then at most every shard here once (RESOURCE_EXHAUSTED; once a
  // placement table is applied, FAILED_PRECONDITION saying the shards
  // moved, as for a server that holds none then). A transport
  // that receives a push in parts asks as they come, before buffering more.
  absl::Status AdmitPushBytes(uint64_t incarnation, int64_t bytes) const;

  // Rows of embedding tables (TableCalls::Pull), after checking the
  // caller's incarnation and worker and renewing its lease.
  absl::StatusOr<PullRowsResponse> PullRows(const PullRowsRequest& request, absl::Time deadline);

  // Row gradients (TableCalls::Push), after the caller's checks as for
  // PullRows; the outcomes are counted.
  absl::StatusOr<PushRowsResponse> PushRows(const PushRowsRequest& request);
  // The same for one push in parts (a PushRowsStream), merged first
  // (MergeRowPush): parts that are not of one push change nothing.
  absl::StatusOr<PushRowsResponse> PushRows(std::vector<PushRowsRequest> parts);

  // A page of a table's stored rows (TableCalls::Read); ABORTED for
  // another incarnation, as for a pull.
  absl::StatusOr<ReadRowsResponse> ReadRows(const ReadRowsRequest& request) const;

  // A primary's updates to this server's backup copies, applied in order
  // (Shard::ApplyReplicated); the versions the shards are at after.
  absl::StatusOr<ReplicateResponse> Replicate(const ReplicateRequest& request);

  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request);

  DescribeResponse Describe() const;
  // Bytes workers pushed here and pulled from here (what a transport
  // counts as calls pass), for Describe.
  void CountTraffic(int64_t pushed, int64_t pulled) {
    bytes_pushed_.fetch_add(pushed, std::memory_order_relaxed);
    bytes_pulled_.fetch_add(pulled, std::memory_order_relaxed);
  }

  // The chief says training is over. WaitForJobDone returns once every
  // worker has also finished (Heartbeat with finished) or its lease has run
  // out, so no worker loses its servers mid-step.
  void JobDone(const std::string& reason);
  // True once the job is done as above; false when `timeout` passed first.
  bool WaitForJobDone(absl::Duration timeout) const;

  // Wakes every waiting pull (they fail UNAVAILABLE, so clients retry); for
  // shutdown.
  void CancelWaits();

  // Expires worker leases that have run out, then OnWorkersChanged. Called
  // periodically.
  void CheckLeases();

  // Whether a push-pull may answer each pulled shard once the push has
  // applied it, before the push ends (the mode's policy says).
  bool PullsOverlapPush() const { return policy_->PullsOverlapPush(); }

  const PsServerConfig& config() const { return config_; }

 private:
  // SaveCheckpoint, unrecorded.
  absl::StatusOr<SaveCheckpointResponse> SaveCheckpointHere(const SaveCheckpointRequest& request)
      ABSL_LOCKS_EXCLUDED(placement_mu_);
  static constexpr int kStalenessBuckets = 16;

  // One shard's pushed gradient, checked and decoded: its slices' values
  // in row order, which tile the shard.
  struct PushedShard {
    Shard* shard;
    ShardGradient gradient;
  };
  // Checks every gradient of `request` (variables, shapes, dtypes, tiling,
  // NaN/Inf, versions) and decodes it: from the slices, or from `received`
  // where it says; 16-bit values are widened into `widened`, which the
  // parts point into.
  absl::StatusOr<std::vector<PushedShard>> DecodePush(
      const PushRequest& request, const ReceivedBytes& received,
      std::deque<std::vector<float>>* widened) const;
  // A push's checks before any of its shards: its `bytes` of gradients
  // (AdmitPushBytes, `limits`), its worker, the mode's fields. Renews the
  // worker's lease.
  absl::Status StartPush(const PushRequest& header, int64_t bytes, const CallLimits& limits);
  // Checks the shards of `request` whole (DecodePush), then hands each to
  // the policy, appending their outcomes to `response`.
  absl::Status ApplyShards(const PushRequest& request, const ReceivedBytes& received,
                           PushResponse* response);
  // Renews `worker`'s lease; OnWorkersChanged when it arrived.
  void Renew(int worker);
  // After workers arrived, died or finished: the policy's reaction, and the
  // end of the job if it is done.
  void OnWorkersChanged();
  void RecordOutcome(const ShardPushResult& result);

  // Makes each of `held` (shards, tables' ranges) that `table` places what
  // the table says it is here (ApplyUnit).
  void ApplyUnits(const Placement& table, const std::vector<ReplicatedUnit*>& held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // Makes `copy` the copy `unit` of `table` says it is here: a backup of
  // its primary, or the primary (promoted, if it was a backup: the first
  // promotion of the table sets *promoted) replicating to its backups; a
  // copy the unit has none of here (it moved away) is freed
  // (VariableStore::RemoveUnit). `addresses`: ServerAddresses(table).
  void ApplyUnit(const Placement& table, const std::map<int32_t, std::string>& addresses,
                 const PlacedUnit& unit, ReplicatedUnit* copy, bool* promoted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // The replicated shards and ranges CreateShards created: each becomes the
  // copy its request names, then the one this server's table places here,
  // if the table has it yet.
  void PlaceCreated(const std::vector<std::pair<ReplicatedUnit*, const ShardCopy*>>& copies)
      ABSL_LOCKS_EXCLUDED(apply_mu_);
  // INVALID_ARGUMENT for a copy that is both a primary and a backup;
  // FAILED_PRECONDITION for one with backups on a server that replicates
  // to none.
  absl::Status CheckCopyRequest(const ShardCopy& copy) const;
  // The table spec of each range `request` names, in order, when each is
  // of a table of the request, its partition one of the table's and its
  // copy sound (CheckCopyRequest); else INVALID_ARGUMENT or
  // FAILED_PRECONDITION naming the first that is not.
  absl::StatusOr<std::vector<const EmbeddingTableSpec*>> CheckRanges(
      const CreateShardsRequest& request) const;
  // Creates the ranges `request` names, of `specs` (CheckRanges'), where
  // missing, each restored from the checkpoint; those with copies are added
  // to `copies` (pointing into `request`), for PlaceCreated.
  absl::Status CreateRanges(const CreateShardsRequest& request,
                            const std::vector<const EmbeddingTableSpec*>& specs,
                            CreateShardsResponse* response,
                            std::vector<std::pair<ReplicatedUnit*, const ShardCopy*>>* copies);
  // Each server's address in `table`, by id.
  static std::map<int32_t, std::string> ServerAddresses(const Placement& table);
  // The replicator of this server's primaries, from own_address_; it
  // reports caught-up copies to the coordination.
  void MakeReplicator();
  // The shard, for a worker's call: NOT_FOUND when there is no such shard
  // (the server lost the caller's state), but FAILED_PRECONDITION naming
  // its primary when the placement table has it elsewhere (it moved away).
  absl::StatusOr<Shard*> FindShard(const std::string& variable, int shard) const;
  // The same of a table's range of ids.
  absl::StatusOr<EmbeddingTable*> FindRange(const std::string& table, int partition) const;
  // `missing`, what finding the unit of `key` said; but for NOT_FOUND of
  // one the placement table puts elsewhere, FAILED_PRECONDITION naming its
  // primary.
  absl::Status Moved(const std::string& key, absl::Status missing) const;
  // The placement table's unit of `key`; null when it has none.
  const PlacedUnit* UnitLocked(const std::string& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(placement_mu_);
  // Whether the placement table makes this server the primary of a shard
  // it does not hold (it restarted, with the only copy: --replication=1).
  bool LacksOwnPrimaries() const ABSL_LOCKS_EXCLUDED(placement_mu_);
  // The units (shard keys) the placement table makes this server the
  // primary of.
  std::set<std::string> PrimariesHereLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(placement_mu_);
  // The first of `keys` (units' keys) whose unit this server lacks; ""
  // when it holds them all.
  std::string FirstMissing(const std::set<std::string>& keys) const;
  // OK when the placement table puts a backup copy of unit `key` here,
  // of `primary`; else FAILED_PRECONDITION saying so.
  absl::Status CheckCopyHere(const std::string& key, const std::string& primary) const;
  // The copy here that `update` (from `primary`) is for: created, when it
  // starts a snapshot, if the placement table puts it here; null for one
  // the table puts here that is still to come; else what finding it said.
  absl::StatusOr<ReplicatedUnit*> CopyFor(const ShardUpdate& update, const std::string& primary);
  // A backup copy of `primary`'s shard of `spec`, or of range `partition`
  // of a table, created empty to take its snapshot (Replicate): only one
  // the placement table puts here.
  absl::StatusOr<Shard*> CreateCopy(const ShardSpec& spec, const std::string& primary);
  absl::StatusOr<EmbeddingTable*> CreateTableCopy(const EmbeddingTableSpec& spec, int partition,
                                                  const std::string& primary);

  // OK when `shard` is a primary. A backup copy answers FAILED_PRECONDITION
  // naming its primary, or UNAVAILABLE (retried) when the call was routed
  // by a newer placement table (`routed_by`) than this server has applied.
  absl::Status CheckPrimary(const Shard& shard, int64_t routed_by) const;
  // `status`, but a FAILED_PRECONDITION (a backup, a unit moved away) of a
  // call routed by a placement table newer than this server applied is
  // UNAVAILABLE, retried: the unit may be promoted or created here in a
  // moment.
  absl::Status RoutedAhead(absl::Status status, int64_t routed_by) const;
  // ABORTED when the caller learned its versions from another incarnation.
  absl::Status CheckIncarnation(uint64_t incarnation) const;
  // OK, or why the coordination says this server may take no writes.
  absl::Status CheckServing() const;

  const PsServerConfig config_;
  const uint64_t incarnation_;
  std::string own_address_;  // as the cluster spec names it (or ServeAt); "": not given
  VariableStore store_;
  ServerCheckpoints checkpoints_;  // of store_
  WorkerTable workers_;
  const std::unique_ptr<ConsistencyPolicy> policy_;  // of config_.mode(), over store_ and workers_
  TableCalls tables_;                                // over store_ and policy_
  const ReplicaLinkFactory replicas_;
  // Of store_'s primaries with backups; null without a ReplicaLinkFactory.
  std::unique_ptr<Replicator> replicator_;
  std::atomic<Coordination*> coordination_{nullptr};
  // Held while a table is applied to the shards (ApplyPlacement,
  // PlaceCreated): tables come on several threads, and an older one must
  // not undo a newer one. Taken before placement_mu_.
  absl::Mutex apply_mu_ ABSL_ACQUIRED_BEFORE(placement_mu_);
  mutable absl::Mutex placement_mu_;
  Placement placement_ ABSL_GUARDED_BY(placement_mu_);  // the last applied; epoch 0: none
  // The newest epoch whose units every shard here has taken on.
  std::atomic<int64_t> placement_applied_{0};

  std::atomic<int64_t> updates_applied_{0};
  mutable absl::Mutex checkpoints_mu_;
  CheckpointHistory checkpoint_info_ ABSL_GUARDED_BY(checkpoints_mu_);  // what Describe says
  std::atomic<int64_t> bytes_pushed_{0};
  std::atomic<int64_t> bytes_pulled_{0};
  std::atomic<int64_t> stale_dropped_{0};
  std::array<std::atomic<int64_t>, kStalenessBuckets> staleness_histogram_{};

  std::atomic<bool> job_done_requested_{false};
  std::atomic<bool> job_done_notified_{false};
  absl::Notification job_done_;
  absl::Notification stop_lease_thread_;
  std::thread lease_thread_;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_PARAMETER_SERVER_H_
