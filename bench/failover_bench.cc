// failover_bench: how long a job waits when a parameter server is lost for
// good, and how fast a server that comes back is filled again. Each round
// starts a fresh cluster: an etcd of its own, three ps_server processes
// with --replication=2 (plaintext, on 127.0.0.1), and one async worker
// pushing to a variable in six shards, so that every push reaches every
// server. After --warmup pushes one server is killed (-9) and never
// restarted; the failover is the time from the kill to the first push
// acknowledged after it. Prints name=value lines: failover_p50_ms and
// failover_max_ms over the rounds, the push's own p50 before the kill, and
// the failover against the etcd lease, which bounds how soon the others
// may take the lost server's shards.
//
// Then the catch-up: a cluster holding --catch_up_mib of SGD values (two
// copies of each 4 MiB shard, so each server holds two thirds of it) has
// a server killed and started again at once at its address. It rejoins
// holding nothing, and its copies are filled from their primaries; the
// catch-up is the time from its start to every copy of every shard ready
// again. Prints catch_up_secs and catch_up_MBps (the bytes it was sent
// over that time); bench/run.sh sets the rate against raw loopback TCP.
// What the catch-up costs the training: a second worker pushes to a small
// variable of its own (as the failover rounds' worker does) before the
// restart and all through the catch-up; catch_up_push_p50_ms is its
// pushes' median meanwhile (catch_up_push_p90_ms their 90th percentile),
// catch_up_push_vs_before that against the median before. What it costs
// the primaries' memory: catch_up_primary_peak_growth_MiB is the most a
// surviving server's resident memory rose above its level at the restart,
// and catch_up_primary_growth_vs_sent that against the bytes it sent (half
// of the restarted server's copies each): 1 or more is a whole copy of
// what it sent held at once.
// The servers' --catch_up_mib_per_sec is --catch_up_mib_per_sec (0, the
// default here: unbounded, the wire's and the servers' own speed).
//
// Last, what replication costs the data plane: the same cluster with
// --replication=2 against --replication=1 (etcd for both), measured in the
// same run: a worker's push+pulls of a 64 MiB variable in six shards
// (replication2_pushpull_64MiB_vs_unreplicated: the throughputs' ratio)
// and its pulls of a 4 KiB one (replication2_pull_4KiB_p50_vs_unreplicated:
// the medians' ratio, above 1 slower). A pull is served by the primary
// alone; a push is answered once the backup has applied it too.
//
//   failover_bench --ps_server=bazel-bin/ps_server/ps_server [--rounds=10]
//                  [--catch_up_mib=1536] [--catch_up_mib_per_sec=0]
//                  [--cost_rounds=10]
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/etcd/local_etcd.h"
#include "common/subprocess.h"
#include "common/tensor.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/ps_client.h"

ABSL_FLAG(std::string, ps_server, "", "The ps_server binary (required).");
ABSL_FLAG(int, rounds, 10, "Fresh clusters, one server killed in each.");
ABSL_FLAG(int, warmup, 50, "Pushes before the kill.");
ABSL_FLAG(int, lease_secs, 1, "The servers' --etcd_lease_secs.");
ABSL_FLAG(int, catch_up_mib, 1536,
          "The catch-up's variable, in MiB, a multiple of 4 (the restarted server holds two "
          "thirds of it); 0: no catch-up.");
ABSL_FLAG(int, catch_up_mib_per_sec, 0,
          "The servers' --catch_up_mib_per_sec: each primary's bound on the snapshots it sends "
          "(the restarted server is filled by two); 0: unbounded.");
ABSL_FLAG(int, cost_rounds, 10,
          "Timed 64 MiB push+pulls at each --replication (and 200 times as many 4 KiB pulls); "
          "0: the cost of replication is not measured.");

namespace {

constexpr int kServers = 3;

double Millis(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

double Quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(q * static_cast<double>(values.size() - 1))];
}

