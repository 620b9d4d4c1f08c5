// PsTransport over gRPC: streams shards in chunks of kChunkBytes (a pull or
// push-pull within one chunk each way is a single unary call), lends
// gradient bytes to gRPC and reads pulled values straight into the sink's
// place (common/rpc/tensor_bytes.h), raises gRPC's message limits, and
// waits for a server that is not up yet until each call's deadline (then
// UNAVAILABLE). Each transport has a connection of its own, even beside
// another to the same address. Thread-safe.
#ifndef FULCRUM_CLIENT_GRPC_GRPC_PS_TRANSPORT_H_
#define FULCRUM_CLIENT_GRPC_GRPC_PS_TRANSPORT_H_

#include <grpcpp/channel.h>
#include <grpcpp/impl/codegen/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "client/transport/ps_transport.h"
#include "common/rpc/credentials.h"
#include "proto/ps_service.grpc.pb.h"

namespace fulcrum {

// Largest message the client sends or accepts (the server sets its own).
constexpr int kClientMaxMessageBytes = 256 << 20;

class GrpcPsTransport final : public PsTransport {
 public:
  // Connects lazily: an unreachable server makes calls fail UNAVAILABLE.
  // A channel to `address`, secured as `tls` says (plaintext without files),
  // whose calls carry `token` (none when empty).
  GrpcPsTransport(const std::string& address, const TlsFiles& tls, std::string token = "");
  ~GrpcPsTransport() override;

  std::string address() const override { return address_; }
  void FailFast() override { fail_fast_ = true; }
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
  // DEADLINE_EXCEEDED without a connection becomes UNAVAILABLE; the rest
  // converts as is.
  absl::Status Convert(const grpc::Status& status) const;
  // The response of a unary pull, its values placed by `sink`.
  absl::StatusOr<PullResponse> ParseUnaryPull(const grpc::Status& status, grpc::ByteBuffer* buffer,
                                              SlicePlacer* sink) const;

  const std::string address_;
  const std::string token_;
  std::atomic<bool> fail_fast_{false};
  const bool plaintext_;  // no TLS files: a failure to connect probes why
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<PsService::Stub> stub_;  // the calls without tensors
  // The calls with tensors, made on raw byte buffers (grpc::internal::
  // RpcMethod: see the constructor for why).
  std::unique_ptr<grpc::internal::RpcMethod> pull_, push_, push_pull_, pull_small_,
      push_pull_small_;
};

// One transport per address, in order, each over `channels` channels of
// its own (TCP connections): with more than one, a ParallelPsTransport
// (client/transport/parallel_ps_transport.h) splits each streamed call by shard over
// them. Secured as `tls` says, the calls carrying `token`.
std::vector<std::unique_ptr<PsTransport>> MakeGrpcTransports(
    const std::vector<std::string>& addresses, int channels = 1, const TlsFiles& tls = {},
    const std::string& token = "");

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_GRPC_GRPC_PS_TRANSPORT_H_
