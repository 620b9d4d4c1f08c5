// PsClientImpl: the PsClient of the public API (fulcrum/ps_client.h) over
// one PsTransport per server, knowing nothing of how calls travel (the gRPC
// factory NewGrpcPsClient makes one over gRPC transports; tests use
// in-process ones). It composes the library's three parts: the server set
// (connections, incarnations, recovery, the lease: server_set.h), the
// dense calls (dense_calls.h) and the row calls (row_calls.h); a server
// recovered after a restart makes both call families forget the versions
// they learned from it. Thread-safety as PsClient's.
#ifndef FULCRUM_CLIENT_PS_CLIENT_IMPL_H_
#define FULCRUM_CLIENT_PS_CLIENT_IMPL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/consistency/policy.h"
#include "client/dense_calls.h"
#include "client/row_calls.h"
#include "client/server_set.h"
#include "client/transport/ps_transport.h"
#include "fulcrum/ps_client.h"

namespace fulcrum {

class PsClientImpl final : public PsClient {
 public:
  // A client over `servers` (one per PS task, in task order).
  // `connect` opens the way to a server that joined later (ServerSet).
  PsClientImpl(std::vector<std::unique_ptr<PsTransport>> servers, PsClientOptions options,
               ServerSet::Connect connect = nullptr);

  PsClientImpl(const PsClientImpl&) = delete;
  PsClientImpl& operator=(const PsClientImpl&) = delete;

  // PsClient; see fulcrum/ps_client.h.
  using PsClient::CreateVariables;
  absl::Status CreateVariables(const std::vector<VariableSpec>& specs,
                               const ConstTensorViews& initial_values) override {
    return dense_.CreateVariables(specs, initial_values);
  }
  absl::Status Pull(const std::vector<std::string>& names, TensorMap* out) override {
    return dense_.Pull(names, out);
  }
  absl::StatusOr<PushStats> Push(const TensorMap& gradients) override {
    return dense_.Push(gradients);
  }
  absl::StatusOr<PushStats> PushPull(const TensorMap& gradients,
                                     const std::vector<std::string>& names,
                                     TensorMap* out) override {
    return dense_.PushPull(gradients, names, out);
  }
  absl::Status PullInto(const TensorViews& out) override { return dense_.PullInto(out); }
  absl::StatusOr<PushStats> PushFrom(const ConstTensorViews& gradients) override {
    return dense_.PushFrom(gradients);
  }
  absl::StatusOr<PushStats> PushPullInto(const ConstTensorViews& gradients,
                                         const TensorViews& out) override {
    return dense_.PushPullInto(gradients, out);
  }
  absl::Status CreateTables(const std::vector<EmbeddingTableSpec>& specs) override {
    return rows_.CreateTables(specs);
  }
  absl::Status PullRows(const std::vector<TableIds>& lookups,
                        std::vector<std::vector<float>>* rows) override {
    return rows_.PullRows(lookups, rows);
  }
  absl::Status PullRowsInto(const std::vector<TableIds>& lookups,
                            const std::vector<absl::Span<float>>& out) override {
    return rows_.PullRowsInto(lookups, out);
  }
  absl::StatusOr<PushStats> PushRows(const std::vector<TableIds>& lookups,
                                     const std::vector<absl::Span<const float>>& grads) override {
    return rows_.PushRows(lookups, grads);
  }
  absl::Status Heartbeat() override { return servers_.Heartbeat(); }
  absl::Status AwaitJobStart(const std::atomic<bool>* stop) override {
    return servers_.AwaitJobStart(stop);
  }
  absl::Status Finish() override { return servers_.Finish(); }
  void StartHeartbeats(absl::Duration interval) override { servers_.StartHeartbeats(interval); }
  absl::Status ReadTable(
      const std::string& table, bool slots,
      absl::FunctionRef<absl::Status(const ReadRowsResponse& page)> visit) override {
    return rows_.ReadTable(table, slots, visit);
  }
  absl::StatusOr<std::vector<DescribeResponse>> Describe() override { return servers_.Describe(); }
  absl::StatusOr<std::vector<SaveCheckpointResponse>> SaveCheckpoint(int64_t step) override {
    return servers_.SaveCheckpoint(step);
  }
  absl::Status JobDone(const std::string& reason) override { return servers_.JobDone(reason); }
  int64_t step() const override { return dense_.step(); }
  int64_t clock() const override { return servers_.clock(); }
  int64_t ResumedBatches(int num_workers) const override {
    return policy_->ResumedBatches(step(), num_workers);
  }
  ConsistencyMode mode() const override { return options_.mode; }
  int num_servers() const override { return servers_.size(); }

 private:
  const PsClientOptions options_;
  const std::unique_ptr<ClientConsistencyPolicy> policy_;  // of options_.mode
  ServerSet servers_;                                      // before the call families, which use it
  DenseCalls dense_;
  RowCalls rows_;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_PS_CLIENT_IMPL_H_
