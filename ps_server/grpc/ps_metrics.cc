#include "ps_server/grpc/ps_metrics.h"

#include <google/protobuf/descriptor.h>
#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>

#include <algorithm>
#include <limits>
#include <map>

namespace fulcrum {
namespace {

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
          5e-2, 0.1,    0.25, 0.5,  1,      2.5,  5,    10};
}

prometheus::MetricFamily Family(const std::string& name, const std::string& help,
                                prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  return family;
}

// A counter's or gauge's value.
prometheus::ClientMetric Value(prometheus::MetricType type, double value) {
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return metric;
}

prometheus::MetricFamily Single(const std::string& name, const std::string& help,
                                prometheus::MetricType type, double value) {
  prometheus::MetricFamily family = Family(name, help, type);
  family.metric.push_back(Value(type, value));
  return family;
}

// The labels of a table's range on this server: its name, which range,
// and which copy (a server holds at most one of each range).
std::vector<prometheus::ClientMetric::Label> RangeLabels(const TableInfo& table) {
  return {{"table", table.name()},
          {"range", std::to_string(table.partition())},
          {"copy", table.primary().empty() ? "primary" : "backup"}};
}

// One gauge or counter per range of an embedding table held here.
prometheus::MetricFamily PerTable(const std::string& name, const std::string& help,
                                  prometheus::MetricType type, const DescribeResponse& d,
                                  int64_t (TableInfo::*field)() const) {
  prometheus::MetricFamily family = Family(name, help, type);
  for (const TableInfo& table : d.tables()) {
    prometheus::ClientMetric metric = Value(type, static_cast<double>((table.*field)()));
    metric.label = RangeLabels(table);
    family.metric.push_back(metric);
  }
  return family;
}

// Reads the server's state at each scrape.
class StateCollector final : public prometheus::Collectable {
 public:
  explicit StateCollector(ParameterServer* ps) : ps_(ps) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const DescribeResponse d = ps_->Describe();
    int64_t step = d.shards().empty() ? 0 : std::numeric_limits<int64_t>::max();
    for (const ShardInfo& shard : d.shards()) step = std::min(step, shard.version());
    int64_t active = 0;
    std::map<std::string, int64_t> by_state = {
        {"live", 0}, {"awaited", 0}, {"dead", 0}, {"finished", 0}, {"never_came", 0}};
    for (const WorkerInfo& w : d.workers()) {
      active += w.live() && !w.finished();
      ++by_state[w.finished()  ? "finished"
                 : w.live()    ? "live"
                 : w.awaited() ? "awaited"
                 : w.seen()    ? "dead"
                               : "never_came"];
    }

    std::vector<prometheus::MetricFamily> out;
    AddReplication(d, &out);
    out.push_back(Single("fulcrum_ps_updates_applied_total", "Updates applied, counted per shard.",
                         prometheus::MetricType::Counter,
                         static_cast<double>(d.updates_applied())));
    out.push_back(Single("fulcrum_ps_stale_gradients_dropped_total",
                         "Shard gradients dropped as computed from an old version.",
                         prometheus::MetricType::Counter,
                         static_cast<double>(d.stale_gradients_dropped())));
    out.push_back(Single("fulcrum_ps_step", "The lowest version among this server's shards.",
                         prometheus::MetricType::Gauge, static_cast<double>(step)));
    out.push_back(Single("fulcrum_ps_workers_active", "Workers live and not finished.",
                         prometheus::MetricType::Gauge, static_cast<double>(active)));
    prometheus::MetricFamily workers =
        Family("fulcrum_ps_workers",
               "Workers this server knows, by state: live, awaited (not started yet), dead (its "
               "lease ran out), finished, never_came (the start-up deadline passed).",
               prometheus::MetricType::Gauge);
    for (const auto& [state, count] : by_state) {
      prometheus::ClientMetric metric =
          Value(prometheus::MetricType::Gauge, static_cast<double>(count));
      metric.label.push_back({"state", state});
      workers.metric.push_back(metric);
    }
    out.push_back(std::move(workers));
    out.push_back(Single("fulcrum_ps_job_done",
                         "1 once the chief has said the job is done (no steps are due then).",
                         prometheus::MetricType::Gauge, d.job_done() ? 1 : 0));
    out.push_back(Single("fulcrum_ps_shards", "Shards this server holds.",
                         prometheus::MetricType::Gauge, static_cast<double>(d.shards_size())));
    out.push_back(Single(
        "fulcrum_ps_memory_bytes",
        "Memory the shards and embedding tables take: values, optimizer slots, sync accumulators.",
        prometheus::MetricType::Gauge, static_cast<double>(d.memory_bytes())));
    out.push_back(Single("fulcrum_ps_memory_budget_bytes",
                         "The most memory the shards may take (--max_memory_mb).",
                         prometheus::MetricType::Gauge, static_cast<double>(d.max_memory_bytes())));

