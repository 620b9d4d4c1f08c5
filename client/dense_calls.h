// DenseCalls: the client library's dense variables -- partitioned and
// placed over the servers (common/partitioner.h), created there, pulled
// into tensors or the caller's buffers and pushed from them, shard by shard
// on every server involved, in parallel. It tracks what the consistency
// mode needs per shard: the version it was pulled at (sync pushes carry
// it) and the version the next pull waits for. Over a ServerSet, which owns
// the connections, recovery and the worker's clock. Thread-safety as
// PsClient's: one call at a time.
#ifndef FULCRUM_CLIENT_DENSE_CALLS_H_
#define FULCRUM_CLIENT_DENSE_CALLS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/server_set.h"
#include "common/logging.h"
#include "common/partitioner.h"
#include "common/tensor.h"
#include "fulcrum/ps_client.h"
#include "proto/placement.pb.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

class DenseCalls {
 public:
  // `servers` must outlive the calls.
  explicit DenseCalls(ServerSet* servers) : servers_(*servers) {}

  DenseCalls(const DenseCalls&) = delete;
  DenseCalls& operator=(const DenseCalls&) = delete;

  // PsClient's dense calls; see fulcrum/ps_client.h.
  absl::Status CreateVariables(const std::vector<VariableSpec>& specs,
                               const ConstTensorViews& initial_values);
  absl::Status Pull(const std::vector<std::string>& names, TensorMap* out);
  absl::StatusOr<PushStats> Push(const TensorMap& gradients);
  absl::StatusOr<PushStats> PushPull(const TensorMap& gradients,
                                     const std::vector<std::string>& names, TensorMap* out);
  absl::Status PullInto(const TensorViews& out);
  absl::StatusOr<PushStats> PushFrom(const ConstTensorViews& gradients);
  absl::StatusOr<PushStats> PushPullInto(const ConstTensorViews& gradients, const TensorViews& out);

  // The lowest version among the shards of the last pull.
  int64_t step() const { return step_; }

  // Forgets the versions learned from the servers in `recovered`: the next
  // pulls wait for none, and gradients go as computed at version 0 until
  // their shards are pulled again (whichever call recovered the server).
  void ForgetVersions(const std::vector<bool>& recovered);

 private:
  // Follows the servers' placement table when it is newer than the one the
  // shards are routed by: each shard goes to its primary there (a server
  // new to this client joins its set). A call that `failed` because a
  // shard moved (FAILED_PRECONDITION) asks the servers for their table
  // first. Whether it was newer (a call that failed may then be made
  // again).
  bool Reroute(const absl::Status& failed = absl::OkStatus());
  // The server `shard` of `variable` is pulled from: its primary, or the
  // backup read_from_ names.
  int PullServer(const std::string& variable, const ShardPlacement& shard) const;
  absl::StatusOr<const VariablePlacement*> Find(const std::string& name) const;
  absl::StatusOr<std::vector<const VariablePlacement*>> Resolve(
      const std::vector<std::string>& names) const;
  // The variables `out` names, after checking each view's shape and data.
  absl::StatusOr<std::vector<const VariablePlacement*>> ResolveViews(const TensorViews& out) const;
  // Sizes `out` for `variables`; views of its tensors.
  static TensorViews SizeOutputs(const std::vector<const VariablePlacement*>& variables,
                                 TensorMap* out);
  // Views of `gradients`, after checking each holds its shape's values.
  static absl::StatusOr<ConstTensorViews> ViewGradients(const TensorMap& gradients);
  // Pull and PushPull into views of `variables`.
  absl::Status PullVariables(const std::vector<const VariablePlacement*>& variables,
                             const TensorViews& out);
  absl::StatusOr<PushStats> PushPullVariables(
      const ConstTensorViews& gradients, const std::vector<const VariablePlacement*>& variables,
      const TensorViews& out);
  // One attempt of each call, over the shards' placement as it is; a
  // push's parts carry `push_id` (so that a shard a failed attempt applied
  // is DUPLICATE when the call is made again).
  absl::Status PullOnce(const std::vector<const VariablePlacement*>& variables,
                        const TensorViews& out);
  absl::StatusOr<PushStats> PushOnce(const ConstTensorViews& gradients, uint64_t push_id);
  absl::StatusOr<PushStats> PushPullOnce(const ConstTensorViews& gradients,
                                         const std::vector<const VariablePlacement*>& variables,
                                         const TensorViews& out, uint64_t push_id);
  // Runs `attempt` (returning a status or a status-or) again each time it
  // fails while the placement table moved on: a server left, or shards
  // moved, and their primaries are elsewhere (Reroute).
  template <typename Attempt>
  auto Rerouting(const char* what, const Attempt& attempt) -> decltype(attempt()) {
    for (;;) {
      auto result = attempt();
      if (result.ok() || !Reroute(StatusOf(result))) return result;
      LOG_WARN("{}: {}; made again with the placement table of epoch {}", what,
               StatusOf(result).message(), routed_epoch_);
      // By the newest table: one may have moved a shard again meanwhile.
      absl::Status again = PushAccumulatedAgain();
      while (!again.ok() && Reroute(again)) again = PushAccumulatedAgain();
    }
  }
  static const absl::Status& StatusOf(const absl::Status& status) { return status; }
  template <typename T>
  static const absl::Status& StatusOf(const absl::StatusOr<T>& result) {
    return result.status();
  }
  // Each server's part of a push. With a float32 wire the parts lend the
  // caller's gradient memory (OutgoingPush), and a transport may hold a part
  // after its call returns (gRPC, until the bytes are sent): destroying
  // Pushes waits until every part it made is gone, so a call returns only
  // once nothing refers to the caller's memory. Movable, not copyable.
  class Pushes {
   public:
    explicit Pushes(size_t servers);
    Pushes(Pushes&&) = default;
    Pushes& operator=(Pushes&&) = delete;
    ~Pushes();
    const std::shared_ptr<OutgoingPush>& operator[](size_t ps) const { return parts_[ps]; }
    size_t size() const { return parts_.size(); }

