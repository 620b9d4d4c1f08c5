// client_bench: the C++ client's side of bench/python_bench.py, which runs
// it against the same server in the same run: a large push+pull's time, a
// 4 KiB pull's latency, and how much a 256 MiB push+pull raises peak
// resident memory. Prints name=value lines.
//
// With --lockstep, only the 4 KiB pulls, in blocks that the caller
// interleaves with its own: each line on standard input is a count of
// pulls to time, each answered with a line "done P" (P: the block's p50,
// in µs); at the end of the input, the p50 of all of them.
//
//   client_bench --ps_hosts=127.0.0.1:2222 [--mib=64 --rounds=10 ...]
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/cluster_flags.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/ps_client.h"

ABSL_FLAG(int, mib, 64, "Size of the large push+pull, in MiB.");
ABSL_FLAG(int, rounds, 10, "Timed large push+pulls.");
ABSL_FLAG(int, small_rounds, 2000, "Timed 4 KiB pulls; 0: none.");
ABSL_FLAG(int, rss_mib, 256, "Size of the push+pull whose peak memory is measured; 0: none.");
ABSL_FLAG(std::string, optimizer, "sgd", "The variables' optimizer: sgd or adam (two slots).");
ABSL_FLAG(bool, lockstep, false,
          "Only the 4 KiB pulls, in blocks on standard input's word (above).");
ABSL_FLAG(int, max_shard_mib, 0,
          "Split each variable into shards of at most this many MiB (the MAX_SIZE "
          "partitioner); 0: one shard per variable.");

namespace {

using fulcrum::DenseTensor;
using fulcrum::TensorMap;

// A float32 variable of `floats` floats under --optimizer.
fulcrum::VariableSpec Variable(const std::string& name, int64_t floats) {
  fulcrum::VariableSpec spec;
  spec.set_name(name);
  spec.add_shape(floats / 1024);
  spec.add_shape(1024);
  spec.set_dtype(fulcrum::DT_FLOAT);
  spec.mutable_optimizer()->set_kind(absl::GetFlag(FLAGS_optimizer) == "adam"
                                         ? fulcrum::OptimizerSpec::ADAM
                                         : fulcrum::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1e-6f);
  if (const int64_t mib = absl::GetFlag(FLAGS_max_shard_mib); mib > 0) {
    spec.mutable_partitioner()->set_kind(fulcrum::PartitionerSpec::MAX_SIZE);
    spec.mutable_partitioner()->set_max_shard_bytes(mib << 20);
  }
  return spec;
}

// A field of /proc/self/status, in KiB.
long StatusKib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "client_bench: %s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}

// --lockstep: 4 KiB pulls in the blocks standard input asks for.
int Lockstep(fulcrum::PsClient& client) {
  Check(client.CreateVariables({Variable("cpp_small", 1024)}), "create variables");
  TensorMap small;
  Check(client.Pull({"cpp_small"}, &small), "pull");
  std::vector<double> latency;
  std::string line;
  while (std::getline(std::cin, line)) {
    int count = 0;
    if (!absl::SimpleAtoi(line, &count) || count <= 0) {
      std::fprintf(stderr, "client_bench: --lockstep: '%s' is not a count of pulls\n",
                   line.c_str());
      return 2;
    }
    const std::vector<double> block =
        fulcrum::Time(count, [&] { Check(client.Pull({"cpp_small"}, &small), "pull"); });
    latency.insert(latency.end(), block.begin(), block.end());
    std::printf("done %.1f\n", 1e6 * fulcrum::Percentile(block, 0.5));
    std::fflush(stdout);
  }
  if (latency.empty()) {
    std::fprintf(stderr, "client_bench: --lockstep was asked for no pulls\n");
    return 2;
  }
  std::printf("cpp_pull_4KiB_us_p50=%.1f\n", 1e6 * fulcrum::Percentile(latency, 0.5));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("The C++ client's figures for bench/python_bench.py.");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_optimizer) != "sgd" && absl::GetFlag(FLAGS_optimizer) != "adam") {
    std::fprintf(stderr, "client_bench: --optimizer must be sgd or adam\n");
    return 2;
  }
  auto hosts = fulcrum::PsHostsFromFlags();
  if (!hosts.ok()) {
    std::fprintf(stderr, "client_bench: %s\n", std::string(hosts.status().message()).c_str());
    return 2;
  }
  fulcrum::PsClientOptions options;
  auto client = fulcrum::NewGrpcPsClient(*hosts, options);
  if (absl::GetFlag(FLAGS_lockstep)) return Lockstep(*client);
  const int64_t big = int64_t{absl::GetFlag(FLAGS_mib)} << 18;  // floats
  const int64_t huge = int64_t{absl::GetFlag(FLAGS_rss_mib)} << 18;
  std::vector<fulcrum::VariableSpec> specs = {Variable("cpp_big", big),
                                              Variable("cpp_small", 1024)};
  if (huge > 0) specs.push_back(Variable("cpp_huge", huge));
  Check(client->CreateVariables(specs), "create variables");
  // First, in a heap that no large call has grown yet: what one push+pull
  // adds to the resident set, its tensors (written, so resident) aside.
  double rss_growth_mib = 0;
  if (huge > 0) {
    TensorMap huge_grads = {
        {"cpp_huge", DenseTensor{{huge / 1024, 1024}, std::vector<float>(huge, 1e-3f)}}};
    TensorMap huge_values = {
        {"cpp_huge", DenseTensor{{huge / 1024, 1024}, std::vector<float>(huge, 0.0f)}}};
    const long before = StatusKib("VmRSS");
    std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to VmRSS
    Check(client->PushPull(huge_grads, {"cpp_huge"}, &huge_values).status(), "push_pull");
    rss_growth_mib = (StatusKib("VmHWM") - before) / 1024.0;
  }

  TensorMap grads = {{"cpp_big", DenseTensor{{big / 1024, 1024}, std::vector<float>(big, 1e-3f)}}};
  TensorMap values;
  Check(client->Pull({"cpp_big"}, &values), "pull");
  const std::vector<double> large = fulcrum::Time(absl::GetFlag(FLAGS_rounds), [&] {
    Check(client->PushPull(grads, {"cpp_big"}, &values).status(), "push_pull");
  });
  std::printf("cpp_push_pull_%dMiB_ms_p50=%.2f\n", absl::GetFlag(FLAGS_mib),
              1e3 * fulcrum::Percentile(large, 0.5));
  if (const int rounds = absl::GetFlag(FLAGS_small_rounds); rounds > 0) {
    TensorMap small;
    const std::vector<double> latency =
        fulcrum::Time(rounds, [&] { Check(client->Pull({"cpp_small"}, &small), "pull"); });
    std::printf("cpp_pull_4KiB_us_p50=%.1f\n", 1e6 * fulcrum::Percentile(latency, 0.5));
  }
  std::printf("cpp_client_peak_rss_MiB=%.1f\n", StatusKib("VmHWM") / 1024.0);
  if (huge > 0) {
    std::printf("cpp_rss_growth_%dMiB_push_pull_MiB=%.1f\n", absl::GetFlag(FLAGS_rss_mib),
                rss_growth_mib);
  }
  std::fflush(stdout);
  return 0;
}
