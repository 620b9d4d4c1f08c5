// The parameter server's Prometheus metrics: RPC latency and bytes, as the
// gRPC adapter measures them, and the server's state (updates, staleness,
// step, workers), read from ParameterServer::Describe at each scrape.
// Thread-safe.
#ifndef FULCRUM_PS_SERVER_GRPC_PS_METRICS_H_
#define FULCRUM_PS_SERVER_GRPC_PS_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "ps_server/parameter_server.h"

namespace fulcrum {

class PsMetrics {
 public:
  // Defines the metrics in `registry`; `ps` outlives this.
  PsMetrics(ParameterServer* ps, prometheus::Registry& registry);

  // One call of `method` ("Pull", "Push", ...), however it ended.
  void ObserveRpc(const std::string& method, absl::Duration latency);
  void AddPulledBytes(int64_t bytes) { pulled_bytes_.Increment(static_cast<double>(bytes)); }
  void AddPushedBytes(int64_t bytes) { pushed_bytes_.Increment(static_cast<double>(bytes)); }
  // A call refused for want of the right token or identity.
  void AddRefused(const std::string& method) { refused_.Add({{"method", method}}).Increment(); }
  void ObserveCheckpoint(absl::Duration duration) {
    checkpoint_seconds_.Observe(absl::ToDoubleSeconds(duration));
  }
  // A checkpoint this server could not write.
  void AddCheckpointFailure() { checkpoint_failures_.Increment(); }

  // The server's state, for MetricsServer::Add.
  std::shared_ptr<prometheus::Collectable> state() const { return state_; }

 private:
  prometheus::Family<prometheus::Histogram>& rpc_seconds_;
  prometheus::Counter& pulled_bytes_;
  prometheus::Counter& pushed_bytes_;
  prometheus::Family<prometheus::Counter>& refused_;
  prometheus::Histogram& checkpoint_seconds_;
  prometheus::Counter& checkpoint_failures_;
  std::shared_ptr<prometheus::Collectable> state_;
};

}  // namespace fulcrum

#endif  // FULCRUM_PS_SERVER_GRPC_PS_METRICS_H_
