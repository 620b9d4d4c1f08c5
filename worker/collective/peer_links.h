// What a collective needs of the network: ordered, buffered float messages
// between the ranks of one group, each sent in a round (a tag): a group
// that re-forms after a failure moves to a later round, so that what was
// sent in the failed one is dropped, and a rank that waits on a peer that
// has moved on learns it at once. Implementations: in-process (tests) and,
// for the all-reduce strategies, gRPC streams between workers.
#ifndef FULCRUM_WORKER_COLLECTIVE_PEER_LINKS_H_
#define FULCRUM_WORKER_COLLECTIVE_PEER_LINKS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/collective/mailbox.h"
#include "worker/collective/message.h"

namespace fulcrum {

class PeerLinks {
 public:
  virtual ~PeerLinks() = default;

  // This process's rank in [0, size()), and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Queues `message`, in the current round, for `peer` and returns
  // without waiting for the peer to receive it: floats it owns, or ones as
  // they were received (what a collective passes on), which a transport
  // that can sends from where they were received, without a copy.
  // Messages from one rank to another arrive in the order sent. An empty
  // message is a notice, never received: the peer learns this rank is in
  // this round. UNAVAILABLE naming the peer when the link is broken.
  virtual absl::Status SendMessage(int peer, Message message) = 0;

  // SendMessage of a copy of `data`.
  absl::Status Send(int peer, absl::Span<const float> data) {
    return SendOwned(peer, MessageFloats(data.begin(), data.end()));
  }
  // SendMessage of floats the caller gives up (what a collective summed
  // into), not a copy of them.
  absl::Status SendOwned(int peer, MessageFloats data) {
    return SendMessage(peer, Message(std::move(data)));
  }

  // The next message of the current round from `peer`, as sent; those of
  // earlier rounds are dropped. ABORTED naming the peer when it has moved on
  // to a later round; DEADLINE_EXCEEDED naming it when none comes by
  // `deadline`; UNAVAILABLE when the link is broken.
  virtual absl::StatusOr<Message> Recv(int peer, absl::Time deadline) = 0;

  // The round this rank sends and receives in (0 at first), and the latest
  // round of any message it received.
  virtual uint64_t tag() const = 0;
  virtual void SetTag(uint64_t tag) = 0;
  virtual uint64_t NewestTag() const = 0;

  // Rejoining a group (worker/collective/regroup.h). A group whose links
  // never change (one rank, a subgroup) has none of this.
  //
  // Opens a new link to `peer`, dropping the old one and what it still
  // held: how a rank asks to rejoin, and how a group's members reach one
  // that restarted.
  virtual absl::Status Reconnect(int peer) { return absl::OkStatus(); }
  // The ranks that opened a new link to this one since the last call.
  virtual std::vector<int> TakeReconnected() { return {}; }
  // Waits for a message of a round after tag() from any rank (a running
  // group's invitation), or for what a new group's start needs: a
  // non-empty message of round tag() from `root` (-1: none), or, when
  // `root` is this rank, a link from every other rank. The message's
  // sender and round, else {rank(), tag()}. DEADLINE_EXCEEDED when none of
  // that comes by `deadline`.
  virtual absl::StatusOr<std::pair<int, uint64_t>> AwaitRound(int root, absl::Time deadline) {
    return std::pair<int, uint64_t>{rank(), tag()};  // no one else to wait for
  }
};

// Integers travel in float messages by their bits: two floats each.
inline void PutBits(uint64_t value, float* out) { std::memcpy(out, &value, sizeof(value)); }
inline uint64_t GetBits(const float* in) {
  uint64_t value = 0;
  std::memcpy(&value, in, sizeof(value));
  return value;
}

// PeerLinks over one process's Mailbox (every rank's, or what one rank's
// incoming streams deliver), this rank's round kept here.
class MailboxLinks : public PeerLinks {
 public:
  MailboxLinks(Mailbox* inbox, int rank) : inbox_(inbox), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return inbox_->size(); }
  absl::StatusOr<Message> Recv(int peer, absl::Time deadline) override {
    return inbox_->Take(peer, rank_, tag(), deadline);
  }
  uint64_t tag() const override { return tag_.load(); }
  void SetTag(uint64_t tag) override { tag_ = tag; }
  uint64_t NewestTag() const override { return inbox_->NewestTag(rank_); }
  std::vector<int> TakeReconnected() override { return inbox_->TakeReconnected(rank_); }
  absl::StatusOr<std::pair<int, uint64_t>> AwaitRound(int root, absl::Time deadline) override {
    return inbox_->AwaitRound(rank_, root, tag(), deadline);
  }

 private:
  Mailbox* const inbox_;
  const int rank_;
  std::atomic<uint64_t> tag_{0};
};

// The links of a group of one (MirroredStrategy: one worker), which has
// no peer to send to or receive from.
class SoloLinks final : public PeerLinks {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::Status SendMessage(int peer, Message) override { return NoPeer(peer); }
  absl::StatusOr<Message> Recv(int peer, absl::Time) override { return NoPeer(peer); }
  uint64_t tag() const override { return 0; }
  void SetTag(uint64_t) override {}
  uint64_t NewestTag() const override { return 0; }

 private:
  static absl::Status NoPeer(int peer) {
    return absl::FailedPreconditionError(
        absl::StrCat("a group of one has no rank ", peer, " to talk to"));
  }
};

// Some ranks of `base`, renumbered 0.. in the order given: the group a
// collective runs in once others are gone. `base` outlives it and its
// round is theirs.
class SubgroupLinks final : public PeerLinks {
 public:
  // `members`: ranks of `base`, this one among them.
  SubgroupLinks(PeerLinks* base, std::vector<int> members)
      : base_(base), members_(std::move(members)) {
    rank_ = static_cast<int>(std::find(members_.begin(), members_.end(), base_->rank()) -
                             members_.begin());
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  absl::Status SendMessage(int peer, Message message) override {
    return base_->SendMessage(members_[peer], std::move(message));
  }
  absl::StatusOr<Message> Recv(int peer, absl::Time deadline) override {
    return base_->Recv(members_[peer], deadline);
  }
  uint64_t tag() const override { return base_->tag(); }
  void SetTag(uint64_t tag) override { base_->SetTag(tag); }
  uint64_t NewestTag() const override { return base_->NewestTag(); }

 private:
  PeerLinks* const base_;
  const std::vector<int> members_;
  int rank_ = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_PEER_LINKS_H_
