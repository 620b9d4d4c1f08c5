#include "client/grpc/grpc_ps_transport.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/sync_stream.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/grpc/plaintext_probe.h"
#include "client/transport/parallel_ps_transport.h"
#include "common/logging.h"
#include "common/rpc/authorization.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/options.h"
#include "common/rpc/tensor_bytes.h"
#include "common/slices.h"

namespace fulcrum {
namespace {

// A call waits for the channel to connect (a server that starts late, or
// restarts, is waited for) until its deadline, unless not to `wait`
// (FailFast). The calling thread drives the connection meanwhile, which a
// sleep between fail-fast retries would not. It carries `token`, when
// there is one.
void Prepare(absl::Time deadline, const std::string& token, bool wait,
             grpc::ClientContext* context) {
  context->set_wait_for_ready(wait);
  if (deadline != absl::InfiniteFuture()) context->set_deadline(absl::ToChronoTime(deadline));
  if (!token.empty()) context->AddMetadata(kTokenMetadataKey, TokenMetadata(token));
}

// The push as stream messages of about kChunkBytes of gradients each; at
// least one, which carries the worker and clock even with no gradients. The
// messages borrow the push's slices instead of copying their bytes.
std::vector<std::shared_ptr<const OutgoingPush>> PushMessages(
    const std::shared_ptr<const OutgoingPush>& push) {
  std::vector<std::shared_ptr<const OutgoingPush>> messages;
  for (const SliceRange& batch : BatchSlices(push->request.gradients(), kChunkBytes, push->lent)) {
    std::vector<int> slices(batch.end - batch.begin);
    std::iota(slices.begin(), slices.end(), batch.begin);
    messages.push_back(PushPart(push, slices));
  }
  return messages;
}

// Reads a stream of pull responses to its end, their values placed by
// `sink`, keeping the slices as they came. A message that does not parse
// cancels the call (the server would otherwise wait for this reader until
// the deadline) and is DATA_LOSS.
template <typename Reader, typename Finish>
absl::StatusOr<PullResponse> ReadPulls(grpc::ClientContext* context, Reader* reader,
                                       SlicePlacer* sink, Finish finish) {
  PullResponse response;
  grpc::ByteBuffer buffer;
  while (reader->Read(&buffer)) {
    PullResponse part;
    if (absl::Status s = ParsePullResponse(&buffer, sink, &part); !s.ok()) {
      context->TryCancel();
      finish().IgnoreError();
      return s;
    }
    AppendPullResponse(part, &response);
  }
  if (absl::Status s = finish(); !s.ok()) return s;
  return response;
}

// A unary call with a deadline and `token`, waiting for the server or not; `call(context,
// response)` makes it and `convert` turns its status into an absl::Status.
template <typename Response, typename Call, typename Convert>
absl::StatusOr<Response> Unary(absl::Time deadline, const std::string& token, bool wait, Call call,
                               Convert convert) {
  grpc::ClientContext context;
  Prepare(deadline, token, wait, &context);
  Response response;
  if (absl::Status s = convert(call(&context, &response)); !s.ok()) return s;
  return response;
}

}  // namespace

GrpcPsTransport::GrpcPsTransport(const std::string& address, const TlsFiles& tls, std::string token)
    : address_(address), token_(std::move(token)), plaintext_(!tls.enabled()) {
  grpc::ChannelArguments args = ClientChannelArguments(kClientMaxMessageBytes);
  // gRPC would share one connection among channels with equal arguments;
  // several transports to one server are there for several connections.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  channel_ = grpc::CreateCustomChannel(address, MakeChannelCredentials(tls), args);
  stub_ = PsService::NewStub(channel_);
  // The calls that carry tensors are made with raw byte buffers, which this
  // transport serialises (lending tensor bytes) and parses (placing them)
  // itself: gRPC's typed calls would pass everything through protobuf.
  // They use grpc::internal:: (RpcMethod, BlockingUnaryCall, the
  // Client*Factory calls: the entry points generated stubs use) because
  // gRPC's public API has no blocking calls on byte buffers: GenericStub
  // makes only asynchronous and callback ones.
  using grpc::internal::RpcMethod;
  pull_ =
      std::make_unique<RpcMethod>("/fulcrum.PsService/Pull", RpcMethod::SERVER_STREAMING, channel_);
  push_ =
      std::make_unique<RpcMethod>("/fulcrum.PsService/Push", RpcMethod::CLIENT_STREAMING, channel_);
  push_pull_ = std::make_unique<RpcMethod>("/fulcrum.PsService/PushPull", RpcMethod::BIDI_STREAMING,
                                           channel_);
  pull_small_ =
      std::make_unique<RpcMethod>("/fulcrum.PsService/PullSmall", RpcMethod::NORMAL_RPC, channel_);
  push_pull_small_ = std::make_unique<RpcMethod>("/fulcrum.PsService/PushPullSmall",
                                                 RpcMethod::NORMAL_RPC, channel_);
}

GrpcPsTransport::~GrpcPsTransport() = default;

absl::Status GrpcPsTransport::Convert(const grpc::Status& status) const {
  // A call that timed out without ever connecting found no server.
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      channel_->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
    std::string why = absl::StrCat("cannot connect to ", address_, " before the call's deadline");
    if (plaintext_ &&
        ProbePlaintext(address_, absl::Milliseconds(500)) == PlaintextAnswer::kClosedAtPreface) {
      absl::StrAppend(&why,
                      ": it listens but closes plaintext connections, so it likely wants TLS "
                      "(give this client the cluster's certificate, key and CA: --tls_cert, "
                      "--tls_key and --tls_ca, or tls_cert, tls_key and tls_ca in Python)");
    }
    return absl::UnavailableError(why);
  }
  return FromGrpcStatus(status);
}

