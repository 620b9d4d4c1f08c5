#include "deploy/top_view.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/consistency_mode.h"
#include "common/describe_text.h"
#include "common/memory_size.h"

namespace fulcrum {
namespace {

// `value` per second from `before` to `now`, or "-" without a before.
std::string Rate(double now, const double* before, double secs) {
  if (before == nullptr || secs <= 0) return "-";
  return absl::StrFormat("%.1f", std::max(0.0, now - *before) / secs);
}

}  // namespace

std::string RenderTop(const std::vector<std::string>& hosts, const TopSample& now,
                      const TopSample* before) {
  const double secs = before != nullptr ? absl::ToDoubleSeconds(now.at - before->at) : 0;
  const bool rates = before != nullptr && before->servers.size() == now.servers.size();
  // Each worker as the servers see it: live where any sees it live, its
  // highest clock.
  struct Worker {
    WorkerInfo info;
    int64_t lease_ms = 0;
  };
  std::map<int, Worker> workers;
  for (const DescribeResponse& d : now.servers) {
    for (const WorkerInfo& w : d.workers()) {
      Worker& seen = workers[w.worker_id()];
      if (seen.info.worker_id() != w.worker_id() || (w.live() && !seen.info.live())) {
        seen.info = w;
      }
      seen.info.set_clock(std::max(seen.info.clock(), w.clock()));
      seen.lease_ms = std::max(seen.lease_ms, w.lease_remaining_ms());
    }
  }
  int live = 0;
  for (const auto& [id, w] : workers) live += w.info.live() && !w.info.finished();
  // The first server asked (one lost for good is not: its entry is empty).
  DescribeResponse first;
  for (const DescribeResponse& d : now.servers) {
    if (WasAsked(d)) {
      first = d;
      break;
    }
  }
  std::string out =
      absl::StrFormat("fulcrumctl top: %d server(s), mode %s, %d of %d worker(s) live%s, at %s\n\n",
                      now.servers.size(), ConsistencyModeName(first.mode()), live, workers.size(),
                      first.job_done() ? ", JOB DONE" : "",
                      absl::FormatTime("%H:%M:%S", now.at, absl::LocalTimeZone()));

  absl::StrAppendFormat(&out, "%-22s %7s %7s %10s %8s  %-24s %s\n", "SERVER", "SHARDS", "RANGES",
                        "UPDATES/S", "STALE/S", "MEMORY", "COPIES");
  std::map<std::string, std::pair<int, int64_t>> tables;  // ranges, rows (primaries)
  std::map<std::string, double> evictions, evictions_before;
  for (size_t i = 0; i < now.servers.size(); ++i) {
    const DescribeResponse& d = now.servers[i];
    if (!WasAsked(d)) {
      absl::StrAppendFormat(&out, "%-22s left the cluster (lost for good)\n",
                            i < hosts.size() ? hosts[i] : "?");
      continue;
    }
    const DescribeResponse* b = rates ? &before->servers[i] : nullptr;
    int primaries = 0, backups = 0;
    auto count = [&](const auto& unit) { ++(unit.primary().empty() ? primaries : backups); };
    for (const ShardInfo& s : d.shards()) count(s);
    for (const TableInfo& t : d.tables()) {
      count(t);
      if (!t.primary().empty()) continue;  // a backup: its primary counts
      ++tables[t.name()].first;
      tables[t.name()].second += t.rows();
      evictions[t.name()] += static_cast<double>(t.evictions());
    }
    if (b != nullptr) {
      for (const TableInfo& t : b->tables()) {
        if (t.primary().empty()) evictions_before[t.name()] += static_cast<double>(t.evictions());
      }
    }
    const double updates_before = b != nullptr ? static_cast<double>(b->updates_applied()) : 0;
    const double stale_before =
        b != nullptr ? static_cast<double>(b->stale_gradients_dropped()) : 0;
    absl::StrAppendFormat(
        &out, "%-22s %7d %7d %10s %8s  %-24s %s\n", i < hosts.size() ? hosts[i] : "?",
        d.shards_size(), d.tables_size(),
        Rate(static_cast<double>(d.updates_applied()), b != nullptr ? &updates_before : nullptr,
             secs),
        Rate(static_cast<double>(d.stale_gradients_dropped()),
             b != nullptr ? &stale_before : nullptr, secs),
        absl::StrCat(FormatBytes(d.memory_bytes()), " of ", FormatBytes(d.max_memory_bytes())),
        backups > 0 ? absl::StrCat(primaries, " primary, ", backups, " backup")
                    : absl::StrCat(primaries, " primary"));
  }

  absl::StrAppendFormat(&out, "\n%-8s %-28s %8s %10s\n", "WORKER", "STATE", "CLOCK", "LEASE");
  for (const auto& [id, w] : workers) {
    absl::StrAppendFormat(&out, "%-8d %-28s %8d %10s\n", id, WorkerState(w.info), w.info.clock(),
                          w.info.live() ? absl::StrFormat("%.1fs", w.lease_ms / 1000.0) : "-");
  }
  if (workers.empty()) out += "(no worker has called yet)\n";

  if (!tables.empty()) {
    absl::StrAppendFormat(&out, "\n%-24s %7s %12s %12s\n", "TABLE", "RANGES", "ROWS",
                          "EVICTIONS/S");
    for (const auto& [name, t] : tables) {
      const auto was = evictions_before.find(name);
      absl::StrAppendFormat(
          &out, "%-24s %7d %12d %12s\n", name, t.first, t.second,
          Rate(evictions[name], rates && was != evictions_before.end() ? &was->second : nullptr,
               secs));
    }
  }
  return out;
}

}  // namespace fulcrum
