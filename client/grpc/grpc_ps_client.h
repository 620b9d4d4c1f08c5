// The client library over gRPC: Fulcrum's public factory of PsClients
// (fulcrum/ps_client.h), declared beside the transport that serves it, as
// TensorFlow declares NewGrpcRemoteWorker over its WorkerInterface.
//
//   #include "fulcrum/grpc_ps_client.h"
//   auto client = fulcrum::NewGrpcPsClient({"ps0:2222", "ps1:2222"}, options);
//
// Include as "fulcrum/grpc_ps_client.h"; link //client/grpc:grpc_ps_client.
#ifndef FULCRUM_CLIENT_GRPC_GRPC_PS_CLIENT_H_
#define FULCRUM_CLIENT_GRPC_GRPC_PS_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "fulcrum/ps_client.h"

namespace fulcrum {

// A client over gRPC to the servers at `addresses` ("host:port", in task
// order), with options.channels_per_server connections to each, secured by
// the options' TLS files (plaintext without) and carrying their token.
// Connects lazily: a server that is not up yet is waited for within each
// call's deadline.
std::unique_ptr<PsClient> NewGrpcPsClient(const std::vector<std::string>& addresses,
                                          PsClientOptions options);

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_GRPC_GRPC_PS_CLIENT_H_
