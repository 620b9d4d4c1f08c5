#include "common/placement.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

std::vector<PlacementServer> Servers(int n, std::vector<std::string> zones = {}) {
  std::vector<PlacementServer> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({absl::StrCat("10.0.0.", i, ":2222"), zones.empty() ? "" : zones[i]});
  }
  return out;
}

std::vector<PlacementUnitSpec> Units(int n, int64_t bytes = 1000) {
  std::vector<PlacementUnitSpec> out;
  for (int i = 0; i < n; ++i) out.push_back({absl::StrCat("w/", i), bytes});
  return out;
}

std::vector<int32_t> Holders(const PlacedUnit& unit) {
  std::vector<int32_t> out;
  for (const PlacedCopy& c : unit.copies()) out.push_back(c.server());
  return out;
}

// Bytes of ready copies per server id, primaries only or all.
std::map<int32_t, int64_t> Bytes(const Placement& p, bool primaries) {
  std::map<int32_t, int64_t> out;
  for (const PlacedServer& s : p.servers()) out[s.id()] = 0;
  for (const PlacedUnit& u : p.units()) {
    for (int c = 0; c < (primaries ? 1 : u.copies_size()); ++c)
      out[u.copies(c).server()] += u.bytes();
  }
  return out;
}

// Every catching-up copy made ready, as the servers would report them.
Placement AllCaughtUp(Placement p) {
  for (bool again = true; again;) {
    again = false;
    for (const PlacedUnit& u : p.units()) {
      for (const PlacedCopy& c : u.copies()) {
        if (!c.catching_up()) continue;
        absl::StatusOr<Placement> next = CaughtUp(p, u.key(), c.server());
        EXPECT_TRUE(next.ok()) << next.status();
        p = *next;
        again = true;
        break;
      }
      if (again) break;
    }
  }
  return p;
}

