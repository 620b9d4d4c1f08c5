#include "ps_server/grpc/replica_link.h"

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/rpc/authorization.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/options.h"
#include "proto/ps_service.grpc.pb.h"

namespace fulcrum {
namespace {

class GrpcReplicaLink : public ReplicaLink {
 public:
  GrpcReplicaLink(const std::string& address, const TlsFiles& tls, std::string token,
                  int max_message_bytes, absl::Duration timeout)
      : address_(address),
        token_(std::move(token)),
        timeout_(timeout),
        stub_(PsService::NewStub(grpc::CreateCustomChannel(
            address, MakeChannelCredentials(tls), ClientChannelArguments(max_message_bytes)))) {}

  absl::StatusOr<ReplicateResponse> Replicate(const ReplicateRequest& request) override {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    if (!token_.empty()) context.AddMetadata(kTokenMetadataKey, TokenMetadata(token_));
    ReplicateResponse response;
    const grpc::Status status = stub_->Replicate(&context, request, &response);
    if (!status.ok()) {
      const absl::Status s = FromGrpcStatus(status);
      return absl::Status(s.code(), absl::StrCat("Replicate to ", address_, ": ", s.message()));
    }
    return response;
  }

 private:
  const std::string address_;
  const std::string token_;
  const absl::Duration timeout_;
  std::unique_ptr<PsService::Stub> stub_;
};

}  // namespace

ReplicaLinkFactory GrpcReplicaLinks(const TlsFiles& tls, const std::string& token,
                                    int max_message_bytes, absl::Duration timeout) {
  return [tls, token, max_message_bytes, timeout](const std::string& address) {
    return std::make_unique<GrpcReplicaLink>(address, tls, token, max_message_bytes, timeout);
  };
}

}  // namespace fulcrum
