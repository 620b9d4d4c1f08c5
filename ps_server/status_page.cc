#include "ps_server/status_page.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/consistency_mode.h"
#include "common/describe_text.h"
#include "common/memory_size.h"
#include "common/status_html.h"
#include "common/tensor.h"

namespace fulcrum {
namespace {

constexpr int kRefreshSecs = 2;

std::string Or(const std::string& text, const char* otherwise) {
  return text.empty() ? otherwise : text;
}

// A range's most pushed ids: "17 (1204), 5 (998)"; "-" for none.
std::string Hottest(const TableInfo& table) {
  std::vector<std::string> ids;
  for (const HotId& hot : table.hottest()) {
    ids.push_back(absl::StrCat(hot.id(), " (", hot.pushes(), ")"));
  }
  return ids.empty() ? "-" : absl::StrJoin(ids, ", ");
}

// Per-second rates of a unit's counts since the last render, by unit;
// absent for a unit the last render did not see.
using Rates = std::map<std::string, std::array<double, 2>>;

std::string ShardUnit(const ShardInfo& s) { return absl::StrCat(s.variable(), "/", s.shard()); }
std::string RangeUnit(const TableInfo& t) { return absl::StrCat(t.name(), "#", t.partition()); }

// "12.5/s"; "-" where there is no rate yet.
std::string RateText(const Rates& rates, const std::string& unit, int which) {
  auto it = rates.find(unit);
  return it == rates.end() ? "-" : absl::StrFormat("%.1f/s", it->second[which]);
}

std::string RenderServerPage(const DescribeResponse& state, const ServerPageContext& context,
                             const Rates& rates) {
  const std::string title = absl::StrCat("ps ", state.ps_index(), " ", context.address);
  const char* job = state.shutting_down() ? "done, shutting down"
                    : state.job_done()    ? "done"
                                          : "training";
  std::string body = absl::StrCat(
      "<h1>Fulcrum parameter server ", state.ps_index(), " of ", state.num_ps(), " at ",
      HtmlEscape(context.address), "</h1>\n<p id=\"summary\">job ", job, " &middot; mode ",
      HtmlEscape(ConsistencyModeName(state.mode())), " &middot; replication ",
      std::max(1, state.replication()), state.zone().empty() ? "" : " &middot; zone ",
      HtmlEscape(state.zone()), " &middot; ", HtmlEscape(context.security),
      " &middot; incarnation ", absl::Hex(state.incarnation()), " &middot; checkpoint restored: ",
      state.restored_step() >= 0 ? absl::StrCat("step ", state.restored_step()) : "none",
      " &middot; updates applied ", state.updates_applied(), " &middot; stale pushes dropped ",
      state.stale_gradients_dropped(), " &middot; pushed here ",
      HtmlEscape(FormatBytes(state.bytes_pushed())), ", pulled ",
      HtmlEscape(FormatBytes(state.bytes_pulled())), "</p>\n<h2>Memory</h2>\n<p id=\"memory\">",
      HtmlBar(static_cast<double>(state.memory_bytes()),
              static_cast<double>(state.max_memory_bytes()),
              absl::StrCat(FormatBytes(state.memory_bytes()), " of its budget ",
                           FormatBytes(state.max_memory_bytes()))),
      "</p>\n");

  const CheckpointHistory& checkpoints = state.checkpoints();
  absl::StrAppend(
      &body, "<h2>Checkpoints</h2>\n<p id=\"checkpoints\">",
      checkpoints.last_step() >= 0
          ? absl::StrCat("last: step ", checkpoints.last_step(), ", written in ",
                         absl::StrFormat("%.2f", checkpoints.last_seconds()), " s at ",
                         absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                                          absl::FromUnixSeconds(checkpoints.last_unix_secs()),
                                          absl::UTCTimeZone()))
          : "none written yet",
      " &middot; failures: ", checkpoints.failures(), "</p>\n");
  if (!checkpoints.last_error().empty()) {
    absl::StrAppend(&body, "<p id=\"checkpoint-error\" class=\"alert\">last failure: ",
                    HtmlEscape(checkpoints.last_error()), "</p>\n");
  }

  std::vector<std::vector<HtmlCell>> workers;
  for (const WorkerInfo& w : state.workers()) {
    // A worker lost stands out.
    workers.push_back({absl::StrCat(w.worker_id()),
                       HtmlCell(WorkerState(w), !w.live() && w.seen() && !w.finished()),
                       w.live() ? absl::StrCat(w.lease_remaining_ms(), " ms") : "-",
                       absl::StrCat(w.clock())});
  }
  absl::StrAppend(&body, "<h2>Workers</h2>\n",
                  HtmlTable("workers", {"worker", "state", "lease left", "clock"}, workers,
                            "no worker known yet"));

