#include "ps_server/grpc/ps_grpc_server.h"

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/row_push.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/options.h"
#include "common/rpc/tensor_bytes.h"
#include "common/slices.h"

namespace fulcrum {
namespace {

absl::Time Deadline(const grpc::ServerContext* context) {
  return absl::FromChrono(context->deadline());
}

// Bytes of the floats in rows of tables.
int64_t RowBytes(const google::protobuf::RepeatedPtrField<TableRows>& tables) {
  int64_t bytes = 0;
  for (const TableRows& rows : tables) {
    bytes += rows.values_size() * static_cast<int64_t>(sizeof(float));
  }
  return bytes;
}

// Records one call's latency, when there are metrics.
class RpcTimer {
 public:
  RpcTimer(PsMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method), start_(absl::Now()) {}
  ~RpcTimer() {
    if (metrics_ != nullptr) metrics_->ObserveRpc(method_, absl::Now() - start_);
  }

 private:
  PsMetrics* const metrics_;
  const char* const method_;
  const absl::Time start_;
};

// The handling of a push the worker traces (PushRequest.trace, its
// --trace_steps), for the server's trace file: the whole call on the track
// of its worker, with the arrow from the worker's call, and its parts.
class HandlingTrace {
 public:
  HandlingTrace(TraceFile* trace, int ps, const char* call)
      : trace_(trace), ps_(ps), call_(call), start_(absl::Now()), lap_(start_) {}
  ~HandlingTrace() {
    if (!traced_) return;
    const std::string track = absl::StrCat("worker ", worker_);
    trace_->Add({track,
                 call_,
                 start_,
                 absl::Now(),
                 {{"push_id", absl::StrCat(absl::Hex(push_id_))}},
                 TraceSpan::kTo,
                 FlowId(push_id_, ps_)});
    for (const TraceSpan& part : parts_) trace_->Add(part);
  }

  // The push's header (a PushRequest's or PushRowsRequest's), once read.
  template <typename Request>
  void Header(const Request& header) {
    if (trace_ == nullptr || !header.trace()) return;
    traced_ = true;
    worker_ = header.worker_id();
    push_id_ = header.push_id();
  }
  // Ends part `name` of the handling, begun where the last one ended.
  void Lap(const char* name) {
    if (!traced_) return;
    const absl::Time now = absl::Now();
    parts_.push_back({absl::StrCat("worker ", worker_), name, lap_, now});
    lap_ = now;
  }

