// What a collective needs of the network: ordered, buffered float messages
// between the ranks of one group. Implementations: in-process (tests) and,
// for the all-reduce strategies, gRPC streams between workers.
#ifndef FULCRUM_WORKER_COLLECTIVE_PEER_LINKS_H_
#define FULCRUM_WORKER_COLLECTIVE_PEER_LINKS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace fulcrum {

class PeerLinks {
 public:
  virtual ~PeerLinks() = default;

  // This process's rank in [0, size()), and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Queues a copy of `data` for `peer` and returns without waiting for the
  // peer to receive it. Messages from one rank to another arrive in the
  // order sent. UNAVAILABLE naming the peer when the link is broken.
  virtual absl::Status Send(int peer, absl::Span<const float> data) = 0;

  // The next message from `peer`, as sent. DEADLINE_EXCEEDED naming the
  // peer when none comes by `deadline`; UNAVAILABLE when the link is broken.
  virtual absl::StatusOr<std::vector<float>> Recv(int peer, absl::Time deadline) = 0;
};

// The links of a group of one (MirroredStrategy: one worker), which has
// no peer to send to or receive from.
class SoloLinks final : public PeerLinks {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::Status Send(int peer, absl::Span<const float>) override { return NoPeer(peer); }
  absl::StatusOr<std::vector<float>> Recv(int peer, absl::Time) override { return NoPeer(peer); }

 private:
  static absl::Status NoPeer(int peer) {
    return absl::FailedPreconditionError(
        absl::StrCat("a group of one has no rank ", peer, " to talk to"));
  }
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_PEER_LINKS_H_
