// PeerLinks between threads of one process, for tests: one Mailbox holds
// every rank's queues; each rank takes its own InProcessLinks.
#ifndef FULCRUM_WORKER_COLLECTIVE_IN_PROCESS_LINKS_H_
#define FULCRUM_WORKER_COLLECTIVE_IN_PROCESS_LINKS_H_

#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "worker/collective/peer_links.h"

namespace fulcrum {

class Mailbox {
 public:
  explicit Mailbox(int size) : size_(size) {}
  int size() const { return size_; }

  void Put(int from, int to, std::vector<float> message) ABSL_LOCKS_EXCLUDED(mu_);
  // The next message from `from` to `to`, or nothing at `deadline`.
  bool Take(int from, int to, absl::Time deadline, std::vector<float>* message)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int size_;
  absl::Mutex mu_;
  std::map<std::pair<int, int>, std::deque<std::vector<float>>> queues_ ABSL_GUARDED_BY(mu_);
};

class InProcessLinks final : public PeerLinks {
 public:
  InProcessLinks(Mailbox* mailbox, int rank) : mailbox_(mailbox), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return mailbox_->size(); }
  absl::Status Send(int peer, absl::Span<const float> data) override;
  absl::Status Recv(int peer, absl::Span<float> into, absl::Time deadline) override;

 private:
  Mailbox* const mailbox_;
  const int rank_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_IN_PROCESS_LINKS_H_
