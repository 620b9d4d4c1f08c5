#include "bench/bench_util.h"

#include "absl/strings/str_cat.h"

namespace fulcrum {

PsServerConfig BenchServerConfig() {
  PsServerConfig config;
  config.set_mode(ASYNC);
  config.set_num_replicas(1);
  config.set_replicas_to_aggregate(1);
  config.set_max_staleness(-1);
  config.set_lease_timeout_ms(600000);
  config.set_max_message_bytes(int64_t{1} << 30);
  return config;
}

LoopbackServers::LoopbackServers(int n, PsServerConfig config, const TlsFiles& tls) {
  for (int i = 0; i < n; ++i) config.mutable_cluster()->mutable_cluster()->add_ps("127.0.0.1:0");
  config.mutable_cluster()->mutable_task()->set_type("ps");
  for (int i = 0; i < n; ++i) {
    config.mutable_cluster()->mutable_task()->set_index(i);
    servers.push_back(std::make_unique<ParameterServer>(config));
    grpc.push_back(*PsGrpcServer::Start(servers.back().get(), "127.0.0.1:0", nullptr, tls));
    addresses.push_back(absl::StrCat("127.0.0.1:", grpc.back()->port()));
  }
}

}  // namespace fulcrum
