#include "worker/collective/grpc/grpc_peer_links.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <deque>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/rpc/authorization.h"
#include "common/rpc/options.h"
#include "worker/collective/grpc/collective_frame.h"
#include "worker/collective/mailbox.h"

namespace fulcrum {
namespace {

// One incoming stream: each message goes to the mailbox; a stream that
// ends without the sender closing it breaks that sender's link. A sender's
// new stream (it restarted, or reconnects to rejoin) replaces its old one;
// an old one that comes after its replacement is ended unread.
class Incoming final : public grpc::ServerGenericBidiReactor {
 public:
  Incoming(Mailbox* inbox, int rank, grpc::GenericCallbackServerContext* context)
      : inbox_(inbox), rank_(rank), context_(context) {
    const auto& metadata = context->client_metadata();
    if (auto it = metadata.find(kStreamOrderMetadataKey); it != metadata.end()) {
      order_ = ParseStreamOrder(absl::string_view(it->second.data(), it->second.size()));
    }
    StartRead(&buffer_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (from_ >= 0 && context_->IsCancelled()) {
        inbox_->Break(from_, rank_, stream_,
                      absl::UnavailableError(absl::StrCat("rank ", rank_, ": the stream from rank ",
                                                          from_, " broke")));
      }
      Finish(grpc::Status::OK);
      return;
    }
    absl::StatusOr<DecodedFrame> message = DecodeFrame(buffer_, inbox_->size());
    if (message.ok() && from_ >= 0 && message->from != from_) {
      message = absl::InvalidArgumentError(absl::StrCat(
          "a collective message from rank ", message->from, " on a stream from rank ", from_));
    }
    if (!message.ok()) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          std::string(message.status().message())));
      return;
    }
    if (from_ < 0) {
      stream_ = inbox_->Open(message->from, rank_, order_);
      if (stream_ == 0) {
        Finish(grpc::Status(grpc::StatusCode::ABORTED,
                            absl::StrCat("rank ", rank_, ": a newer stream from rank ",
                                         message->from, " replaced this one")));
        return;
      }
      from_ = message->from;
    }
    inbox_->Put(from_, rank_, stream_, message->round, std::move(message->data));
    buffer_.Clear();
    StartRead(&buffer_);
  }

  void OnDone() override { delete this; }

 private:
  Mailbox* const inbox_;
  const int rank_;
  grpc::GenericCallbackServerContext* const context_;
  grpc::ByteBuffer buffer_;
  StreamOrder order_;
  int from_ = -1;
  uint64_t stream_ = 0;
};

// Who may open a stream: any peer, or with a cluster token, those that
// send it.
Access StreamAccess(const std::string& token) {
  AccessPolicy policy;
  policy.cluster_token = token;
  return Access(std::move(policy));
}

// A stream refused before it starts: finished at once with `status`.
class Refused final : public grpc::ServerGenericBidiReactor {
 public:
  explicit Refused(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

class Service final : public grpc::CallbackGenericService {
 public:
  Service(Mailbox* inbox, int rank, Access access)
      : inbox_(inbox), rank_(rank), access_(std::move(access)) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    if (context->method() != CollectiveStreamMethod()) {
      return CallbackGenericService::CreateReactor(context);
    }
    if (grpc::Status allowed = access_.CheckData(*context, "a collective stream"); !allowed.ok()) {
      LOG_WARN("rank {}: refused a collective stream from {}: {}", rank_, context->peer(),
               allowed.error_message());
      return new Refused(allowed);
    }
    return new Incoming(inbox_, rank_, context);
  }

 private:
  Mailbox* const inbox_;
  const int rank_;
  const Access access_;
};

// The stream to one peer, written in order by its own thread.
class Outgoing {
 public:
  Outgoing(int rank, int peer, std::string address, const TlsFiles& tls, const std::string& token,
           const StreamOrder& order)
      : rank_(rank),
        peer_(peer),
        address_(std::move(address)),
        stub_(grpc::CreateCustomChannel(address_, MakeChannelCredentials(tls),
                                        ClientChannelArguments(-1))) {
    if (!token.empty()) context_.AddMetadata(kTokenMetadataKey, TokenMetadata(token));
    context_.AddMetadata(kStreamOrderMetadataKey, FormatStreamOrder(order));
    writer_thread_ = std::thread([this] { WriteLoop(); });
  }