// One cluster: etcd, the servers (each read in the background, so that its
// output never fills the pipe) and their addresses.
class Cluster {
 public:
  // Empty addresses when a server did not come up.
  Cluster(const std::string& ps_server, int lease_secs, int replication = 2) {
    std::string dir = "/tmp/failover-bench-XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) return;
    auto etcd = fulcrum::LocalEtcd::Start(dir);
    if (!etcd.ok()) {
      std::fprintf(stderr, "failover_bench: %s\n", etcd.status().ToString().c_str());
      return;
    }
    etcd_ = *std::move(etcd);
    std::vector<std::string> hosts(kServers, "127.0.0.1:0");
    absl::MutexLock lock(&mu_);
    for (int i = 0; i < kServers; ++i) {
      argv_.push_back(
          {ps_server, "--ps_hosts=" + absl::StrJoin(hosts, ","),
           "--worker_hosts=127.0.0.1:1,127.0.0.1:2", absl::StrCat("--task_index=", i),
           "--bind_host=127.0.0.1", "--port=0", "--mode=async", "--insecure",
           absl::StrCat("--replication=", replication), "--etcd=" + etcd_->endpoint(),
           "--etcd_prefix=/failover-bench/", absl::StrCat("--etcd_lease_secs=", lease_secs),
           absl::StrCat("--catch_up_mib_per_sec=", absl::GetFlag(FLAGS_catch_up_mib_per_sec))});
      servers_.push_back(std::make_unique<fulcrum::Subprocess>(argv_.back()));
      addresses_.push_back(AwaitAddress(*servers_.back()));
    }
    reader_ = std::thread([this] {
      while (!stop_) {
        absl::MutexLock lock(&mu_);
        for (auto& server : servers_) server->ReadLines(absl::Milliseconds(20));
      }
    });
  }
  ~Cluster() {
    stop_ = true;
    if (reader_.joinable()) reader_.join();
  }

  const std::vector<std::string>& addresses() const { return addresses_; }
  bool up() const {
    return addresses_.size() == kServers &&
           std::none_of(addresses_.begin(), addresses_.end(),
                        [](const std::string& a) { return a.empty(); });
  }
  void Kill(int i) {
    absl::MutexLock lock(&mu_);
    ::kill(servers_[i]->pid(), SIGKILL);
  }
  // Server i's /proc status `field` (VmRSS, VmHWM) in KiB; -1 unread.
  long StatusKib(int i, const std::string& field) {
    absl::MutexLock lock(&mu_);
    std::ifstream status(absl::StrCat("/proc/", servers_[i]->pid(), "/status"));
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
    }
    return -1;
  }
  // Resets server i's peak resident memory (VmHWM) to what it holds now.
  void ResetPeak(int i) {
    absl::MutexLock lock(&mu_);
    std::ofstream(absl::StrCat("/proc/", servers_[i]->pid(), "/clear_refs")) << "5";
  }
  // Kills server i (-9) and starts it again at its address; whether it
  // listens there again.
  bool Restart(int i) {
    absl::MutexLock lock(&mu_);
    servers_[i]->Signal(SIGKILL);
    while (!servers_[i]->Poll().has_value()) servers_[i]->ReadLines(absl::Milliseconds(20));
    std::vector<std::string> argv = argv_[i];
    std::replace(argv.begin(), argv.end(), std::string("--port=0"),
                 "--port=" + addresses_[i].substr(addresses_[i].rfind(':') + 1));
    servers_[i] = std::make_unique<fulcrum::Subprocess>(argv);
    return AwaitAddress(*servers_[i]) == addresses_[i];
  }

 private:
  // Reads the server's output until it says where it listens, having joined
  // the job in etcd first; "" when it does not within 30 s.
  static std::string AwaitAddress(fulcrum::Subprocess& server) {
    const std::regex listening("listening on 127\\.0\\.0\\.1:(\\d+)");
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline && !server.Poll().has_value()) {
      for (const std::string& line : server.ReadLines(absl::Milliseconds(100))) {
        std::smatch match;
        if (std::regex_search(line, match, listening)) return "127.0.0.1:" + match[1].str();
      }
    }
    return "";
  }

  std::unique_ptr<fulcrum::LocalEtcd> etcd_;
  absl::Mutex mu_;  // the reader reads the servers' output in turn
  std::vector<std::vector<std::string>> argv_;
  std::vector<std::unique_ptr<fulcrum::Subprocess>> servers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> addresses_;
  std::atomic<bool> stop_{false};
  std::thread reader_;
};

