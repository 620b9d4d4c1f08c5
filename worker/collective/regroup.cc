#include "worker/collective/regroup.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace fulcrum {
namespace {

bool IsQuorum(const std::vector<int>& members, const std::vector<int>& current) {
  const size_t twice = 2 * members.size();
  return twice > current.size() || (twice == current.size() && members.front() == current.front());
}

// A member's report: its completed steps, its latest epoch dealt, and
// whether it is joining.
constexpr size_t kReportFloats = 5;

// The leader: hears the candidates and joiners by the deadline and sends
// its decision. ABORTED when a member has moved to a later round.
absl::StatusOr<Regrouping> Lead(PeerLinks& links, const std::vector<int>& heard,
                                const std::vector<int>& current, const MemberState& mine,
                                absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  Regrouping decision;
  std::vector<int> old_members = {links.rank()};
  int64_t dealt = mine.dealt_epoch;
  std::vector<std::pair<int, int64_t>> completed = {{links.rank(), mine.completed}};
  for (int peer : heard) {
    if (peer == links.rank()) continue;
    auto received = links.Recv(peer, deadline);
    if (!received.ok()) {
      if (received.status().code() == absl::StatusCode::kAborted) return received.status();
      LOG_WARN("regroup: leaving rank {} out: {}", peer, received.status().message());
      continue;
    }
    const MessageFloats report = std::move(*received).Take();
    if (report.size() != kReportFloats) {
      return absl::InternalError(
          absl::StrCat("regroup: rank ", peer, " sent ", report.size(), " floats, not a state"));
    }
    if (report[4] != 0.0f) {
      decision.joiners.push_back(peer);
      continue;
    }
    old_members.push_back(peer);
    completed.emplace_back(peer, static_cast<int64_t>(GetBits(report.data())));
    dealt = std::max(dealt, static_cast<int64_t>(GetBits(report.data() + 2)));
  }
  std::sort(old_members.begin(), old_members.end());
  if (!IsQuorum(old_members, current)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "regroup: only ranks ", absl::StrJoin(old_members, ", "), " of ",
        absl::StrJoin(current, ", "),
        " are left, not a quorum (more than half, or half with the lowest rank): stopping, so "
        "that two parts of a partitioned group cannot train apart"));
  }
  std::sort(decision.joiners.begin(), decision.joiners.end());
  decision.members = old_members;
  decision.members.insert(decision.members.end(), decision.joiners.begin(), decision.joiners.end());
  std::sort(decision.members.begin(), decision.members.end());
  for (const auto& [rank, steps] : completed) {
    decision.completed = std::max(decision.completed, steps);
  }
  decision.source = links.size();
  for (const auto& [rank, steps] : completed) {
    if (steps == decision.completed) decision.source = std::min(decision.source, rank);
  }
  decision.first_epoch = dealt + 1;
  std::vector<float> message(6);
  PutBits(static_cast<uint64_t>(decision.completed), message.data());
  PutBits(static_cast<uint64_t>(decision.first_epoch), message.data() + 2);
  message[4] = static_cast<float>(decision.source);
  message[5] = static_cast<float>(decision.members.size());
  message.insert(message.end(), decision.members.begin(), decision.members.end());
  message.insert(message.end(), decision.joiners.begin(), decision.joiners.end());
  for (int peer : decision.members) {
    // A member that cannot be told fails the next collective: another round.
    if (peer != links.rank()) links.Send(peer, message).IgnoreError();
  }
  return decision;
}

// The leader's next message of this round, by `deadline`. ABORTED as soon
// as any rank is in a later round: the round is over. (A joiner can also
// have been invited by a rank that leads nothing: a member's notice can
// reach it on a stream opened to its previous process, which the new one
// took over.)
absl::StatusOr<MessageFloats> AwaitLeader(PeerLinks& links, int leader, absl::Time deadline) {
  for (;;) {
    const absl::Time until = std::min(deadline, absl::Now() + absl::Milliseconds(50));
    auto message = links.Recv(leader, until);
    if (message.ok()) return std::move(*message).Take();
    if (message.status().code() != absl::StatusCode::kDeadlineExceeded || until == deadline) {
      return message.status();
    }
    if (links.NewestTag() > links.tag()) {
      return absl::AbortedError(absl::StrCat("rank ", links.rank(), ": a rank moved on to round ",
                                             links.NewestTag(), " while rank ", leader,
                                             " had not decided round ", links.tag()));
    }
  }
}

