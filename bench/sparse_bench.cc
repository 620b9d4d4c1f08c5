// Embedding-table benchmark: rows pulled and pushed per second through the
// client (deduplicated, routed, scattered back) with 1 and 4 parameter
// servers on loopback, rows of 16 and 64 floats, 1K to 64K ids per
// request, ids uniform or Zipf-skewed; against a dense pull and push of
// the same bytes in the same run. And the memory a million rows take on
// a server, against their raw floats (values and Adagrad's slot). And the
// cost curve of a server's table against its size: rows pushed and pulled
// per second, in the server's process (no network), by tables of 10^4 to
// 10^8 rows with eviction on. Prints tables and `name=value` lines.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "common/hash.h"
#include "common/process_tuning.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/ps_client.h"

ABSL_FLAG(bool, quick, false, "Fewer shapes and iterations: a run of under a minute.");
ABSL_FLAG(int64_t, table_curve_max_rows, 100000000,
          "The cost curve's largest table (rows; from 10^4 by tens; 0: no curve). Its memory is "
          "about 100 bytes a row.");
ABSL_FLAG(std::string, only, "",
          "Only the cases whose name (as in sparse_1ps_w16_65536ids_uniform) contains this: for "
          "profiling one.");

namespace fulcrum {
namespace {

constexpr int64_t kRanks = 1 << 22;  // distinct ids the requests draw from

EmbeddingTableSpec Table(int64_t width) {
  EmbeddingTableSpec spec;
  spec.set_name(absl::StrCat("t", width));
  spec.set_width(width);
  spec.mutable_initializer()->set_kind(InitializerSpec::RANDOM_UNIFORM);
  spec.mutable_initializer()->set_minval(-0.05f);
  spec.mutable_initializer()->set_maxval(0.05f);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  spec.mutable_optimizer()->set_learning_rate(0.05f);
  return spec;
}

// The id of rank `rank`, hashed as feature ids are.
int64_t IdOfRank(int64_t rank) {
  return static_cast<int64_t>(Mix64(static_cast<uint64_t>(rank)) >> 1);
}

// Requests of `n` ids: uniform over kRanks, or Zipf (exponent 1.05) over
// them; each rank hashed to an id, as feature ids are.
class IdSource {
 public:
  explicit IdSource(bool zipf) : zipf_(zipf), gen_(7) {
    if (!zipf) return;
    cdf_.resize(kRanks);
    double sum = 0;
    for (int64_t r = 0; r < kRanks; ++r) cdf_[r] = sum += std::pow(r + 1.0, -1.05);
    for (double& c : cdf_) c /= sum;
  }
  std::vector<int64_t> Next(int64_t n) {
    std::vector<int64_t> ids(n);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (int64_t& id : ids) {
      const int64_t rank =
          zipf_ ? std::lower_bound(cdf_.begin(), cdf_.end(), uniform(gen_)) - cdf_.begin()
                : static_cast<int64_t>(gen_() % kRanks);
      id = IdOfRank(rank);
    }
    return ids;
  }