// Async worker `id` of `cluster` with `name` [rows, cols] created in
// `shards` shards (SGD); null when the creation failed.
std::unique_ptr<fulcrum::PsClient> Worker(const Cluster& cluster, int id, const std::string& name,
                                          int64_t rows, int64_t cols, int shards) {
  fulcrum::PsClientOptions options;
  options.worker_id = id;
  std::unique_ptr<fulcrum::PsClient> worker =
      fulcrum::NewGrpcPsClient(cluster.addresses(), options);
  fulcrum::VariableSpec spec;
  spec.set_name(name);
  spec.add_shape(rows);
  spec.add_shape(cols);
  spec.set_dtype(fulcrum::DT_FLOAT);
  spec.mutable_partitioner()->set_kind(fulcrum::PartitionerSpec::FIXED_SHARDS);
  spec.mutable_partitioner()->set_num_shards(shards);
  spec.mutable_optimizer()->set_learning_rate(1e-3f);
  if (absl::Status s = worker->CreateVariables({spec}); !s.ok()) {
    std::fprintf(stderr, "failover_bench: %s\n", s.ToString().c_str());
    return nullptr;
  }
  return worker;
}

// The gradient of ones of `name` [1536, 64], the variable pushes are
// timed with.
fulcrum::TensorMap Ones(const std::string& name) {
  fulcrum::TensorMap gradient;
  gradient[name] = fulcrum::DenseTensor{{1536, 64}, std::vector<float>(size_t{1536} * 64, 1.0f)};
  return gradient;
}

// A push's milliseconds; nothing when it failed.
std::optional<double> TimedPush(fulcrum::PsClient& worker, const fulcrum::TensorMap& gradient) {
  const absl::Time start = absl::Now();
  if (!worker.Push(gradient).ok()) return std::nullopt;
  return Millis(absl::Now() - start);
}

// One round: the failover time, and the pushes' times before the kill;
// nothing when the cluster failed.
std::optional<absl::Duration> Round(const std::string& ps_server, std::vector<double>* push_ms) {
  Cluster cluster(ps_server, absl::GetFlag(FLAGS_lease_secs));
  if (!cluster.up()) return std::nullopt;
  std::unique_ptr<fulcrum::PsClient> worker = Worker(cluster, 0, "w", 1536, 64, 6);
  if (worker == nullptr) return std::nullopt;
  const fulcrum::TensorMap gradient = Ones("w");
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) {
    const std::optional<double> ms = TimedPush(*worker, gradient);
    if (!ms) return std::nullopt;
    push_ms->push_back(*ms);
  }
  const absl::Time killed = absl::Now();
  cluster.Kill(1);
  absl::StatusOr<fulcrum::PushStats> pushed = worker->Push(gradient);
  if (!pushed.ok()) {
    std::fprintf(stderr, "failover_bench: the push after the kill: %s\n",
                 pushed.status().ToString().c_str());
    return std::nullopt;
  }
  return absl::Now() - killed;
}

struct CatchUp {
  absl::Duration took;
  int64_t bytes = 0;  // of the copies the restarted server was filled with
  std::vector<double> push_ms_before, push_ms_during;  // the training worker's
  double primary_growth_mib = 0;                       // the most a surviving server's memory rose
};

// Restarts server 1 of `cluster` at once, and polls until it holds copies
// and no primary is still filling one: the time from its start, and the
// bytes of its copies; nothing when that failed.
std::optional<CatchUp> AwaitCaughtUp(Cluster& cluster, fulcrum::PsClient& worker) {
  std::vector<long> rss_kib(kServers);  // of the survivors, at the restart
  for (int ps : {0, 2}) {
    rss_kib[ps] = cluster.StatusKib(ps, "VmRSS");
    cluster.ResetPeak(ps);
  }
  const absl::Time start = absl::Now();
  if (!cluster.Restart(1)) {
    std::fprintf(stderr, "failover_bench: the restarted server did not listen at its address\n");
    return std::nullopt;
  }
  for (const absl::Time deadline = start + absl::Minutes(10); absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(50))) {  // polls the servers' state
    // By server, in the cluster's order; one that left the worker's table
    // answers nothing.
    absl::StatusOr<std::vector<fulcrum::DescribeResponse>> described = worker.Describe();
    if (!described.ok()) continue;
    CatchUp caught{absl::Now() - start, 0, {}, {}, 0};
    bool ready = !(*described)[1].shards().empty();
    for (size_t ps = 0; ps < described->size(); ++ps) {
      for (const fulcrum::ShardInfo& shard : (*described)[ps].shards()) {
        if (!shard.catching_up().empty()) ready = false;
        if (ps == 1) caught.bytes += fulcrum::NumElements(shard.shape()) * int64_t{sizeof(float)};
      }
    }
    if (ready) {
      for (int ps : {0, 2}) {
        caught.primary_growth_mib =
            std::max(caught.primary_growth_mib,
                     static_cast<double>(cluster.StatusKib(ps, "VmHWM") - rss_kib[ps]) / 1024);
      }
      return caught;
    }
  }
  std::fprintf(stderr, "failover_bench: the restarted server was not filled in 10 minutes\n");
  return std::nullopt;
}

