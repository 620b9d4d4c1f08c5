// Messages between the ranks of a group, held until taken: what a rank's
// PeerLinks receives into (the gRPC links' incoming streams, or every rank
// of the in-process links). Thread-safe.
#ifndef FULCRUM_WORKER_COLLECTIVE_MAILBOX_H_
#define FULCRUM_WORKER_COLLECTIVE_MAILBOX_H_

#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace fulcrum {

class Mailbox {
 public:
  explicit Mailbox(int size) : size_(size) {}
  int size() const { return size_; }

  // A message sent in round `tag` (PeerLinks::tag).
  void Put(int from, int to, uint64_t tag, std::vector<float> message) ABSL_LOCKS_EXCLUDED(mu_);

  // The link from `from` to `to` is gone: once its queue is empty, Take
  // answers `why`.
  void Break(int from, int to, absl::Status why) ABSL_LOCKS_EXCLUDED(mu_);

  // The next message of round `tag` from `from` to `to`; those of earlier
  // rounds are dropped, and so are empty ones (notices: the sender is in
  // this round). ABORTED naming `from` when its next message is of a
  // later round (it has moved on); DEADLINE_EXCEEDED naming it when none
  // comes by `deadline`; Break's status once broken.
  absl::StatusOr<std::vector<float>> Take(int from, int to, uint64_t tag, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The latest round of any message put here to `to`.
  uint64_t NewestTag(int to) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Message {
    uint64_t tag;
    std::vector<float> data;
  };
  struct Queue {
    std::deque<Message> messages;
    absl::Status broken;
  };

  const int size_;
  mutable absl::Mutex mu_;
  std::map<std::pair<int, int>, Queue> queues_ ABSL_GUARDED_BY(mu_);
  std::map<int, uint64_t> newest_tag_ ABSL_GUARDED_BY(mu_);  // by receiver
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_MAILBOX_H_
