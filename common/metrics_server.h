// Prometheus /metrics over HTTP (prometheus-cpp), serving a registry and any
// collectables added. Thread-safe.
#ifndef FULCRUM_COMMON_METRICS_SERVER_H_
#define FULCRUM_COMMON_METRICS_SERVER_H_

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace fulcrum {

class MetricsServer {
 public:
  // Serves http://<host>:<port>/metrics; port 0 picks a free one.
  // UNAVAILABLE naming the address when it cannot listen.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port);

  // Metrics defined by the daemon (counters, histograms, gauges).
  prometheus::Registry& registry() { return *registry_; }

  // Also serves what `collectable` reports at each scrape; it must outlive
  // the server.
  void Add(const std::shared_ptr<prometheus::Collectable>& collectable);

  int port() const { return port_; }

 private:
  MetricsServer() = default;

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  int port_ = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_METRICS_SERVER_H_