// The catch-up of a server of a cluster holding `mib` MiB restarted at
// once, and the training worker's pushes before and during it.
std::optional<CatchUp> MeasureCatchUp(const std::string& ps_server, int64_t mib) {
  Cluster cluster(ps_server, absl::GetFlag(FLAGS_lease_secs));
  if (!cluster.up()) return std::nullopt;
  // Rows of 4 KiB, in shards of 4 MiB.
  std::unique_ptr<fulcrum::PsClient> worker =
      Worker(cluster, 0, "w", mib * 256, 1024, static_cast<int>(mib / 4));
  std::unique_ptr<fulcrum::PsClient> trainer = Worker(cluster, 1, "v", 1536, 64, 6);
  if (worker == nullptr || trainer == nullptr) return std::nullopt;
  const fulcrum::TensorMap gradient = Ones("v");
  std::vector<double> before;
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) {
    const std::optional<double> ms = TimedPush(*trainer, gradient);
    if (!ms) return std::nullopt;
    before.push_back(*ms);
  }
  std::vector<double> during;
  std::atomic<bool> done{false};
  std::thread training([&] {  // a push that fails (in the failover) is not counted
    while (!done) {
      if (std::optional<double> ms = TimedPush(*trainer, gradient)) during.push_back(*ms);
    }
  });
  std::optional<CatchUp> caught = AwaitCaughtUp(cluster, *worker);
  done = true;
  training.join();
  if (caught) {
    caught->push_ms_before = std::move(before);
    caught->push_ms_during = std::move(during);
  }
  return caught;
}

