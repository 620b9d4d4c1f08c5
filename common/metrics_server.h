// Prometheus /metrics over HTTP: a small HTTP/1.0 server that serializes a
// prometheus-cpp registry and any collectables added, in the text
// exposition format, and at / the daemon's status page (SetPage). Scrapes are answered
// concurrently, each on a thread of its own (at most kMaxConnections at once; more get 503), and
// each within kConnectionTimeout: a client that stalls or resets mid-response costs its own
// connection, never the process (writes use MSG_NOSIGNAL). prometheus-cpp's own exposer (civetweb)
// is not used: Debian's civetweb starts its threads with 100 KiB stacks, too small beside cuBLAS's
// static TLS, so it cannot start in the worker. Thread-safe.
#ifndef FULCRUM_COMMON_METRICS_SERVER_H_
#define FULCRUM_COMMON_METRICS_SERVER_H_

#include <prometheus/collectable.h>
#include <prometheus/registry.h>
#include <sys/socket.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fulcrum {

// Whether `peer` (an accepted connection's address) is on loopback:
// 127.0.0.0/8, ::1, or an IPv4-mapped 127.x.
bool IsLoopback(const sockaddr_storage& peer);

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

  // Serves the HTML `render` makes at each GET / (else 404). With
  // `loopback_only` (a daemon with TLS: its page names what its data port
  // keeps to the job's certificates), a client not on loopback is answered
  // 403, saying how to reach it (ssh -L, kubectl port-forward).
  void SetPage(std::function<std::string()> render, bool loopback_only) ABSL_LOCKS_EXCLUDED(mu_);

  int port() const { return port_; }

 private:
  MetricsServer() = default;
  // Accepts connections until the wake pipe is written.
  void Serve() ABSL_LOCKS_EXCLUDED(mu_);
  // Answers one request on `connection`, from a client `from_loopback` or
  // not (the caller closes it).
  void Answer(int connection, bool from_loopback) ABSL_LOCKS_EXCLUDED(mu_);
  std::string Body() ABSL_LOCKS_EXCLUDED(mu_);
  // The status, content type and body answering `request` (its first
  // line at least) from a client that `from_loopback` or not.
  struct Response {
    std::string status, content_type, body;
  };
  Response Route(absl::string_view request, bool from_loopback) ABSL_LOCKS_EXCLUDED(mu_);

  std::shared_ptr<prometheus::Registry> registry_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a pipe that ends Serve
  int port_ = 0;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_ ABSL_GUARDED_BY(mu_);
  std::function<std::string()> page_ ABSL_GUARDED_BY(mu_);
  bool page_loopback_only_ ABSL_GUARDED_BY(mu_) = false;
  int connections_ ABSL_GUARDED_BY(mu_) = 0;  // being answered, each on its own thread
  std::thread thread_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_METRICS_SERVER_H_
