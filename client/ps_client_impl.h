// PsClientImpl: the PsClient of the public API (fulcrum/ps_client.h) over
// one PsTransport per server, knowing nothing of how calls travel (the gRPC
// factory NewGrpcPsClient makes one over gRPC transports; tests use
// in-process ones).
// Thread-safety as PsClient's.
#ifndef FULCRUM_CLIENT_PS_CLIENT_IMPL_H_
#define FULCRUM_CLIENT_PS_CLIENT_IMPL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/consistency/policy.h"
#include "client/row_routing.h"
#include "client/transport/ps_transport.h"
#include "common/partitioner.h"
#include "common/tensor.h"
#include "common/thread_pool.h"
#include "fulcrum/ps_client.h"
#include "proto/config.pb.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

class PsClientImpl final : public PsClient {
 public:
  // A client over `servers` (one per PS task, in task order).
  PsClientImpl(std::vector<std::unique_ptr<PsTransport>> servers, PsClientOptions options);
  ~PsClientImpl() override;

  PsClientImpl(const PsClientImpl&) = delete;
  PsClientImpl& operator=(const PsClientImpl&) = delete;

  // PsClient; see fulcrum/ps_client.h.
  using PsClient::CreateVariables;
  absl::Status CreateVariables(const std::vector<VariableSpec>& specs,
                               const ConstTensorViews& initial_values) override;
  absl::Status Pull(const std::vector<std::string>& names, TensorMap* out) override;
  absl::StatusOr<PushStats> Push(const TensorMap& gradients) override;
  absl::StatusOr<PushStats> PushPull(const TensorMap& gradients,
                                     const std::vector<std::string>& names,
                                     TensorMap* out) override;
  absl::Status PullInto(const TensorViews& out) override;
  absl::StatusOr<PushStats> PushFrom(const ConstTensorViews& gradients) override;
  absl::StatusOr<PushStats> PushPullInto(const ConstTensorViews& gradients,
                                         const TensorViews& out) override;
  absl::Status CreateTables(const std::vector<EmbeddingTableSpec>& specs) override;
  absl::Status PullRows(const std::vector<TableIds>& lookups,
                        std::vector<std::vector<float>>* rows) override;
  absl::Status PullRowsInto(const std::vector<TableIds>& lookups,
                            const std::vector<absl::Span<float>>& out) override;
  absl::StatusOr<PushStats> PushRows(const std::vector<TableIds>& lookups,
                                     const std::vector<absl::Span<const float>>& grads) override;
  absl::Status Heartbeat() override;
  absl::Status AwaitJobStart(const std::atomic<bool>* stop) override;
  absl::Status Finish() override;
  void StartHeartbeats(absl::Duration interval) override;
  absl::StatusOr<std::vector<DescribeResponse>> Describe() override;
  absl::StatusOr<std::vector<SaveCheckpointResponse>> SaveCheckpoint(int64_t step) override;
  absl::Status JobDone(const std::string& reason) override;
  int64_t step() const override { return step_; }
  int64_t clock() const override { return clock_; }
  ConsistencyMode mode() const override { return options_.mode; }
  int num_servers() const override { return static_cast<int>(servers_.size()); }

  // The consistency mode's client side.
  const ClientConsistencyPolicy& policy() const { return *policy_; }

 private:
  struct ShardState {
    int64_t pulled_version = 0;
    int64_t min_version = 0;  // the next pull waits for this (the policy says)
  };

  // The table's width, or NOT_FOUND when this client did not create it.
  absl::StatusOr<int64_t> TableWidth(const std::string& table) const;
  // Routes each lookup's ids (RouteIds); checks the tables and that
  // rows[i] holds a row per id of lookups[i] (`what` names them: "gradient",
  // "output").
  absl::StatusOr<std::vector<RoutedIds>> RouteLookups(const std::vector<TableIds>& lookups,
                                                      const std::vector<size_t>& row_floats,
                                                      const std::string& what) const;
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
  absl::StatusOr<Pushes> BuildPushes(const ConstTensorViews& gradients);
  // The pull of `variables` from each server, and the tensor bytes each
  // answers with.
  std::vector<PullRequest> BuildPulls(const std::vector<const VariablePlacement*>& variables,
                                      std::vector<int64_t>* response_bytes) const;
  // Where a server's pulled float32 values go in the output tensors: the
  // transport reads them straight into place (a gRPC transport from the
  // socket's buffers). Defined in ps_client.cc.
  class Placer;
  // One placer per server into `out`, a view per variable of `variables`.
  std::vector<Placer> PrepareOutputs(const std::vector<const VariablePlacement*>& variables,
                                     const TensorViews& out) const;
  // Checks that the responses cover every shard of `variables` and copies
  // the values not already placed into `out`.
  absl::Status Assemble(const std::vector<const VariablePlacement*>& variables,
                        std::vector<PullResponse>& responses, const std::vector<Placer>& placers,
                        const TensorViews& out);
  void AfterPush(const Pushes& pushes, const std::vector<bool>& dropped);
  PushStats Summarize(const google::protobuf::RepeatedPtrField<ShardPushResult>& results,
                      PushStats stats) const;

  // Renews the lease (and says `finished`) on every server; their answers.
  absl::StatusOr<std::vector<HeartbeatResponse>> SendHeartbeat(bool finished);
  // Creates this client's variables on server `ps` again after it lost them.
  absl::Status Recover(int ps, absl::Time deadline);
  // Recover(ps), then `pull` from it afresh, its values placed by `placer`.
  absl::StatusOr<PullResponse> RecoverAndPull(int ps, PullRequest pull, int64_t response_bytes,
                                              absl::Time deadline, Placer* placer);
  // push(ps) on every server `involved`, in parallel (ForEachServer), into
  // (*responses)[ps]. A server that lost its state is recovered and marked
  // in `recovered` (what was pushed to it is lost), and the versions
  // learned from it forgotten.
  template <typename Response>
  absl::Status PushEach(
      const std::vector<bool>& involved, const std::string& what,
      const std::function<absl::StatusOr<Response>(int ps, absl::Time deadline)>& push,
      std::vector<Response>* responses, std::vector<bool>* recovered);
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
  std::map<std::string, EmbeddingTableSpec> tables_;               // created by this client
  std::map<std::pair<std::string, int>, ShardState> table_state_;  // (table, ps)
  int64_t step_ = 0;
  int64_t clock_ = 0;
  std::mt19937_64 push_ids_;

  absl::Notification stop_heartbeats_;
  std::thread heartbeat_thread_;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_PS_CLIENT_IMPL_H_
