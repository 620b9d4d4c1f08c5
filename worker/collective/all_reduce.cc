#include "worker/collective/all_reduce.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

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
absl::StatusOr<Message> RecvExactly(PeerLinks& links, int peer, size_t count, absl::Time deadline) {
  auto message = links.Recv(peer, deadline);
  if (message.ok() && message->size() != count) {
    return absl::InternalError(absl::StrCat("rank ", links.rank(), ": rank ", peer, " sent ",
                                            message->size(), " floats where ", count,
                                            " were expected"));
  }
  return message;
}

// The ring's steps over one buffer: the reduce-scatter, the all-gather, or
// both in turn, within one deadline, as one pipeline. Every chunk a step
// sends is one the step before received (with this rank's part added, in
// the reduce-scatter), so it is passed on the moment it arrives: a rank's
// link to its right always has the next chunk queued, rather than waiting
// for each chunk of a step to come from the left before sending the next
// (which left the links idle for a hand-off per chunk).
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

  // Reduce-scatter (`reduce`): after step k, rank r holds the sum of k + 2
  // ranks in segment r - k - 1; at the end, the whole sum of segment
  // r + 1, which it stores. All-gather (`gather`): those whole sums go
  // round, each rank storing each.
  absl::Status Run(bool reduce, bool gather) {
    struct Step {
      int send;     // the segment this step sends
      int receive;  // and receives
      bool add;     // this rank's part is added to what arrives
    };
    std::vector<Step> steps;
    for (int k = 0; reduce && k < n_ - 1; ++k) {
      steps.push_back({Mod(rank_ - k, n_), Mod(rank_ - k - 1, n_), true});
    }
    for (int k = 0; gather && k < n_ - 1; ++k) {
      steps.push_back({Mod(rank_ + 1 - k, n_), Mod(rank_ - k, n_), false});
    }
    const int right = Mod(rank_ + 1, n_);
    const int left = Mod(rank_ - 1, n_);
    // The first step sends from the buffer, all of it at once.
    const Range first = Segment(length_, n_, steps.front().send);
    for (int64_t offset = first.begin; offset < first.end; offset += chunk_) {
      const int64_t count = std::min(chunk_, first.end - offset);
      if (absl::Status s = links_.Send(right, buffer_.subspan(offset, count)); !s.ok()) return s;
    }
    for (size_t k = 0; k < steps.size(); ++k) {
      const bool last = k + 1 == steps.size();
      // What arrives is whole once no later step adds to it.
      const bool store = last || !steps[k + 1].add;
      const Range in = Segment(length_, n_, steps[k].receive);
      for (int64_t offset = in.begin; offset < in.end; offset += chunk_) {
        const int64_t count = std::min(chunk_, in.end - offset);
        auto message = RecvExactly(links_, left, count, deadline_);
        if (!message.ok()) return message.status();
        float* own = buffer_.data() + offset;
        absl::Status sent = absl::OkStatus();
        if (steps[k].add) {
          // Summed straight out of the received bytes.
          MessageFloats sum(count);
          message->SumTo(own, sum.data());
          if (store) std::copy(sum.begin(), sum.end(), own);
          if (!last) sent = links_.SendOwned(right, std::move(sum));
        } else {
          message->CopyTo(own);
          // The next step's chunk: passed on as it arrived, not copied.
          if (!last) sent = links_.SendMessage(right, *std::move(message));
        }
        if (!sent.ok()) return sent;
      }
    }
    return absl::OkStatus();
  }

 private:
  PeerLinks& links_;
  const absl::Span<float> buffer_;
  const int n_;
  const int rank_;
  const int64_t length_;
  const int64_t chunk_;
  const absl::Time deadline_;
};

}  // namespace

RingPart RingPartOf(int64_t length, int n, int rank) {
  const Range part = Segment(length, n, Mod(rank + 1, n));
  return {part.begin, part.end};
}

absl::Status RingAllReduce(PeerLinks& links, absl::Span<float> buffer,
                           const AllReduceOptions& options) {
  if (links.size() <= 1 || buffer.empty()) return absl::OkStatus();
  return Ring(links, buffer, options).Run(/*reduce=*/true, /*gather=*/true);
}

absl::Status RingReduceScatter(PeerLinks& links, absl::Span<float> buffer,
                               const AllReduceOptions& options) {
  if (links.size() <= 1 || buffer.empty()) return absl::OkStatus();
  return Ring(links, buffer, options).Run(/*reduce=*/true, /*gather=*/false);
}

absl::Status RingAllGather(PeerLinks& links, absl::Span<float> buffer,
                           const AllReduceOptions& options) {
  if (links.size() <= 1 || buffer.empty()) return absl::OkStatus();
  return Ring(links, buffer, options).Run(/*reduce=*/false, /*gather=*/true);
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
    message->AddTo(buffer.data());
    return absl::OkStatus();
  };
  if (rank >= p) {
    if (absl::Status s = links.Send(rank - p, buffer); !s.ok()) return s;
    auto sum = RecvExactly(links, rank - p, buffer.size(), deadline);  // the whole sum
    if (!sum.ok()) return sum.status();
    sum->CopyTo(buffer.data());
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
      message->CopyTo(buffer.data() + offset);
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
  const int64_t length = static_cast<int64_t>(buffer.size());
  if (length * static_cast<int64_t>(sizeof(float)) <= options.small_bytes ||
      (links.size() == 2 && length <= 2 * options.chunk_elements)) {
    return RecursiveDoublingAllReduce(links, buffer, options);
  }
  return RingAllReduce(links, buffer, options);
}

}  // namespace fulcrum
