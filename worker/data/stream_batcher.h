// Training data streamed from a file instead of held in memory
// (--stream_data): each epoch reads the file again, keeps this worker's
// share and shuffles it through a bounded buffer, so a worker's memory does
// not grow with the data set. The dealing over workers is the in-memory
// one's: example i (the i-th of the file) goes to shard i mod shards, every
// shard of a dealing trains the same number of whole batches an epoch, a
// worker gone for good has its share dealt to the others from the next
// epoch on, and a resumed job skips the batches it has trained. What
// differs is the order within a share: a shuffle buffer (as tf.data's
// shuffle) mixes examples only as far apart as the buffer is long, where
// the in-memory path shuffles the whole share.
#ifndef FULCRUM_WORKER_DATA_STREAM_BATCHER_H_
#define FULCRUM_WORKER_DATA_STREAM_BATCHER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/data/batcher.h"
#include "worker/data/criteo.h"
#include "worker/data/dataset.h"
#include "worker/data/dealing.h"

namespace fulcrum {

// A training file to stream.
struct ExampleStream {
  // Opens the file at its first example.
  std::function<absl::StatusOr<std::unique_ptr<CriteoReader>>()> open;
  int64_t num_examples = 0;          // in the file (CountExamples)
  int64_t shuffle_buffer = 1 << 16;  // examples of a share mixed at once, >= 1
};

// Reads the whole file once, a chunk at a time, checking every line: its
// examples. Errors name the file and line, as reading it does.
absl::StatusOr<int64_t> CountExamples(const ExampleStream& stream);

// What a Batcher makes of `stream`, dealt as `dealing` says (seed, epochs,
// skip and re-dealing as in memory): each epoch's batches read from the
// file opened anew, the share's examples shuffled through the buffer from
// (seed, epoch, shard). A file that cannot be opened or read, or that holds
// fewer examples than counted, ends the batches with an error naming it.
Batcher::Produce StreamBatches(ExampleStream stream, DealingOptions dealing);

// The training file of `source` (source.stream) to stream through `fs`
// (which must outlive it), its examples counted (and every line checked)
// by reading it once; and the set's shape, without its examples.
struct TrainingStream {
  ExampleStream stream;
  Dataset shape;  // num_examples, feature_dim, ids_per_example, num_classes
};
absl::StatusOr<TrainingStream> OpenTrainingStream(FileSystem& fs, const DataSource& source);

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_STREAM_BATCHER_H_
