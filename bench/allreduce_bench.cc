// All-reduce of float32 buffers among n ranks on loopback, each rank a
// thread with its own gRPC PeerLinks (worker/collective): per size, the
// median time of one all-reduce, its algorithm bandwidth (bytes / time) and
// bus bandwidth (algbw x 2 (n - 1) / n, as nccl-tests defines it: what each
// rank's link carried). bench/run.sh sets these against iperf3 with n
// parallel streams, measured in the same run.
//
//   allreduce_bench [--quick]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "worker/collective/all_reduce.h"
#include "worker/collective/grpc/grpc_peer_links.h"

namespace fulcrum {
namespace {

std::string SizeName(int64_t bytes) {
  return bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, "MiB") : absl::StrCat(bytes >> 10, "KiB");
}

// The median of `iterations` all-reduces of `bytes` on `links`, in seconds.
double MedianSeconds(std::vector<std::unique_ptr<GrpcPeerLinks>>& links, int64_t bytes,
                     int iterations) {
  const int n = static_cast<int>(links.size());
  std::vector<std::vector<float>> buffers(n, std::vector<float>(bytes / sizeof(float), 1.0f));
  std::vector<double> seconds;
  for (int it = 0; it < iterations + 1; ++it) {  // the first warms the streams up
    auto* start = new absl::Barrier(n + 1);
    std::vector<std::thread> threads;
    bool failed = false;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        if (start->Block()) delete start;
        absl::Status s = AllReduce(*links[r], absl::MakeSpan(buffers[r]));
        if (!s.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", r, s.ToString().c_str());
          failed = true;
        }
      });
    }
    const absl::Time begin = absl::Now();
    if (start->Block()) delete start;
    for (std::thread& t : threads) t.join();
    if (failed) std::exit(1);
    if (it > 0) seconds.push_back(absl::ToDoubleSeconds(absl::Now() - begin));
    for (auto& buffer : buffers) std::fill(buffer.begin(), buffer.end(), 1.0f);  // no overflow
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

int Main(bool quick) {
  std::vector<int64_t> sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  if (!quick) sizes.push_back(int64_t{256} << 20);
  for (int n : {2, 3, 4}) {
    std::vector<std::unique_ptr<GrpcPeerLinks>> links;
    std::vector<std::string> addresses;
    for (int r = 0; r < n; ++r) {
      auto started = GrpcPeerLinks::Start(r, n, "127.0.0.1:0");
      if (!started.ok()) {
        std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
        return 1;
      }
      addresses.push_back(absl::StrCat("127.0.0.1:", (*started)->port()));
      links.push_back(*std::move(started));
    }
    for (auto& l : links) l->Connect(addresses);
    for (int64_t bytes : sizes) {
      const int iterations = bytes <= (1 << 20) ? (quick ? 30 : 200) : (quick ? 3 : 10);
      const double t = MedianSeconds(links, bytes, iterations);
      const double algbw = static_cast<double>(bytes) / t / 1e6;
      const std::string name = absl::StrCat("allreduce_", SizeName(bytes), "_n", n);
      std::printf("%s_p50_us=%.1f\n%s_algbw_MBps=%.1f\n%s_busbw_MBps=%.1f\n", name.c_str(), t * 1e6,
                  name.c_str(), algbw, name.c_str(), algbw * 2.0 * (n - 1) / n);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace fulcrum

int main(int argc, char** argv) {
  return fulcrum::Main(argc > 1 && std::strcmp(argv[1], "--quick") == 0);
}