// A worker's push+pulls of 64 MiB (MB/s) and its 4 KiB pulls (median ms)
// over a fresh cluster at `replication`; nothing when it failed.
struct DataPlane {
  double pushpull_MBps = 0;
  double pull_p50_ms = 0;
};
std::optional<DataPlane> MeasureDataPlane(const std::string& ps_server, int replication,
                                          int rounds) {
  Cluster cluster(ps_server, absl::GetFlag(FLAGS_lease_secs), replication);
  if (!cluster.up()) return std::nullopt;
  constexpr int64_t kRows = 16384, kCols = 1024;  // 64 MiB of float32
  std::unique_ptr<fulcrum::PsClient> worker = Worker(cluster, 0, "big", kRows, kCols, 6);
  std::unique_ptr<fulcrum::PsClient> reader = Worker(cluster, 1, "small", 1, 1024, 1);
  if (worker == nullptr || reader == nullptr) return std::nullopt;
  fulcrum::TensorMap gradient;
  gradient["big"] = fulcrum::DenseTensor{{kRows, kCols}, std::vector<float>(kRows * kCols, 1e-3f)};
  fulcrum::TensorMap values;
  std::vector<double> pushpull_ms;
  for (int i = 0; i < rounds + 2; ++i) {  // the first two warm up
    const absl::Time start = absl::Now();
    if (!worker->PushPull(gradient, {"big"}, &values).ok()) return std::nullopt;
    if (i >= 2) pushpull_ms.push_back(Millis(absl::Now() - start));
  }
  std::vector<double> pull_ms;
  for (int i = 0; i < rounds * 200 + 20; ++i) {
    const absl::Time start = absl::Now();
    if (!reader->Pull({"small"}, &values).ok()) return std::nullopt;
    if (i >= 20) pull_ms.push_back(Millis(absl::Now() - start));
  }
  const double bytes = 2.0 * kRows * kCols * sizeof(float);  // pushed and pulled
  return DataPlane{bytes / 1e3 / Quantile(pushpull_ms, 0.5), Quantile(pull_ms, 0.5)};
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Measures the failover of a parameter server lost for good (--replication=2, etcd).\n"
      "  failover_bench --ps_server=bazel-bin/ps_server/ps_server [--rounds=10]");
  absl::ParseCommandLine(argc, argv);
  const std::string ps_server = absl::GetFlag(FLAGS_ps_server);
  if (ps_server.empty()) {
    std::fprintf(stderr, "failover_bench: --ps_server is required\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_rounds) < 1 || absl::GetFlag(FLAGS_catch_up_mib) % 4 != 0) {
    std::fprintf(stderr,
                 "failover_bench: --rounds must be 1 or more, --catch_up_mib a multiple of 4\n");
    return 2;
  }
  std::vector<double> failover_ms;
  std::vector<double> push_ms;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    std::optional<absl::Duration> failover = Round(ps_server, &push_ms);
    if (!failover) {
      std::fprintf(stderr, "failover_bench: round %d failed\n", round);
      return 1;
    }
    failover_ms.push_back(Millis(*failover));
    std::fprintf(stderr, "failover_bench: round %d: %.0f ms\n", round, failover_ms.back());
  }
  const double lease_ms = 1000.0 * absl::GetFlag(FLAGS_lease_secs);
  const double p50 = Quantile(failover_ms, 0.5);
  std::printf("failover_p50_ms=%.0f\n", p50);
  std::printf("failover_max_ms=%.0f\n", Quantile(failover_ms, 1.0));
  std::printf("failover_push_p50_ms=%.2f\n", Quantile(push_ms, 0.5));
  std::printf("failover_p50_vs_lease=%.2f\n", p50 / lease_ms);
  if (const int64_t mib = absl::GetFlag(FLAGS_catch_up_mib); mib > 0) {
    std::optional<CatchUp> caught = MeasureCatchUp(ps_server, mib);
    if (!caught) return 1;
    const double secs = absl::ToDoubleSeconds(caught->took);
    std::printf("catch_up_GiB=%.2f\n", static_cast<double>(caught->bytes) / (1 << 30));
    std::printf("catch_up_secs=%.2f\n", secs);
    std::printf("catch_up_MBps=%.1f\n", static_cast<double>(caught->bytes) / 1e6 / secs);
    if (caught->push_ms_during.empty()) {
      std::fprintf(stderr, "failover_bench: no push was acknowledged during the catch-up\n");
      return 1;
    }
    const double during = Quantile(caught->push_ms_during, 0.5);
    std::printf("catch_up_push_p50_ms=%.2f\n", during);
    std::printf("catch_up_push_vs_before=%.2f\n", during / Quantile(caught->push_ms_before, 0.5));
    std::printf("catch_up_push_p90_ms=%.2f\n", Quantile(caught->push_ms_during, 0.9));
    std::printf("catch_up_primary_peak_growth_MiB=%.1f\n", caught->primary_growth_mib);
    std::printf("catch_up_primary_growth_vs_sent=%.2f\n",
                caught->primary_growth_mib * (1 << 20) / (static_cast<double>(caught->bytes) / 2));
  }
  if (const int rounds = absl::GetFlag(FLAGS_cost_rounds); rounds > 0) {
    std::optional<DataPlane> one = MeasureDataPlane(ps_server, 1, rounds);
    std::optional<DataPlane> two = MeasureDataPlane(ps_server, 2, rounds);
    if (!one || !two) {
      std::fprintf(stderr, "failover_bench: the data plane's cluster failed\n");
      return 1;
    }
    std::printf("replication1_pushpull_64MiB_MBps=%.1f\n", one->pushpull_MBps);
    std::printf("replication2_pushpull_64MiB_MBps=%.1f\n", two->pushpull_MBps);
    std::printf("replication2_pushpull_64MiB_vs_unreplicated=%.2f\n",
                two->pushpull_MBps / one->pushpull_MBps);
    std::printf("replication1_pull_4KiB_p50_ms=%.3f\n", one->pull_p50_ms);
    std::printf("replication2_pull_4KiB_p50_ms=%.3f\n", two->pull_p50_ms);
    std::printf("replication2_pull_4KiB_p50_vs_unreplicated=%.2f\n",
                two->pull_p50_ms / one->pull_p50_ms);
  }
  return 0;
}
