#include "deploy/top_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fulcrum {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

DescribeResponse Server(int64_t updates, int64_t evictions, bool worker1_live) {
  DescribeResponse d;
  d.set_incarnation(0x5eed);  // a running server's: never 0
  d.set_mode(ASYNC);
  d.set_updates_applied(updates);
  d.set_memory_bytes(int64_t{2} << 20);
  d.set_max_memory_bytes(int64_t{1} << 30);
  d.add_shards()->add_backups("127.0.0.1:2");
  d.add_shards()->set_primary("127.0.0.1:2");
  TableInfo* table = d.add_tables();
  table->set_name("ads");
  table->set_rows(400);
  table->set_evictions(evictions);
  WorkerInfo* w0 = d.add_workers();
  w0->set_worker_id(0);
  w0->set_live(true);
  w0->set_seen(true);
  w0->set_clock(7);
  w0->set_lease_remaining_ms(2500);
  WorkerInfo* w1 = d.add_workers();
  w1->set_worker_id(1);
  w1->set_seen(true);
  w1->set_live(worker1_live);
  return d;
}

// Rates over the time between two samples; workers as any server sees
// them; tables summed over their primaries.
TEST(TopViewTest, ShowsRatesWorkersAndTables) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const TopSample before{t0, {Server(100, 10, true)}};
  const TopSample now{t0 + absl::Seconds(2), {Server(300, 50, false)}};
  const std::string screen = RenderTop({"127.0.0.1:1"}, now, &before);
  EXPECT_THAT(screen, HasSubstr("1 server(s), mode async, 1 of 2 worker(s) live"));
  // 200 updates and 40 evictions over 2 s.
  EXPECT_THAT(screen, HasSubstr("127.0.0.1:1                  2       1      100.0      0.0  "
                                "2.0 MiB of 1.0 GiB       2 primary, 1 backup"));
  EXPECT_THAT(screen, HasSubstr("0        live                                7       2.5s"));
  EXPECT_THAT(screen, HasSubstr("1        dead                                0          -"));
  EXPECT_THAT(screen, HasSubstr("ads                            1          400         20.0"));
}

TEST(TopViewTest, TheFirstSampleHasNoRates) {
  const TopSample now{absl::FromUnixSeconds(1000), {Server(300, 50, true)}};
  const std::string screen = RenderTop({"127.0.0.1:1"}, now, nullptr);
  EXPECT_THAT(screen, HasSubstr("2 of 2 worker(s) live"));
  EXPECT_THAT(screen, HasSubstr("         -        -  2.0 MiB"));
  EXPECT_THAT(screen, Not(HasSubstr("JOB DONE")));
  const TopSample empty{absl::FromUnixSeconds(1000), {DescribeResponse()}};
  EXPECT_THAT(RenderTop({"127.0.0.1:1"}, empty, nullptr), HasSubstr("(no worker has called yet)"));
}

// A server lost for good is not asked (its entry is empty): it is named as
// gone, and the others' mode is shown.
TEST(TopViewTest, AServerLostForGoodIsNamed) {
  const TopSample now{absl::FromUnixSeconds(1000), {DescribeResponse(), Server(300, 50, true)}};
  const std::string screen = RenderTop({"127.0.0.1:1", "127.0.0.1:2"}, now, nullptr);
  EXPECT_THAT(screen, HasSubstr("2 server(s), mode async"));
  EXPECT_THAT(screen, HasSubstr("127.0.0.1:1            left the cluster (lost for good)"));
  EXPECT_THAT(screen, HasSubstr("127.0.0.1:2                  2       1"));
}

}  // namespace
}  // namespace fulcrum
