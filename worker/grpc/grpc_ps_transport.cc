#include "worker/grpc/grpc_ps_transport.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/slices.h"

namespace fulcrum {
namespace {

// Every call waits for the channel to connect (a server that starts late, or
// restarts, is waited for) until its deadline. The calling thread drives the
// connection meanwhile, which a sleep between fail-fast retries would not.
void Prepare(absl::Time deadline, grpc::ClientContext* context) {
  context->set_wait_for_ready(true);
  if (deadline != absl::InfiniteFuture()) context->set_deadline(absl::ToChronoTime(deadline));
}

// The push's gradients as stream messages of about kChunkBytes each; at least
// one message, which carries the worker and clock even with no gradients.
std::vector<PushRequest> PushMessages(const PushRequest& push) {
  std::vector<PushRequest> messages;
  for (SliceList& batch : BatchSlices(push.gradients(), kChunkBytes)) {
    PushRequest& message = messages.emplace_back();
    *message.mutable_gradients() = std::move(batch);
  }
  if (messages.empty()) messages.emplace_back();
  for (PushRequest& message : messages) {
    message.set_worker_id(push.worker_id());
    message.set_clock(push.clock());
    message.set_incarnation(push.incarnation());
  }
  return messages;
}

// Reads a pull stream to its end and joins the slices into whole shards.
absl::StatusOr<PullResponse> ReadPull(grpc::internal::ReaderInterface<PullResponse>* reader,
                                      const std::function<absl::Status()>& finish) {
  PullResponse joined;
  PullResponse part;
  while (reader->Read(&part)) {
    for (ShardSlice& slice : *part.mutable_slices()) *joined.add_slices() = std::move(slice);
    for (ShardPushResult& result : *part.mutable_push_results()) {
      *joined.add_push_results() = std::move(result);
    }
  }
  if (absl::Status s = finish(); !s.ok()) return s;
  if (absl::Status s = JoinSlices(joined.mutable_slices()); !s.ok()) return s;
  return joined;
}

// A unary call with a deadline; `call(context, response)` makes it and
// `convert` turns its status into an absl::Status.
template <typename Response, typename Call, typename Convert>
absl::StatusOr<Response> Unary(absl::Time deadline, Call call, Convert convert) {
  grpc::ClientContext context;
  Prepare(deadline, &context);
  Response response;
  if (absl::Status s = convert(call(&context, &response)); !s.ok()) return s;
  return response;
}

}  // namespace

GrpcPsTransport::GrpcPsTransport(const std::string& address) : address_(address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kClientMaxMessageBytes);
  args.SetMaxSendMessageSize(kClientMaxMessageBytes);
  // gRPC's own reconnect backoff (1 s growing to 120 s) would make a server
  // that starts late look down long after it is up; PsClient retries with
  // its own bounded backoff, so reconnect attempts stay frequent.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Keepalive pings find a connection that a network partition silently
  // cut (no reset ever arrives) within seconds: its calls then fail
  // UNAVAILABLE and are retried, instead of hanging to their deadline.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  stub_ = PsService::NewStub(channel_);
}

absl::Status GrpcPsTransport::Convert(const grpc::Status& status) const {
  // A call that timed out without ever connecting found no server.
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      channel_->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", address_, " before the call's deadline"));
  }
  return FromGrpcStatus(status);
}

absl::StatusOr<CreateShardsResponse> GrpcPsTransport::CreateShards(
    const CreateShardsRequest& request, absl::Time deadline) {
  return Unary<CreateShardsResponse>(deadline, [&](auto* context, auto* response) {
    return stub_->CreateShards(context, request, response);
  }, [this](const grpc::Status& s) { return Convert(s); });
}

absl::StatusOr<PullResponse> GrpcPsTransport::Pull(const PullRequest& request,
                                                   absl::Time deadline) {
  grpc::ClientContext context;
  Prepare(deadline, &context);
  auto reader = stub_->Pull(&context, request);
  return ReadPull(reader.get(), [&] { return Convert(reader->Finish()); });
}

absl::StatusOr<PushResponse> GrpcPsTransport::Push(const PushRequest& request,
                                                   absl::Time deadline) {
  grpc::ClientContext context;
  Prepare(deadline, &context);
  PushResponse response;
  auto writer = stub_->Push(&context, &response);
  for (const PushRequest& message : PushMessages(request)) {
    if (!writer->Write(message)) break;  // the server ended the call; Finish says why
  }
  writer->WritesDone();
  if (absl::Status s = Convert(writer->Finish()); !s.ok()) return s;
  return response;
}

absl::StatusOr<PullResponse> GrpcPsTransport::PushPull(const PushRequest& push,
                                                       const PullRequest& pull,
                                                       absl::Time deadline) {
  grpc::ClientContext context;
  Prepare(deadline, &context);
  auto stream = stub_->PushPull(&context);
  std::vector<PushRequest> messages = PushMessages(push);
  for (size_t i = 0; i < messages.size(); ++i) {
    PushPullRequest message;
    *message.mutable_push() = std::move(messages[i]);
    if (i + 1 == messages.size()) *message.mutable_pull() = pull;
    if (!stream->Write(message)) break;  // the server ended the call; Finish says why
  }
  stream->WritesDone();
  return ReadPull(stream.get(), [&] { return Convert(stream->Finish()); });
}

absl::StatusOr<HeartbeatResponse> GrpcPsTransport::Heartbeat(const HeartbeatRequest& request,
                                                             absl::Time deadline) {
  return Unary<HeartbeatResponse>(deadline, [&](auto* context, auto* response) {
    return stub_->Heartbeat(context, request, response);
  }, [this](const grpc::Status& s) { return Convert(s); });
}

absl::StatusOr<DescribeResponse> GrpcPsTransport::Describe(absl::Time deadline) {
  return Unary<DescribeResponse>(deadline, [&](auto* context, auto* response) {
    return stub_->Describe(context, DescribeRequest(), response);
  }, [this](const grpc::Status& s) { return Convert(s); });
}

absl::StatusOr<SaveCheckpointResponse> GrpcPsTransport::SaveCheckpoint(
    const SaveCheckpointRequest& request, absl::Time deadline) {
  return Unary<SaveCheckpointResponse>(deadline, [&](auto* context, auto* response) {
    return stub_->SaveCheckpoint(context, request, response);
  }, [this](const grpc::Status& s) { return Convert(s); });
}

absl::Status GrpcPsTransport::JobDone(const std::string& reason, absl::Time deadline) {
  JobDoneRequest request;
  request.set_reason(reason);
  return Unary<JobDoneResponse>(deadline, [&](auto* context, auto* response) {
           return stub_->JobDone(context, request, response);
         }, [this](const grpc::Status& s) { return Convert(s); }).status();
}

std::vector<std::unique_ptr<PsTransport>> MakeGrpcTransports(
    const std::vector<std::string>& addresses) {
  std::vector<std::unique_ptr<PsTransport>> transports;
  for (const std::string& address : addresses) {
    transports.push_back(std::make_unique<GrpcPsTransport>(address));
  }
  return transports;
}

}  // namespace fulcrum
