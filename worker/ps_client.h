// PsClient: the public C++ API for training against Fulcrum's parameter
// servers -- the counterpart of TensorFlow's custom training loop with a
// ParameterServerStrategy.
//
// A training loop:
//
//   PsClientOptions options;
//   options.worker_id = replica_id;           // from the cluster spec
//   options.mode = SYNC;                      // as the servers run
//   auto client = PsClient::Connect({"ps0:2222", "ps1:2222"}, options);
//   client->CreateVariables(specs);           // idempotent: every worker may call it
//   TensorMap weights;
//   for (...) {
//     client->Pull({}, &weights);             // sync: waits for this step's update
//     TensorMap grads = ComputeGradients(weights, batch);   // your model
//     client->Push(grads);                    // the optimizer runs on the servers
//   }
//   client->Finish();                         // every worker, after its last push
//   client->JobDone("finished");              // chief: the servers exit 0
//
// Variables are partitioned and placed on the servers by their specs
// (common/partitioner.h); pulls and pushes go to every server involved in
// parallel; UNAVAILABLE servers are retried with backoff up to
// retry_timeout; errors name the server, the variable and what happened.
//
// A server that restarted (it lost its variables, or answers ABORTED for
// another incarnation) is recovered on the spot: the client creates its
// variables there again -- filled from the newest checkpoint, when the
// servers keep them -- and forgets the versions it had learned from it.
// Gradients meant for it in that step are dropped (PushStats::lost); the
// updates lost since the checkpoint are logged.
//
// The consistency mode sets what the client tracks for you:
//   SYNC:  a push carries the version each shard was pulled at; the next pull
//          waits (long poll) until the step's aggregated update is applied.
//   ASYNC: pushes apply at once; the servers record their staleness.
//   SSP:   the client keeps a clock (one per push); a pull waits while this
//          worker is more than the servers' bound ahead of the slowest.
//
// Thread-safety: Pull, Push and PushPull are called from one thread at a time
// (the training loop). Heartbeats run on their own thread once started.
#ifndef FULCRUM_WORKER_PS_CLIENT_H_
#define FULCRUM_WORKER_PS_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/partitioner.h"
#include "common/tensor.h"
#include "common/thread_pool.h"
#include "proto/config.pb.h"
#include "proto/ps_service.pb.h"
#include "worker/consistency/policy.h"
#include "worker/transport/ps_transport.h"

namespace fulcrum {

struct PsClientOptions {
  // This worker's replica id (ReplicaId of the cluster spec); -1 for a
  // read-only client (evaluator, tools) that may only pull.
  int worker_id = 0;
  // Must match the servers' --mode.
  ConsistencyMode mode = ASYNC;
  // Deadline of each call, long polls included. A server that is not up yet
  // (or restarting) is waited for within it.
  absl::Duration call_timeout = absl::Seconds(60);
  // How long calls that fail UNAVAILABLE or CANCELLED (no server, a call
  // broken off, a server shutting down) are retried, with backoff, before
  // the error is returned.
  absl::Duration retry_timeout = absl::Seconds(60);
  // First retry delay; doubles up to max_backoff.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  // How gradients and pulled values travel: DT_FLOAT, or DT_BFLOAT16 or
  // DT_FLOAT16 for half the bytes at the rounding error common/tensor.h
  // states. The servers keep and update float32 values either way.
  DataType wire_dtype = DT_FLOAT;
  // Connect: gRPC channels (TCP connections) to each server. With more
  // than one, each call of more than kChunkBytes is split by shard over
  // them and sent in parallel (worker/transport/parallel_ps_transport.h says what
  // that changes); at least 1.
  int channels_per_server = 1;
};

// What the servers did with one push, summed over shards.
struct PushStats {
  int applied = 0;      // applied now
  int accumulated = 0;  // sync: waiting for the step's other gradients
  int stale = 0;        // dropped: computed from an old version
  int duplicate = 0;    // sync: already pushed for this step
  int lost = 0;         // dropped: their server restarted since they were pulled
  int64_t max_staleness = 0;
};

class PsClient {
 public:
  // A client over `servers` (one per PS task, in task order).
  PsClient(std::vector<std::unique_ptr<PsTransport>> servers, PsClientOptions options);
  ~PsClient();

  // A client over gRPC to the servers at `addresses` ("host:port", in task
  // order). Connects lazily. Defined by the gRPC transport
  // (worker/transport/grpc_ps_transport.cc): link //worker/transport:grpc.
  static std::unique_ptr<PsClient> Connect(const std::vector<std::string>& addresses,
                                           PsClientOptions options);

  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  // Partitions and places the variables and creates their shards on the
  // servers, initialised there from each spec's initializer. Idempotent: the
  // same specs again are OK (so every worker may call it); a different spec
  // under an existing name is ALREADY_EXISTS. Must precede pulls and pushes.
  absl::Status CreateVariables(const std::vector<VariableSpec>& specs);

  // Pulls the named variables (all when `names` is empty) into `out`. The
  // values are read into `out` as they arrive, so after an error its
  // tensors for these variables may hold a mix of old and new values.
  absl::Status Pull(const std::vector<std::string>& names, TensorMap* out);