// A member or joiner: sends its state to the leader and takes its decision.
absl::StatusOr<Regrouping> Follow(PeerLinks& links, int leader, const MemberState& mine,
                                  absl::Duration timeout) {
  float report[kReportFloats];
  PutBits(static_cast<uint64_t>(mine.completed), report);
  PutBits(static_cast<uint64_t>(mine.dealt_epoch), report + 2);
  report[4] = mine.joining ? 1.0f : 0.0f;
  if (absl::Status s = links.Send(leader, report); !s.ok()) return s;
  auto message = AwaitLeader(links, leader, absl::Now() + 2 * timeout);
  if (!message.ok()) return message.status();
  if (message->size() < 6 || message->size() < 6 + static_cast<size_t>((*message)[5])) {
    return absl::InternalError(absl::StrCat("regroup: rank ", leader, " sent ", message->size(),
                                            " floats, not a decision"));
  }
  Regrouping decision;
  decision.completed = static_cast<int64_t>(GetBits(message->data()));
  decision.first_epoch = static_cast<int64_t>(GetBits(message->data() + 2));
  decision.source = static_cast<int>((*message)[4]);
  const size_t joiners = 6 + static_cast<size_t>((*message)[5]);
  for (size_t i = 6; i < message->size(); ++i) {
    (i < joiners ? decision.members : decision.joiners).push_back(static_cast<int>((*message)[i]));
  }
  if (!std::binary_search(decision.members.begin(), decision.members.end(), links.rank())) {
    return absl::FailedPreconditionError(
        absl::StrCat("regroup: rank ", leader, " re-formed the group as ranks ",
                     absl::StrJoin(decision.members, ", "), " without this one (rank ",
                     links.rank(), "), which it did not hear from in time"));
  }
  // The joiners' old links are gone (the leader has reconnected already).
  for (int joiner : decision.joiners) {
    if (joiner != links.rank()) links.Reconnect(joiner).IgnoreError();
  }
  return decision;
}

void LogDecision(uint64_t round, int leader, const Regrouping& decision) {
  LOG_WARN("regroup (round {}): the group is now ranks {} (leader {}), from step {}{}", round,
           absl::StrJoin(decision.members, ", "), leader, decision.completed,
           decision.joiners.empty()
               ? std::string()
               : absl::StrCat("; rank(s) ", absl::StrJoin(decision.joiners, ", "), " joined"));
}

}  // namespace

absl::StatusOr<Regrouping> Regroup(PeerLinks& links, const std::vector<int>& current,
                                   const std::vector<int>& joiners, const MemberState& mine,
                                   absl::Duration timeout) {
  std::set<int> suspects;
  for (;;) {
    const uint64_t round = std::max(links.tag() + 1, links.NewestTag());
    links.SetTag(round);
    std::vector<int> candidates;
    for (int peer : current) {
      if (!suspects.count(peer)) candidates.push_back(peer);
    }
    const int leader = candidates.front();  // this rank is never suspected
    // Everyone hears of the new round; the leader hears the candidates
    // and, reconnected to them, the joiners.
    std::set<int> told(current.begin(), current.end());
    std::set<int> heard(candidates.begin(), candidates.end());
    if (leader == links.rank()) {
      for (int joiner : joiners) {
        if (joiner == links.rank() || !links.Reconnect(joiner).ok()) continue;
        told.insert(joiner);
        heard.insert(joiner);
      }
    }
    for (int peer : told) {
      if (peer != links.rank()) links.Send(peer, {}).IgnoreError();  // the dead cannot hear it
    }
    absl::StatusOr<Regrouping> decision =
        leader == links.rank()
            ? Lead(links, std::vector<int>(heard.begin(), heard.end()), current, mine, timeout)
            : Follow(links, leader, mine, timeout);
    if (decision.ok()) {
      LogDecision(round, leader, *decision);
      return decision;
    }
    switch (decision.status().code()) {
      case absl::StatusCode::kAborted:  // a member is in a later round: join it
        break;
      case absl::StatusCode::kDeadlineExceeded:
      case absl::StatusCode::kUnavailable:
        if (leader == links.rank()) return decision.status();
        LOG_WARN("regroup (round {}): no decision from rank {} ({}); trying the next", round,
                 leader, decision.status().message());
        suspects.insert(leader);
        break;
      default:
        return decision.status();
    }
  }
}

absl::StatusOr<Regrouping> JoinGroup(PeerLinks& links, int leader, uint64_t round,
                                     absl::Duration timeout) {
  links.SetTag(round);
  MemberState mine;
  mine.joining = true;
  auto decision = Follow(links, leader, mine, timeout);
  if (decision.ok()) LogDecision(round, leader, *decision);
  return decision;
}

}  // namespace fulcrum
