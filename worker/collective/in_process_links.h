// PeerLinks between threads of one process, for tests: one Mailbox holds
// every rank's queues; each rank takes its own InProcessLinks.
#ifndef FULCRUM_WORKER_COLLECTIVE_IN_PROCESS_LINKS_H_
#define FULCRUM_WORKER_COLLECTIVE_IN_PROCESS_LINKS_H_

#include <vector>

#include "worker/collective/mailbox.h"
#include "worker/collective/peer_links.h"

namespace fulcrum {

class InProcessLinks final : public MailboxLinks {
 public:
  InProcessLinks(Mailbox* mailbox, int rank) : MailboxLinks(mailbox, rank), mailbox_(mailbox) {}

  absl::Status Send(int peer, absl::Span<const float> data) override {
    mailbox_->Put(rank(), peer, tag(), std::vector<float>(data.begin(), data.end()));
    return absl::OkStatus();
  }

 private:
  Mailbox* const mailbox_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_IN_PROCESS_LINKS_H_
