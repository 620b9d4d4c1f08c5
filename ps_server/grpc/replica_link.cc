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

class GrpcReplicaStream : public ReplicaStream {
 public:
  GrpcReplicaStream(PsService::Stub* stub, const std::string& address, const std::string& token)
      : address_(address) {
    if (!token.empty()) context_.AddMetadata(kTokenMetadataKey, TokenMetadata(token));
    stream_ = stub->Replicate(&context_);
  }
  ~GrpcReplicaStream() override {
    if (!finished_) {
      context_.TryCancel();
      stream_->Finish().IgnoreError();
    }
  }

  bool Write(const ReplicateRequest& request) override { return stream_->Write(request); }
  bool Read(ReplicateResponse* response) override { return stream_->Read(response); }
  void Cancel() override { context_.TryCancel(); }
  absl::Status Finish() override {
    finished_ = true;
    absl::Status s = FromGrpcStatus(stream_->Finish());
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat("Replicate to ", address_, ": ", s.message()));
  }

 private:
  const std::string address_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<ReplicateRequest, ReplicateResponse>> stream_;
  bool finished_ = false;
};

class GrpcReplicaLink : public ReplicaLink {
 public:
  GrpcReplicaLink(const std::string& address, const TlsFiles& tls, std::string token,
                  int max_message_bytes)
      : address_(address),
        token_(std::move(token)),
        stub_(PsService::NewStub(grpc::CreateCustomChannel(
            address, MakeChannelCredentials(tls), ClientChannelArguments(max_message_bytes)))) {}

  std::unique_ptr<ReplicaStream> Open() override {
    return std::make_unique<GrpcReplicaStream>(stub_.get(), address_, token_);
  }

 private:
  const std::string address_;
  const std::string token_;
  std::unique_ptr<PsService::Stub> stub_;
};

}  // namespace

ReplicaLinkFactory GrpcReplicaLinks(const TlsFiles& tls, const std::string& token,
                                    int max_message_bytes) {
  return [tls, token, max_message_bytes](const std::string& address) {
    return std::make_unique<GrpcReplicaLink>(address, tls, token, max_message_bytes);
  };
}

}  // namespace fulcrum
