// Re-forming an all-reduce group after a member is lost: where TensorFlow's
// MultiWorkerMirroredStrategy fails the whole job, the live members agree
// on a new membership and go on.
//
// Every live member calls Regroup once its collective failed. It moves to a
// new round (PeerLinks::tag), which drops what the failed collective left in
// flight, and tells every member so (an empty message): a member still
// waiting in the old round sees its peer moved on and fails at once, so the
// whole group regroups within moments of the first failure. The leader is
// the lowest rank not known to be gone; the others send it their state
// (steps completed, latest epoch dealt) and wait for its decision. The
// leader takes every member it hears from by the deadline and decides:
//
// - the members, if they are a quorum of the old group (more than half,
//   or exactly half with its lowest rank), so that a partition cannot leave
//   two groups training apart; without one, FAILED_PRECONDITION;
// - the step the group goes on from: the furthest member's (members
//   differ by at most one: a step completes nowhere before every member has
//   begun it), and the member whose state the others take;
// - the first epoch dealt over the new members: one that no member has
//   dealt yet, so every member deals each epoch over the same members.
//
// A leader that does not answer is suspected and the next lowest tried, in
// a later round; a member the leader did not hear from is left out and
// told so when it asks.
//
// Rejoining: a worker that restarted (or was left out and asks again)
// opens new links to every rank (PeerLinks::Reconnect). The leader sees
// that before its next collective and regroups with the joiner among the
// candidates: it reconnects to the joiner and sends it the new round's
// notice; the joiner answers with a report that says it has no state
// (JoinGroup). Joiners become members, but only the old members count
// for the quorum, the furthest step and the epochs dealt; every member
// reconnects to the joiners.
#ifndef FULCRUM_WORKER_COLLECTIVE_REGROUP_H_
#define FULCRUM_WORKER_COLLECTIVE_REGROUP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/collective/peer_links.h"

namespace fulcrum {

// What a member brings to a regrouping.
struct MemberState {
  int64_t completed = 0;    // collective steps it completed
  int64_t dealt_epoch = 0;  // the latest epoch whose data it dealt
  bool joining = false;     // it has no state yet: it asks to (re)join
};

struct Regrouping {
  std::vector<int> members;  // ranks of the links, ascending
  int64_t completed = 0;     // the furthest member's completed steps
  int source = 0;            // the lowest member that completed them: its state is taken
  int64_t first_epoch = 0;   // the first epoch dealt over `members`
  std::vector<int> joiners;  // the members admitted now, ascending
};

// Called by each live member of `current` (ranks of `links`, ascending,
// this rank among them) after a collective among them failed, or by the
// leader when ranks asked to join (`joiners`: those that reconnected to it,
// members or not; the others pass none). `timeout` bounds each wait: the
// leader's for the others' states, a member's for the leader's decision
// (twice as long).
absl::StatusOr<Regrouping> Regroup(PeerLinks& links, const std::vector<int>& current,
                                   const std::vector<int>& joiners, const MemberState& mine,
                                   absl::Duration timeout);

// Called by a joiner that got a notice of round `round` from `leader`
// (PeerLinks::AwaitRound): reports to it as a joiner and takes its
// decision. FAILED_PRECONDITION when the leader left it out; ABORTED as
// soon as any rank is in a later round (the notice may have come from a
// member, not the leader: look for the later round's).
absl::StatusOr<Regrouping> JoinGroup(PeerLinks& links, int leader, uint64_t round,
                                     absl::Duration timeout);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_REGROUP_H_
