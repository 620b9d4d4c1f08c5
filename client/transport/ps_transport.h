// The calls a worker makes to one parameter server, independent of how they
// travel: over gRPC (grpc_ps_transport.h), split over several connections
// (parallel_ps_transport.h), or to a server in this process
// (in_process_ps_transport.h, for tests), so PsClient and the trainer know
// nothing of gRPC. Implementations are thread-safe.
#ifndef FULCRUM_CLIENT_TRANSPORT_PS_TRANSPORT_H_
#define FULCRUM_CLIENT_TRANSPORT_PS_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/slices.h"
#include "proto/ps_service.pb.h"

namespace fulcrum {

class PsTransport {
 public:
  virtual ~PsTransport() = default;

  // Where the server is, for messages: "127.0.0.1:4000" or "in-process".
  virtual std::string address() const = 0;
  // From now on a call fails UNAVAILABLE at once when the server cannot be
  // reached, instead of waiting for it until its deadline: for a caller
  // that then looks for the server's shards elsewhere (replicated shards).
  // Transports that always reach their server ignore it.
  virtual void FailFast() {}

  virtual absl::StatusOr<CreateShardsResponse> CreateShards(const CreateShardsRequest& request,
                                                            absl::Time deadline) = 0;

  // The response holds each requested shard as one or more slices of rows
  // that together cover it. `response_bytes` is the tensor data the caller
  // expects back (the shards' size in the request's wire_dtype): a
  // transport may make a cheaper call for small transfers. DT_FLOAT values
  // go where `sink` (if not null) places them, and such slices arrive
  // without data. A response that does not parse is DATA_LOSS.
  virtual absl::StatusOr<PullResponse> Pull(const PullRequest& request, int64_t response_bytes,
                                            absl::Time deadline, SlicePlacer* sink) = 0;

  // The gradients may hold a shard as several slices of rows that together
  // cover it, their bytes held or lent (OutgoingPush). A transport may keep
  // the push after returning, until its bytes are sent (gRPC sends them
  // from where they lie), so the caller must not change it, nor the memory
  // it lends, until the push is destroyed: a new step builds a new push.
  virtual absl::StatusOr<PushResponse> Push(std::shared_ptr<const OutgoingPush> request,
                                            absl::Time deadline) = 0;

  // Push, then pull, in one round trip. The response's push_results hold the
  // push's outcome; `push` as for Push, `response_bytes` and `sink` as for
  // Pull.
  virtual absl::StatusOr<PullResponse> PushPull(std::shared_ptr<const OutgoingPush> push,
                                                const PullRequest& pull, int64_t response_bytes,
                                                absl::Time deadline, SlicePlacer* sink) = 0;

  // Rows of embedding tables by id; their row gradients.
  virtual absl::StatusOr<PullRowsResponse> PullRows(const PullRowsRequest& request,
                                                    absl::Time deadline) = 0;
  virtual absl::StatusOr<PushRowsResponse> PushRows(const PushRowsRequest& request,
                                                    absl::Time deadline) = 0;

  // One push of rows in several parts (SplitRowPush), applied as one.
  virtual absl::StatusOr<PushRowsResponse> PushRowsInParts(
      const std::vector<PushRowsRequest>& parts, absl::Time deadline) = 0;

  // A page of a table's stored rows: a dump, not a lookup.
  virtual absl::StatusOr<ReadRowsResponse> ReadRows(const ReadRowsRequest& request,
                                                    absl::Time deadline) = 0;

  virtual absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request,
                                                      absl::Time deadline) = 0;

  virtual absl::StatusOr<DescribeResponse> Describe(absl::Time deadline) = 0;

  virtual absl::StatusOr<SaveCheckpointResponse> SaveCheckpoint(
      const SaveCheckpointRequest& request, absl::Time deadline) = 0;

  virtual absl::Status JobDone(const std::string& reason, absl::Time deadline) = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_TRANSPORT_PS_TRANSPORT_H_
