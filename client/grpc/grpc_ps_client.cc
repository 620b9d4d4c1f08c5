#include "fulcrum/grpc_ps_client.h"

#include <utility>

#include "client/grpc/grpc_ps_transport.h"
#include "client/ps_client_impl.h"

namespace fulcrum {

std::unique_ptr<PsClient> NewGrpcPsClient(const std::vector<std::string>& addresses,
                                          PsClientOptions options) {
  const TlsFiles tls{options.tls_cert, options.tls_key, options.tls_ca};
  auto transports =
      MakeGrpcTransports(addresses, options.channels_per_server, tls, options.auth_token);
  ServerSet::Connect connect = [tls, channels = options.channels_per_server,
                                token = options.auth_token](const std::string& address) {
    return std::move(MakeGrpcTransports({address}, channels, tls, token).front());
  };
  return std::make_unique<PsClientImpl>(std::move(transports), std::move(options),
                                        std::move(connect));
}

}  // namespace fulcrum
