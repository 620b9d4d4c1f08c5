// How a job's training examples are dealt over its workers, epoch by
// epoch, and dealt again over those left when one is gone for good. The
// C++ worker's Batcher and the Python package (fulcrum.data) both deal
// through here, so a job of either kind sees the same batches. Pure
// functions; thread-safe.
#ifndef FULCRUM_WORKER_DATA_DEALING_H_
#define FULCRUM_WORKER_DATA_DEALING_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
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

// The random numbers that order `dealing`'s share in `epoch`: the same on
// every run with this seed, others each epoch and shard.
std::mt19937_64 EpochShuffle(uint64_t seed, int64_t epoch, const Dealing& dealing);

// The examples `dealing` gives in `epoch`, in the order they are trained:
// its share, shuffled by (seed, epoch, shard), cut to whole batches of
// `batch_size`. The same permutation on every run with this seed.
std::vector<int64_t> DealtExamples(int64_t num_examples, const Dealing& dealing, int64_t epoch,
                                   uint64_t seed, int64_t batch_size);

// What a worker's batches are dealt from.
struct DealingOptions {
  int shard_index = 0;  // this worker's first dealing
  int num_shards = 1;
  int64_t batch_size = 64;
  int64_t epochs = 1;
  uint64_t seed = 0;
  int64_t skip = 0;  // batches to skip first (resuming a job part-way), of the first dealing
  // The dealing of each later epoch, asked as the epoch begins, and of the
  // first when `skip` ends exactly where it begins; none: the first
  // dealing throughout.
  std::function<Dealing(int64_t epoch)> deal;
};

// One epoch a worker trains: the dealing it is dealt by (asked as it
// begins), its batches (the same on every shard of that dealing), and the
// first one trained (past a resumed job's skip; 0 otherwise).
struct EpochPlan {
  int64_t epoch = 0;
  Dealing dealing;
  int64_t steps = 0;
  int64_t first_step = 0;
};

// A worker's epochs in order, each dealt as it begins, the epochs a resume
// skips whole left out: the walk that in-memory (BatchDealer) and streamed
// (StreamBatches) data share. Thread-compatible.
class EpochPlanner {
 public:
  EpochPlanner(int64_t num_examples, DealingOptions options);

  // Batches per epoch of the first dealing.
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  const DealingOptions& options() const { return options_; }

  // The next epoch; nothing once every epoch is planned.
  std::optional<EpochPlan> Next();

 private:
  const int64_t num_examples_;
  const DealingOptions options_;
  const int64_t steps_per_epoch_;
  int64_t epoch_ = -1;  // the last planned
  bool first_ = true;   // no epoch planned yet
};

// One batch's examples, and where it stands.
struct DealtBatch {
  std::vector<int64_t> indices;
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  int64_t steps_in_epoch = 0;  // of this epoch's dealing
};

// A worker's batches of example indices, epoch by epoch: each epoch's
// share (DealtExamples, of the dealing asked as it begins) in whole
// batches, after the first `skip`. Every shard of one dealing gets the same
// number of batches, so synchronous workers stay in step.
// Thread-compatible.
class BatchDealer {
 public:
  BatchDealer(int64_t num_examples, DealingOptions options);

  // Batches per epoch of the first dealing.
  int64_t steps_per_epoch() const { return planner_.steps_per_epoch(); }

  // The next batch; nothing once every epoch is done.
  std::optional<DealtBatch> Next();

 private:
  const int64_t num_examples_;
  EpochPlanner planner_;
  std::optional<EpochPlan> epoch_;  // of share_; none before the first
  int64_t step_ = 0;                // the next batch of share_
  std::vector<int64_t> share_;
};

// The dealing of `worker` (of `num_workers`) over the workers left, as the
// servers' answers to Describe tell: a worker the servers all hold neither
// live, finished nor awaited is gone for good (its id in *gone), and the
// others share its examples. Its own share when none is gone. A server's
// empty entry (not WasAsked: lost for good) tells nothing.
Dealing DealOverWorkersLeft(const std::vector<DescribeResponse>& servers, int worker,
                            int num_workers, std::vector<int>* gone);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_DEALING_H_
