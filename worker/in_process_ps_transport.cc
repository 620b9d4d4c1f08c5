#include "worker/in_process_ps_transport.h"

#include <utility>

namespace fulcrum {

absl::StatusOr<CreateShardsResponse> InProcessPsTransport::CreateShards(
    const CreateShardsRequest& request, absl::Time) {
  return ps_->CreateShards(request);
}

absl::StatusOr<PullResponse> InProcessPsTransport::Pull(const PullRequest& request, int64_t,
                                                        absl::Time deadline) {
  return ps_->Pull(request, deadline, max_slice_bytes_);
}

absl::StatusOr<PushResponse> InProcessPsTransport::Push(std::shared_ptr<const PushRequest> request,
                                                        absl::Time) {
  return ps_->Push(*request);
}

absl::StatusOr<PullResponse> InProcessPsTransport::PushPull(std::shared_ptr<const PushRequest> push,
                                                            const PullRequest& pull,
                                                            int64_t response_bytes,
                                                            absl::Time deadline) {
  auto pushed = Push(std::move(push), deadline);
  if (!pushed.ok()) return pushed.status();
  auto pulled = Pull(pull, response_bytes, deadline);
  if (!pulled.ok()) return pulled.status();
  *pulled->mutable_push_results() = std::move(*pushed->mutable_results());
  return pulled;
}

absl::StatusOr<HeartbeatResponse> InProcessPsTransport::Heartbeat(const HeartbeatRequest& request,
                                                                  absl::Time) {
  return ps_->Heartbeat(request);
}

absl::StatusOr<DescribeResponse> InProcessPsTransport::Describe(absl::Time) {
  return ps_->Describe();
}

absl::StatusOr<SaveCheckpointResponse> InProcessPsTransport::SaveCheckpoint(
    const SaveCheckpointRequest& request, absl::Time) {
  return ps_->SaveCheckpoint(request);
}

absl::Status InProcessPsTransport::JobDone(const std::string& reason, absl::Time) {
  ps_->JobDone(reason);
  return absl::OkStatus();
}

}  // namespace fulcrum
