#include "common/rpc/options.h"

namespace fulcrum {

void ApplyServerOptions(grpc::ServerBuilder& builder, int max_message_bytes) {
  // gRPC sets SO_REUSEPORT by default, so a second server on this address
  // would bind too and the kernel would split the clients between two
  // servers holding different state. Without it the second bind fails.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  builder.SetMaxSendMessageSize(max_message_bytes);
  // Accept the clients' keepalive pings (every 2 s, with or without calls).
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // Request threads notice shutdown when their poll times out: gRPC's 10 s
  // default would hold every exit that long.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::CQ_TIMEOUT_MSEC, 200);
  // A request thread that finishes a call while more than MAX_POLLERS others
  // wait for one exits, and the next call starts a thread again. gRPC's
  // default of 2 made a server of 3 CTR workers' row calls start about 280
  // threads a second; up to 32 wait instead (each wakes every 200 ms).
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 32);
}

grpc::ChannelArguments ClientChannelArguments(int max_message_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  // gRPC's own reconnect backoff (1 s growing to 120 s) would make a peer
  // that starts late look down long after it is up; callers retry with
  // their own bounded backoff, so reconnect attempts stay frequent.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Keepalive pings find a connection that a network partition silently
  // cut (no reset ever arrives) within seconds: its calls then fail
  // UNAVAILABLE, instead of hanging to their deadline.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return args;
}

}  // namespace fulcrum