   private:
    struct Live {
      absl::Mutex mu;
      int parts ABSL_GUARDED_BY(mu) = 0;
    };
    std::shared_ptr<Live> live_;
    std::vector<std::shared_ptr<OutgoingPush>> parts_;
  };
  // The parts of the push of `gradients` with idempotency key `push_id`.
  absl::StatusOr<Pushes> BuildPushes(const ConstTensorViews& gradients, uint64_t push_id);
  // The pull of `variables` from each server, and the tensor bytes each
  // answers with.
  std::vector<PullRequest> BuildPulls(const std::vector<const VariablePlacement*>& variables,
                                      std::vector<int64_t>* response_bytes) const;
  // Where a server's pulled float32 values go in the output tensors: the
  // transport reads them straight into place (a gRPC transport from the
  // socket's buffers). Defined in dense_calls.cc.
  class Placer;
  // One placer per server into `out`, a view per variable of `variables`.
  std::vector<Placer> PrepareOutputs(const std::vector<const VariablePlacement*>& variables,
                                     const TensorViews& out) const;
  // A pull of `pull` from server `ps` after it was recovered: what it has
  // now, with no versions to wait for.
  absl::StatusOr<PullResponse> PullRecovered(int ps, PullRequest pull, int64_t response_bytes,
                                             absl::Time deadline, Placer* placer);
  // Checks that the responses cover every shard of `variables` and copies
  // the values not already placed into `out`.
  absl::Status Assemble(const std::vector<const VariablePlacement*>& variables,
                        std::vector<PullResponse>& responses, const std::vector<Placer>& placers,
                        const TensorViews& out);
  // After a push answered by `results` (each server's), when following a
  // placement table: keeps a copy of the gradients its shards' primaries
  // accumulated (sync), in place of the last push's. A step's accumulated
  // gradients are not replicated (only the step's update is), so a
  // primary lost before its step completes loses them: they are pushed
  // again to the shards' new primaries (PushAccumulatedAgain).
  void KeepAccumulated(
      const Pushes& pushes,
      const std::vector<const google::protobuf::RepeatedPtrField<ShardPushResult>*>& results);
  // The kept gradients, each to its shard's primary now, with the push's
  // id: a primary that has them (or has applied their step) answers
  // DUPLICATE or STALE. Kept until the next push: an error is logged and
  // returned, for the caller to follow a newer table and try again.
  absl::Status PushAccumulatedAgain();
  // Sets the versions the next pulls wait for, after a push that the
  // servers in `dropped` lost; advances the clock.
  void AfterPush(const Pushes& pushes, const std::vector<bool>& dropped);

  ServerSet& servers_;
  std::vector<VariablePlacement> placement_;
  std::map<std::string, size_t> index_;  // name -> placement_ index
  std::map<std::pair<std::string, int>, ShardVersions> shard_state_;
  int64_t step_ = 0;
  // Reading from backups (PsClientOptions::read_from_backups): the server
  // each shard is pulled from, by variable and shard, where not its primary.
  std::map<std::pair<std::string, int>, int> read_from_;
  int64_t routed_epoch_ = 0;  // of the placement table placement_ follows; 0: the chief's
  // KeepAccumulated's: the push's id and clock, and its accumulated shards'
  // slices, with their bytes.
  uint64_t accumulated_push_id_ = 0;
  int64_t accumulated_clock_ = 0;
  std::vector<ShardSlice> accumulated_;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_DENSE_CALLS_H_
