// Scaling benchmark with simulated compute (a fixed sleep per step), over
// gRPC to 2 parameter servers on loopback, workers as threads:
//   async: N = 1, 2, 4, 8 workers; total updates/s over N x one worker's.
//   sync: step time with 1 to 8 workers, without and with a backup worker
//   (replicas_to_aggregate = N - 1), and with one straggler (3x compute).
// Prints a table and `name=value` lines.
#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process_tuning.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/ps_client.h"
#include "ps_server/grpc/ps_grpc_server.h"

ABSL_FLAG(bool, quick, false, "Shorter runs.");
ABSL_FLAG(int, compute_ms, 20, "Simulated compute per step, in milliseconds.");

namespace fulcrum {
namespace {

constexpr int kServers = 2;
constexpr int64_t kRows = 256, kCols = 256;  // 256 KiB of float32

struct Servers {
  Servers(ConsistencyMode mode, int workers, int to_aggregate) {
    PsServerConfig config;
    config.set_mode(mode);
    config.set_num_replicas(workers);
    config.set_replicas_to_aggregate(to_aggregate);
    config.set_max_staleness(-1);
    config.set_lease_timeout_ms(60000);
    config.set_startup_timeout_ms(60000);
    config.set_max_message_bytes(64 << 20);
    for (int i = 0; i < kServers; ++i) {
      servers.push_back(std::make_unique<ParameterServer>(config));
      grpc.push_back(*PsGrpcServer::Start(servers.back().get(), "127.0.0.1:0"));
      addresses.push_back(absl::StrCat("127.0.0.1:", grpc.back()->port()));
    }
  }
  std::vector<std::unique_ptr<ParameterServer>> servers;
  std::vector<std::unique_ptr<PsGrpcServer>> grpc;
  std::vector<std::string> addresses;
};

VariableSpec Variable() {
  VariableSpec spec;
  spec.set_name("w");
  spec.add_shape(kRows);
  spec.add_shape(kCols);
  spec.set_dtype(DT_FLOAT);
  spec.mutable_partitioner()->set_kind(PartitionerSpec::FIXED_SHARDS);
  spec.mutable_partitioner()->set_num_shards(kServers);
  spec.mutable_optimizer()->set_learning_rate(1e-6f);
  return spec;
}

// Runs `workers` threads for `duration` (or `steps` each when > 0); worker
// w computes for compute(w). Returns total steps and mean step seconds.
std::pair<int64_t, double> Run(ConsistencyMode mode, int workers, int to_aggregate,
                               absl::Duration duration, int steps,
                               const std::function<absl::Duration(int)>& compute) {
  Servers servers(mode, workers, to_aggregate);
  std::atomic<int64_t> total{0};
  std::atomic<bool> stop{false};
  std::vector<double> mean_step(workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      PsClientOptions options;
      options.worker_id = w;
      options.mode = mode;
      auto client = NewGrpcPsClient(servers.addresses, options);
      if (!client->CreateVariables({Variable()}).ok()) std::abort();
      DenseTensor grad{{kRows, kCols}, std::vector<float>(kRows * kCols, 1e-3f)};
      TensorMap weights;
      if (!client->Pull({}, &weights).ok()) std::abort();
      const absl::Time start = absl::Now();
      int done = 0;
      while (steps > 0 ? done < steps : !stop.load()) {
        absl::SleepFor(compute(w));  // the simulated forward/backward
        if (!client->PushPull({{"w", grad}}, {}, &weights).ok()) std::abort();
        ++done;
      }
      total += done;
      mean_step[w] = absl::ToDoubleSeconds(absl::Now() - start) / std::max(1, done);
      client->Finish().IgnoreError();
    });
  }
  if (steps == 0) {
    absl::SleepFor(duration);  // the measurement window
    stop = true;
  }
  for (auto& t : threads) t.join();
  double mean = 0;
  for (double s : mean_step) mean += s / workers;
  return {total.load(), mean};
}

int Main() {
  const bool quick = absl::GetFlag(FLAGS_quick);
  const absl::Duration compute = absl::Milliseconds(absl::GetFlag(FLAGS_compute_ms));
  const absl::Duration window = absl::Seconds(quick ? 2 : 6);
  auto same = [&](int) { return compute; };

  std::printf("async scaling (compute %s per step, %d servers)\n",
              absl::FormatDuration(compute).c_str(), kServers);
  double one = 0;
  for (int n : {1, 2, 4, 8}) {
    const auto [steps, step_s] = Run(ASYNC, n, n, window, 0, same);
    const double rate = steps / absl::ToDoubleSeconds(window);
    if (n == 1) one = rate;
    std::printf("  N=%d  updates/s %.1f  efficiency %.2f\n", n, rate, rate / (n * one));
    std::printf("async_scaling_n%d=%.2f\nasync_updates_per_sec_n%d=%.1f\n", n, rate / (n * one), n,
                rate);
  }

  const int steps = quick ? 30 : 100;
  std::printf("sync step time (%d steps)\n", steps);
  for (int n : {1, 2, 4, 8}) {
    const double plain = Run(SYNC, n, n, window, steps, same).second;
    auto straggler = [&](int w) { return w == n - 1 ? 3 * compute : compute; };
    const double slow = Run(SYNC, n, n, window, steps, straggler).second;
    double backup = slow;
    if (n > 1) backup = Run(SYNC, n, n - 1, window, steps, straggler).second;
    std::printf("  N=%d  step %.1f ms  with a 3x straggler %.1f ms  and a backup worker %.1f ms\n",
                n, plain * 1e3, slow * 1e3, backup * 1e3);
    std::printf("sync_step_ms_n%d=%.1f\nsync_step_straggler_ms_n%d=%.1f\n", n, plain * 1e3, n,
                slow * 1e3);
    if (n > 1) std::printf("sync_step_straggler_backup_ms_n%d=%.1f\n", n, backup * 1e3);
  }
  return 0;
}

}  // namespace
}  // namespace fulcrum

int main(int argc, char** argv) {
  fulcrum::TuneProcess();
  absl::SetProgramUsageMessage(
      "Async updates/s of 1 to 8 workers and sync step times (backup worker, straggler) with "
      "simulated compute, 2 servers on loopback; name=value lines for bench/run.sh.");
  absl::ParseCommandLine(argc, argv);
  return fulcrum::Main();
}