  // Pushes gradients, each the shape of its variable. Nothing is sent when a
  // name or shape is wrong.
  absl::StatusOr<PushStats> Push(const TensorMap& gradients);

  // Push, then pull (after the push is applied), in one round trip per
  // server; `out` as for Pull.
  absl::StatusOr<PushStats> PushPull(const TensorMap& gradients,
                                     const std::vector<std::string>& names, TensorMap* out);

  // Renews this worker's lease on every server.
  absl::Status Heartbeat();

  // Tells every server this worker has finished training: sync steps and
  // SSP waits stop counting it, and the job can end without it. Call once,
  // after the last push.
  absl::Status Finish();

  // Sends heartbeats every `interval` from a thread, until destruction, so
  // the lease holds through long computations.
  void StartHeartbeats(absl::Duration interval);

  // Every server's state, in task order.
  absl::StatusOr<std::vector<DescribeResponse>> Describe();

  // Phase one of checkpoint `step`: every server writes its file; their
  // answers in task order (worker/checkpointer.h does phase two).
  absl::StatusOr<std::vector<SaveCheckpointResponse>> SaveCheckpoint(int64_t step);

  // Tells every server that training is over (the chief calls it); each
  // exits 0 once every worker has finished or is dead.
  absl::Status JobDone(const std::string& reason);

  // The lowest version among the shards of the last pull: the global step in
  // sync mode.
  int64_t step() const { return step_; }
  // Pushes made so far: the clock SSP calls carry.
  int64_t clock() const { return clock_; }
  // The consistency mode's client side.
  const ClientConsistencyPolicy& policy() const { return *policy_; }

  const std::vector<VariablePlacement>& placement() const { return placement_; }
  int num_servers() const { return static_cast<int>(servers_.size()); }

 private:
  struct ShardState {
    int64_t pulled_version = 0;
    int64_t min_version = 0;  // the next pull waits for this (the policy says)
  };

  absl::StatusOr<const VariablePlacement*> Find(const std::string& name) const;
  absl::StatusOr<std::vector<const VariablePlacement*>> Resolve(
      const std::vector<std::string>& names) const;
  // Each server's part of the push of `gradients`.
  using Pushes = std::vector<std::shared_ptr<PushRequest>>;
  absl::StatusOr<Pushes> BuildPushes(const TensorMap& gradients);
  // The pull of `variables` from each server, and the tensor bytes each
  // answers with.
  std::vector<PullRequest> BuildPulls(const std::vector<const VariablePlacement*>& variables,
                                      std::vector<int64_t>* response_bytes) const;
  // Where a server's pulled float32 values go in the output tensors: the
  // transport reads them straight into place (a gRPC transport from the
  // socket's buffers). Defined in ps_client.cc.
  class Placer;
  // Sizes `out` for `variables`; one placer per server into it.
  std::vector<Placer> PrepareOutputs(const std::vector<const VariablePlacement*>& variables,
                                     TensorMap* out) const;
  // Checks that the responses cover every shard of `variables` and copies
  // the values not already placed into `out`, as PrepareOutputs sized it.
  absl::Status Assemble(const std::vector<const VariablePlacement*>& variables,
                        std::vector<PullResponse>& responses, const std::vector<Placer>& placers,
                        TensorMap* out);
  void AfterPush(const Pushes& pushes, const std::vector<bool>& dropped);
  PushStats Summarize(const google::protobuf::RepeatedPtrField<ShardPushResult>& results,
                      PushStats stats) const;

  absl::Status SendHeartbeat(bool finished);
  // Creates this client's variables on server `ps` again after it lost them.
  absl::Status Recover(int ps, absl::Time deadline);
  // Recover(ps), then `pull` from it afresh, its values placed by `placer`.
  absl::StatusOr<PullResponse> RecoverAndPull(int ps, PullRequest pull, int64_t response_bytes,
                                              absl::Time deadline, Placer* placer);
  // Forgets the versions learned from the servers in `recovered`.
  void ForgetVersions(const std::vector<bool>& recovered);
  // Runs call(ps) for every server with work (`involved`), in parallel;
  // retries UNAVAILABLE with backoff; the first error, named by server.
  absl::Status ForEachServer(const std::vector<bool>& involved, const std::string& what,
                             const std::function<absl::Status(int ps, absl::Time deadline)>& call);

  const std::vector<std::unique_ptr<PsTransport>> servers_;
  const PsClientOptions options_;
  const std::unique_ptr<ClientConsistencyPolicy> policy_;  // of options_.mode
  ThreadPool fan_out_;  // ForEachServer's calls beside the caller's own
  std::vector<VariablePlacement> placement_;
  std::map<std::string, size_t> index_;               // name -> placement_ index
  std::vector<CreateShardsRequest> create_requests_;  // per server
  std::vector<uint64_t> incarnations_;                // per server, from CreateShards
  std::map<std::pair<std::string, int>, ShardState> shard_state_;
  int64_t step_ = 0;
  int64_t clock_ = 0;
  std::mt19937_64 push_ids_;

  absl::Notification stop_heartbeats_;
  std::thread heartbeat_thread_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_PS_CLIENT_H_
