#include "worker/job_page.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/memory_size.h"
#include "common/status_html.h"

namespace fulcrum {
namespace {

constexpr int kRefreshSecs = 5;

}  // namespace

std::string FormatDuration(double secs) {
  if (secs < 0 || !std::isfinite(secs)) return "unknown";
  const int64_t s = std::llround(secs);
  return s >= 3600 ? absl::StrFormat("%dh%02dm", s / 3600, s % 3600 / 60)
         : s >= 60 ? absl::StrFormat("%dm%02ds", s / 60, s % 60)
                   : absl::StrFormat("%ds", s);
}

void JobStatus::Progress(const ProgressRecord& record, int64_t total_steps, double eta_secs) {
  absl::MutexLock lock(&mu_);
  view_.total_steps = total_steps;
  view_.eta_secs = eta_secs;
  std::vector<ProgressRecord>& progress = view_.progress;
  if (progress.size() >= kMaxPoints) {
    size_t kept = 0;
    for (size_t i = 0; i < progress.size(); i += 2) progress[kept++] = std::move(progress[i]);
    progress.resize(kept);
  }
  progress.push_back(record);
}

void JobStatus::Step(const StepParts& parts) {
  absl::MutexLock lock(&mu_);
  filling_ += parts;
  ++filling_steps_;
  // Until a first window is whole, the steps so far show; then whole
  // windows, each as it completes.
  if (view_.parts_steps < kWindowSteps || filling_steps_ >= kWindowSteps) {
    view_.parts = filling_;
    view_.parts_steps = filling_steps_;
  }
  if (filling_steps_ >= kWindowSteps) {
    filling_ = StepParts();
    filling_steps_ = 0;
  }
}

void JobStatus::Evaluated(const EpochRecord& record) {
  absl::MutexLock lock(&mu_);
  view_.evaluations.push_back(record);
}

void JobStatus::Finished() {
  absl::MutexLock lock(&mu_);
  view_.finished = true;
  view_.eta_secs = 0;
}

void JobStatus::SetServers(const std::vector<DescribeResponse>& described,
                           const std::vector<std::string>& addresses) {
  std::vector<View::Server> servers;
  for (size_t i = 0; i < described.size() && i < addresses.size(); ++i) {
    const DescribeResponse& d = described[i];
    View::Server& server = servers.emplace_back();
    server.address = addresses[i];
    if (d.metrics_port() > 0) {
      // At the host of its address, on the port its Describe says.
      server.page = absl::StrCat("http://", addresses[i].substr(0, addresses[i].rfind(':')), ":",
                                 d.metrics_port(), "/");
    }
    for (const ShardInfo& shard : d.shards()) server.shards += shard.primary().empty();
    for (const TableInfo& table : d.tables()) server.ranges += table.primary().empty();
    server.updates_applied = d.updates_applied();
    server.bytes = d.bytes_pushed() + d.bytes_pulled();
    server.memory_bytes = d.memory_bytes();
    server.max_memory_bytes = d.max_memory_bytes();
  }
  absl::MutexLock lock(&mu_);
  view_.servers = std::move(servers);
}

JobStatus::View JobStatus::view() const {
  absl::MutexLock lock(&mu_);
  return view_;
}

std::string RenderJobPage(const JobStatus::View& view) {
  const ProgressRecord last = view.progress.empty() ? ProgressRecord() : view.progress.back();
  std::string body = absl::StrCat(
      "<h1>Fulcrum ", HtmlEscape(view.title), "</h1>\n<p id=\"job\">", HtmlEscape(view.job),
      "</p>\n<p id=\"progress\">", view.finished ? "finished" : "training", " &middot; epoch ",
      last.epoch(), " of ", view.epochs, " &middot; step ", static_cast<int64_t>(last.step()),
      " of ", view.total_steps, " &middot; ", absl::StrFormat("%.0f", last.examples_per_sec()),
      " examples/s &middot; ETA ", FormatDuration(view.eta_secs), " &middot; ",
      FormatDuration(last.wall_seconds()), " so far</p>\n");
  ChartLine loss{"train loss", "#c33", {}};
  ChartLine accuracy{"train accuracy", "#36c", {}};
  for (const ProgressRecord& p : view.progress) {
    loss.points.emplace_back(p.step(), p.train_loss());
    accuracy.points.emplace_back(p.step(), p.train_accuracy());
  }
  absl::StrAppend(&body, "<h2>Loss</h2>\n", HtmlLineChart("loss", {loss}, "this worker's step"),
                  "<h2>Accuracy</h2>\n");
  std::vector<ChartLine> accuracies = {accuracy};
  if (!view.evaluations.empty()) {
    ChartLine test{"test accuracy", "#393", {}};
    // The evaluations are at global steps; this worker's steps are a share
    // of them, so each is drawn at the end of its epoch's steps here.
    for (const EpochRecord& e : view.evaluations) {
      double end = -1;
      for (const ProgressRecord& p : view.progress) {
        if (p.epoch() == e.epoch()) end = std::max(end, p.step());
      }
      if (end >= 0) test.points.emplace_back(end, e.test_accuracy());
    }
    accuracies.push_back(std::move(test));
  }
  absl::StrAppend(&body, HtmlLineChart("accuracy", accuracies, "this worker's step"));
  // Where a step's time goes: each part's mean, and its share as a bar.
  absl::Duration total;
  for (const absl::Duration& t : view.parts.time) total += t;
  std::vector<std::vector<HtmlCell>> parts;
  const double steps = static_cast<double>(std::max<int64_t>(view.parts_steps, 1));
  std::string bars;
  for (int p = 0; p < StepParts::kParts && view.parts_steps > 0; ++p) {
    const double ms = absl::ToDoubleMilliseconds(view.parts.time[p]) / steps;
    const double share =
        total > absl::ZeroDuration() ? absl::FDivDuration(view.parts.time[p], total) : 0.0;
    parts.push_back({kStepPartNames[p], absl::StrFormat("%.2f ms", ms),
                     absl::StrFormat("%.0f%%", 100 * share)});
    absl::StrAppend(&bars, "<div>",
                    HtmlBar(share, 1, absl::StrFormat("%s %.0f%%", kStepPartNames[p], 100 * share)),
                    "</div>");
  }
  absl::StrAppend(&body, "<h2>Where a step's time goes</h2>\n",
                  HtmlTable("parts", {"part", "mean per step", "share"}, parts, "no step yet"),
                  bars,
                  view.parts_steps > 0
                      ? absl::StrCat("<p class=\"muted\">Over the last ", view.parts_steps,
                                     " steps. In sync and SSP the wait for the other workers is "
                                     "in the exchange: a straggler shows as its own compute "
                                     "high and the others' exchange high.</p>\n")
                      : "");
  std::vector<std::vector<HtmlCell>> evaluations;
  for (const EpochRecord& e : view.evaluations) {
    evaluations.push_back(
        {absl::StrCat(e.epoch()), absl::StrCat(static_cast<int64_t>(e.global_step())),
         absl::StrFormat("%.4f", e.test_loss()), absl::StrFormat("%.4f", e.test_accuracy()),
         e.has_test_auc() ? absl::StrFormat("%.4f", e.test_auc()) : "-"});
  }
  absl::StrAppend(
      &body, "<h2>Test set, after each epoch</h2>\n",
      HtmlTable("evaluations", {"epoch", "global step", "test loss", "test accuracy", "test AUC"},
                evaluations, "no evaluation yet (the chief evaluates after each epoch)"));
  // Each server's share of the updates and of the bytes: an imbalanced
  // placement shows.
  int64_t updates = 0, bytes = 0;
  for (const JobStatus::View::Server& server : view.servers) {
    updates += server.updates_applied;
    bytes += server.bytes;
  }
  const auto share = [](int64_t part, int64_t whole) {
    return absl::StrFormat(
        "%.0f%%", whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  };
  std::string servers = view.servers.empty()
                            ? "<p id=\"servers\" class=\"muted\">no parameter server</p>\n"
                            : "<table id=\"servers\"><tr><th>server</th><th>shards</th><th>"
                              "ranges</th><th>updates applied</th><th>share</th><th>bytes "
                              "pushed and pulled</th><th>share</th><th>memory</th></tr>\n";
  for (const JobStatus::View::Server& server : view.servers) {
    const std::string address = HtmlEscape(server.address);
    absl::StrAppend(
        &servers, "<tr><td>",
        server.page.empty()
            ? address
            : absl::StrCat("<a href=\"", HtmlEscape(server.page), "\">", address, "</a>"),
        "</td><td>", server.shards, "</td><td>", server.ranges, "</td><td>", server.updates_applied,
        "</td><td>", share(server.updates_applied, updates), "</td><td>",
        HtmlEscape(FormatBytes(server.bytes)), "</td><td>", share(server.bytes, bytes), "</td><td>",
        HtmlEscape(FormatBytes(server.memory_bytes)), " of ",
        HtmlEscape(FormatBytes(server.max_memory_bytes)), "</td></tr>\n");
  }
  if (!view.servers.empty()) servers += "</table>\n";
  absl::StrAppend(&body, "<h2>Parameter servers</h2>\n", servers,
                  "<p class=\"muted\">Refreshes every ", kRefreshSecs,
                  " s. The same figures for Prometheus: <a href=\"/metrics\">/metrics</a>.</p>");
  return HtmlPage(view.title, kRefreshSecs, body);
}

}  // namespace fulcrum
