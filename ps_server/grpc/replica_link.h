// The gRPC ReplicaLink: a primary's Replicate calls to the server holding
// backups of its shards, made as the cluster's clients call it: the
// server's own certificate presented as a client's (mutual TLS), and its
// control token, else its cluster token.
#ifndef FULCRUM_PS_SERVER_GRPC_REPLICA_LINK_H_
#define FULCRUM_PS_SERVER_GRPC_REPLICA_LINK_H_

#include <string>

#include "absl/time/time.h"
#include "common/rpc/credentials.h"
#include "ps_server/replicator.h"

namespace fulcrum {

// Links whose calls carry `token` ("" none) over `tls`, with messages of
// up to `max_message_bytes`, each call given `timeout`.
ReplicaLinkFactory GrpcReplicaLinks(const TlsFiles& tls, const std::string& token,
                                    int max_message_bytes,
                                    absl::Duration timeout = absl::Seconds(30));

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_GRPC_REPLICA_LINK_H_
