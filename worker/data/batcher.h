// A worker's share of the training set, reshuffled every epoch from the
// seed, cut into batches and prefetched on a background thread.
#ifndef FULCRUM_WORKER_DATA_BATCHER_H_
#define FULCRUM_WORKER_DATA_BATCHER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/data/dataset.h"
#include "worker/data/dealing.h"

namespace fulcrum {

// One batch: `size` examples of `feature_dim` floats, and their labels
// (and ids_per_example categorical ids each, for CTR data).
struct Batch {
  int64_t size = 0;
  int64_t feature_dim = 0;
  std::vector<float> features;
  std::vector<int32_t> labels;
  int64_t ids_per_example = 0;
  std::vector<int64_t> ids;
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  int64_t steps_in_epoch = 0;  // of this epoch's dealing
};

// Copies rows `indices` of `data` into a batch.
Batch GatherBatch(const Dataset& data, const std::vector<int64_t>& indices);

// Consecutive batches of a whole data set, in order (for evaluation); the
// last may be smaller.
std::vector<Batch> SequentialBatches(const Dataset& data, int64_t batch_size);

// Yields a worker's batches, made ahead on a background thread: of a data
// set in memory as its dealing deals them, or of whatever `produce` makes
// (streamed data: StreamBatches). Thread-safe.
class Batcher {
 public:
  // Makes the next batch, on the background thread: nothing once all
  // epochs are done; an error ends the batches (status() then says it).
  using Produce = std::function<absl::StatusOr<std::optional<Batch>>()>;

  // `epochs` epochs of `data`'s examples as `dealing` deals them (every
  // shard of one dealing yields the same number of batches per epoch, the
  // remainder dropped, so synchronous workers stay in step); `data` must
  // outlive it. `prefetch`: batches made ahead.
  Batcher(const Dataset& data, DealingOptions dealing, int prefetch = 4);
  // The batches `produce` makes.
  explicit Batcher(Produce produce, int prefetch = 4);
  ~Batcher();

  // The next batch, waiting for the prefetch thread; nothing once all epochs
  // are done, or once making one failed.
  std::optional<Batch> Next() ABSL_LOCKS_EXCLUDED(mu_);

  // Why the batches ended early (the data could not be read), or OK.
  absl::Status status() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run();

  const int prefetch_;
  const Produce produce_;  // the producer's

  mutable absl::Mutex mu_;
  std::deque<Batch> ready_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread producer_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_BATCHER_H_
