// Messages between the ranks of a group, held until taken: what a rank's
// PeerLinks receives into (the gRPC links' incoming streams, or every rank
// of the in-process links). Messages from one rank to another come on a
// stream; a rank that restarts, or reopens its links to rejoin a group,
// opens a new one. Thread-safe.
#ifndef FULCRUM_WORKER_COLLECTIVE_MAILBOX_H_
#define FULCRUM_WORKER_COLLECTIVE_MAILBOX_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/collective/message.h"

namespace fulcrum {

// Where a stream stands among its sender's streams to one peer: the
// sender (a number drawn by each links object; 0: not said) and the
// sender's count of streams it opened. A stream the sender replaced can
// reach the peer after its replacement (it waited for a connection to a
// restarted peer); the order tells it apart.
struct StreamOrder {
  uint64_t sender = 0;
  uint64_t sequence = 0;
};

class Mailbox {
 public:
  explicit Mailbox(int size) : size_(size) {}
  int size() const { return size_; }

  // A stream from `from` to `to` opened; its number, for Break. Every
  // stream after the first is a reconnection (Reconnected): what came on
  // the earlier one is dropped, and the link is whole again. 0, and
  // nothing changes, when `order` says the sender has since opened a
  // newer stream that is already open here: the stale one is to be ended.
  uint64_t Open(int from, int to, StreamOrder order = {}) ABSL_LOCKS_EXCLUDED(mu_);

  // A message sent in round `tag` (PeerLinks::tag) on stream `stream`
  // (Open's number). Dropped when a newer stream has opened since: its
  // sender replaced that stream, and what it still carried with it.
  void Put(int from, int to, uint64_t stream, uint64_t tag, Message message)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Stream `stream` from `from` to `to` is gone: once its queue is empty,
  // Take answers `why`. Ignored when a newer stream has opened since.
  void Break(int from, int to, uint64_t stream, absl::Status why) ABSL_LOCKS_EXCLUDED(mu_);

  // The next message of round `tag` from `from` to `to`; those of earlier
  // rounds are dropped, and so are empty ones (notices: the sender is in
  // this round). ABORTED naming `from` when its next message is of a
  // later round (it has moved on); DEADLINE_EXCEEDED naming it when none
  // comes by `deadline`; Break's status once broken.
  absl::StatusOr<Message> Take(int from, int to, uint64_t tag, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The latest round of any message put here to `to`.
  uint64_t NewestTag(int to) const ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until `to` holds a message of a round after `tag`, from any
  // rank, or a non-empty one of round `tag` from `root` (-1: none), or,
  // when `root` is `to`, a stream from every other rank; the sender and
  // round of such a message (a later round first), else {to, tag}.
  // DEADLINE_EXCEEDED when none of that comes by `deadline`.
  absl::StatusOr<std::pair<int, uint64_t>> AwaitRound(int to, int root, uint64_t tag,
                                                      absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // The ranks that reconnected to `to` since the last call, ascending.
  std::vector<int> TakeReconnected(int to) ABSL_LOCKS_EXCLUDED(mu_);

  // Drops everything queued to `to`: a rank that restarts in the same
  // process (tests) starts with an empty inbox, as a new process does.
  void Forget(int to) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Queued {
    uint64_t tag;
    Message data;
  };
  struct Queue {
    std::deque<Queued> messages;
    absl::Status broken;
    uint64_t streams = 0;  // opened so far; the newest is the live one
    StreamOrder order;     // the live one's
  };

  const int size_;
  mutable absl::Mutex mu_;
  std::map<std::pair<int, int>, Queue> queues_ ABSL_GUARDED_BY(mu_);
  std::map<int, uint64_t> newest_tag_ ABSL_GUARDED_BY(mu_);        // by receiver
  std::map<int, std::set<int>> reconnected_ ABSL_GUARDED_BY(mu_);  // by receiver
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_MAILBOX_H_
