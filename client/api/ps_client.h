// PsClient: the public C++ API for training against Fulcrum's parameter
// servers -- the counterpart of TensorFlow's custom training loop with a
// ParameterServerStrategy.
//
// A training loop:
//
//   PsClientOptions options;
//   options.worker_id = replica_id;           // from the cluster spec
//   options.mode = SYNC;                      // as the servers run
//   auto client = NewGrpcPsClient({"ps0:2222", "ps1:2222"}, options);  // fulcrum/grpc_ps_client.h
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
// (their PartitionerSpec); pulls and pushes go to every server involved in
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
//
// The interface knows nothing of how calls travel: NewGrpcPsClient
// (fulcrum/grpc_ps_client.h) makes one over gRPC.
//
// Include as "fulcrum/ps_client.h"; link //client/api:ps_client. The
// variable specs and server descriptions are the wire contract's messages
// (proto/tensor.proto, proto/ps_service.proto).
#ifndef FULCRUM_CLIENT_API_PS_CLIENT_H_
#define FULCRUM_CLIENT_API_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "fulcrum/tensor.h"
#include "proto/config.pb.h"
#include "proto/ps_service.pb.h"
#include "proto/tensor.pb.h"

namespace fulcrum {

class TraceFile;

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
  // DT_FLOAT16 for half the bytes, rounded to nearest even: at most 2^-8
  // of each value (bfloat16, 0.39%) or 2^-11 (float16, 0.049%, which fails
  // on values beyond 65504). The servers keep and update float32 values
  // either way.
  DataType wire_dtype = DT_FLOAT;
  // NewGrpcPsClient: gRPC channels (TCP connections) to each server. With more
  // than one, each call of more than 4 MiB is split by shard over them and
  // sent in parallel; each part then applies as a push of its own (docs/speed.md,
  // "Several channels per server"). At least 1.
  int channels_per_server = 1;
  // Mutual TLS (docs/security.md): PEM files of this client's certificate
  // and key, and of the CA that signed the servers' certificates. All empty:
  // plaintext. The files are reread every minute (rotation).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  // A read-only client (worker_id -1: an evaluator, a tool) of servers
  // with replicated shards: pulls each shard from a ready backup copy (the
  // first the placement table lists; the primary when it has none),
  // taking reads off the servers that take the pushes. Async reads: a
  // backup has every version its primary acknowledged, and may lack one
  // not acknowledged yet. Workers' pulls always go to the primaries.
  bool read_from_backups = false;
  // A token every call carries, for servers that need one (docs/security.md): the cluster token, or
  // the control token for the chief and tools. Empty: none.
  std::string auth_token;
  // A trace file (common/trace.h, --trace_file) that, while it records,
  // gets a span for each data call to each server, and whose recording
  // marks pushes for the servers to trace too. Must outlive the client;
  // null: none.
  TraceFile* trace = nullptr;
};

// One embedding table's ids in a sparse pull or push, repeats allowed, in
// any order (a batch's ids of one field, say).
struct TableIds {
  std::string table;
  std::vector<int64_t> ids;
};

// What the servers did with one push, summed over shards.
struct PushStats {
  int applied = 0;      // applied now
  int accumulated = 0;  // sync: waiting for the step's other gradients
  int stale = 0;        // dropped: computed from an old version
  int duplicate = 0;    // already taken: sync, pushed for this step; or a retried push
  int lost = 0;         // dropped: their server restarted since they were pulled
  int64_t max_staleness = 0;
  // PushPull: the longest any server held the pull for the other workers
  // (sync's step, SSP's bound), as the servers measured it.
  absl::Duration waited;
};

class PsClient {
 public:
  virtual ~PsClient() = default;

  // Partitions and places the variables and creates their shards on the
  // servers, initialised there from each spec's initializer. Idempotent: the
  // same specs again are OK (so every worker may call it); a different spec
  // under an existing name is ALREADY_EXISTS. Must precede pulls and pushes.
  absl::Status CreateVariables(const std::vector<VariableSpec>& specs) {
    return CreateVariables(specs, {});
  }
  // The same, with the values of some variables given (a model initialised
  // in the client): a shard created by this call takes its rows of them
  // instead of its initializer; one that exists or is restored from a
  // checkpoint keeps its own. So the worker that creates a variable first
  // decides its value: let the chief create, and the others call this
  // without values once the variables exist (Describe lists them).
  virtual absl::Status CreateVariables(const std::vector<VariableSpec>& specs,
                                       const ConstTensorViews& initial_values) = 0;

  // Creates embedding tables on every server, each holding the rows that
  // EmbeddingOwner gives it; idempotent as CreateVariables. Call after
  // CreateVariables; a restarted server gets them again as it does its
  // variables.
  virtual absl::Status CreateTables(const std::vector<EmbeddingTableSpec>& specs) = 0;

  // The rows of each lookup's ids: (*rows)[i] gets lookups[i].ids.size()
  // rows of the table's width, in the ids' order. Each distinct id is asked
  // of its server once; the servers are asked in parallel.
  virtual absl::Status PullRows(const std::vector<TableIds>& lookups,
                                std::vector<std::vector<float>>* rows) = 0;

