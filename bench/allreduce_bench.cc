// All-reduce of float32 buffers among n ranks on loopback, each rank a
// thread with its own gRPC PeerLinks (worker/collective): per size, the
// median time of one all-reduce, its algorithm bandwidth (bytes / time) and
// bus bandwidth (algbw x 2 (n - 1) / n, as nccl-tests defines it: what each
// rank's link carried). bench/run.sh sets these against iperf3 with n
// parallel streams, measured in the same run.
//
// Then the all-reduce strategy's whole step (the collective and Adam) on a
// 16 MiB model, with the optimizer sharded over the ranks (ZeRO-1) and
// whole on every rank, in the same run: the median step and the optimizer
// slots' memory each rank holds, against n; zero_step_sharded_vs_whole_nN
// is the sharded step's time over the whole one's.
//
//   allreduce_bench [--quick]
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "common/process_tuning.h"
#include "worker/collective/all_reduce.h"
#include "worker/collective/grpc/grpc_peer_links.h"
#include "worker/strategy/all_reduce_strategy.h"

ABSL_FLAG(bool, quick, false,
          "Fewer sizes and iterations, no 256 MiB buffer: a run of a minute or two.");

namespace fulcrum {
namespace {

std::string SizeName(int64_t bytes) {
  return bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, "MiB") : absl::StrCat(bytes >> 10, "KiB");
}

// n ranks on loopback, each with its gRPC links, connected.
absl::StatusOr<std::vector<std::unique_ptr<GrpcPeerLinks>>> StartRanks(int n) {
  std::vector<std::unique_ptr<GrpcPeerLinks>> links;
  std::vector<std::string> addresses;
  for (int r = 0; r < n; ++r) {
    auto started = GrpcPeerLinks::Start(r, n, "127.0.0.1:0");
    if (!started.ok()) return started.status();
    addresses.push_back(absl::StrCat("127.0.0.1:", (*started)->port()));
    links.push_back(*std::move(started));
  }
  for (auto& l : links) l->Connect(addresses);
  return links;
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

// The model of the strategy's steps: 16 MiB in four variables, with Adam.
std::vector<VariableSpec> ModelSpecs() {
  std::vector<VariableSpec> specs(4);
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].set_name(absl::StrCat("layer", i));
    specs[i].add_shape(1024);
    specs[i].add_shape(1024);
    specs[i].set_dtype(DT_FLOAT);
    specs[i].mutable_initializer()->set_kind(InitializerSpec::GLOROT_UNIFORM);
    specs[i].mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
    specs[i].mutable_optimizer()->set_learning_rate(0.001f);
  }
  return specs;
}

struct StrategySteps {
  double median_seconds = 0;
  int64_t slot_floats = 0;  // the most any rank holds
};

// `steps` steps of an all-reduce group of n ranks (after two that warm
// it up), each timed by rank 0, and the slots each rank holds after.
absl::StatusOr<StrategySteps> RunStrategy(int n, bool shard, int steps) {
  auto links = StartRanks(n);
  if (!links.ok()) return links.status();
  const std::vector<VariableSpec> specs = ModelSpecs();
  std::vector<double> seconds;
  std::vector<int64_t> slots(n);
  std::vector<absl::Status> failures(n);
  absl::Mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      AllReduceStrategyOptions options;
      options.shard_optimizer = shard;
      AllReduceStrategy strategy((*links)[r].get(), specs, options);
      TensorMap weights;
      absl::Status s = strategy.Start(&weights);
      TensorMap grads;
      for (const VariableSpec& spec : specs) {
        grads[spec.name()] =
            DenseTensor{{1024, 1024}, std::vector<float>(1 << 20, 0.001f * (r + 1))};
      }
      for (int step = 0; s.ok() && step < steps + 2; ++step) {
        const absl::Time begin = absl::Now();
        auto stale = strategy.Step(&grads, {}, &weights);
        s = stale.status();
        if (r == 0 && step >= 2) seconds.push_back(absl::ToDoubleSeconds(absl::Now() - begin));
      }
      absl::MutexLock lock(&mu);
      slots[r] = strategy.slot_floats();
      failures[r] = s;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : failures) {
    if (!s.ok()) return s;
  }
  std::sort(seconds.begin(), seconds.end());
  return StrategySteps{seconds[seconds.size() / 2], *std::max_element(slots.begin(), slots.end())};
}

int Main(bool quick) {
  std::vector<int64_t> sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  if (!quick) sizes.push_back(int64_t{256} << 20);
  for (int n : {2, 3, 4}) {
    auto links = StartRanks(n);
    if (!links.ok()) {
      std::fprintf(stderr, "%s\n", links.status().ToString().c_str());
      return 1;
    }
    for (int64_t bytes : sizes) {
      const int iterations = bytes <= (1 << 20) ? (quick ? 30 : 200) : (quick ? 3 : 10);
      const double t = MedianSeconds(*links, bytes, iterations);
      const double algbw = static_cast<double>(bytes) / t / 1e6;
      const std::string name = absl::StrCat("allreduce_", SizeName(bytes), "_n", n);
      std::printf("%s_p50_us=%.1f\n%s_algbw_MBps=%.1f\n%s_busbw_MBps=%.1f\n", name.c_str(), t * 1e6,
                  name.c_str(), algbw, name.c_str(), algbw * 2.0 * (n - 1) / n);
      std::fflush(stdout);
    }
  }
  for (int n : {1, 2, 4}) {
    double whole_seconds = 0;
    for (bool shard : {false, true}) {
      auto run = RunStrategy(n, shard, quick ? 5 : 20);
      if (!run.ok()) {
        std::fprintf(stderr, "strategy, n %d: %s\n", n, run.status().ToString().c_str());
        return 1;
      }
      const char* kind = shard ? "sharded" : "whole";
      std::printf("zero_16MiB_n%d_step_ms_%s=%.2f\nzero_16MiB_n%d_slot_MiB_per_rank_%s=%.2f\n", n,
                  kind, run->median_seconds * 1e3, n, kind,
                  static_cast<double>(run->slot_floats) * sizeof(float) / (1 << 20));
      if (shard) {
        std::printf("zero_step_sharded_vs_whole_n%d=%.2f\n", n,
                    run->median_seconds / whole_seconds);
      }
      whole_seconds = run->median_seconds;
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace fulcrum

int main(int argc, char** argv) {
  fulcrum::TuneProcess();  // as the workers whose collective this measures
  absl::SetProgramUsageMessage(
      "The all-reduce among 2, 3 and 4 ranks on loopback, 4 KiB to 256 MiB, and the all-reduce "
      "strategy's step with its optimizer whole and sharded; name=value lines for bench/run.sh.");
  absl::ParseCommandLine(argc, argv);
  return fulcrum::Main(absl::GetFlag(FLAGS_quick));
}
