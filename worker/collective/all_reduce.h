// All-reduce over PeerLinks: every rank's float buffer replaced by the
// elementwise sum over the ranks, bit-identical on every rank. Two
// algorithms, picked by size:
//
// - Ring (Patarasuk & Yuan; Baidu's and Horovod's), bandwidth-optimal: the
//   buffer is cut into one segment per rank; in n - 1 reduce-scatter steps
//   each rank passes a segment to its right neighbour and adds the one from
//   its left, so that it ends holding the whole sum of one segment; in n - 1
//   all-gather steps those sums go round. Each rank sends and receives
//   2 (n - 1) / n of the buffer, whatever n is. Segments travel in chunks,
//   and each chunk is passed on the moment it arrives: in the
//   reduce-scatter, summed with this rank's part straight out of the
//   bytes received; in the all-gather, stored and forwarded as it was
//   received (PeerLinks::SendMessage), not copied. The steps run as one
//   pipeline, a rank adding one chunk while the next are on the wire.
// - Recursive doubling, latency-optimal for small buffers: in log2(p)
//   steps (p the largest power of two <= n) each rank swaps its whole
//   buffer with the rank whose number differs in one bit and adds; the
//   n - p extra ranks first hand their buffer to a partner and get the sum
//   back at the end. A 4 KiB all-reduce takes log2(p) + 2 hops, not
//   2 (n - 1). Between two ranks it sends the same bytes as the ring, in
//   one message rather than the ring's two halves one after the other, so
//   it is picked there for any buffer whose halves would each be one of
//   the ring's chunks (a 0.9 MiB model: 0.96 against 1.1 ms here).
#ifndef FULCRUM_WORKER_COLLECTIVE_ALL_REDUCE_H_
#define FULCRUM_WORKER_COLLECTIVE_ALL_REDUCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/collective/peer_links.h"

namespace fulcrum {

struct AllReduceOptions {
  int64_t chunk_elements = 1 << 18;            // ring: 1 MiB of float32 per message at most
  int64_t small_bytes = 64 << 10;              // buffers up to this take recursive doubling
  absl::Duration timeout = absl::Seconds(60);  // for the whole all-reduce
};

// Replaces `buffer` on every rank of `links` by the elementwise sum of every
// rank's `buffer` (each rank passes the same length and options), by
// recursive doubling up to options.small_bytes (between two ranks, up to
// two of the ring's chunks) and by the ring above. Any
// rank's failure -- a peer that dies, hangs or is cut off -- fails it on the
// others within `timeout`, naming the peer; `buffer` then holds partial sums.
absl::Status AllReduce(PeerLinks& links, absl::Span<float> buffer,
                       const AllReduceOptions& options = {});

// Replaces `buffer` on every rank by rank `root`'s (each rank passes the
// same length): the root sends it to each peer in chunks. For the chief's
// initial variables; failures as for AllReduce.
absl::Status Broadcast(PeerLinks& links, int root, absl::Span<float> buffer,
                       const AllReduceOptions& options = {});

// The ring's two halves, for a caller that works on its own part of the
// sum between them (a sharded optimizer updating its part of the
// variables): after RingReduceScatter each rank holds the whole sum of its
// part of `buffer`, [begin, end) of RingPartOf(length, n, rank), and
// partial sums elsewhere; RingAllGather then gives every rank each rank's
// part, as its buffer holds it. The parts of the n ranks cover the buffer
// without overlap. Failures as for AllReduce.
struct RingPart {
  int64_t begin;
  int64_t end;
};
RingPart RingPartOf(int64_t length, int n, int rank);
absl::Status RingReduceScatter(PeerLinks& links, absl::Span<float> buffer,
                               const AllReduceOptions& options = {});
absl::Status RingAllGather(PeerLinks& links, absl::Span<float> buffer,
                           const AllReduceOptions& options = {});

// The two algorithms, as AllReduce runs them; the ring is
// RingReduceScatter then RingAllGather.
absl::Status RingAllReduce(PeerLinks& links, absl::Span<float> buffer,
                           const AllReduceOptions& options = {});
absl::Status RecursiveDoublingAllReduce(PeerLinks& links, absl::Span<float> buffer,
                                        const AllReduceOptions& options = {});

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_ALL_REDUCE_H_