  std::vector<std::vector<HtmlCell>> shards;
  for (const ShardInfo& s : state.shards()) {
    shards.push_back({s.variable(), absl::StrCat(s.shard(), " of ", s.num_shards()),
                      ShapeString(s.shape()), absl::StrCat(s.version()),
                      RateText(rates, ShardUnit(s), 0), RateText(rates, ShardUnit(s), 1),
                      absl::StrCat(s.pending_gradients()), s.optimizer(),
                      Or(CopyOf(s), "the only copy")});
  }
  absl::StrAppend(&body, "<h2>Shards</h2>\n",
                  HtmlTable("shards",
                            {"variable", "shard", "shape", "version", "pushes", "pulls",
                             "pending gradients", "optimizer", "copy"},
                            shards, "no shard here"));

  std::vector<std::vector<HtmlCell>> tables;
  for (const TableInfo& t : state.tables()) {
    tables.push_back({t.name(), absl::StrCat(t.partition()), absl::StrCat(t.width()),
                      absl::StrCat(t.rows(), " of ",
                                   t.max_rows() > 0 ? absl::StrCat(t.max_rows()) : "unbounded"),
                      absl::StrCat(t.candidates()), absl::StrCat(t.evictions()),
                      absl::StrCat(t.admissions()), FormatBytes(t.memory_bytes()),
                      absl::StrCat(t.version()), RateText(rates, RangeUnit(t), 0), t.optimizer(),
                      Or(CopyOf(t), "the only copy"), Hottest(t)});
  }
  absl::StrAppend(
      &body, "<h2>Embedding tables</h2>\n",
      HtmlTable("tables",
                {"table", "range", "width", "rows", "candidates", "evictions", "admissions",
                 "memory", "version", "updates", "optimizer", "copy", "most pushed ids (pushes)"},
                tables, "no table's range here"));

  std::vector<std::vector<HtmlCell>> staleness;
  for (int i = 0; i < state.staleness_histogram_size(); ++i) {
    if (state.staleness_histogram(i) == 0) continue;
    staleness.push_back({absl::StrCat(i, i + 1 == state.staleness_histogram_size() ? "+" : ""),
                         absl::StrCat(state.staleness_histogram(i))});
  }
  absl::StrAppend(
      &body, "<h2>Staleness of accepted pushes</h2>\n",
      HtmlTable("staleness", {"versions behind", "pushes"}, staleness, "no push accepted yet"));
  if (state.placement().epoch() > 0) {
    std::vector<std::string> servers;
    for (const PlacedServer& server : state.placement().servers()) {
      servers.push_back(absl::StrCat(server.address(), server.draining() ? " (draining)" : ""));
    }
    absl::StrAppend(&body, "<h2>Placement</h2>\n<p id=\"placement\">epoch ",
                    state.placement().epoch(), ", ", state.placement().units_size(), " unit(s) on ",
                    HtmlEscape(absl::StrJoin(servers, ", ")), "</p>\n");
  }
  absl::StrAppend(&body, "<p class=\"muted\">Refreshes every ", kRefreshSecs,
                  " s. The same figures for Prometheus: <a href=\"/metrics\">/metrics</a>.</p>");
  return HtmlPage(title, kRefreshSecs, body);
}

}  // namespace

std::string ServerPage::Render(const DescribeResponse& state, absl::Time now) {
  std::map<std::string, std::array<int64_t, 2>> counts;
  for (const ShardInfo& s : state.shards()) counts[ShardUnit(s)] = {s.pushes(), s.pulls()};
  for (const TableInfo& t : state.tables()) counts[RangeUnit(t)] = {t.version(), 0};
  Rates rates;
  {
    absl::MutexLock lock(&mu_);
    const double seconds = absl::ToDoubleSeconds(now - last_render_);
    if (seconds > 0 && seconds < 3600) {
      for (const auto& [unit, count] : counts) {
        auto last = last_counts_.find(unit);
        if (last == last_counts_.end()) continue;
        rates[unit] = {static_cast<double>(count[0] - last->second[0]) / seconds,
                       static_cast<double>(count[1] - last->second[1]) / seconds};
      }
    }
    last_counts_ = counts;
    last_render_ = now;
  }
  return RenderServerPage(state, context_, rates);
}

}  // namespace fulcrum