absl::StatusOr<PullResponse> GrpcPsTransport::ParseUnaryPull(const grpc::Status& status,
                                                             grpc::ByteBuffer* buffer,
                                                             SlicePlacer* sink) const {
  if (absl::Status s = Convert(status); !s.ok()) return s;
  PullResponse response;
  if (absl::Status s = ParsePullResponse(buffer, sink, &response); !s.ok()) return s;
  return response;
}

absl::StatusOr<CreateShardsResponse> GrpcPsTransport::CreateShards(
    const CreateShardsRequest& request, absl::Time deadline) {
  return Unary<CreateShardsResponse>(
      deadline, token_, !fail_fast_.load(),
      [&](auto* context, auto* response) {
        return stub_->CreateShards(context, request, response);
      },
      [this](const grpc::Status& s) { return Convert(s); });
}

absl::StatusOr<PullResponse> GrpcPsTransport::Pull(const PullRequest& request,
                                                   int64_t response_bytes, absl::Time deadline,
                                                   SlicePlacer* sink) {
  grpc::ClientContext context;
  Prepare(deadline, token_, !fail_fast_.load(), &context);
  if (response_bytes <= kChunkBytes) {
    grpc::ByteBuffer buffer;
    const grpc::Status status = grpc::internal::BlockingUnaryCall<PullRequest, grpc::ByteBuffer>(
        channel_.get(), *pull_small_, &context, request, &buffer);
    return ParseUnaryPull(status, &buffer, sink);
  }
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel_.get(), *pull_,
                                                                    &context, request));
  return ReadPulls(&context, reader.get(), sink, [&] { return Convert(reader->Finish()); });
}

absl::StatusOr<PushResponse> GrpcPsTransport::Push(std::shared_ptr<const OutgoingPush> request,
                                                   absl::Time deadline) {
  grpc::ClientContext context;
  Prepare(deadline, token_, !fail_fast_.load(), &context);
  grpc::ByteBuffer response_buffer;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel_.get(), *push_,
                                                                    &context, &response_buffer));
  for (const std::shared_ptr<const OutgoingPush>& message : PushMessages(request)) {
    // The gradients are sent from where they lie.
    if (!writer->Write(SerializePush(*message, false, nullptr, message))) break;  // Finish says why
  }
  writer->WritesDone();
  if (absl::Status s = Convert(writer->Finish()); !s.ok()) return s;
  PushResponse response;
  if (!grpc::SerializationTraits<PushResponse>::Deserialize(&response_buffer, &response).ok()) {
    return absl::DataLossError("malformed push response");
  }
  return response;
}

absl::StatusOr<PullResponse> GrpcPsTransport::PushPull(std::shared_ptr<const OutgoingPush> push,
                                                       const PullRequest& pull,
                                                       int64_t response_bytes, absl::Time deadline,
                                                       SlicePlacer* sink) {
  grpc::ClientContext context;
  Prepare(deadline, token_, !fail_fast_.load(), &context);
  if (push->TensorBytes() <= kChunkBytes && response_bytes <= kChunkBytes) {
    grpc::ByteBuffer buffer;
    const grpc::Status status =
        grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
            channel_.get(), *push_pull_small_, &context, SerializePush(*push, true, &pull, push),
            &buffer);
    return ParseUnaryPull(status, &buffer, sink);
  }
  // On the stream, the gradients are lent to gRPC, sent from where they
  // lie, and so is the pull: the lent bytes must all belong to `lent`.
  const auto lent =
      std::make_shared<const std::pair<std::shared_ptr<const OutgoingPush>, PullRequest>>(
          std::move(push), pull);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel_.get(), *push_pull_, &context));
  // The pull goes first, so that a server can send each shard's values back
  // as soon as it has applied its gradient, while the rest still arrives
  // (async mode); a thread reads them meanwhile, so that neither side's
  // flow-control window fills up waiting for the other.
  absl::StatusOr<PullResponse> read;
  std::thread reader(
      [&] { read = ReadPulls(&context, stream.get(), sink, [] { return absl::OkStatus(); }); });
  const std::vector<std::shared_ptr<const OutgoingPush>> parts = PushMessages(lent->first);
  for (size_t i = 0; i < parts.size(); ++i) {
    const PullRequest* pull_part = i == 0 ? &lent->second : nullptr;
    if (!stream->Write(SerializePush(*parts[i], true, pull_part, lent))) break;  // Finish says why
  }
  stream->WritesDone();
  reader.join();
  const absl::Status finished = Convert(stream->Finish());
  if (!read.ok() || !finished.ok()) return read.ok() ? finished : read.status();
  return read;
}

