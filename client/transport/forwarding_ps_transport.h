// A PsTransport that passes every call to another: tests derive from it and
// override the calls they watch or break, and TracingPsTransport times the
// data calls. Thread-safe as the inner one is.
#ifndef FULCRUM_CLIENT_TRANSPORT_FORWARDING_PS_TRANSPORT_H_
#define FULCRUM_CLIENT_TRANSPORT_FORWARDING_PS_TRANSPORT_H_

#include <memory>
#include <string>
#include <utility>

#include "client/transport/ps_transport.h"

namespace fulcrum {

class ForwardingPsTransport : public PsTransport {
 public:
  explicit ForwardingPsTransport(std::unique_ptr<PsTransport> inner) : inner_(std::move(inner)) {}

  std::string address() const override { return inner_->address(); }
  void FailFast() override { inner_->FailFast(); }
  absl::StatusOr<CreateShardsResponse> CreateShards(const CreateShardsRequest& request,
                                                    absl::Time deadline) override {
    return inner_->CreateShards(request, deadline);
  }
  absl::StatusOr<PullResponse> Pull(const PullRequest& request, int64_t response_bytes,
                                    absl::Time deadline, SlicePlacer* sink) override {
    return inner_->Pull(request, response_bytes, deadline, sink);
  }
  absl::StatusOr<PushResponse> Push(std::shared_ptr<const OutgoingPush> request,
                                    absl::Time deadline) override {
    return inner_->Push(std::move(request), deadline);
  }
  absl::StatusOr<PullResponse> PushPull(std::shared_ptr<const OutgoingPush> push,
                                        const PullRequest& pull, int64_t response_bytes,
                                        absl::Time deadline, SlicePlacer* sink) override {
    return inner_->PushPull(std::move(push), pull, response_bytes, deadline, sink);
  }
  absl::StatusOr<PullRowsResponse> PullRows(const PullRowsRequest& request,
                                            absl::Time deadline) override {
    return inner_->PullRows(request, deadline);
  }
  absl::StatusOr<PushRowsResponse> PushRows(const PushRowsRequest& request,
                                            absl::Time deadline) override {
    return inner_->PushRows(request, deadline);
  }
  absl::StatusOr<PushRowsResponse> PushRowsInParts(const std::vector<PushRowsRequest>& parts,
                                                   absl::Time deadline) override {
    return inner_->PushRowsInParts(parts, deadline);
  }
  absl::StatusOr<ReadRowsResponse> ReadRows(const ReadRowsRequest& request,
                                            absl::Time deadline) override {
    return inner_->ReadRows(request, deadline);
  }
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request,
                                              absl::Time deadline) override {
    return inner_->Heartbeat(request, deadline);
  }
  absl::StatusOr<DescribeResponse> Describe(absl::Time deadline) override {
    return inner_->Describe(deadline);
  }
  absl::StatusOr<SaveCheckpointResponse> SaveCheckpoint(const SaveCheckpointRequest& request,
                                                        absl::Time deadline) override {
    return inner_->SaveCheckpoint(request, deadline);
  }
  absl::Status JobDone(const std::string& reason, absl::Time deadline) override {
    return inner_->JobDone(reason, deadline);
  }

 private:
  const std::unique_ptr<PsTransport> inner_;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_TRANSPORT_FORWARDING_PS_TRANSPORT_H_
