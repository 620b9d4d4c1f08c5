// The gRPC ReplicaLink: a primary's Replicate calls to the server holding
// backups of its shards, made as the cluster's clients call it: the
// server's own certificate presented as a client's (mutual TLS), and its
// control token, else its cluster token.
#ifndef FULCRUM_PS_SERVER_GRPC_REPLICA_LINK_H_
#define FULCRUM_PS_SERVER_GRPC_REPLICA_LINK_H_

#include <string>

#include "common/rpc/credentials.h"
#include "ps_server/replicator.h"

namespace fulcrum {

// Links whose streams carry `token` ("" none) over `tls`, with messages of
// up to `max_message_bytes`. A stream lives until it breaks: the channel's
// keepalive pings (common/rpc/options.h) find a backup cut off.
ReplicaLinkFactory GrpcReplicaLinks(const TlsFiles& tls, const std::string& token,
                                    int max_message_bytes);

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_GRPC_REPLICA_LINK_H_
