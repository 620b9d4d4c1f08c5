// PsTransport over gRPC: streams shards in chunks of kChunkBytes (a pull or
// push-pull within one chunk each way is a single unary call), raises
// gRPC's message limits, and waits for a server that is not up yet until
// each call's deadline (then UNAVAILABLE). Each transport has a connection
// of its own, even beside another to the same address. Thread-safe.
#ifndef FULCRUM_WORKER_GRPC_GRPC_PS_TRANSPORT_H_
#define FULCRUM_WORKER_GRPC_GRPC_PS_TRANSPORT_H_

#include <grpcpp/channel.h>

#include <memory>
#include <string>
#include <vector>

#include "proto/ps_service.grpc.pb.h"
#include "worker/ps_transport.h"

namespace fulcrum {

// Largest message the client sends or accepts (the server sets its own).
constexpr int kClientMaxMessageBytes = 256 << 20;

class GrpcPsTransport final : public PsTransport {
 public:
  // Connects lazily: an unreachable server makes calls fail UNAVAILABLE.
  explicit GrpcPsTransport(const std::string& address);

  std::string address() const override { return address_; }
  absl::StatusOr<CreateShardsResponse> CreateShards(const CreateShardsRequest& request,
                                                    absl::Time deadline) override;
  absl::StatusOr<PullResponse> Pull(const PullRequest& request, int64_t response_bytes,
                                    absl::Time deadline) override;
  absl::StatusOr<PushResponse> Push(std::shared_ptr<const PushRequest> request,
                                    absl::Time deadline) override;
  absl::StatusOr<PullResponse> PushPull(std::shared_ptr<const PushRequest> push,
                                        const PullRequest& pull, int64_t response_bytes,
                                        absl::Time deadline) override;
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request,
                                              absl::Time deadline) override;
  absl::StatusOr<DescribeResponse> Describe(absl::Time deadline) override;
  absl::StatusOr<SaveCheckpointResponse> SaveCheckpoint(const SaveCheckpointRequest& request,
                                                        absl::Time deadline) override;
  absl::Status JobDone(const std::string& reason, absl::Time deadline) override;

 private:
  // DEADLINE_EXCEEDED without a connection becomes UNAVAILABLE; the rest
  // converts as is.
  absl::Status Convert(const grpc::Status& status) const;

  const std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<PsService::Stub> stub_;
};

// One transport per address, in order, each over `channels` channels of
// its own (TCP connections): with more than one, a ParallelPsTransport
// (worker/parallel_ps_transport.h) splits each streamed call by shard over
// them.
std::vector<std::unique_ptr<PsTransport>> MakeGrpcTransports(
    const std::vector<std::string>& addresses, int channels = 1);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_GRPC_GRPC_PS_TRANSPORT_H_
