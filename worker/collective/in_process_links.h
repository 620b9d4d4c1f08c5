// PeerLinks between threads of one process, for tests: one Mailbox holds
// every rank's queues; each rank takes its own InProcessLinks.
#ifndef FULCRUM_WORKER_COLLECTIVE_IN_PROCESS_LINKS_H_
#define FULCRUM_WORKER_COLLECTIVE_IN_PROCESS_LINKS_H_

#include <vector>

#include "worker/collective/mailbox.h"
#include "worker/collective/peer_links.h"

namespace fulcrum {

class InProcessLinks final : public PeerLinks {
 public:
  InProcessLinks(Mailbox* mailbox, int rank) : mailbox_(mailbox), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return mailbox_->size(); }
  absl::Status Send(int peer, absl::Span<const float> data) override {
    mailbox_->Put(rank_, peer, std::vector<float>(data.begin(), data.end()));
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<float>> Recv(int peer, absl::Time deadline) override {
    return mailbox_->Take(peer, rank_, deadline);
  }

 private:
  Mailbox* const mailbox_;
  const int rank_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_IN_PROCESS_LINKS_H_