TEST(PlacementTest, OneCopyPlacesByBytesWithTiesRoundRobin) {
  // Equal units go round-robin; a large one then holds its server back.
  absl::StatusOr<Placement> p = InitialPlacement(
      Servers(3), {{"a/0", 10}, {"a/1", 10}, {"a/2", 10}, {"b/0", 100}, {"c/0", 10}, {"c/1", 10}},
      1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->epoch(), 1);
  std::vector<int32_t> primaries;
  for (const PlacedUnit& u : p->units()) primaries.push_back(u.copies(0).server());
  EXPECT_EQ(primaries, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_TRUE(ValidatePlacement(*p).ok());
}

TEST(PlacementTest, CopiesAreOnDistinctServersAndBalancedPrimariesToo) {
  for (int servers : {2, 3, 5}) {
    for (int replication = 1; replication <= std::min(servers, 3); ++replication) {
      absl::StatusOr<Placement> p = InitialPlacement(Servers(servers), Units(30), replication);
      ASSERT_TRUE(p.ok()) << p.status();
      for (const PlacedUnit& u : p->units()) {
        std::vector<int32_t> holders = Holders(u);
        EXPECT_EQ(static_cast<int>(std::set<int32_t>(holders.begin(), holders.end()).size()),
                  replication);
      }
      for (bool primaries : {true, false}) {
        std::map<int32_t, int64_t> bytes = Bytes(*p, primaries);
        int64_t lo = INT64_MAX, hi = 0;
        for (const auto& [id, b] : bytes) lo = std::min(lo, b), hi = std::max(hi, b);
        EXPECT_LE(hi - lo, 1000) << servers << " servers, R=" << replication;
      }
    }
  }
}

TEST(PlacementTest, CopiesGoToDistinctZonesWhileThereAreEnough) {
  absl::StatusOr<Placement> p = InitialPlacement(Servers(4, {"a", "a", "b", "b"}), Units(8), 2);
  ASSERT_TRUE(p.ok()) << p.status();
  std::map<int32_t, std::string> zone;
  for (const PlacedServer& s : p->servers()) zone[s.id()] = s.zone();
  for (const PlacedUnit& u : p->units()) {
    EXPECT_NE(zone[u.copies(0).server()], zone[u.copies(1).server()]) << u.key();
  }
  // Three copies over two zones: zones repeat rather than copies go missing.
  p = InitialPlacement(Servers(4, {"a", "a", "b", "b"}), Units(8), 3);
  ASSERT_TRUE(p.ok()) << p.status();
  for (const PlacedUnit& u : p->units()) EXPECT_EQ(u.copies_size(), 3);
}

TEST(PlacementTest, BadArgumentsAreRefusedByName) {
  EXPECT_THAT(InitialPlacement(Servers(2), Units(3), 3).status().message(),
              HasSubstr("replication 3 needs between 1 and 2 server(s)"));
  EXPECT_THAT(InitialPlacement(Servers(2), {{"w/0", 1}, {"w/0", 1}}, 1).status().message(),
              HasSubstr("unit 'w/0' is empty or listed twice"));
  std::vector<PlacementServer> twice = Servers(2);
  twice[1].address = twice[0].address;
  EXPECT_THAT(InitialPlacement(twice, Units(1), 1).status().message(), HasSubstr("listed twice"));
  Placement p = *InitialPlacement(Servers(2), Units(1), 2);
  p.mutable_units(0)->mutable_copies(0)->set_catching_up(true);
  EXPECT_THAT(ValidatePlacement(p).message(), HasSubstr("no ready primary"));
  p = *InitialPlacement(Servers(2), Units(1), 2);
  p.mutable_units(0)->mutable_copies(1)->set_replaces(p.units(0).copies(0).server());
  EXPECT_THAT(ValidatePlacement(p).message(), HasSubstr("only a catching-up copy may do"));
  EXPECT_EQ(WithoutServer(p, 7).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Draining(p, 7).status().code(), absl::StatusCode::kNotFound);
}

TEST(PlacementTest, ALostServersBackupsArePromotedAndOnlyItsUnitsChange) {
  const Placement before = *InitialPlacement(Servers(3), Units(12), 2);
  absl::StatusOr<Placement> after = WithoutServer(before, 1);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->epoch(), before.epoch() + 1);
  EXPECT_EQ(after->servers_size(), 2);
  for (int i = 0; i < before.units_size(); ++i) {
    const std::vector<int32_t> was = Holders(before.units(i));
    const std::vector<int32_t> now = Holders(after->units(i));
    if (was[0] == 1) {
      EXPECT_EQ(now, std::vector<int32_t>{was[1]});  // the backup is the primary
    } else if (was[1] == 1) {
      EXPECT_EQ(now, std::vector<int32_t>{was[0]});  // the primary stays
    } else {
      EXPECT_EQ(now, was);  // untouched
    }
  }
  EXPECT_TRUE(ValidatePlacement(*after).ok());

  // Then the missing copies are made on the survivors, spread evenly.
  const Placement repaired = Repaired(*after);
  EXPECT_EQ(repaired.epoch(), after->epoch() + 1);
  for (const PlacedUnit& u : repaired.units()) {
    ASSERT_EQ(u.copies_size(), 2) << u.key();
    EXPECT_FALSE(u.copies(0).catching_up());
    EXPECT_NE(u.copies(0).server(), u.copies(1).server());
  }
  EXPECT_EQ(Repaired(repaired).epoch(), repaired.epoch());  // nothing more to do
  std::map<int32_t, int64_t> bytes = Bytes(AllCaughtUp(repaired), false);
  EXPECT_EQ(bytes[0], bytes[2]);
}

