// Regrouping between in-process ranks.
#include "worker/collective/regroup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "worker/collective/in_process_links.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// A restarted rank can find a member's notice from before it restarted (a
// stream opened to its previous process reached the new one) and take it
// for an invitation from a rank that leads nothing. Once the leader's
// invitation of a later round comes, it stops waiting for that rank at
// once (not after twice the timeout) and finds the leader's.
TEST(RegroupTest, AJoinerInvitedByANonLeaderTurnsToTheLatestRound) {
  Mailbox mailbox(3);
  InProcessLinks zero(&mailbox, 0), one(&mailbox, 1), two(&mailbox, 2);
  one.SetTag(1);
  ASSERT_TRUE(one.Send(2, {}).ok());  // a member's notice of round 1
  auto invited = two.AwaitRound(-1, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(invited.ok()) << invited.status();
  EXPECT_EQ(*invited, (std::pair<int, uint64_t>{1, 1}));
  zero.SetTag(2);
  ASSERT_TRUE(zero.Send(2, {}).ok());  // the leader's invitation, of round 2

  auto joined = JoinGroup(two, 1, 1, absl::Seconds(60));
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kAborted) << joined.status();
  EXPECT_THAT(joined.status().message(), HasSubstr("moved on to round 2"));
  invited = two.AwaitRound(-1, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(invited.ok()) << invited.status();
  EXPECT_EQ(*invited, (std::pair<int, uint64_t>{0, 2}));
}

}  // namespace
}  // namespace fulcrum