 private:
  const bool zipf_;
  std::mt19937_64 gen_;
  std::vector<double> cdf_;
};

struct Rates {
  double pull_rows_per_sec = 0;  // ids of the requests
  double push_rows_per_sec = 0;
  double unique_fraction = 0;  // distinct ids per id asked
};

// Pulls then pushes `rounds` requests of `n` ids of a table of `width`.
Rates Measure(PsClient& client, int64_t width, int64_t n, bool zipf, int rounds) {
  IdSource source(zipf);
  std::vector<std::vector<int64_t>> requests;
  double unique = 0;
  for (int i = 0; i < rounds + 1; ++i) {
    requests.push_back(source.Next(n));
    std::vector<int64_t> sorted = requests.back();
    std::sort(sorted.begin(), sorted.end());
    unique += std::unique(sorted.begin(), sorted.end()) - sorted.begin();
  }
  const std::string table = absl::StrCat("t", width);
  const std::vector<float> grad(n * width, 1e-3f);
  std::vector<std::vector<float>> rows;
  int i = 0, j = 0;
  const std::vector<double> pulls = Time(rounds, [&] {
    if (!client.PullRows({{table, requests[i++]}}, &rows).ok()) std::abort();
  });
  const std::vector<double> pushes = Time(rounds, [&] {
    if (!client.PushRows({{table, requests[j++]}}, {grad}).ok()) std::abort();
  });
  Rates rates;
  rates.pull_rows_per_sec = n / Percentile(pulls, 0.5);
  rates.push_rows_per_sec = n / Percentile(pushes, 0.5);
  rates.unique_fraction = unique / (static_cast<double>(n) * (rounds + 1));
  return rates;
}

// Seconds of a dense pull and push of `floats` floats through `client`.
std::pair<double, double> DenseBaseline(PsClient& client, int num_ps, int64_t floats, int rounds) {
  VariableSpec spec;
  spec.set_name(absl::StrCat("dense", floats));
  spec.add_shape(std::max<int64_t>(num_ps, floats / 256));
  spec.add_shape(256);
  spec.set_dtype(DT_FLOAT);
  spec.mutable_partitioner()->set_kind(PartitionerSpec::FIXED_SHARDS);
  spec.mutable_partitioner()->set_num_shards(num_ps);
  spec.mutable_optimizer()->set_learning_rate(1e-6f);
  if (!client.CreateVariables({spec}).ok()) std::abort();
  TensorMap grads, values;
  grads[spec.name()] =
      DenseTensor{{spec.shape(0), 256}, std::vector<float>(spec.shape(0) * 256, 1e-3f)};
  const double pull = Percentile(Time(rounds,
                                      [&] {
                                        if (!client.Pull({spec.name()}, &values).ok()) std::abort();
                                      }),
                                 0.5);
  const double push = Percentile(Time(rounds,
                                      [&] {
                                        if (!client.Push(grads).ok()) std::abort();
                                      }),
                                 0.5);
  return {pull, push};
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// `spec`'s table created on `server` (its one range), then filled by
// pushes of the ids id_of(0) to id_of(count - 1), 65,536 at a time.
void CreateAndFill(ParameterServer& server, const EmbeddingTableSpec& spec, int64_t count,
                   absl::FunctionRef<int64_t(int64_t)> id_of) {
  CreateShardsRequest create;
  *create.add_tables() = spec;
  create.add_ranges()->set_table(spec.name());
  if (!server.CreateShards(create).ok()) std::abort();
  PushRowsRequest push;
  push.set_worker_id(0);
  TableRows* rows = push.add_tables();
  rows->set_table(spec.name());
  for (int64_t start = 0; start < count; start += 65536) {
    rows->clear_ids();
    for (int64_t r = start; r < std::min(count, start + 65536); ++r) rows->add_ids(id_of(r));
    rows->mutable_values()->Resize(rows->ids_size() * spec.width(), 1e-3f);
    if (!server.PushRows(push).ok()) std::abort();
  }
}

// A million rows of width 16 with Adagrad's slot in one server's table.
void MeasureMemory() {
  constexpr int64_t kRows = 1000000, kWidth = 16;
  PsServerConfig config = BenchServerConfig();
  const int64_t before = ResidentBytes();
  ParameterServer server(config);
  CreateAndFill(server, Table(kWidth), kRows, [](int64_t id) { return id; });
  const int64_t resident = ResidentBytes() - before;
  const TableInfo info = server.Describe().tables(0);
  const double raw = static_cast<double>(kWidth * 2 * sizeof(float));  // values and one slot
  std::printf(
      "memory: %lld rows of width %lld with Adagrad: table %.1f B/row, resident %.1f "
      "B/row; raw values and slot %.0f B/row\n\n",
      static_cast<long long>(info.rows()), static_cast<long long>(kWidth),
      static_cast<double>(info.memory_bytes()) / info.rows(),
      static_cast<double>(resident) / info.rows(), raw);
  std::printf("sparse_bytes_per_row=%.1f\n",
              static_cast<double>(info.memory_bytes()) / info.rows());
  std::printf("sparse_resident_bytes_per_row=%.1f\n", static_cast<double>(resident) / info.rows());
  std::printf("sparse_memory_vs_raw=%.2f\n",
              static_cast<double>(info.memory_bytes()) / info.rows() / raw);
}

// Rows per second that one server's table of `max_rows` rows (width 4,
// Adagrad) takes in pushes and pulls of 16,384 ids, once full: ids are
// drawn uniformly from twice as many as it holds, so that half of a push's
// are new, each evicting the least recently used row. Called directly,
// without gRPC, so that the table's own cost shows.
void TableCurvePoint(int64_t max_rows, int rounds) {
  constexpr int64_t kIds = 16384, kWidth = 4;
  ParameterServer server(BenchServerConfig());
  EmbeddingTableSpec spec = Table(kWidth);
  spec.set_max_rows(max_rows);
  // Filled by pushing every id of the space once: the second half evicts
  // the first.
  CreateAndFill(server, spec, 2 * max_rows, IdOfRank);
  PushRowsRequest push;
  push.set_worker_id(0);
  TableRows* rows = push.add_tables();
  rows->set_table(spec.name());
  std::mt19937_64 gen(11);
  const auto draw = [&] {
    std::vector<int64_t> ids(kIds);
    absl::flat_hash_set<int64_t> seen;
    for (int64_t& id : ids) {
      do {
        id = IdOfRank(static_cast<int64_t>(gen() % static_cast<uint64_t>(2 * max_rows)));
      } while (!seen.insert(id).second);
    }
    return ids;
  };
  rows->mutable_values()->Resize(kIds * kWidth, 1e-3f);
  PullRowsRequest pull;
  pull.set_worker_id(0);
  TableRows* asked = pull.add_tables();
  asked->set_table(spec.name());
  // The ids drawn first, apart from the calls timed.
  std::vector<std::vector<int64_t>> draws(2 *
                                          static_cast<size_t>(rounds + 1));  // Time calls once more
  for (std::vector<int64_t>& ids : draws) ids = draw();
  int next = 0;
  const std::vector<double> pushes = Time(rounds, [&] {
    rows->mutable_ids()->Assign(draws[next].begin(), draws[next].end());
    ++next;
    if (!server.PushRows(push).ok()) std::abort();
  });
  const std::vector<double> pulls = Time(rounds, [&] {
    asked->mutable_ids()->Assign(draws[next].begin(), draws[next].end());
    ++next;
    if (!server.PullRows(pull, absl::InfiniteFuture()).ok()) std::abort();
  });
  const TableInfo info = server.Describe().tables(0);
  const double push_rate = kIds / Percentile(pushes, 0.5);
  const double pull_rate = kIds / Percentile(pulls, 0.5);
  std::printf("  %10lld rows  %12.0f pushed rows/s  %12.0f pulled rows/s  %6.1f B/row\n",
              static_cast<long long>(info.rows()), push_rate, pull_rate,
              static_cast<double>(info.memory_bytes()) / static_cast<double>(info.rows()));
  std::printf("table_curve_%lld_rows_push_rows_per_sec=%.0f\n", static_cast<long long>(max_rows),
              push_rate);
  std::printf("table_curve_%lld_rows_pull_rows_per_sec=%.0f\n", static_cast<long long>(max_rows),
              pull_rate);
}

void TableCurve(int64_t largest, bool quick) {
  if (largest <= 0) return;
  std::printf("a server's table against its size (width 4, Adagrad, eviction on, 16K ids)\n");
  for (int64_t rows = 10000; rows <= largest; rows *= 10) TableCurvePoint(rows, quick ? 10 : 30);
  std::printf("\n");
}

void Run(bool quick, const std::string& only) {
  // First, while no freed memory is kept for reuse, so that the resident
  // growth is the table's.
  if (only.empty()) MeasureMemory();
  if (only.empty()) {
    const int64_t largest = absl::GetFlag(FLAGS_table_curve_max_rows);
    TableCurve(quick ? std::min<int64_t>(largest, 1000000) : largest, quick);
  }
  const std::vector<int> servers = {1, 4};
  const std::vector<int64_t> widths = {16, 64};
  const std::vector<int64_t> sizes =
      quick ? std::vector<int64_t>{4096, 65536} : std::vector<int64_t>{1024, 4096, 16384, 65536};
  const int rounds = quick ? 10 : 30;
  std::printf("%-4s %-6s %-8s %-8s %14s %14s %8s %12s %12s\n", "ps", "width", "ids", "ids",
              "pull rows/s", "push rows/s", "unique", "pull/dense", "push/dense");
  for (int num_ps : servers) {
    LoopbackServers loopback(num_ps, BenchServerConfig());
    PsClientOptions options;
    auto client = NewGrpcPsClient(loopback.addresses, options);
    std::vector<EmbeddingTableSpec> tables;
    for (int64_t width : widths) tables.push_back(Table(width));
    if (!client->CreateTables(tables).ok()) std::abort();
    for (int64_t width : widths) {
      for (int64_t n : sizes) {
        // The same bytes as a dense pull and push, as the baseline.
        const auto [dense_pull, dense_push] = DenseBaseline(*client, num_ps, n * width, rounds);
        for (bool zipf : {false, true}) {
          const std::string key = absl::StrFormat("sparse_%dps_w%d_%dids_%s", num_ps, width, n,
                                                  zipf ? "zipf" : "uniform");
          if (!absl::StrContains(key, only)) continue;
          const Rates rates = Measure(*client, width, n, zipf, rounds);
          const double pull_vs = rates.pull_rows_per_sec * dense_pull / n;
          const double push_vs = rates.push_rows_per_sec * dense_push / n;
          std::printf("%-4d %-6lld %-8lld %-8s %14.0f %14.0f %8.2f %12.2f %12.2f\n", num_ps,
                      static_cast<long long>(width), static_cast<long long>(n),
                      zipf ? "zipf" : "uniform", rates.pull_rows_per_sec, rates.push_rows_per_sec,
                      rates.unique_fraction, pull_vs, push_vs);
          std::printf("%s_pull_rows_per_sec=%.0f\n%s_push_rows_per_sec=%.0f\n", key.c_str(),
                      rates.pull_rows_per_sec, key.c_str(), rates.push_rows_per_sec);
          std::printf("%s_pull_vs_dense=%.2f\n%s_push_vs_dense=%.2f\n", key.c_str(), pull_vs,
                      key.c_str(), push_vs);
          if (num_ps == 1 && width == 16 && n == 16384 && zipf) {
            // The headline: a pull and a push of a 16K-id batch, per second.
            std::printf("sparse_rows_per_sec_1ps=%.0f\n",
                        2.0 / (1.0 / rates.pull_rows_per_sec + 1.0 / rates.push_rows_per_sec));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace fulcrum

int main(int argc, char** argv) {
  fulcrum::TuneProcess();
  absl::SetProgramUsageMessage(
      "Embedding rows pulled and pushed per second against dense bytes/s, a table's memory per "
      "row, and its cost against its size; name=value lines for bench/run.sh.");
  absl::ParseCommandLine(argc, argv);
  fulcrum::Run(absl::GetFlag(FLAGS_quick), absl::GetFlag(FLAGS_only));
  return 0;
}