    if (!d.tables().empty()) {
      constexpr auto kGauge = prometheus::MetricType::Gauge;
      constexpr auto kCounter = prometheus::MetricType::Counter;
      out.push_back(PerTable("fulcrum_ps_table_rows", "Rows an embedding table stores here.",
                             kGauge, d, &TableInfo::rows));
      out.push_back(PerTable("fulcrum_ps_table_candidates",
                             "Ids seen but not admitted yet (admit_after).", kGauge, d,
                             &TableInfo::candidates));
      out.push_back(PerTable("fulcrum_ps_table_evictions_total",
                             "Rows evicted as least recently used (max_rows).", kCounter, d,
                             &TableInfo::evictions));
      out.push_back(PerTable("fulcrum_ps_table_admissions_total",
                             "Ids admitted after admit_after pushes.", kCounter, d,
                             &TableInfo::admissions));
      out.push_back(PerTable("fulcrum_ps_table_memory_bytes",
                             "Memory an embedding table's rows, slots and index take.", kGauge, d,
                             &TableInfo::memory_bytes));
      out.push_back(PerTable("fulcrum_ps_table_version", "Steps applied to an embedding table.",
                             kGauge, d, &TableInfo::version));
      // The hottest ids' pushes by rank, not by id: a label per id would
      // make a series for every id that was ever hot.
      prometheus::MetricFamily hottest =
          Family("fulcrum_ps_table_hottest_pushes",
                 "Pushes that carried the rank-th most pushed id of a range here (an estimate, "
                 "Space-Saving); the ids are on the status page.",
                 kGauge);
      for (const TableInfo& table : d.tables()) {
        for (int rank = 0; rank < table.hottest_size(); ++rank) {
          prometheus::ClientMetric metric =
              Value(kGauge, static_cast<double>(table.hottest(rank).pushes()));
          metric.label = RangeLabels(table);
          metric.label.push_back({"rank", std::to_string(rank + 1)});
          hottest.metric.push_back(metric);
        }
      }
      out.push_back(std::move(hottest));
    }

