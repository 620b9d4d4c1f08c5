// A PsTransport that calls a ParameterServer in this process directly, for
// tests: pulled values are placed through the sink as over gRPC. Thread-safe.
#ifndef FULCRUM_CLIENT_TRANSPORT_IN_PROCESS_PS_TRANSPORT_H_
#define FULCRUM_CLIENT_TRANSPORT_IN_PROCESS_PS_TRANSPORT_H_

#include <cstdint>
#include <limits>

#include "client/transport/ps_transport.h"
#include "ps_server/parameter_server.h"

namespace fulcrum {

class InProcessPsTransport final : public PsTransport {
 public:
  // `ps` must outlive the transport. Calls meet the limits they would over
  // gRPC (unary within one chunk each way, else streamed); pulls return
  // each shard in slices of at most max_slice_bytes besides.
  explicit InProcessPsTransport(ParameterServer* ps, int64_t max_slice_bytes = kChunkBytes)
      : ps_(ps), max_slice_bytes_(max_slice_bytes) {}

  std::string address() const override { return "in-process"; }
  absl::StatusOr<CreateShardsResponse> CreateShards(const CreateShardsRequest& request,
                                                    absl::Time deadline) override;
  absl::StatusOr<PullResponse> Pull(const PullRequest& request, int64_t response_bytes,
                                    absl::Time deadline, SlicePlacer* sink) override;
  absl::StatusOr<PushResponse> Push(std::shared_ptr<const OutgoingPush> request,
                                    absl::Time deadline) override;
  absl::StatusOr<PullResponse> PushPull(std::shared_ptr<const OutgoingPush> push,
                                        const PullRequest& pull, int64_t response_bytes,
                                        absl::Time deadline, SlicePlacer* sink) override;
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request,
                                              absl::Time deadline) override;
  absl::StatusOr<DescribeResponse> Describe(absl::Time deadline) override;
  absl::StatusOr<PushRowsResponse> PushRowsInParts(const std::vector<PushRowsRequest>& parts,
                                                   absl::Time deadline) override;
  absl::StatusOr<ReadRowsResponse> ReadRows(const ReadRowsRequest& request,
                                            absl::Time deadline) override;
  absl::StatusOr<PullRowsResponse> PullRows(const PullRowsRequest& request,
                                            absl::Time deadline) override;
  absl::StatusOr<PushRowsResponse> PushRows(const PushRowsRequest& request,
                                            absl::Time deadline) override;
  absl::StatusOr<SaveCheckpointResponse> SaveCheckpoint(const SaveCheckpointRequest& request,
                                                        absl::Time deadline) override;
  absl::Status JobDone(const std::string& reason, absl::Time deadline) override;

 private:
  // The limits of a small (unary) call, or a streamed one.
  CallLimits Limits(bool small) const;

  ParameterServer* const ps_;
  const int64_t max_slice_bytes_;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_TRANSPORT_IN_PROCESS_PS_TRANSPORT_H_
