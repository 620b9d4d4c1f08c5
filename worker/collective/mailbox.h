// Messages between the ranks of a group, held until taken: what a rank's
// PeerLinks receives into (the gRPC links' incoming streams, or every rank
// of the in-process links). Thread-safe.
#ifndef FULCRUM_WORKER_COLLECTIVE_MAILBOX_H_
#define FULCRUM_WORKER_COLLECTIVE_MAILBOX_H_

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

  void Put(int from, int to, std::vector<float> message) ABSL_LOCKS_EXCLUDED(mu_);

  // The link from `from` to `to` is gone: once its queue is empty, Take
  // answers `why`.
  void Break(int from, int to, absl::Status why) ABSL_LOCKS_EXCLUDED(mu_);

  // The next message from `from` to `to`. DEADLINE_EXCEEDED naming `from`
  // when none comes by `deadline`; Break's status once broken.
  absl::StatusOr<std::vector<float>> Take(int from, int to, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Queue {
    std::deque<std::vector<float>> messages;
    absl::Status broken;
  };

  const int size_;
  absl::Mutex mu_;
  std::map<std::pair<int, int>, Queue> queues_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_MAILBOX_H_