  // PullRows into the caller's buffers: out[i] must hold exactly
  // lookups[i].ids.size() rows of the table's width.
  virtual absl::Status PullRowsInto(const std::vector<TableIds>& lookups,
                                    const std::vector<absl::Span<float>>& out) = 0;

  // Pushes row gradients: grads[i] holds a row per id of lookups[i] (a
  // std::vector<float> converts), read where it lies; a repeated id's rows
  // are summed, and each distinct id goes to its server once. In sync,
  // every table of `lookups` reaches every server each step, ids for it or
  // not, so that the step completes.
  virtual absl::StatusOr<PushStats> PushRows(const std::vector<TableIds>& lookups,
                                             const std::vector<absl::Span<const float>>& grads) = 0;

  // Every row the servers store of `table`, as they are (a dump, not a
  // lookup: nothing waits, unseen ids are not made up, the order of use is
  // kept): each server's, page after page, given to `visit` as it comes
  // (ids, values, with `slots` the optimizer's slots; ReadRowsResponse).
  // Each id lives on one server, so no id comes twice. A page is read at
  // one moment and rows stored or evicted while the dump runs may be
  // missed: read after the last step for an exact copy. NOT_FOUND when a
  // server lacks the table; ABORTED when one restarts during the dump;
  // visit's first error ends it. Any client, read-only ones too.
  virtual absl::Status ReadTable(
      const std::string& table, bool slots,
      absl::FunctionRef<absl::Status(const ReadRowsResponse& page)> visit) = 0;

  // Pulls the named variables (all when `names` is empty) into `out`. The
  // values are read into `out` as they arrive, so after an error its
  // tensors for these variables may hold a mix of old and new values.
  virtual absl::Status Pull(const std::vector<std::string>& names, TensorMap* out) = 0;

  // Pushes gradients, each the shape of its variable. Nothing is sent when a
  // name or shape is wrong.
  virtual absl::StatusOr<PushStats> Push(const TensorMap& gradients) = 0;

  // Push, then pull (after the push is applied), in one round trip per
  // server; `out` as for Pull.
  virtual absl::StatusOr<PushStats> PushPull(const TensorMap& gradients,
                                             const std::vector<std::string>& names,
                                             TensorMap* out) = 0;

  // The same three calls on the caller's own buffers, which must stay valid
  // for the call: pulled values are read straight into `out` (a view per
  // variable, of its shape) and gradients are read from where they lie, with
  // no copy into a TensorMap (the Python package's zero-copy path). A view
  // with a wrong shape, no data or an unknown name fails the call before
  // anything is sent. Pulled values may arrive while gradients are still
  // being sent, so `out` must not overlap the gradients.
  virtual absl::Status PullInto(const TensorViews& out) = 0;
  virtual absl::StatusOr<PushStats> PushFrom(const ConstTensorViews& gradients) = 0;
  virtual absl::StatusOr<PushStats> PushPullInto(const ConstTensorViews& gradients,
                                                 const TensorViews& out) = 0;

  // Renews this worker's lease on every server.
  virtual absl::Status Heartbeat() = 0;

  // In sync and ssp, whose steps wait for every training worker: renews this
  // worker's lease and waits until no server awaits another worker's first
  // contact (each server's --startup_timeout_secs bounds that), logging who
  // is missing every 10 s. Returns at once in async, for a reader, or once
  // *stop (if given) turns true. Call before the first step.
  virtual absl::Status AwaitJobStart(const std::atomic<bool>* stop) = 0;

  // Tells every server this worker has finished training: sync steps and
  // SSP waits stop counting it, and the job can end without it. Call once,
  // after the last push.
  virtual absl::Status Finish() = 0;

  // Sends heartbeats every `interval` from a thread, until destruction, so
  // the lease holds through long computations.
  virtual void StartHeartbeats(absl::Duration interval) = 0;

  // Every server's state, in task order. A server lost for good (no longer
  // in the cluster's placement table, with replicated shards) is not asked:
  // its entry is empty (WasAsked, common/describe_text.h, tells).
  virtual absl::StatusOr<std::vector<DescribeResponse>> Describe() = 0;

  // Phase one of checkpoint `step`: every server writes its file; their
  // answers in task order, for the manifest that completes the checkpoint
  // (phase two, which the chief's checkpointer writes).
  virtual absl::StatusOr<std::vector<SaveCheckpointResponse>> SaveCheckpoint(int64_t step) = 0;

  // Tells every server that training is over (the chief calls it); each
  // exits 0 once every worker has finished or is dead.
  virtual absl::Status JobDone(const std::string& reason) = 0;

  // The lowest version among the shards of the last pull: the global step in
  // sync mode.
  virtual int64_t step() const = 0;
  // Pushes made so far: the clock SSP calls carry.
  virtual int64_t clock() const = 0;
  // The batches each of `num_workers` workers has trained by step(), as
  // the mode counts them: where a restarted worker resumes (sync: the
  // global step; async and ssp: the steps shared over the workers).
  virtual int64_t ResumedBatches(int num_workers) const = 0;
  virtual ConsistencyMode mode() const = 0;
  virtual int num_servers() const = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_API_PS_CLIENT_H_
