// The gRPC settings every Fulcrum server and client shares: one place for
// what a lost peer, a late server and a quick exit need.
#ifndef FULCRUM_COMMON_RPC_OPTIONS_H_
#define FULCRUM_COMMON_RPC_OPTIONS_H_

#include <grpcpp/server_builder.h>
#include <grpcpp/support/channel_arguments.h>

namespace fulcrum {

// A server that owns its port (no SO_REUSEPORT), accepts its clients'
// keepalive pings, and whose request threads notice shutdown quickly.
// Messages up to `max_message_bytes` (-1: any).
void ApplyServerOptions(grpc::ServerBuilder& builder, int max_message_bytes);

// A client channel that pings its peer every 2 s (a connection a partition
// cut silently fails its calls within seconds) and reconnects often.
// Messages up to `max_message_bytes` (-1: any).
grpc::ChannelArguments ClientChannelArguments(int max_message_bytes);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_RPC_OPTIONS_H_