TEST(PlacementTest, LosingTheOnlyReadyCopyIsDataLossAndChangesNothing) {
  const Placement one = *InitialPlacement(Servers(2), Units(4), 1);
  absl::StatusOr<Placement> lost = WithoutServer(one, 0);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(lost.status().message(), HasSubstr("2 unit(s): w/0, w/2"));
  // A copy still catching up is no copy to promote.
  Placement two = Repaired(*WithoutServer(*InitialPlacement(Servers(3), Units(3), 2), 2));
  const PlacedUnit& unit = two.units(2);  // was on servers 2 and 0
  ASSERT_TRUE(unit.copies(1).catching_up());
  EXPECT_EQ(WithoutServer(two, unit.copies(0).server()).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(PlacementTest, AnAddedServerTakesItsShareAndOnlyWhatMovesToItChanges) {
  const Placement before = *InitialPlacement(Servers(2), Units(12), 2);
  absl::StatusOr<Placement> added = WithServer(before, {"10.0.0.9:2222", ""});
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->servers(2).id(), 2);
  EXPECT_TRUE(ValidatePlacement(*added).ok()) << ValidatePlacement(*added);
  int moved = 0;
  for (int i = 0; i < before.units_size(); ++i) {
    const PlacedUnit& now = added->units(i);
    if (now.copies_size() == 2) {
      EXPECT_EQ(Holders(now), Holders(before.units(i)));
      continue;
    }
    ++moved;
    ASSERT_EQ(now.copies_size(), 3);
    EXPECT_EQ(now.copies(2).server(), 2);
    EXPECT_TRUE(now.copies(2).catching_up() && now.copies(2).has_replaces());
  }
  EXPECT_EQ(moved, 8);  // 24 copies over 3 servers: 8 each
  const Placement after = AllCaughtUp(*added);
  for (const auto& [id, bytes] : Bytes(after, false)) EXPECT_EQ(bytes, 8000) << id;
  for (const PlacedUnit& u : after.units()) EXPECT_EQ(u.copies_size(), 2);
  EXPECT_THAT(WithServer(after, {"10.0.0.9:2222", ""}).status().message(),
              HasSubstr("already, as id 2"));
}

// A server restarted after it was lost rejoins holding nothing, then
// takes the copies the table lacks: no primary moves.
TEST(PlacementTest, ARejoiningServerTakesTheLostCopiesAndNoPrimaryMoves) {
  const Placement lost = *WithoutServer(*InitialPlacement(Servers(3), Units(9), 2), 2);
  absl::StatusOr<Placement> joined = WithServer(lost, {"10.0.0.2:2222", ""}, /*balance=*/false);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->servers(2).id(), 3);
  for (int i = 0; i < lost.units_size(); ++i)
    EXPECT_EQ(Holders(joined->units(i)), Holders(lost.units(i)));
  const Placement repaired = Repaired(*joined);
  int on_it = 0;
  for (int i = 0; i < lost.units_size(); ++i) {
    const PlacedUnit& unit = repaired.units(i);
    EXPECT_EQ(unit.copies(0).server(), lost.units(i).copies(0).server()) << unit.key();
    ASSERT_EQ(unit.copies_size(), 2) << unit.key();
    if (unit.copies(1).server() == 3) {
      EXPECT_TRUE(unit.copies(1).catching_up());
      ++on_it;
    }
  }
  EXPECT_EQ(on_it, 6);  // every copy server 2 held, remade on it
}

// A server that joined holding nothing (as a ps_server with --etcd does)
// is given its share later (fulcrumctl add-server): the same moves as a
// server added balanced, and a second call moves nothing more.
TEST(PlacementTest, AServerThatJoinedEmptyIsBalancedLikeOneAddedBalanced) {
  const Placement before = *InitialPlacement(Servers(2), Units(12), 2);
  const Placement empty = *WithServer(before, {"10.0.0.9:2222", ""}, /*balance=*/false);
  absl::StatusOr<Placement> balanced = Balanced(empty, 2);
  ASSERT_TRUE(balanced.ok()) << balanced.status();
  EXPECT_EQ(balanced->epoch(), empty.epoch() + 1);
  const Placement added = *WithServer(before, {"10.0.0.9:2222", ""});
  for (int i = 0; i < added.units_size(); ++i) {
    EXPECT_EQ(Holders(balanced->units(i)), Holders(added.units(i))) << added.units(i).key();
  }
  const Placement after = AllCaughtUp(*balanced);
  EXPECT_EQ(Balanced(after, 2)->epoch(), after.epoch());  // nothing left to move
  int catching_up = 0;
  for (const PlacedUnit& u : balanced->units()) {
    for (const PlacedCopy& c : u.copies()) catching_up += c.catching_up() ? 1 : 0;
  }
  EXPECT_GT(catching_up, 0);
  EXPECT_EQ(CopiesMoving(*balanced, "10.0.0.9:2222", /*off=*/false), catching_up);
  EXPECT_EQ(CopiesMoving(after, "10.0.0.9:2222", /*off=*/false), 0);
  EXPECT_EQ(CopiesMoving(*balanced, "10.0.0.5:2222", /*off=*/false), -1);
  EXPECT_EQ(Balanced(after, 7).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Balanced(*Draining(after, 2), 1).status().code(), absl::StatusCode::kOk);
  EXPECT_THAT(Balanced(*Draining(after, 2), 2).status().message(), HasSubstr("draining"));
}

