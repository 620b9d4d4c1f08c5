#include "client/transport/in_process_ps_transport.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace fulcrum {
namespace {

// The push as the server takes it: its request, with what it lends copied
// into `storage` when it lends anything (the server is in this process).
const PushRequest& Whole(const OutgoingPush& push, PushRequest* storage) {
  if (push.lent.empty()) return push.request;
  *storage = push.Materialize();
  return *storage;
}

// Gives the sink the float32 values it places, as a gRPC transport reads
// them into place: those slices are left without data.
void Place(SlicePlacer* sink, PullResponse* response) {
  if (sink == nullptr) return;
  for (ShardSlice& slice : *response->mutable_slices()) {
    TensorProto* tensor = slice.mutable_tensor();
    if (tensor->dtype() != DT_FLOAT) continue;
    float* place = sink->Place(slice, tensor->data().size());
    if (place == nullptr) continue;
    std::memcpy(place, tensor->data().data(), tensor->data().size());
    tensor->clear_data();
  }
}

}  // namespace

absl::StatusOr<CreateShardsResponse> InProcessPsTransport::CreateShards(
    const CreateShardsRequest& request, absl::Time) {
  return ps_->CreateShards(request);
}

absl::StatusOr<PullResponse> InProcessPsTransport::Pull(const PullRequest& request,
                                                        int64_t response_bytes, absl::Time deadline,
                                                        SlicePlacer* sink) {
  auto pulled = ps_->Pull(request, deadline, Limits(response_bytes <= kChunkBytes));
  if (pulled.ok()) Place(sink, &*pulled);
  return pulled;
}

absl::StatusOr<PushResponse> InProcessPsTransport::Push(std::shared_ptr<const OutgoingPush> request,
                                                        absl::Time) {
  PushRequest storage;
  return ps_->Push(Whole(*request, &storage), Limits(false));
}

CallLimits InProcessPsTransport::Limits(bool small) const {
  CallLimits limits = small ? SmallCallLimits() : StreamedCallLimits();
  limits.max_slice_bytes = std::min(limits.max_slice_bytes, max_slice_bytes_);
  return limits;
}

absl::StatusOr<PullResponse> InProcessPsTransport::PushPull(
    std::shared_ptr<const OutgoingPush> push, const PullRequest& pull, int64_t response_bytes,
    absl::Time deadline, SlicePlacer* sink) {
  // One call each way, as over gRPC: small when both halves are.
  const bool small = push->TensorBytes() <= kChunkBytes && response_bytes <= kChunkBytes;
  PushRequest storage;
  auto pushed = ps_->Push(Whole(*push, &storage), Limits(small));
  if (!pushed.ok()) return pushed.status();
  auto pulled = ps_->Pull(pull, deadline, Limits(small));
  if (pulled.ok()) Place(sink, &*pulled);
  if (!pulled.ok()) return pulled.status();
  *pulled->mutable_push_results() = std::move(*pushed->mutable_results());
  return pulled;
}

absl::StatusOr<HeartbeatResponse> InProcessPsTransport::Heartbeat(const HeartbeatRequest& request,
                                                                  absl::Time) {
  return ps_->Heartbeat(request);
}

absl::StatusOr<PullRowsResponse> InProcessPsTransport::PullRows(const PullRowsRequest& request,
                                                                absl::Time deadline) {
  return ps_->PullRows(request, deadline);
}

absl::StatusOr<PushRowsResponse> InProcessPsTransport::PushRows(const PushRowsRequest& request,
                                                                absl::Time) {
  return ps_->PushRows(request);
}

absl::StatusOr<PushRowsResponse> InProcessPsTransport::PushRowsInParts(
    const std::vector<PushRowsRequest>& parts, absl::Time) {
  return ps_->PushRows(parts);
}

absl::StatusOr<ReadRowsResponse> InProcessPsTransport::ReadRows(const ReadRowsRequest& request,
                                                                absl::Time) {
  return ps_->ReadRows(request);
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
