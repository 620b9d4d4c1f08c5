// PeerLinks over gRPC, for the all-reduce strategies: each rank serves the
// method /fulcrum.Collective/Stream (a client stream of CollectiveFrames:
// proto/collective.proto, collective_frame.h) on its own port and keeps one stream open to each
// peer it sends to, written by a thread of its own so that Send
// never waits for the peer. What arrives goes to a Mailbox that Recv takes
// from. A stream that breaks (the peer died or was cut off: keepalive pings
// notice within seconds) makes Send to that peer and Recv from it fail
// UNAVAILABLE, naming it. Reconnect replaces a peer's stream with a new one,
// which the peer sees as a reconnection.
#ifndef FULCRUM_WORKER_COLLECTIVE_GRPC_GRPC_PEER_LINKS_H_
#define FULCRUM_WORKER_COLLECTIVE_GRPC_GRPC_PEER_LINKS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc/credentials.h"
#include "worker/collective/peer_links.h"

namespace fulcrum {

class GrpcPeerLinks final : public MailboxLinks {
 public:
  // Starts serving rank `rank` of `size` on `listen_address` ("host:0" picks
  // a port: see port()). UNAVAILABLE when it cannot listen. Both ways,
  // links are secured as `tls` says (plaintext without files). With a
  // cluster `token` (--auth_token_file), every stream carries it, and a
  // stream without it is refused UNAUTHENTICATED, which breaks the
  // sender's link.
  static absl::StatusOr<std::unique_ptr<GrpcPeerLinks>> Start(int rank, int size,
                                                              const std::string& listen_address,
                                                              const TlsFiles& tls = {},
                                                              const std::string& token = "");
  ~GrpcPeerLinks() override;

  int port() const;

  // The peers' addresses by rank (this rank's entry is not used); call once,
  // before the first Send. A stream to each peer opens at once, waiting for
  // a peer that is not listening yet.
  void Connect(const std::vector<std::string>& addresses);

  absl::Status SendMessage(int peer, Message message) override;
  absl::Status Reconnect(int peer) override;

  class Impl;

 private:
  explicit GrpcPeerLinks(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_GRPC_GRPC_PEER_LINKS_H_
