#include "worker/collective/all_reduce.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/vector_loops.h"

namespace fulcrum {
namespace {

// Elements [begin, end) of segment `s` of `length` cut into `n`: the first
// segments one element longer when n does not divide length.
struct Range {
  int64_t begin;
  int64_t end;
};
Range Segment(int64_t length, int n, int s) { return {length * s / n, length * (s + 1) / n}; }

int Mod(int a, int n) { return ((a % n) + n) % n; }

// The next message from `peer`, which must hold `count` floats (INTERNAL
// naming both counts otherwise).
absl::StatusOr<MessageFloats> RecvExactly(PeerLinks& links, int peer, size_t count,
                                          absl::Time deadline) {
  auto message = links.Recv(peer, deadline);
  if (message.ok() && message->size() != count) {
    return absl::InternalError(absl::StrCat("rank ", links.rank(), ": rank ", peer, " sent ",
                                            message->size(), " floats where ", count,
                                            " were expected"));
  }
  return message;
}

}  // namespace

namespace {

// The ring's steps over one buffer: the reduce-scatter, the all-gather, or
// both in turn, within one deadline.
class Ring {
 public:
  Ring(PeerLinks& links, absl::Span<float> buffer, const AllReduceOptions& options)
      : links_(links),
        buffer_(buffer),
        n_(links.size()),
        rank_(links.rank()),
        length_(static_cast<int64_t>(buffer.size())),
        chunk_(std::max<int64_t>(1, options.chunk_elements)),
        deadline_(absl::Now() + options.timeout) {}

