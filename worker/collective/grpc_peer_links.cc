#include "worker/collective/grpc_peer_links.h"

#include <grpcpp/grpcpp.h>

#include <cstring>
#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc/options.h"
#include "proto/collective.grpc.pb.h"
#include "worker/collective/mailbox.h"

namespace fulcrum {
namespace {

// Incoming streams: each message goes to the mailbox; a stream that ends
// without the sender closing it breaks that sender's link. A sender's new
// stream (it restarted, or reconnects to rejoin) replaces its old one.
class Service final : public Collective::Service {
 public:
  Service(Mailbox* inbox, int rank) : inbox_(inbox), rank_(rank) {}

  grpc::Status Stream(grpc::ServerContext* context, grpc::ServerReader<CollectiveChunk>* reader,
                      CollectiveAck*) override {
    CollectiveChunk chunk;
    int from = -1;
    uint64_t stream = 0;
    while (reader->Read(&chunk)) {
      if (from < 0 || chunk.from_rank() != from) {
        if (from >= 0 || chunk.from_rank() < 0 || chunk.from_rank() >= inbox_->size()) {
          return {grpc::StatusCode::INVALID_ARGUMENT,
                  absl::StrCat("a chunk from rank ", chunk.from_rank(), " on a stream from rank ",
                               from, ": not one rank of ", inbox_->size())};
        }
        from = chunk.from_rank();
        stream = inbox_->Open(from, rank_);
      }
      if (chunk.data().size() % sizeof(float) != 0) {
        return {grpc::StatusCode::INVALID_ARGUMENT,
                absl::StrCat("a chunk from rank ", from, " of ", chunk.data().size(),
                             " bytes: not floats")};
      }
      std::vector<float> message(chunk.data().size() / sizeof(float));
      if (!message.empty()) {  // an empty one is a notice of the sender's round
        std::memcpy(message.data(), chunk.data().data(), chunk.data().size());
      }
      inbox_->Put(from, rank_, chunk.tag(), std::move(message));
    }
    if (from >= 0 && context->IsCancelled()) {
      inbox_->Break(from, rank_, stream,
                    absl::UnavailableError(
                        absl::StrCat("rank ", rank_, ": the stream from rank ", from, " broke")));
    }
    return grpc::Status::OK;
  }

 private:
  Mailbox* const inbox_;
  const int rank_;
};

// The stream to one peer, written in order by its own thread.
class Outgoing {
 public:
  Outgoing(int rank, int peer, std::string address) : rank_(rank), peer_(peer) {
    stub_ = Collective::NewStub(grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), ClientChannelArguments(-1)));
    address_ = std::move(address);
    writer_thread_ = std::thread([this] { WriteLoop(); });
  }

  // Writes what was queued (for up to a second: a peer that never came
  // is not waited for; none when abandoned), then closes the stream.
  ~Outgoing() {
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
      if (abandoned_) queue_.clear();
      auto flushed = [this]()
                         ABSL_SHARED_LOCKS_REQUIRED(mu_) { return queue_.empty() && !writing_; };
      mu_.AwaitWithTimeout(absl::Condition(&flushed), absl::Seconds(1));
    }
    context_.TryCancel();
    writer_thread_.join();
  }

  // What is still queued is not to be written: a new stream replaces this.
  void Abandon() {
    absl::MutexLock lock(&mu_);
    abandoned_ = true;
  }

  absl::Status Send(absl::Span<const float> data, uint64_t tag) {
    CollectiveChunk chunk;
    chunk.set_from_rank(rank_);
    chunk.set_tag(tag);
    if (!data.empty()) chunk.set_data(data.data(), data.size() * sizeof(float));
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    queue_.push_back(std::move(chunk));
    return absl::OkStatus();
  }

 private:
  void WriteLoop() {
    context_.set_wait_for_ready(true);  // a peer that is not listening yet is waited for
    CollectiveAck ack;
    std::unique_ptr<grpc::ClientWriter<CollectiveChunk>> writer;
    for (;;) {
      CollectiveChunk chunk;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]()
                         ABSL_SHARED_LOCKS_REQUIRED(mu_) { return closing_ || !queue_.empty(); };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) break;  // closing, everything written
        chunk = std::move(queue_.front());
        queue_.pop_front();
        writing_ = true;
      }
      if (writer == nullptr) writer = stub_->Stream(&context_, &ack);
      const bool written = writer->Write(chunk);
      {
        absl::MutexLock lock(&mu_);
        writing_ = false;
      }
      if (!written) {
        const grpc::Status status = writer->Finish();
        absl::MutexLock lock(&mu_);
        broken_ =
            absl::UnavailableError(absl::StrCat("rank ", rank_, ": the link to rank ", peer_, " (",
                                                address_, ") broke: ", status.error_message()));
        queue_.clear();
        return;
      }
    }
    if (writer != nullptr) {
      writer->WritesDone();
      writer->Finish();
    }
  }

  const int rank_;
  const int peer_;
  std::string address_;
  std::unique_ptr<Collective::Stub> stub_;
  grpc::ClientContext context_;  // of the stream
  absl::Mutex mu_;
  std::deque<CollectiveChunk> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a chunk is off the queue, not yet written
  std::thread writer_thread_;
};

}  // namespace

class GrpcPeerLinks::Impl {
 public:
  Impl(int rank, int size) : rank(rank), size(size), inbox(size), service(&inbox, rank) {}

  const int rank;
  const int size;
  Mailbox inbox;
  Service service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::vector<std::string> addresses;               // by rank
  std::vector<std::unique_ptr<Outgoing>> outgoing;  // by rank; none for this one
};

absl::StatusOr<std::unique_ptr<GrpcPeerLinks>> GrpcPeerLinks::Start(
    int rank, int size, const std::string& listen_address) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not one of a group of ", size));
  }
  auto impl = std::make_unique<Impl>(rank, size);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen_address, grpc::InsecureServerCredentials(), &impl->port);
  ApplyServerOptions(builder, -1);
  // Pings on the incoming streams too: a peer cut off silently breaks its
  // stream here within seconds, so a leader waiting for its state, or a
  // rank for its data, need not wait out the collective timeout.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  builder.RegisterService(&impl->service);
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
  if (impl_->outgoing[peer] != nullptr) impl_->outgoing[peer]->Abandon();
  impl_->outgoing[peer] = std::make_unique<Outgoing>(impl_->rank, peer, impl_->addresses[peer]);
  // A notice opens the stream now, so that a peer that dies breaks this
  // rank's link to it even if they never exchanged data, and the peer
  // learns of a reconnection at once.
  return impl_->outgoing[peer]->Send({}, tag());
}

absl::Status GrpcPeerLinks::Send(int peer, absl::Span<const float> data) {
  if (peer < 0 || peer >= static_cast<int>(impl_->outgoing.size()) ||
      impl_->outgoing[peer] == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", impl_->rank, ": no link to rank ", peer, " (Connect first)"));
  }
  return impl_->outgoing[peer]->Send(data, tag());
}

}  // namespace fulcrum