absl::StatusOr<HeartbeatResponse> GrpcPsTransport::Heartbeat(const HeartbeatRequest& request,
                                                             absl::Time deadline) {
  return Unary<HeartbeatResponse>(
      deadline, token_, !fail_fast_.load(),
      [&](auto* context, auto* response) { return stub_->Heartbeat(context, request, response); },
      [this](const grpc::Status& s) { return Convert(s); });
}

absl::StatusOr<PullRowsResponse> GrpcPsTransport::PullRows(const PullRowsRequest& request,
                                                           absl::Time deadline) {
  return Unary<PullRowsResponse>(
      deadline, token_, !fail_fast_.load(),
      [&](auto* context, auto* response) { return stub_->PullRows(context, request, response); },
      [this](const grpc::Status& s) { return Convert(s); });
}

absl::StatusOr<PushRowsResponse> GrpcPsTransport::PushRowsInParts(
    const std::vector<PushRowsRequest>& parts, absl::Time deadline) {
  grpc::ClientContext context;
  Prepare(deadline, token_, !fail_fast_.load(), &context);
  PushRowsResponse response;
  std::unique_ptr<grpc::ClientWriter<PushRowsRequest>> writer(
      stub_->PushRowsStream(&context, &response));
  for (const PushRowsRequest& part : parts) {
    if (!writer->Write(part)) break;  // Finish says why
  }
  writer->WritesDone();
  if (absl::Status s = Convert(writer->Finish()); !s.ok()) return s;
  return response;
}

absl::StatusOr<ReadRowsResponse> GrpcPsTransport::ReadRows(const ReadRowsRequest& request,
                                                           absl::Time deadline) {
  return Unary<ReadRowsResponse>(
      deadline, token_, !fail_fast_.load(),
      [&](auto* context, auto* response) { return stub_->ReadRows(context, request, response); },
      [this](const grpc::Status& s) { return Convert(s); });
}

absl::StatusOr<PushRowsResponse> GrpcPsTransport::PushRows(const PushRowsRequest& request,
                                                           absl::Time deadline) {
  return Unary<PushRowsResponse>(
      deadline, token_, !fail_fast_.load(),
      [&](auto* context, auto* response) { return stub_->PushRows(context, request, response); },
      [this](const grpc::Status& s) { return Convert(s); });
}

absl::StatusOr<DescribeResponse> GrpcPsTransport::Describe(absl::Time deadline) {
  return Unary<DescribeResponse>(
      deadline, token_, !fail_fast_.load(),
      [&](auto* context, auto* response) {
        return stub_->Describe(context, DescribeRequest(), response);
      },
      [this](const grpc::Status& s) { return Convert(s); });
}

absl::StatusOr<SaveCheckpointResponse> GrpcPsTransport::SaveCheckpoint(
    const SaveCheckpointRequest& request, absl::Time deadline) {
  return Unary<SaveCheckpointResponse>(
      deadline, token_, !fail_fast_.load(),
      [&](auto* context, auto* response) {
        return stub_->SaveCheckpoint(context, request, response);
      },
      [this](const grpc::Status& s) { return Convert(s); });
}

absl::Status GrpcPsTransport::JobDone(const std::string& reason, absl::Time deadline) {
  JobDoneRequest request;
  request.set_reason(reason);
  return Unary<JobDoneResponse>(
             deadline, token_, !fail_fast_.load(),
             [&](auto* context, auto* response) {
               return stub_->JobDone(context, request, response);
             },
             [this](const grpc::Status& s) { return Convert(s); })
      .status();
}

std::vector<std::unique_ptr<PsTransport>> MakeGrpcTransports(
    const std::vector<std::string>& addresses, int channels, const TlsFiles& tls,
    const std::string& token) {
  CHECK(channels >= 1 && "PsClientOptions::channels_per_server must be at least 1");
  std::vector<std::unique_ptr<PsTransport>> transports;
  for (const std::string& address : addresses) {
    if (channels == 1) {
      transports.push_back(std::make_unique<GrpcPsTransport>(address, tls, token));
      continue;
    }
    std::vector<std::unique_ptr<PsTransport>> lanes;
    for (int i = 0; i < channels; ++i) {
      lanes.push_back(std::make_unique<GrpcPsTransport>(address, tls, token));
    }
    // Calls that fit one message each way stay whole: unary, and cheaper.
    transports.push_back(std::make_unique<ParallelPsTransport>(std::move(lanes), kChunkBytes));
  }
  return transports;
}

}  // namespace fulcrum
