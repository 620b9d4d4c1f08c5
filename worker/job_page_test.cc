#include "worker/job_page.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

ProgressRecord Progress(int epoch, double step, double loss, double accuracy) {
  ProgressRecord record;
  record.set_epoch(epoch);
  record.set_step(step);
  record.set_wall_seconds(step / 10);
  record.set_train_loss(loss);
  record.set_train_accuracy(accuracy);
  record.set_examples_per_sec(6400);
  return record;
}

// The chief's page: where it is, its curves, the epochs' evaluations and
// the servers' pages.
TEST(JobPageTest, ShowsProgressCurvesEvaluationsAndServers) {
  JobStatus status({"worker 0 (chief)", "mlp 64 · async · 2 worker(s) · 2 server(s)", 3});
  status.Progress(Progress(1, 100, 0.9, 0.7), 1404, 95);
  status.Progress(Progress(1, 468, 0.6, 0.8), 1404, 80);
  EpochRecord epoch;
  epoch.set_epoch(1);
  epoch.set_global_step(936);
  epoch.set_test_loss(0.55);
  epoch.set_test_accuracy(0.81);
  status.Evaluated(epoch);
  status.Progress(Progress(2, 500, 0.5, 0.83), 1404, 72);
  StepParts parts;
  parts.time[StepParts::kCompute] = absl::Milliseconds(3);
  parts.time[StepParts::kExchange] = absl::Milliseconds(1);
  status.Step(parts);
  status.Step(parts);
  std::vector<DescribeResponse> servers(2);
  servers[0].set_metrics_port(9100);
  servers[0].set_updates_applied(300);
  servers[0].add_shards();
  servers[0].add_shards()->set_primary("10.0.0.2:2222");  // a backup: not counted
  servers[0].set_bytes_pushed(int64_t{1} << 20);
  servers[0].set_bytes_pulled(int64_t{1} << 20);
  servers[1].set_updates_applied(100);
  servers[1].set_bytes_pushed(int64_t{3} << 20);
  servers[1].set_bytes_pulled(int64_t{3} << 20);
  servers[1].set_memory_bytes(int64_t{3} << 20);
  servers[1].set_max_memory_bytes(int64_t{4} << 20);
  servers[1].add_tables();
  status.SetServers(servers, {"10.0.0.1:2222", "10.0.0.2:2222"});
  const std::string page = RenderJobPage(status.view());
  EXPECT_THAT(page, HasSubstr("Fulcrum worker 0 (chief)"));
  EXPECT_THAT(page, HasSubstr("mlp 64 · async · 2 worker(s) · 2 server(s)"));
  EXPECT_THAT(page,
              HasSubstr("training &middot; epoch 2 of 3 &middot; step 500 of 1404 &middot; 6400 "
                        "examples/s &middot; ETA 1m12s &middot; 50s so far"));
  // Curves: the loss, and the accuracy with the test set's at epoch 1's end.
  EXPECT_THAT(page, HasSubstr("<svg id=\"loss\""));
  EXPECT_THAT(page, HasSubstr(">train loss</text>"));
  EXPECT_THAT(page, HasSubstr(">test accuracy</text>"));
  EXPECT_THAT(page, HasSubstr("<td>1</td><td>936</td><td>0.5500</td><td>0.8100</td><td>-</td>"));
  // Each server's share of the updates and bytes, linked to its page where
  // it has one: here the second moves three times the first's bytes.
  EXPECT_THAT(page, HasSubstr("<tr><td><a href=\"http://10.0.0.1:9100/\">10.0.0.1:2222</a></td>"
                              "<td>1</td><td>0</td><td>300</td><td>75%</td><td>2.0 MiB</td>"
                              "<td>25%</td>"));
  EXPECT_THAT(page, HasSubstr("<tr><td>10.0.0.2:2222</td><td>0</td><td>1</td><td>100</td><td>25%"
                              "</td><td>6.0 MiB</td><td>75%</td><td>3.0 MiB of 4.0 MiB</td></tr>"));
  // Where a step's time goes: means over the steps so far, and shares.
  EXPECT_THAT(page, HasSubstr("<td>compute</td><td>3.00 ms</td><td>75%</td>"));
  EXPECT_THAT(page, HasSubstr("<td>exchange</td><td>1.00 ms</td><td>25%</td>"));
  EXPECT_THAT(page, HasSubstr("Over the last 2 steps."));
  status.Finished();
  EXPECT_THAT(RenderJobPage(status.view()), HasSubstr("finished &middot; epoch 2"));
}

TEST(JobPageTest, AWorkerJustStartedSaysSo) {
  JobStatus status({"worker 1", "mlp 64 · sync · 2 worker(s)", 5});
  const std::string page = RenderJobPage(status.view());
  EXPECT_THAT(page, HasSubstr("epoch 0 of 5"));
  EXPECT_THAT(page, HasSubstr("ETA unknown"));
  EXPECT_THAT(page, HasSubstr("nothing to draw yet"));
  EXPECT_THAT(page, HasSubstr("no evaluation yet"));
  EXPECT_THAT(page, HasSubstr("no step yet"));
  EXPECT_THAT(page, HasSubstr("no parameter server"));
}

// A long run's curve keeps its shape in bounded memory.
TEST(JobPageTest, ALongRunKeepsABoundedCurve) {
  JobStatus status({"worker 0", "job", 1});
  for (int i = 1; i <= 5000; ++i) status.Progress(Progress(1, i, 1.0 / i, 0.5), 5000, 1);
  const JobStatus::View view = status.view();
  EXPECT_LE(view.progress.size(), JobStatus::kMaxPoints);
  EXPECT_GE(view.progress.size(), JobStatus::kMaxPoints / 2);
  EXPECT_EQ(view.progress.front().step(), 1);
  EXPECT_EQ(view.progress.back().step(), 5000);
}

TEST(JobPageTest, DurationsReadAsPeopleWriteThem) {
  EXPECT_EQ(FormatDuration(45), "45s");
  EXPECT_EQ(FormatDuration(187), "3m07s");
  EXPECT_EQ(FormatDuration(3900), "1h05m");
  EXPECT_EQ(FormatDuration(-1), "unknown");
}

}  // namespace
}  // namespace fulcrum