  // Writes what was queued (of an abandoned stream, only what is being
  // written) and closes the stream once the peer has read it all: a write
  // that completed is only in gRPC's hands, and cancelling then could lose
  // it; the peer would also take a cancelled stream for a broken link,
  // though its replacement is on the way. A peer that never came, or died,
  // is waited for a second at most.
  ~Outgoing() {
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
      if (abandoned_) queue_.clear();
      auto finished = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return finished_; };
      mu_.AwaitWithTimeout(absl::Condition(&finished), absl::Seconds(1));
    }
    context_.TryCancel();
    writer_thread_.join();
  }

  // What is still queued is not to be written: a new stream replaces this.
  void Abandon() {
    absl::MutexLock lock(&mu_);
    abandoned_ = true;
  }

  absl::Status Send(Message data, uint64_t tag) {
    grpc::ByteBuffer message = EncodeForwardedFrame(rank_, tag, std::move(data));
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    queue_.push_back(std::move(message));
    return absl::OkStatus();
  }

 private:
  // The stream is driven through a completion queue of its own, one
  // operation at a time: whether it succeeded.
  bool Await() {
    void* tag = nullptr;
    bool ok = false;
    return cq_.Next(&tag, &ok) && ok;
  }

  void WriteLoop() {
    context_.set_wait_for_ready(true);  // a peer that is not listening yet is waited for
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call;
    bool written = true;
    for (;;) {
      grpc::ByteBuffer message;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]()
                         ABSL_SHARED_LOCKS_REQUIRED(mu_) { return closing_ || !queue_.empty(); };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) break;  // closing, everything written
        message = queue_.front();   // shares the slices
        queue_.pop_front();
      }
      if (call == nullptr) {
        call = stub_.PrepareCall(&context_, CollectiveStreamMethod(), &cq_);
        call->StartCall(nullptr);
        written = Await();
      }
      if (written) {
        call->Write(message, nullptr);
        written = Await();
      }
      if (!written) break;
    }
    grpc::Status status;
    if (call != nullptr) {
      if (written) {
        call->WritesDone(nullptr);
        Await();
      }
      call->Finish(&status, nullptr);
      Await();
    }
    {
      absl::MutexLock lock(&mu_);
      if (!written) {
        broken_ =
            absl::UnavailableError(absl::StrCat("rank ", rank_, ": the link to rank ", peer_, " (",
                                                address_, ") broke: ", status.error_message()));
        queue_.clear();
      }
      finished_ = true;  // the peer read everything, or the stream is gone
    }
    cq_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  const int rank_;
  const int peer_;
  const std::string address_;
  grpc::GenericStub stub_;
  grpc::ClientContext context_;  // of the stream
  grpc::CompletionQueue cq_;
  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // the stream is closed
  std::thread writer_thread_;
};

// A sender number for StreamOrder: drawn, so that another links object
// (a restarted rank) has another; never 0 (no order).
uint64_t DrawSender() {
  std::random_device device;
  const uint64_t drawn = (uint64_t{device()} << 32) | device();
  return drawn == 0 ? 1 : drawn;
}

}  // namespace

class GrpcPeerLinks::Impl {
 public:
  Impl(int rank, int size, TlsFiles tls, std::string token)
      : rank(rank),
        size(size),
        tls(std::move(tls)),
        token(std::move(token)),
        inbox(size),
        service(&inbox, rank, StreamAccess(this->token)) {}

  const int rank;
  const int size;
  const TlsFiles tls;
  const std::string token;               // the cluster token, or ""
  const uint64_t sender = DrawSender();  // StreamOrder's
  uint64_t streams_opened = 0;
  Mailbox inbox;
  Service service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::vector<std::string> addresses;               // by rank
  std::vector<std::unique_ptr<Outgoing>> outgoing;  // by rank; none for this one
};

absl::StatusOr<std::unique_ptr<GrpcPeerLinks>> GrpcPeerLinks::Start(
    int rank, int size, const std::string& listen_address, const TlsFiles& tls,
    const std::string& token) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not one of a group of ", size));
  }
  auto impl = std::make_unique<Impl>(rank, size, tls, token);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen_address, MakeServerCredentials(tls), &impl->port);
  ApplyServerOptions(builder, -1);
  // Pings on the incoming streams too: a peer cut off silently breaks its
  // stream here within seconds, so a leader waiting for its state, or a
  // rank for its data, need not wait out the collective timeout.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  builder.RegisterCallbackGenericService(&impl->service);
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    return absl::UnavailableError(absl::StrCat("collective: cannot listen on ", listen_address));
  }
  return std::unique_ptr<GrpcPeerLinks>(new GrpcPeerLinks(std::move(impl)));
}

GrpcPeerLinks::GrpcPeerLinks(std::unique_ptr<Impl> impl)
    : MailboxLinks(&impl->inbox, impl->rank), impl_(std::move(impl)) {}

GrpcPeerLinks::~GrpcPeerLinks() {
  impl_->outgoing.clear();  // what was sent is written first
  impl_->server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
}

int GrpcPeerLinks::port() const { return impl_->port; }

void GrpcPeerLinks::Connect(const std::vector<std::string>& addresses) {
  impl_->addresses = addresses;
  impl_->addresses.resize(impl_->size);
  impl_->outgoing.resize(impl_->size);
  for (int peer = 0; peer < impl_->size; ++peer) {
    if (peer != impl_->rank && !impl_->addresses[peer].empty()) Reconnect(peer).IgnoreError();
  }
}

absl::Status GrpcPeerLinks::Reconnect(int peer) {
  if (peer < 0 || peer >= static_cast<int>(impl_->outgoing.size()) || peer == impl_->rank ||
      impl_->addresses[peer].empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", impl_->rank, ": no address of rank ", peer, " (Connect first)"));
  }
  std::unique_ptr<Outgoing> old = std::move(impl_->outgoing[peer]);
  if (old != nullptr) old->Abandon();
  impl_->outgoing[peer] =
      std::make_unique<Outgoing>(impl_->rank, peer, impl_->addresses[peer], impl_->tls,
                                 impl_->token, StreamOrder{impl_->sender, ++impl_->streams_opened});
  // A notice opens the stream now, so that a peer that dies breaks this
  // rank's link to it even if they never exchanged data, and the peer
  // learns of a reconnection at once; the old stream is closed after it.
  return impl_->outgoing[peer]->Send(Message(), tag());
}

absl::Status GrpcPeerLinks::SendMessage(int peer, Message message) {
  if (peer < 0 || peer >= static_cast<int>(impl_->outgoing.size()) ||
      impl_->outgoing[peer] == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", impl_->rank, ": no link to rank ", peer, " (Connect first)"));
  }
  return impl_->outgoing[peer]->Send(std::move(message), tag());
}

}  // namespace fulcrum
