// What the benchmarks share: parameter servers on loopback, timing and
// percentiles. Not thread-safe.
#ifndef FULCRUM_BENCH_BENCH_UTIL_H_
#define FULCRUM_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/rpc/credentials.h"
#include "ps_server/grpc/ps_grpc_server.h"
#include "ps_server/parameter_server.h"

namespace fulcrum {

// An async server for one worker that never expires it, taking messages
// up to 1 GiB.
PsServerConfig BenchServerConfig();

// `n` servers of `config` on 127.0.0.1, each told its place in a cluster
// of n (so embedding tables check their ids' owner), serving over gRPC,
// secured as `tls` says (plaintext without files).
struct LoopbackServers {
  LoopbackServers(int n, PsServerConfig config, const TlsFiles& tls = {});
  std::vector<std::unique_ptr<ParameterServer>> servers;
  std::vector<std::unique_ptr<PsGrpcServer>> grpc;
  std::vector<std::string> addresses;
};

// Seconds per call of `fn`, over `iterations` after one warm-up call.
template <typename Fn>
std::vector<double> Time(int iterations, Fn fn) {
  fn();
  std::vector<double> seconds;
  for (int i = 0; i < iterations; ++i) {
    const absl::Time start = absl::Now();
    fn();
    seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  return seconds;
}

// The p-th quantile (0 <= p <= 1) of `v`.
inline double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

}  // namespace fulcrum

#endif  // FULCRUM_BENCH_BENCH_UTIL_H_
