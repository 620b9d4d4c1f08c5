#include "common/metrics_server.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace fulcrum {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host,
                                                                    int port) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  const std::string address = absl::StrCat(host, ":", port);
  try {
    // prometheus-cpp (civetweb) reports a failure to listen by throwing.
    server->exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address));
  }
  server->port_ = ports.front();
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->exposer_->RegisterCollectable(server->registry_);
  return server;
}

void MetricsServer::Add(const std::shared_ptr<prometheus::Collectable>& collectable) {
  exposer_->RegisterCollectable(collectable);
}

}  // namespace fulcrum