  // Reduce-scatter: after step k, rank r holds the sum of k + 2 ranks in
  // segment r - k - 1; at the end, the whole sum of segment r + 1, which
  // it stores. `keep`: its last chunks are kept to start the all-gather.
  absl::Status ReduceScatter(bool keep) {
    for (int step = 0; step < n_ - 1; ++step) {
      if (absl::Status s = Exchange(Mod(rank_ - step, n_), Mod(rank_ - step - 1, n_), /*add=*/true,
                                    /*store=*/step == n_ - 2, /*keep=*/keep || step < n_ - 2);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  // All-gather: each rank's segment r + 1 goes round.
  absl::Status AllGather() {
    for (int step = 0; step < n_ - 1; ++step) {
      if (absl::Status s = Exchange(Mod(rank_ + 1 - step, n_), Mod(rank_ - step, n_),
                                    /*add=*/false, /*store=*/true, /*keep=*/step < n_ - 2);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

 private:
  // Sends segment `send` to the right and receives segment `receive` from
  // the left, chunk by chunk. `add`: this rank's part is added to what
  // arrives (reduce-scatter); `store`: what arrives (with it) goes into
  // the buffer; `keep`: it is forwarded in the next step.
  absl::Status Exchange(int send, int receive, bool add, bool store, bool keep) {
    const int right = Mod(rank_ + 1, n_);
    const int left = Mod(rank_ - 1, n_);
    const Range out = Segment(length_, n_, send);
    const Range in = Segment(length_, n_, receive);
    std::vector<MessageFloats> received;
    size_t forwarded = 0;
    for (int64_t offset = 0; offset < std::max(out.end - out.begin, in.end - in.begin);
         offset += chunk_) {
      if (out.begin + offset < out.end) {
        const int64_t count = std::min(chunk_, out.end - out.begin - offset);
        absl::Status sent = forwarded < forward_.size()
                                ? links_.SendOwned(right, std::move(forward_[forwarded++]))
                                : links_.Send(right, buffer_.subspan(out.begin + offset, count));
        if (!sent.ok()) return sent;
      }
      if (in.begin + offset < in.end) {
        const int64_t count = std::min(chunk_, in.end - in.begin - offset);
        auto message = RecvExactly(links_, left, count, deadline_);
        if (!message.ok()) return message.status();
        float* incoming = message->data();
        float* own = buffer_.data() + in.begin + offset;
        if (add) AddInto(incoming, own, count);
        if (store) std::copy(incoming, incoming + count, own);
        if (keep) received.push_back(*std::move(message));
      }
    }
    forward_ = std::move(received);
    return absl::OkStatus();
  }

  PeerLinks& links_;
  const absl::Span<float> buffer_;
  const int n_;
  const int rank_;
  const int64_t length_;
  const int64_t chunk_;
  const absl::Time deadline_;
  // The chunks of the segment this rank sends next, as they arrived in the
  // step before (in the reduce-scatter, with this rank's part added):
  // forwarded as they are, not copied. None at first: the first segment
  // goes from the buffer.
  std::vector<MessageFloats> forward_;
};

}  // namespace

RingPart RingPartOf(int64_t length, int n, int rank) {
  const Range part = Segment(length, n, Mod(rank + 1, n));
  return {part.begin, part.end};
}

absl::Status RingAllReduce(PeerLinks& links, absl::Span<float> buffer,
                           const AllReduceOptions& options) {
  if (links.size() <= 1 || buffer.empty()) return absl::OkStatus();
  Ring ring(links, buffer, options);
  if (absl::Status s = ring.ReduceScatter(/*keep=*/true); !s.ok()) return s;
  return ring.AllGather();
}

absl::Status RingReduceScatter(PeerLinks& links, absl::Span<float> buffer,
                               const AllReduceOptions& options) {
  if (links.size() <= 1 || buffer.empty()) return absl::OkStatus();
  return Ring(links, buffer, options).ReduceScatter(/*keep=*/false);
}

absl::Status RingAllGather(PeerLinks& links, absl::Span<float> buffer,
                           const AllReduceOptions& options) {
  if (links.size() <= 1 || buffer.empty()) return absl::OkStatus();
  return Ring(links, buffer, options).AllGather();
}

absl::Status RecursiveDoublingAllReduce(PeerLinks& links, absl::Span<float> buffer,
                                        const AllReduceOptions& options) {
  const int n = links.size();
  const int rank = links.rank();
  if (n <= 1 || buffer.empty()) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + options.timeout;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  // Ranks p..n-1 are extras; extra p + i pairs with rank i.
  auto add_from = [&](int peer) -> absl::Status {
    auto message = RecvExactly(links, peer, buffer.size(), deadline);
    if (!message.ok()) return message.status();
    AddInto(buffer.data(), message->data(), static_cast<int64_t>(buffer.size()));
    return absl::OkStatus();
  };
  if (rank >= p) {
    if (absl::Status s = links.Send(rank - p, buffer); !s.ok()) return s;
    auto sum = RecvExactly(links, rank - p, buffer.size(), deadline);  // the whole sum
    if (!sum.ok()) return sum.status();
    std::copy(sum->begin(), sum->end(), buffer.begin());
    return absl::OkStatus();
  }
  if (rank + p < n) {
    if (absl::Status s = add_from(rank + p); !s.ok()) return s;
  }
  for (int mask = 1; mask < p; mask *= 2) {
    const int partner = rank ^ mask;
    if (absl::Status s = links.Send(partner, buffer); !s.ok()) return s;
    // a + b on one side and b + a on the other: the same float.
    if (absl::Status s = add_from(partner); !s.ok()) return s;
  }
  if (rank + p < n) return links.Send(rank + p, buffer);
  return absl::OkStatus();
}

absl::Status Broadcast(PeerLinks& links, int root, absl::Span<float> buffer,
                       const AllReduceOptions& options) {
  const int n = links.size();
  if (n <= 1) return absl::OkStatus();
  const int64_t length = static_cast<int64_t>(buffer.size());
  const int64_t chunk = std::max<int64_t>(1, options.chunk_elements);
  const absl::Time deadline = absl::Now() + options.timeout;
  for (int64_t offset = 0; offset < length; offset += chunk) {
    const int64_t count = std::min(chunk, length - offset);
    if (links.rank() != root) {
      auto message = RecvExactly(links, root, count, deadline);
      if (!message.ok()) return message.status();
      std::copy(message->begin(), message->end(), buffer.begin() + offset);
      continue;
    }
    for (int peer = 0; peer < n; ++peer) {
      if (peer == root) continue;
      if (absl::Status s = links.Send(peer, buffer.subspan(offset, count)); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status AllReduce(PeerLinks& links, absl::Span<float> buffer,
                       const AllReduceOptions& options) {
  if (static_cast<int64_t>(buffer.size() * sizeof(float)) <= options.small_bytes) {
    return RecursiveDoublingAllReduce(links, buffer, options);
  }
  return RingAllReduce(links, buffer, options);
}

}  // namespace fulcrum