TEST(PlacementTest, ADrainedServerHandsOverItsCopiesThenLeaves) {
  const Placement before = *InitialPlacement(Servers(3), Units(9), 2);
  absl::StatusOr<Placement> draining = Draining(before, 0);
  ASSERT_TRUE(draining.ok()) << draining.status();
  EXPECT_TRUE(draining->servers(0).draining());
  // Until the new copies have caught up, server 0 keeps its own, and each
  // has a catching-up copy to replace it.
  for (int i = 0; i < before.units_size(); ++i) {
    const std::vector<int32_t> was = Holders(before.units(i));
    if (std::find(was.begin(), was.end(), 0) == was.end()) continue;
    const PlacedUnit& u = draining->units(i);
    ASSERT_EQ(u.copies_size(), 3);
    EXPECT_EQ(Holders(u)[0], was[0]);
    EXPECT_TRUE(u.copies(2).catching_up() && u.copies(2).replaces() == 0);
  }
  EXPECT_EQ(CopiesMoving(*draining, "10.0.0.0:2222", /*off=*/true), 6);  // 9 units x 2 / 3
  EXPECT_EQ(CopiesMoving(*draining, "10.0.0.0:2222", /*off=*/false), 0);
  const Placement after = AllCaughtUp(*draining);
  ASSERT_EQ(after.servers_size(), 2);
  for (const PlacedUnit& u : after.units()) {
    EXPECT_EQ(u.copies_size(), 2);
    EXPECT_NE(u.copies(0).server(), 0);
    EXPECT_NE(u.copies(1).server(), 0);
  }
  // With two servers and two copies each, neither may leave.
  const Placement full = *InitialPlacement(Servers(2), Units(2), 2);
  EXPECT_THAT(Draining(full, 1).status().message(), HasSubstr("no other server may take"));
}

TEST(PlacementTest, CaughtUpOnlyForACatchingUpCopy) {
  const Placement p = *InitialPlacement(Servers(2), Units(1), 2);
  EXPECT_EQ(CaughtUp(p, "w/0", 0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CaughtUp(p, "w/9", 0).status().code(), absl::StatusCode::kNotFound);
}

TEST(WithUnitsTest, AddsTheUnitsItLacksOnTheSameAddresses) {
  absl::StatusOr<Placement> first = InitialPlacement(Servers(3), Units(2), 2);
  ASSERT_TRUE(first.ok()) << first.status();
  // The first table is the chief's own.
  absl::StatusOr<Placement> same = WithUnits(Placement(), *first);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->SerializeAsString(), first->SerializeAsString());
  // Server 0 lost since: the cluster's ids are no longer the chief's.
  absl::StatusOr<Placement> cluster = WithoutServer(*first, 0);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<PlacementServer> two = Servers(3);
  two.erase(two.begin());
  std::vector<PlacementUnitSpec> later = Units(2);
  later.push_back({"b/0", 10});
  absl::StatusOr<Placement> added = InitialPlacement(two, later, 2);
  ASSERT_TRUE(added.ok()) << added.status();
  absl::StatusOr<Placement> merged = WithUnits(*cluster, *added);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->epoch(), cluster->epoch() + 1);
  ASSERT_EQ(merged->units_size(), 3);
  // The units the cluster had are left as they are; the new one is on the
  // servers of the chief's addresses (ids 1 and 2 in the cluster's table).
  EXPECT_EQ(merged->units(0).SerializeAsString(), cluster->units(0).SerializeAsString());
  EXPECT_EQ(merged->units(2).key(), "b/0");
  std::vector<int32_t> holders = Holders(merged->units(2));
  std::sort(holders.begin(), holders.end());
  EXPECT_EQ(holders, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(ValidatePlacement(*merged).ok());
  // Nothing new: the same table.
  absl::StatusOr<Placement> again = WithUnits(*merged, *added);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->epoch(), merged->epoch());
  // A copy on a server the cluster lost is refused, naming it.
  absl::StatusOr<Placement> stale = WithUnits(*cluster, *InitialPlacement(Servers(3), later, 2));
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.status().message(), HasSubstr("10.0.0.0:2222"));
}

}  // namespace
}  // namespace fulcrum
