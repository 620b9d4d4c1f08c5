#include "worker/grpc/grpc_ps_transport.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/slices.h"
#include "proto/tensor_bytes.h"
#include "worker/parallel_ps_transport.h"

namespace fulcrum {
namespace {

// Every call waits for the channel to connect (a server that starts late, or
// restarts, is waited for) until its deadline. The calling thread drives the
// connection meanwhile, which a sleep between fail-fast retries would not.
void Prepare(absl::Time deadline, grpc::ClientContext* context) {
  context->set_wait_for_ready(true);
  if (deadline != absl::InfiniteFuture()) context->set_deadline(absl::ToChronoTime(deadline));
}

// The push as stream messages of about kChunkBytes of gradients each; at
// least one, which carries the worker and clock even with no gradients. The
// messages borrow the push's slices instead of copying their bytes.
std::vector<std::shared_ptr<const PushRequest>> PushMessages(
    const std::shared_ptr<const PushRequest>& push) {
  std::vector<std::shared_ptr<const PushRequest>> messages;
  for (const SliceRange& batch : BatchSlices(push->gradients(), kChunkBytes)) {
    std::vector<int> slices(batch.end - batch.begin);
    std::iota(slices.begin(), slices.end(), batch.begin);
    messages.push_back(PushPart(push, slices));
  }
  return messages;
}

// Reads a pull stream to its end, keeping the slices as they came.
absl::StatusOr<PullResponse> ReadPull(grpc::ClientContext* context,
                                      grpc::internal::ReaderInterface<PullResponse>* reader,
                                      const std::function<absl::Status()>& finish) {
  PullResponse response;
  PullResponse part;
  while (reader->Read(&part)) AppendPullResponse(part, &response);
  // A message that failed to parse also ends the reads; the server is not
  // done, and would wait for this reader until the deadline.
  if (PlaceTensorBytes::FailedOnThisThread()) context->TryCancel();
  if (absl::Status s = finish(); !s.ok()) return s;
  return response;
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
  // gRPC would share one connection among channels with equal arguments;
  // several transports to one server are there for several connections.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
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
  return Unary<CreateShardsResponse>(
      deadline,
      [&](auto* context, auto* response) {
        return stub_->CreateShards(context, request, response);
      },
      [this](const grpc::Status& s) { return Convert(s); });
}

absl::StatusOr<PullResponse> GrpcPsTransport::Pull(const PullRequest& request,
                                                   int64_t response_bytes, absl::Time deadline) {
  if (response_bytes <= kChunkBytes) {
    return Unary<PullResponse>(
        deadline,
        [&](auto* context, auto* response) { return stub_->PullSmall(context, request, response); },
        [this](const grpc::Status& s) { return Convert(s); });
  }
  grpc::ClientContext context;
  Prepare(deadline, &context);
  auto reader = stub_->Pull(&context, request);
  return ReadPull(&context, reader.get(), [&] { return Convert(reader->Finish()); });
}

absl::StatusOr<PushResponse> GrpcPsTransport::Push(std::shared_ptr<const PushRequest> request,
                                                   absl::Time deadline) {
  grpc::ClientContext context;
  Prepare(deadline, &context);
  PushResponse response;
  auto writer = stub_->Push(&context, &response);
  for (const std::shared_ptr<const PushRequest>& message : PushMessages(request)) {
    LendTensorBytes lend(message);        // the gradients are sent from where they lie
    if (!writer->Write(*message)) break;  // the server ended the call; Finish says why
  }
  writer->WritesDone();
  if (absl::Status s = Convert(writer->Finish()); !s.ok()) return s;
  return response;
}

absl::StatusOr<PullResponse> GrpcPsTransport::PushPull(std::shared_ptr<const PushRequest> push,
                                                       const PullRequest& pull,
                                                       int64_t response_bytes,
                                                       absl::Time deadline) {
  if (TensorBytes(push->gradients()) <= kChunkBytes && response_bytes <= kChunkBytes) {
    // The push and pull are lent to the request for the call, not copied.
    PushPullRequest request;
    request.unsafe_arena_set_allocated_push(const_cast<PushRequest*>(push.get()));
    request.unsafe_arena_set_allocated_pull(const_cast<PullRequest*>(&pull));
    auto result = Unary<PullResponse>(
        deadline,
        [&](auto* context, auto* response) {
          return stub_->PushPullSmall(context, request, response);
        },
        [this](const grpc::Status& s) { return Convert(s); });
    request.unsafe_arena_release_push();
    request.unsafe_arena_release_pull();
    return result;
  }
  // On the stream, the gradients are lent to gRPC, sent from where they lie
  // (LendTensorBytes), and so is the pull: the lent bytes must all belong to
  // `lent`.
  const auto lent =
      std::make_shared<const std::pair<std::shared_ptr<const PushRequest>, PullRequest>>(
          std::move(push), pull);
  const PullRequest& pull_part = lent->second;
  grpc::ClientContext context;
  Prepare(deadline, &context);
  auto stream = stub_->PushPull(&context);
  const std::vector<std::shared_ptr<const PushRequest>> parts = PushMessages(lent->first);
  for (size_t i = 0; i < parts.size(); ++i) {
    // Lent to the message for the write, not copied into it.
    PushPullRequest message;
    message.unsafe_arena_set_allocated_push(const_cast<PushRequest*>(parts[i].get()));
    if (i + 1 == parts.size()) {
      message.unsafe_arena_set_allocated_pull(const_cast<PullRequest*>(&pull_part));
    }
    bool written = false;
    {
      LendTensorBytes lend(lent);
      written = stream->Write(message);
    }
    message.unsafe_arena_release_push();
    message.unsafe_arena_release_pull();
    if (!written) break;  // the server ended the call; Finish says why
  }
  stream->WritesDone();
  return ReadPull(&context, stream.get(), [&] { return Convert(stream->Finish()); });
}

absl::StatusOr<HeartbeatResponse> GrpcPsTransport::Heartbeat(const HeartbeatRequest& request,
                                                             absl::Time deadline) {
  return Unary<HeartbeatResponse>(
      deadline,
      [&](auto* context, auto* response) { return stub_->Heartbeat(context, request, response); },
      [this](const grpc::Status& s) { return Convert(s); });
}

absl::StatusOr<DescribeResponse> GrpcPsTransport::Describe(absl::Time deadline) {
  return Unary<DescribeResponse>(
      deadline,
      [&](auto* context, auto* response) {
        return stub_->Describe(context, DescribeRequest(), response);
      },
      [this](const grpc::Status& s) { return Convert(s); });
}

absl::StatusOr<SaveCheckpointResponse> GrpcPsTransport::SaveCheckpoint(
    const SaveCheckpointRequest& request, absl::Time deadline) {
  return Unary<SaveCheckpointResponse>(
      deadline,
      [&](auto* context, auto* response) {
        return stub_->SaveCheckpoint(context, request, response);
      },
      [this](const grpc::Status& s) { return Convert(s); });
}

absl::Status GrpcPsTransport::JobDone(const std::string& reason, absl::Time deadline) {
  JobDoneRequest request;
  request.set_reason(reason);
  return Unary<JobDoneResponse>(
             deadline,
             [&](auto* context, auto* response) {
               return stub_->JobDone(context, request, response);
             },
             [this](const grpc::Status& s) { return Convert(s); })
      .status();
}

std::vector<std::unique_ptr<PsTransport>> MakeGrpcTransports(
    const std::vector<std::string>& addresses, int channels) {
  CHECK(channels >= 1 && "PsClientOptions::channels_per_server must be at least 1");
  std::vector<std::unique_ptr<PsTransport>> transports;
  for (const std::string& address : addresses) {
    if (channels == 1) {
      transports.push_back(std::make_unique<GrpcPsTransport>(address));
      continue;
    }
    std::vector<std::unique_ptr<PsTransport>> lanes;
    for (int i = 0; i < channels; ++i) lanes.push_back(std::make_unique<GrpcPsTransport>(address));
    // Calls that fit one message each way stay whole: unary, and cheaper.
    transports.push_back(std::make_unique<ParallelPsTransport>(std::move(lanes), kChunkBytes));
  }
  return transports;
}

}  // namespace fulcrum
