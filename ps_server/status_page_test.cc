#include "ps_server/status_page.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <utility>

namespace fulcrum {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A replicated server's page: its copies, workers in each state, memory,
// staleness and placement, every name escaped.
TEST(StatusPageTest, ShowsCopiesWorkersMemoryAndPlacement) {
  DescribeResponse state;
  state.set_mode(ASYNC);
  state.set_ps_index(1);
  state.set_num_ps(3);
  state.set_replication(2);
  state.set_restored_step(-1);
  state.set_bytes_pushed(int64_t{5} << 20);
  state.set_bytes_pulled(int64_t{7} << 20);
  state.set_memory_bytes(int64_t{3} << 20);
  state.set_max_memory_bytes(int64_t{4} << 20);
  ShardInfo* shard = state.add_shards();
  shard->set_variable("dense<0>/kernel");
  shard->set_shard(1);
  shard->set_num_shards(2);
  shard->add_shape(392);
  shard->add_shape(256);
  shard->set_version(17);
  shard->set_optimizer("ADAM");
  shard->add_backups("127.0.0.1:2");
  TableInfo* table = state.add_tables();
  table->set_name("ads");
  table->set_partition(2);
  table->set_width(8);
  table->set_rows(40);
  table->set_max_rows(50);
  table->set_evictions(7);
  table->set_primary("127.0.0.1:3");
  for (const auto& [id, pushes] : {std::pair<int64_t, int64_t>{17, 1204}, {5, 998}}) {
    HotId* hot = table->add_hottest();
    hot->set_id(id);
    hot->set_pushes(pushes);
  }
  WorkerInfo* live = state.add_workers();
  live->set_worker_id(0);
  live->set_live(true);
  live->set_seen(true);
  live->set_clock(5);
  live->set_lease_remaining_ms(900);
  WorkerInfo* dead = state.add_workers();
  dead->set_worker_id(1);
  dead->set_seen(true);
  state.mutable_checkpoints()->set_last_step(300);
  state.mutable_checkpoints()->set_last_seconds(0.25);
  state.mutable_checkpoints()->set_last_unix_secs(1'700'000'000);
  state.mutable_checkpoints()->set_failures(1);
  state.mutable_checkpoints()->set_last_error("step 200: disk <full>");
  state.add_staleness_histogram(4);
  state.add_staleness_histogram(0);
  state.add_staleness_histogram(2);
  state.mutable_placement()->set_epoch(3);
  state.mutable_placement()->add_servers()->set_address("127.0.0.1:1");
  state.mutable_placement()->add_units();

  const std::string page =
      ServerPage({"127.0.0.1:1", "mutual TLS, tokens"}).Render(state, absl::Now());
  EXPECT_THAT(page, HasSubstr("parameter server 1 of 3 at 127.0.0.1:1"));
  EXPECT_THAT(page, HasSubstr("mode async &middot; replication 2"));
  EXPECT_THAT(page, HasSubstr("mutual TLS, tokens"));
  EXPECT_THAT(page, HasSubstr("checkpoint restored: none"));
  EXPECT_THAT(page, HasSubstr("3.0 MiB of its budget 4.0 MiB"));
  EXPECT_THAT(page, HasSubstr("pushed here 5.0 MiB, pulled 7.0 MiB"));
  EXPECT_THAT(page, HasSubstr("last: step 300, written in 0.25 s at 2023-11-14 22:13:20 UTC "
                              "&middot; failures: 1"));
  EXPECT_THAT(page, HasSubstr("class=\"alert\">last failure: step 200: disk &lt;full&gt;"));
  EXPECT_THAT(page, HasSubstr("<td>dense&lt;0&gt;/kernel</td><td>1 of 2</td><td>[392, 256]</td>"
                              "<td>17</td>"));
  EXPECT_THAT(page, Not(HasSubstr("dense<0>")));
  EXPECT_THAT(page, HasSubstr("<td>primary, backed up on 127.0.0.1:2</td>"));
  EXPECT_THAT(page, HasSubstr("<td>ads</td><td>2</td><td>8</td><td>40 of 50</td>"));
  EXPECT_THAT(page, HasSubstr("<td>backup of 127.0.0.1:3</td><td>17 (1204), 5 (998)</td>"));
  EXPECT_THAT(page, HasSubstr("<td>0</td><td>live</td><td>900 ms</td><td>5</td>"));
  EXPECT_THAT(page, HasSubstr("<td>1</td><td class=\"alert\">dead</td><td>-</td>"));
  EXPECT_THAT(page, HasSubstr("<td>2+</td><td>2</td>"));
  EXPECT_THAT(page, HasSubstr("epoch 3, 1 unit(s) on 127.0.0.1:1"));
}

TEST(StatusPageTest, AnEmptyServerSaysSo) {
  DescribeResponse state;
  state.set_restored_step(12);
  const std::string page = ServerPage({"127.0.0.1:1", "plaintext"}).Render(state, absl::Now());
  EXPECT_THAT(page, HasSubstr("no worker known yet"));
  EXPECT_THAT(page, HasSubstr("no shard here"));
  EXPECT_THAT(page, HasSubstr("no table&#39;s range here"));
  EXPECT_THAT(page, HasSubstr("checkpoint restored: step 12"));
  EXPECT_THAT(page, Not(HasSubstr("Placement")));
}

// Each shard's pushes and pulls, and each range's updates, per second
// between two renders; none at the first.
TEST(StatusPageTest, ShowsRatesSinceTheLastRender) {
  DescribeResponse state;
  ShardInfo* shard = state.add_shards();
  shard->set_variable("w");
  shard->set_num_shards(1);
  shard->set_pushes(100);
  shard->set_pulls(40);
  TableInfo* table = state.add_tables();
  table->set_name("ads");
  table->set_version(7);
  ServerPage page({"127.0.0.1:1", "plaintext"});
  const absl::Time start = absl::FromUnixSeconds(1'000);
  const std::string first = page.Render(state, start);
  EXPECT_THAT(first,
              HasSubstr("<td>w</td><td>0 of 1</td><td>[]</td><td>0</td><td>-</td><td>-</td>"));
  shard->set_pushes(150);
  shard->set_pulls(60);
  table->set_version(27);
  const std::string second = page.Render(state, start + absl::Seconds(2));
  EXPECT_THAT(second, HasSubstr("<td>0</td><td>25.0/s</td><td>10.0/s</td>"));
  EXPECT_THAT(second, HasSubstr("<td>27</td><td>10.0/s</td>"));
}

}  // namespace
}  // namespace fulcrum
