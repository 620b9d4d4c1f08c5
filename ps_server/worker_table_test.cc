#include "ps_server/worker_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fulcrum {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Three workers, 10 s leases and a 60 s start-up deadline, on a clock the
// test moves.
class WorkerTableTest : public ::testing::Test {
 protected:
  WorkerTableTest() : table_(3, absl::Seconds(10), absl::Seconds(60), [this] { return now_; }) {}

  void Advance(absl::Duration d) { now_ += d; }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  WorkerTable table_;
};

TEST_F(WorkerTableTest, WorkersNotSeenYetAreAwaitedUntilTheStartupDeadline) {
  EXPECT_THAT(table_.Awaited(), ElementsAre(0, 1, 2));
  EXPECT_EQ(table_.ActiveCount(), 3) << "the awaited count as active";
  EXPECT_TRUE(table_.Renew(1)) << "a first contact is an arrival";
  EXPECT_FALSE(table_.Renew(1)) << "a renewal is not";
  EXPECT_THAT(table_.Awaited(), ElementsAre(0, 2));
  Advance(absl::Seconds(59));
  const LeaseChanges lease = table_.ExpireLeases();
  EXPECT_THAT(lease.expired, ElementsAre(1)) << "silent for 59 s, past its 10 s lease";
  EXPECT_THAT(lease.never_seen, IsEmpty()) << "the start-up deadline is 1 s away";
  EXPECT_EQ(table_.StartupRemaining(), absl::Seconds(1));
  EXPECT_EQ(table_.ActiveCount(), 2) << "the two still awaited";
  Advance(absl::Seconds(2));
  const LeaseChanges startup = table_.ExpireLeases();
  EXPECT_THAT(startup.never_seen, ElementsAre(0, 2));
  EXPECT_THAT(startup.expired, IsEmpty());
  EXPECT_THAT(startup.ToString(), HasSubstr("0, 2"));
  EXPECT_THAT(table_.Awaited(), IsEmpty());
  EXPECT_EQ(table_.ActiveCount(), 0);
}

TEST_F(WorkerTableTest, ALeaseRunsOutAndARenewalBringsTheWorkerBack) {
  table_.Renew(0);
  Advance(absl::Seconds(9));
  table_.Renew(0);
  Advance(absl::Seconds(9));
  EXPECT_FALSE(table_.ExpireLeases().any()) << "renewed 9 s ago, within 10 s";
  Advance(absl::Seconds(2));
  EXPECT_THAT(table_.ExpireLeases().expired, ElementsAre(0));
  EXPECT_FALSE(table_.Active()[0]);
  EXPECT_FALSE(table_.ExpireLeases().any()) << "a dead worker expires once";
  EXPECT_TRUE(table_.Renew(0)) << "back from the dead: an arrival";
  EXPECT_TRUE(table_.Active()[0]);
}

TEST_F(WorkerTableTest, TheJobEndsWhenEveryStartedWorkerFinishedOrDied) {
  EXPECT_TRUE(table_.AllFinishedOrDead()) << "no worker started: none to wait for";
  table_.Renew(0);
  table_.Renew(1);
  EXPECT_FALSE(table_.AllFinishedOrDead());
  table_.MarkFinished(0);
  EXPECT_FALSE(table_.Active()[0]) << "a finished worker no longer counts";
  EXPECT_FALSE(table_.AllFinishedOrDead());
  Advance(absl::Seconds(11));
  table_.ExpireLeases();
  EXPECT_TRUE(table_.AllFinishedOrDead()) << "worker 1 died; worker 2 never came";
  const std::vector<WorkerInfo> described = table_.Describe();
  ASSERT_EQ(described.size(), 3u);
  EXPECT_TRUE(described[0].finished());
  EXPECT_TRUE(described[1].seen());
  EXPECT_FALSE(described[1].live());
  EXPECT_FALSE(described[2].seen());
}

TEST_F(WorkerTableTest, WorkerIdsOutsideTheClusterAreRefused) {
  EXPECT_TRUE(table_.CheckWorkerId(2).ok());
  for (int id : {-1, 3}) {
    const absl::Status status = table_.CheckWorkerId(id);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << id;
  }
  EXPECT_THAT(std::string(table_.CheckWorkerId(3).message()), HasSubstr("3"));
}

TEST(WorkerTableStartupTest, WithoutAStartupDeadlineNobodyIsAwaited) {
  absl::Time now = absl::FromUnixSeconds(5);
  WorkerTable table(2, absl::Seconds(10), absl::ZeroDuration(), [&] { return now; });
  table.ExpireLeases();
  EXPECT_THAT(table.Awaited(), IsEmpty());
  EXPECT_EQ(table.ActiveCount(), 0);
}

}  // namespace
}  // namespace fulcrum