 private:
  TraceFile* const trace_;
  const int ps_;
  const char* const call_;
  const absl::Time start_;
  absl::Time lap_;
  bool traced_ = false;
  int worker_ = 0;
  uint64_t push_id_ = 0;
  std::vector<TraceSpan> parts_;
};

}  // namespace

class PsGrpcServer::Service final
    : public PsService::WithStreamedUnaryMethod_PullSmall<
          PsService::WithStreamedUnaryMethod_PushPullSmall<PsService::Service>> {
 public:
  Service(ParameterServer* ps, PsMetrics* metrics, Access access, TraceFile* trace)
      : ps_(ps),
        metrics_(metrics),
        access_(std::move(access)),
        trace_(trace),
        index_(ps->config().cluster().task().index()) {}

  grpc::Status CreateShards(grpc::ServerContext* context, const CreateShardsRequest* request,
                            CreateShardsResponse* response) override {
    RpcTimer timer(metrics_, "CreateShards");
    if (grpc::Status s = Allow(*context, kData, "CreateShards"); !s.ok()) return s;
    auto result = ps_->CreateShards(*request);
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    return grpc::Status::OK;
  }

  grpc::Status Pull(grpc::ServerContext* context, const PullRequest* request,
                    grpc::ServerWriter<PullResponse>* writer) override {
    RpcTimer timer(metrics_, "Pull");
    if (grpc::Status s = Allow(*context, kData, "Pull"); !s.ok()) return s;
    return ToGrpcStatus(PullAndWrite(*request, Deadline(context), StreamedCallLimits(), kChunkBytes,
                                     true, {}, writer));
  }

  grpc::Status Push(grpc::ServerContext* context, grpc::ServerReader<PushRequest>* reader,
                    PushResponse* response) override {
    RpcTimer timer(metrics_, "Push");
    if (grpc::Status s = Allow(*context, kData, "Push"); !s.ok()) return s;
    HandlingTrace trace(trace_, index_, "push");
    ParameterServer::IncomingPush push(ps_, StreamedCallLimits());
    ReceiveTensorBytes receive;  // gradients are applied from gRPC's buffers
    PushRequest part;
    while (reader->Read(&part)) {
      trace.Header(part);
      if (absl::Status s = Receive(push, &part, receive.Take()); !s.ok()) return ToGrpcStatus(s);
    }
    if (!receive.error().ok()) return ToGrpcStatus(receive.error());
    auto result = push.Finish();
    trace.Lap("receive and apply");
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    return grpc::Status::OK;
  }

  grpc::Status PushPull(grpc::ServerContext* context,
                        grpc::ServerReaderWriter<PullResponse, PushPullRequest>* stream) override {
    RpcTimer timer(metrics_, "PushPull");
    if (grpc::Status s = Allow(*context, kData, "PushPull"); !s.ok()) return s;
    HandlingTrace trace(trace_, index_, "push-pull");
    ParameterServer::IncomingPush push(ps_, StreamedCallLimits());
    // Without a pull part, only the push's outcome is sent back.
    PullRequest pull;
    // Where the mode allows it (async), a pulled shard is sent back as soon
    // as the push has applied it, while the rest of the push still arrives
    // (the client reads meanwhile); else the pull is answered at its end.
    const bool pipelined = ps_->PullsOverlapPush();
    std::vector<bool> sent;  // of pull's shards
    // The pull's shards not sent yet that `wanted` picks, marked sent.
    const auto take = [&](const auto& wanted) {
      PullRequest taken = pull;
      taken.clear_shards();
      for (int i = 0; i < pull.shards_size(); ++i) {
        if (!sent[i] && wanted(pull.shards(i))) {
          *taken.add_shards() = pull.shards(i);
          sent[i] = true;
        }
      }
      return taken;
    };
    ReceiveTensorBytes receive;  // gradients are applied from gRPC's buffers
    PushPullRequest part;
    while (stream->Read(&part)) {
      trace.Header(part.push());
      if (absl::Status s = Receive(push, part.mutable_push(), receive.Take()); !s.ok()) {
        return ToGrpcStatus(s);
      }
      if (part.has_pull()) {
        pull = part.pull();
        sent.assign(pull.shards_size(), false);
      }
      if (!pipelined) continue;
      const PullRequest ready = take([&](const ShardRef& ref) { return push.Applied(ref); });
      if (ready.shards().empty()) continue;
      if (absl::Status s = PullAndWrite(ready, Deadline(context), StreamedCallLimits(), kChunkBytes,
                                        false, {}, stream);
          !s.ok()) {
        return ToGrpcStatus(s);
      }
    }
    if (!receive.error().ok()) return ToGrpcStatus(receive.error());
    auto pushed = push.Finish();
    if (!pushed.ok()) return ToGrpcStatus(pushed.status());
    trace.Lap("receive and apply");
    // The rest, and the push's outcome.
    const PullRequest rest = take([](const ShardRef&) { return true; });
    const absl::Status pulled = PullAndWrite(rest, Deadline(context), StreamedCallLimits(),
                                             kChunkBytes, true, pushed->results(), stream);
    trace.Lap(kPullPart);
    return ToGrpcStatus(pulled);
  }

  // The unary calls are served as streamed unary methods (below), so that
  // their responses go out through the pull-response serialiser too, with
  // the float32 values lent from the shards' snapshots: the generated unary
  // handlers would serialise them as plain protobuf messages, copying.
  grpc::Status StreamedPullSmall(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<PullRequest, PullResponse>* streamer) override {
    RpcTimer timer(metrics_, "PullSmall");
    if (grpc::Status s = Allow(*context, kData, "PullSmall"); !s.ok()) return s;
    PullRequest request;
    if (!streamer->Read(&request)) return {grpc::StatusCode::INTERNAL, "PullSmall: no request"};
    return ToGrpcStatus(PullAndWrite(request, Deadline(context), SmallCallLimits(), kOneMessage,
                                     true, {}, streamer));
  }

  grpc::Status StreamedPushPullSmall(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<PushPullRequest, PullResponse>* streamer) override {
    RpcTimer timer(metrics_, "PushPullSmall");
    if (grpc::Status s = Allow(*context, kData, "PushPullSmall"); !s.ok()) return s;
    HandlingTrace trace(trace_, index_, "push-pull");
    ReceiveTensorBytes receive;  // gradients are applied from gRPC's buffers
    PushPullRequest request;
    if (!streamer->Read(&request)) {
      if (!receive.error().ok()) return ToGrpcStatus(receive.error());
      return {grpc::StatusCode::INTERNAL, "PushPullSmall: no request"};
    }
    trace.Header(request.push());
    const ReceivedBytes received = receive.Take();
    auto pushed = ps_->Push(request.push(), SmallCallLimits(), received);
    if (!pushed.ok()) return ToGrpcStatus(pushed.status());
    trace.Lap("receive and apply");
    Pushed(TensorBytes(request.push().gradients(), received));
    // Without a pull part (an empty pull), only the push's outcome.
    const absl::Status pulled = PullAndWrite(request.pull(), Deadline(context), SmallCallLimits(),
                                             kOneMessage, true, pushed->results(), streamer);
    trace.Lap(kPullPart);
    return ToGrpcStatus(pulled);
  }

  grpc::Status PullRows(grpc::ServerContext* context, const PullRowsRequest* request,
                        PullRowsResponse* response) override {
    RpcTimer timer(metrics_, "PullRows");
    if (grpc::Status s = Allow(*context, kData, "PullRows"); !s.ok()) return s;
    auto result = ps_->PullRows(*request, Deadline(context));
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    Pulled(RowBytes(response->tables()));
    return grpc::Status::OK;
  }

  grpc::Status PushRows(grpc::ServerContext* context, const PushRowsRequest* request,
                        PushRowsResponse* response) override {
    RpcTimer timer(metrics_, "PushRows");
    if (grpc::Status s = Allow(*context, kData, "PushRows"); !s.ok()) return s;
    HandlingTrace trace(trace_, index_, "push rows");
    trace.Header(*request);
    auto result = ps_->PushRows(*request);
    trace.Lap("apply");
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    Pushed(RowBytes(request->tables()));
    return grpc::Status::OK;
  }

  grpc::Status PushRowsStream(grpc::ServerContext* context,
                              grpc::ServerReader<PushRowsRequest>* reader,
                              PushRowsResponse* response) override {
    RpcTimer timer(metrics_, "PushRowsStream");
    if (grpc::Status s = Allow(*context, kData, "PushRowsStream"); !s.ok()) return s;
    HandlingTrace trace(trace_, index_, "push rows");
    // A peer's parts are bounded as they arrive: at most the ids one push
    // may carry, and their gradients within a few of the largest messages.
    const int64_t max_bytes = 4 * ps_->config().max_message_bytes();
    std::vector<PushRowsRequest> parts;
    int64_t ids = 0, bytes = 0, pushed = 0;
    for (PushRowsRequest part; reader->Read(&part);) {
      trace.Header(part);
      pushed += RowBytes(part.tables());
      for (const TableRows& rows : part.tables()) {
        ids += rows.ids_size();
        bytes += rows.ids_size() * static_cast<int64_t>(sizeof(int64_t)) +
                 rows.values_size() * static_cast<int64_t>(sizeof(float));
      }
      if (ids > kMaxIdsPerRowPush || bytes > max_bytes) {
        return ToGrpcStatus(absl::ResourceExhaustedError(
            absl::StrCat("a push of rows over ", kMaxIdsPerRowPush, " ids or ", max_bytes,
                         " bytes: push fewer rows a step")));
      }
      parts.push_back(std::move(part));
    }
    trace.Lap("receive");
    auto result = ps_->PushRows(std::move(parts));
    trace.Lap("apply");
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    Pushed(pushed);
    return grpc::Status::OK;
  }

  grpc::Status ReadRows(grpc::ServerContext* context, const ReadRowsRequest* request,
                        ReadRowsResponse* response) override {
    RpcTimer timer(metrics_, "ReadRows");
    if (grpc::Status s = Allow(*context, kData, "ReadRows"); !s.ok()) return s;
    auto result = ps_->ReadRows(*request);
    if (!result.ok()) return ToGrpcStatus(result.status());
    *response = *std::move(result);
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext* context, const HeartbeatRequest* request,
                         HeartbeatResponse* response) override {
    RpcTimer timer(metrics_, "Heartbeat");
    if (grpc::Status s = Allow(*context, kData, "Heartbeat"); !s.ok()) return s;
    auto result = ps_->Heartbeat(*request);
    if (result.ok()) *response = *result;
    return ToGrpcStatus(result.status());
  }

  grpc::Status Describe(grpc::ServerContext* context, const DescribeRequest*,
                        DescribeResponse* response) override {
    RpcTimer timer(metrics_, "Describe");
    if (grpc::Status s = Allow(*context, kData, "Describe"); !s.ok()) return s;
    *response = ps_->Describe();
    return grpc::Status::OK;
  }

  grpc::Status SaveCheckpoint(grpc::ServerContext* context, const SaveCheckpointRequest* request,
                              SaveCheckpointResponse* response) override {
    RpcTimer timer(metrics_, "SaveCheckpoint");
    if (grpc::Status s = Allow(*context, kControl, "SaveCheckpoint"); !s.ok()) return s;
    const absl::Time start = absl::Now();
    auto result = ps_->SaveCheckpoint(*request);
    if (metrics_ != nullptr) {
      if (result.ok()) {
        metrics_->ObserveCheckpoint(absl::Now() - start);
      } else {
        metrics_->AddCheckpointFailure();
      }
    }
    if (result.ok()) *response = *result;
    return ToGrpcStatus(result.status());
  }

  grpc::Status Replicate(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<ReplicateResponse, ReplicateRequest>* stream) override {
    RpcTimer timer(metrics_, "Replicate");
    if (grpc::Status s = Allow(*context, kPeer, "Replicate"); !s.ok()) return s;
    ReplicateRequest request;
    while (stream->Read(&request)) {
      auto applied = ps_->Replicate(request);
      if (!applied.ok()) return ToGrpcStatus(applied.status());
      if (!stream->Write(*applied)) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status JobDone(grpc::ServerContext* context, const JobDoneRequest* request,
                       JobDoneResponse*) override {
    RpcTimer timer(metrics_, "JobDone");
    if (grpc::Status s = Allow(*context, kControl, "JobDone"); !s.ok()) return s;
    ps_->JobDone(request->reason());
    return grpc::Status::OK;
  }

  grpc::Status Rebalance(grpc::ServerContext* context, const RebalanceRequest* request,
                         RebalanceResponse* response) override {
    RpcTimer timer(metrics_, "Rebalance");
    if (grpc::Status s = Allow(*context, kControl, "Rebalance"); !s.ok()) return s;
    auto rebalanced = ps_->Rebalance(*request);
    if (!rebalanced.ok()) return ToGrpcStatus(rebalanced.status());
    *response = *std::move(rebalanced);
    return grpc::Status::OK;
  }

 private:
  enum CallKind { kData, kControl, kPeer };
  // OK when the peer may make `call`, of `kind` (Access); a refusal is
  // logged and counted.
  grpc::Status Allow(const grpc::ServerContext& context, CallKind kind, const std::string& call) {
    grpc::Status status = kind == kData      ? access_.CheckData(context, call)
                          : kind == kControl ? access_.CheckControl(context, call)
                                             : access_.CheckPeer(context, call);
    if (!status.ok()) {
      LOG_WARN("refused {} from {}: {}", call, context.peer(), status.error_message());
      if (metrics_ != nullptr) metrics_->AddRefused(call);
    }
    return status;
  }

  // Counts bytes pushed here or pulled from here: in the metrics, and in
  // what Describe says.
  void Pushed(int64_t bytes) {
    if (metrics_ != nullptr) metrics_->AddPushedBytes(bytes);
    ps_->CountTraffic(bytes, 0);
  }
  void Pulled(int64_t bytes) {
    if (metrics_ != nullptr) metrics_->AddPulledBytes(bytes);
    ps_->CountTraffic(0, bytes);
  }

  // Hands a streamed push's next message to `push`, counting its bytes.
  absl::Status Receive(ParameterServer::IncomingPush& push, PushRequest* part,
                       ReceivedBytes received) {
    Pushed(TensorBytes(part->gradients(), received));
    return push.Add(part, std::move(received));
  }

  // Tensor bytes of a message that holds every pulled slice (a unary call's).
  static constexpr int64_t kOneMessage = std::numeric_limits<int64_t>::max();

  // Writes the shards pulled within `limits` as messages of about
  // `message_bytes` of tensor data; the first (always at least one) carries
  // `push_results`. With `ends_call`, they are the call's last messages. Their float32
  // values go from the shards' snapshots, and the rest from the messages,
  // without a copy: gRPC keeps each message until it has sent them.
  // `Writer`: a ServerWriter or ServerReaderWriter of PullResponse.
  template <typename Writer>
  absl::Status PullAndWrite(const PullRequest& request, absl::Time deadline,
                            const CallLimits& limits, int64_t message_bytes, bool ends_call,
                            const google::protobuf::RepeatedPtrField<ShardPushResult>& push_results,
                            Writer* writer) {
    auto result = ps_->PullLending(request, deadline, limits);
    if (!result.ok()) return result.status();
    SliceList& slices = *result->response.mutable_slices();
    const std::vector<SliceRange> batches = BatchSlices(slices, message_bytes, result->lent);
    for (size_t b = 0; b < batches.size(); ++b) {
      auto message = std::make_shared<OutgoingPull>();
      for (int i = batches[b].begin; i < batches[b].end; ++i) {
        *message->response.add_slices() = std::move(*slices.Mutable(i));
        message->lent.push_back(result->lent[i]);
      }
      message->snapshots = result->snapshots;
      Pulled(TensorBytes(message->response.slices(), message->lent));
      if (b == 0) {
        *message->response.mutable_push_results() = push_results;
        message->response.set_waited_us(result->response.waited_us());
      }
      LendTensorBytes lend(message);
      // A call's last message goes out with its status, in one write.
      grpc::WriteOptions options;
      if (ends_call && b + 1 == batches.size()) options.set_last_message();
      if (!writer->Write(message->response, options)) {
        return absl::CancelledError("pull: the client went away");
      }
    }
    return absl::OkStatus();
  }

  // The part of a push-pull's handling after its push: in sync, the wait
  // for the step's other pushes is in it.
  static constexpr const char* kPullPart = "pull";

  ParameterServer* const ps_;
  PsMetrics* const metrics_;
  const Access access_;
  TraceFile* const trace_;
  const int index_;  // this server's, in the cluster's ps list
};

absl::StatusOr<std::unique_ptr<PsGrpcServer>> PsGrpcServer::Start(ParameterServer* ps,
                                                                  const std::string& address,
                                                                  PsMetrics* metrics,
                                                                  const TlsFiles& tls,
                                                                  Access access, TraceFile* trace) {
  grpc::EnableDefaultHealthCheckService(true);
  std::unique_ptr<PsGrpcServer> server(new PsGrpcServer());
  server->ps_ = ps;
  server->service_ = std::make_unique<Service>(ps, metrics, std::move(access), trace);
  const int max_bytes = static_cast<int>(
      std::min<int64_t>(ps->config().max_message_bytes(), std::numeric_limits<int>::max()));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, MakeServerCredentials(tls), &server->port_);
  ApplyServerOptions(builder, max_bytes);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address,
                     ": the port is in use (by another ps_server?) or the host is not an "
                     "address of this machine"));
  }
  server->server_->GetHealthCheckService()->SetServingStatus(true);
  return server;
}

void PsGrpcServer::Shutdown(absl::Time deadline) {
  if (shut_down_ || server_ == nullptr) return;  // never started: nothing to stop
  shut_down_ = true;
  server_->GetHealthCheckService()->SetServingStatus(false);
  ps_->CancelWaits();
  server_->Shutdown(absl::ToChronoTime(deadline));
}

PsGrpcServer::~PsGrpcServer() { Shutdown(absl::Now() + absl::Seconds(1)); }

}  // namespace fulcrum
