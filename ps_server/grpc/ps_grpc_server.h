// The gRPC face of a ParameterServer: the PsService adapter, the standard
// grpc.health.v1 service, and message limits. Thread-safe.
#ifndef FULCRUM_PS_SERVER_GRPC_PS_GRPC_SERVER_H_
#define FULCRUM_PS_SERVER_GRPC_PS_GRPC_SERVER_H_

#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rpc/authorization.h"
#include "common/rpc/credentials.h"
#include "common/trace.h"
#include "proto/ps_service.grpc.pb.h"
#include "ps_server/grpc/ps_metrics.h"
#include "ps_server/parameter_server.h"

namespace fulcrum {

class PsGrpcServer {
 public:
  // Serves `ps` (which must outlive the server) on `address` ("host:port";
  // port 0 picks a free port). Messages up to ps->config().max_message_bytes
  // are accepted. Health reports SERVING once started.
  // With `metrics` (which must outlive the server), every call's latency
  // and bytes are recorded there. With `tls` files, only clients with a
  // certificate its CA signed get through the handshake; without, plaintext.
  // `access` says who may make which calls (tokens, and the identities
  // that may make control calls); refusals are counted in `metrics`.
  // With `trace` (which must outlive the server), the handling of each push
  // a worker traces (--trace_steps) is recorded there.
  static absl::StatusOr<std::unique_ptr<PsGrpcServer>> Start(
      ParameterServer* ps, const std::string& address, PsMetrics* metrics = nullptr,
      const TlsFiles& tls = {}, Access access = {}, TraceFile* trace = nullptr);
  ~PsGrpcServer();

  // The port actually bound.
  int port() const { return port_; }

  // Health turns NOT_SERVING, waiting pulls are woken, and in-flight calls
  // get until `deadline` to finish.
  void Shutdown(absl::Time deadline);

 private:
  class Service;
  PsGrpcServer() = default;

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  ParameterServer* ps_ = nullptr;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_GRPC_PS_GRPC_SERVER_H_
