// Prometheus /metrics over HTTP: a small HTTP/1.0 server that serializes a
// prometheus-cpp registry and any collectables added, in the text
// exposition format. Scrapes are answered concurrently, each on a thread of
// its own (at most kMaxConnections at once; more get 503), and each within
// kConnectionTimeout: a client that stalls or resets mid-response costs its
// own connection, never the process (writes use MSG_NOSIGNAL). prometheus-cpp's own exposer
// (civetweb) is not used: Debian's civetweb starts its threads with 100 KiB stacks, too small
// beside cuBLAS's static TLS, so it cannot start in the worker.
// Thread-safe.
#ifndef FULCRUM_COMMON_METRICS_SERVER_H_
#define FULCRUM_COMMON_METRICS_SERVER_H_

#include <prometheus/collectable.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fulcrum {

class MetricsServer {
 public:
  static constexpr int kMaxConnections = 8;
  static constexpr absl::Duration kConnectionTimeout = absl::Seconds(5);

  // Serves http://<host>:<port>/metrics; port 0 picks a free one.
  // UNAVAILABLE naming the address when it cannot listen.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port);
  ~MetricsServer();

  // Metrics defined by the daemon (counters, histograms, gauges).
  prometheus::Registry& registry() { return *registry_; }

  // Also serves what `collectable` reports at each scrape.
  void Add(const std::shared_ptr<prometheus::Collectable>& collectable) ABSL_LOCKS_EXCLUDED(mu_);

  int port() const { return port_; }

 private:
  MetricsServer() = default;
  // Accepts connections until the wake pipe is written.
  void Serve() ABSL_LOCKS_EXCLUDED(mu_);
  // Answers one request on `connection` (the caller closes it).
  void Answer(int connection) ABSL_LOCKS_EXCLUDED(mu_);
  std::string Body() ABSL_LOCKS_EXCLUDED(mu_);

  std::shared_ptr<prometheus::Registry> registry_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a pipe that ends Serve
  int port_ = 0;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_ ABSL_GUARDED_BY(mu_);
  int connections_ ABSL_GUARDED_BY(mu_) = 0;  // being answered, each on its own thread
  std::thread thread_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_METRICS_SERVER_H_
