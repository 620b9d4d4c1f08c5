// How a job's training examples are dealt over its workers, epoch by
// epoch, and dealt again over those left when one is gone for good. The
// C++ worker's Batcher and the Python package (fulcrum.data) both deal
// through here, so a job of either kind sees the same batches. Pure
// functions; thread-safe.
#ifndef FULCRUM_WORKER_DATA_DEALING_H_
#define FULCRUM_WORKER_DATA_DEALING_H_

#include <cstdint>
#include <vector>

#include "proto/ps_service.pb.h"

namespace fulcrum {

// Which share of an epoch's examples a worker takes: examples i with
// i % num_shards == shard_index.
struct Dealing {
  int shard_index = 0;
  int num_shards = 1;
};

// The batches of an epoch dealt over `num_shards`: the same on every shard
// (the remainder is dropped).
inline int64_t StepsPerEpoch(int64_t num_examples, int num_shards, int64_t batch_size) {
  return num_examples / num_shards / batch_size;
}

// The examples `dealing` gives in `epoch`, in the order they are trained:
// its share, shuffled by (seed, epoch, shard), cut to whole batches of
// `batch_size`. The same permutation on every run with this seed.
std::vector<int64_t> DealtExamples(int64_t num_examples, const Dealing& dealing, int64_t epoch,
                                   uint64_t seed, int64_t batch_size);

// The dealing of `worker` (of `num_workers`) over the workers left, as the
// servers' answers to Describe tell: a worker the servers all hold neither
// live, finished nor awaited is gone for good (its id in *gone), and the
// others share its examples. Its own share when none is gone.
Dealing DealOverWorkersLeft(const std::vector<DescribeResponse>& servers, int worker,
                            int num_workers, std::vector<int>* gone);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_DEALING_H_
