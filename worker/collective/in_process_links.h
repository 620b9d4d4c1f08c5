// PeerLinks between threads of one process, for tests: one Mailbox holds
// every rank's queues; each rank takes its own InProcessLinks. A rank that
// "restarts" takes new InProcessLinks after the old ones Die().
#ifndef FULCRUM_WORKER_COLLECTIVE_IN_PROCESS_LINKS_H_
#define FULCRUM_WORKER_COLLECTIVE_IN_PROCESS_LINKS_H_

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/collective/mailbox.h"
#include "worker/collective/peer_links.h"

namespace fulcrum {

class InProcessLinks final : public MailboxLinks {
 public:
  // Opens a stream to every peer, as a process starting does.
  InProcessLinks(Mailbox* mailbox, int rank)
      : MailboxLinks(mailbox, rank), mailbox_(mailbox), streams_(mailbox->size()) {
    for (int peer = 0; peer < mailbox->size(); ++peer) Reconnect(peer).IgnoreError();
  }

  absl::Status SendMessage(int peer, Message message) override {
    if (dead_) return absl::UnavailableError(absl::StrCat("rank ", rank(), " died"));
    mailbox_->Put(rank(), peer, streams_[peer], tag(), std::move(message));
    if (sends_left_ > 0 && --sends_left_ == 0) Die();
    return absl::OkStatus();
  }

  absl::Status Reconnect(int peer) override {
    if (peer != rank()) streams_[peer] = mailbox_->Open(rank(), peer);
    return absl::OkStatus();
  }

  // Dies (as Die) once it has sent `sends` more messages: mid-collective.
  void DieAfterSends(int sends) { sends_left_ = sends; }

  // As a process killed: its streams break, and what was sent to it is
  // lost; it sends nothing more.
  void Die() {
    dead_ = true;
    for (int peer = 0; peer < mailbox_->size(); ++peer) {
      if (peer == rank()) continue;
      mailbox_->Break(rank(), peer, streams_[peer],
                      absl::UnavailableError(absl::StrCat("rank ", rank(), " died")));
    }
    mailbox_->Forget(rank());
  }

 private:
  Mailbox* const mailbox_;
  std::vector<uint64_t> streams_;  // by peer
  int sends_left_ = 0;
  bool dead_ = false;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_IN_PROCESS_LINKS_H_
