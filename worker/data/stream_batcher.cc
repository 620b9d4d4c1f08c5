#include "worker/data/stream_batcher.h"

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

// Lines read from the file at a time.
constexpr int64_t kChunk = 4096;

// Example `i` of `from` copied over example `j` of `to`.
void CopyExample(const CtrExamples& from, int64_t i, CtrExamples& to, int64_t j) {
  std::copy_n(from.numeric.begin() + i * CriteoReader::kNumeric, CriteoReader::kNumeric,
              to.numeric.begin() + j * CriteoReader::kNumeric);
  std::copy_n(from.ids.begin() + i * CriteoReader::kFields, CriteoReader::kFields,
              to.ids.begin() + j * CriteoReader::kFields);
  to.labels[j] = from.labels[i];
}

// A worker's batches of a streamed file, epoch by epoch.
class StreamProducer {
 public:
  StreamProducer(ExampleStream stream, DealingOptions dealing)
      : stream_(std::move(stream)), planner_(stream_.num_examples, std::move(dealing)) {
    buffer_.numeric.resize(stream_.shuffle_buffer * CriteoReader::kNumeric);
    buffer_.ids.resize(stream_.shuffle_buffer * CriteoReader::kFields);
    buffer_.labels.resize(stream_.shuffle_buffer);
  }

  absl::StatusOr<std::optional<Batch>> Next() {
    for (;;) {
      while (!epoch_ || step_ >= epoch_->steps) {
        epoch_ = planner_.Next();
        if (!epoch_) return std::nullopt;
        if (absl::Status s = Begin(); !s.ok()) return s;
      }
      absl::StatusOr<Batch> batch = Fill();
      if (!batch.ok()) return batch.status();
      // The batches a resume has trained are read and dropped: the
      // buffer's order depends on every example before.
      if (step_++ >= epoch_->first_step) return *std::move(batch);
    }
  }

 private:
  absl::Status Begin() {
    absl::StatusOr<std::unique_ptr<CriteoReader>> reader = stream_.open();
    if (!reader.ok()) return reader.status();
    reader_ = *std::move(reader);
    shuffle_ = EpochShuffle(planner_.options().seed, epoch_->epoch, epoch_->dealing);
    read_ = 0;
    held_ = 0;
    chunk_ = CtrExamples();
    at_ = 0;
    step_ = 0;
    return absl::OkStatus();
  }

  // The next example of the share, from the file: its row in chunk_, or
  // nothing at the end of the file.
  absl::StatusOr<std::optional<int64_t>> Read() {
    const Dealing& dealing = epoch_->dealing;
    for (;;) {
      while (at_ < chunk_.num_examples) {
        const int64_t row = at_++;
        if (read_++ % dealing.num_shards == dealing.shard_index) return row;
      }
      absl::StatusOr<CtrExamples> chunk = reader_->Next(kChunk);
      if (!chunk.ok()) return chunk.status();
      if (chunk->num_examples == 0) return std::nullopt;
      chunk_ = *std::move(chunk);
      at_ = 0;
    }
  }

  // The next batch of the epoch: each example drawn at random from the
  // buffer, its place taken by the share's next one (tf.data's shuffle).
  absl::StatusOr<Batch> Fill() {
    const int64_t size = planner_.options().batch_size;
    Batch batch;
    batch.size = size;
    batch.feature_dim = CriteoReader::kNumeric;
    batch.ids_per_example = CriteoReader::kFields;
    batch.features.resize(size * CriteoReader::kNumeric);
    batch.ids.resize(size * CriteoReader::kFields);
    batch.labels.resize(size);
    batch.epoch = epoch_->epoch;
    batch.step_in_epoch = step_;
    batch.steps_in_epoch = epoch_->steps;
    for (int64_t i = 0; i < size; ++i) {
      // Full, unless the file has ended.
      while (held_ < stream_.shuffle_buffer) {
        absl::StatusOr<std::optional<int64_t>> row = Read();
        if (!row.ok()) return row.status();
        if (!*row) break;
        CopyExample(chunk_, **row, buffer_, held_++);
      }
      if (held_ == 0) {
        return absl::DataLossError(
            absl::StrCat("the streamed training file ended after ", read_, " examples in epoch ",
                         epoch_->epoch + 1, ", but held ", stream_.num_examples,
                         " when it was counted: it changed while the job ran"));
      }
      const int64_t pick = static_cast<int64_t>(shuffle_() % static_cast<uint64_t>(held_));
      std::copy_n(buffer_.numeric.begin() + pick * CriteoReader::kNumeric, CriteoReader::kNumeric,
                  batch.features.begin() + i * CriteoReader::kNumeric);
      std::copy_n(buffer_.ids.begin() + pick * CriteoReader::kFields, CriteoReader::kFields,
                  batch.ids.begin() + i * CriteoReader::kFields);
      batch.labels[i] = buffer_.labels[pick] > 0.5f ? 1 : 0;
      // The last held takes the drawn one's place (the next read refills).
      if (pick != --held_) CopyExample(buffer_, held_, buffer_, pick);
    }
    return batch;
  }

  const ExampleStream stream_;
  EpochPlanner planner_;
  std::optional<EpochPlan> epoch_;
  int64_t step_ = 0;  // the next batch of the epoch
  std::unique_ptr<CriteoReader> reader_;
  int64_t read_ = 0;   // examples of the file read this epoch
  CtrExamples chunk_;  // the last read, from row at_ on
  int64_t at_ = 0;
  std::mt19937_64 shuffle_;
  CtrExamples buffer_;  // held_ rows of the share, in no order
  int64_t held_ = 0;
};

}  // namespace

absl::StatusOr<int64_t> CountExamples(const ExampleStream& stream) {
  absl::StatusOr<std::unique_ptr<CriteoReader>> reader = stream.open();
  if (!reader.ok()) return reader.status();
  int64_t examples = 0;
  for (;;) {
    absl::StatusOr<CtrExamples> chunk = (*reader)->Next(1 << 16);
    if (!chunk.ok()) return chunk.status();
    if (chunk->num_examples == 0) return examples;
    examples += chunk->num_examples;
  }
}

absl::StatusOr<TrainingStream> OpenTrainingStream(FileSystem& fs, const DataSource& source) {
  if (absl::Status s = ValidateDataSource(source); !s.ok()) return s;
  if (!source.stream) return absl::InvalidArgumentError("the data source is not streamed");
  TrainingStream out;
  out.stream.open = [&fs, path = source.data_dir + "/train.txt"] {
    return CriteoReader::Open(fs, path);
  };
  out.stream.shuffle_buffer = source.shuffle_buffer;
  absl::StatusOr<int64_t> examples = CountExamples(out.stream);
  if (!examples.ok()) return examples.status();
  out.stream.num_examples = *examples;
  out.shape.num_examples = *examples;
  out.shape.feature_dim = CriteoReader::kNumeric;
  out.shape.ids_per_example = CriteoReader::kFields;
  out.shape.num_classes = 2;
  return out;
}

Batcher::Produce StreamBatches(ExampleStream stream, DealingOptions dealing) {
  auto producer = std::make_shared<StreamProducer>(std::move(stream), std::move(dealing));
  return [producer] { return producer->Next(); };
}

}  // namespace fulcrum
