// The bandwidth-optimal ring all-reduce (Patarasuk & Yuan; Baidu's and
// Horovod's): the buffer is cut into one segment per rank; in n - 1
// reduce-scatter steps each rank passes a segment to its right neighbour and
// adds the one from its left, so that it ends holding the whole sum of one
// segment; in n - 1 all-gather steps those sums go round. Each rank sends
// and receives 2 (n - 1) / n of the buffer, whatever n is. Segments travel
// in chunks, so a rank adds one chunk while the next is on the wire.
#ifndef FULCRUM_WORKER_COLLECTIVE_RING_ALL_REDUCE_H_
#define FULCRUM_WORKER_COLLECTIVE_RING_ALL_REDUCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/collective/peer_links.h"

namespace fulcrum {

struct RingOptions {
  int64_t chunk_elements = 1 << 18;  // 1 MiB of float32 per message at most
  absl::Duration timeout = absl::Seconds(60);  // for the whole all-reduce
};

// Replaces `buffer` on every rank of `links` by the elementwise sum of every
// rank's `buffer` (each rank passes the same length). The result is
// bit-identical on every rank. Any rank's failure -- a peer that dies, hangs
// or is cut off -- fails it on the others within `timeout`, naming the peer;
// `buffer` then holds partial sums.
absl::Status RingAllReduce(PeerLinks& links, absl::Span<float> buffer,
                           const RingOptions& options = {});

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_COLLECTIVE_RING_ALL_REDUCE_H_