    // Staleness of accepted pushes, in versions; the last bucket of the
    // server's counts holds everything at or above its index.
    prometheus::MetricFamily staleness = Family(
        "fulcrum_ps_gradient_staleness", "Versions between a shard gradient's pull and push.",
        prometheus::MetricType::Histogram);
    prometheus::ClientMetric metric;
    uint64_t cumulative = 0;
    for (int i = 0; i < d.staleness_histogram_size(); ++i) {
      const auto count = static_cast<uint64_t>(d.staleness_histogram(i));
      cumulative += count;
      metric.histogram.sample_sum += static_cast<double>(count) * i;
      if (i + 1 < d.staleness_histogram_size()) {
        metric.histogram.bucket.push_back({cumulative, static_cast<double>(i)});
      }
    }
    metric.histogram.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
    metric.histogram.sample_count = cumulative;
    staleness.metric.push_back(metric);
    out.push_back(staleness);
    return out;
  }

 private:
  // Replicated shards and tables' ranges: which copies this server holds,
  // the copies of its primaries being filled elsewhere, the primaries short
  // of a ready backup, and the placement table applied.
  static void AddReplication(const DescribeResponse& d,
                             std::vector<prometheus::MetricFamily>* out) {
    int64_t primaries = 0, backups = 0, filling = 0, short_of_backups = 0;
    auto count = [&](const auto& unit) {
      if (!unit.primary().empty()) {
        ++backups;
        return;
      }
      ++primaries;
      filling += unit.catching_up_size();
      if (unit.backups_size() < d.replication() - 1) ++short_of_backups;
    };
    for (const ShardInfo& shard : d.shards()) count(shard);
    for (const TableInfo& range : d.tables()) count(range);
    constexpr auto kGauge = prometheus::MetricType::Gauge;
    out->push_back(
        Single("fulcrum_ps_primary_shards",
               "Shards and tables' ranges this server holds the primary copy of (every one, "
               "unreplicated).",
               kGauge, static_cast<double>(primaries)));
    out->push_back(
        Single("fulcrum_ps_backup_shards",
               "Backup copies (of shards and tables' ranges) this server holds of other servers' "
               "primaries.",
               kGauge, static_cast<double>(backups)));
    out->push_back(Single("fulcrum_ps_copies_filling",
                          "Copies of this server's primaries being filled on other servers.",
                          kGauge, static_cast<double>(filling)));
    out->push_back(Single("fulcrum_ps_shards_short_of_backups",
                          "Primaries here with fewer ready backups than --replication asks for.",
                          kGauge, static_cast<double>(short_of_backups)));
    out->push_back(Single("fulcrum_ps_placement_epoch",
                          "The placement table this server applied (0: none, unreplicated).",
                          kGauge, static_cast<double>(d.placement().epoch())));
  }

  ParameterServer* const ps_;
};

}  // namespace

PsMetrics::PsMetrics(ParameterServer* ps, prometheus::Registry& registry)
    : rpc_seconds_(prometheus::BuildHistogram()
                       .Name("fulcrum_ps_rpc_duration_seconds")
                       .Help("Time to serve a call, by method.")
                       .Register(registry)),
      pulled_bytes_(prometheus::BuildCounter()
                        .Name("fulcrum_ps_pulled_bytes_total")
                        .Help("Tensor bytes sent to pulls.")
                        .Register(registry)
                        .Add({})),
      pushed_bytes_(prometheus::BuildCounter()
                        .Name("fulcrum_ps_pushed_bytes_total")
                        .Help("Gradient bytes received from pushes.")
                        .Register(registry)
                        .Add({})),
      refused_(prometheus::BuildCounter()
                   .Name("fulcrum_ps_refused_calls_total")
                   .Help("Calls refused: a missing or wrong token (UNAUTHENTICATED), or a "
                         "certificate without a control identity (PERMISSION_DENIED).")
                   .Register(registry)),
      checkpoint_seconds_(prometheus::BuildHistogram()
                              .Name("fulcrum_ps_checkpoint_duration_seconds")
                              .Help("Time to write this server's checkpoint file.")
                              .Register(registry)
                              .Add({}, LatencyBuckets())),
      checkpoint_failures_(prometheus::BuildCounter()
                               .Name("fulcrum_ps_checkpoint_failures_total")
                               .Help("Checkpoints this server was asked for and could not write.")
                               .Register(registry)
                               .Add({})),
      state_(std::make_shared<StateCollector>(ps)) {
  // Every method's count of refusals from 0, so that a rate over them (an
  // alert's) has a series before the first refusal.
  const google::protobuf::ServiceDescriptor* service =
      DescribeRequest::descriptor()->file()->FindServiceByName("PsService");
  for (int i = 0; service != nullptr && i < service->method_count(); ++i) {
    refused_.Add({{"method", service->method(i)->name()}});
  }
}

void PsMetrics::ObserveRpc(const std::string& method, absl::Duration latency) {
  rpc_seconds_.Add({{"method", method}}, LatencyBuckets()).Observe(absl::ToDoubleSeconds(latency));
}

}  // namespace fulcrum
