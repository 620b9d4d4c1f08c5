// Streamed training data: the in-memory dealing's shares and batch counts,
// a shuffle that reaches only as far as its buffer, resumes and re-dealing
// as in memory, and a file that changes or breaks named in the error.
#include "worker/data/stream_batcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/file_system.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// A Criteo file of `n` lines whose example i has i as its first integer
// feature (read back as log(1 + i): Index inverts it).
std::string WriteNumbered(const std::string& name, int n) {
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) {
    out << i % 2 << '\t' << i;
    for (int f = 1; f < CriteoReader::kNumeric; ++f) out << '\t';
    for (int f = 0; f < CriteoReader::kFields; ++f) out << '\t' << std::hex << i << std::dec;
    out << '\n';
  }
  return path;
}

int64_t Index(const Batch& batch, int64_t row) {
  return std::lround(std::expm1(batch.features[row * batch.feature_dim]));
}

ExampleStream Stream(FileSystem& fs, const std::string& path, int64_t buffer) {
  ExampleStream stream;
  stream.open = [&fs, path] { return CriteoReader::Open(fs, path); };
  stream.shuffle_buffer = buffer;
  absl::StatusOr<int64_t> count = CountExamples(stream);
  EXPECT_TRUE(count.ok()) << count.status();
  stream.num_examples = count.value_or(0);
  return stream;
}

// Each epoch's example indices in the order trained, the batches checked.
std::vector<std::vector<int64_t>> Epochs(const ExampleStream& stream,
                                         const DealingOptions& options) {
  Batcher batcher(StreamBatches(stream, options));
  std::vector<std::vector<int64_t>> epochs(options.epochs);
  while (auto batch = batcher.Next()) {
    EXPECT_EQ(batch->size, options.batch_size);
    EXPECT_EQ(batch->ids.size(), static_cast<size_t>(batch->size * CriteoReader::kFields));
    for (int64_t row = 0; row < batch->size; ++row) {
      EXPECT_EQ(batch->labels[row], Index(*batch, row) % 2);
      epochs[batch->epoch].push_back(Index(*batch, row));
    }
  }
  EXPECT_TRUE(batcher.status().ok()) << batcher.status();
  return epochs;
}

// As in memory: every shard trains floor(103 / 3 / 8) = 4 batches an
// epoch, of its own examples (i mod 3), each at most once; another epoch
// is another order, the same seed the same one. The buffer of 10 bounds
// how far the shuffle reaches: the p-th example trained is among the
// share's first p + 10.
TEST(StreamBatcherTest, DealsAsInMemoryAndShufflesWithinTheBuffer) {
  auto fs = MakeLocalFileSystem();
  const ExampleStream stream = Stream(*fs, WriteNumbered("numbered.txt", 103), 10);
  ASSERT_EQ(stream.num_examples, 103);
  std::set<int64_t> seen;
  for (int shard = 0; shard < 3; ++shard) {
    const DealingOptions options{shard, 3, /*batch_size=*/8, /*epochs=*/2, /*seed=*/5};
    const auto epochs = Epochs(stream, options);
    ASSERT_EQ(epochs[0].size(), 32u);
    ASSERT_EQ(epochs[1].size(), 32u);
    EXPECT_NE(epochs[0], epochs[1]);
    for (size_t p = 0; p < epochs[0].size(); ++p) {
      const int64_t i = epochs[0][p];
      EXPECT_EQ(i % 3, shard);
      EXPECT_TRUE(seen.insert(i).second) << i;
      EXPECT_LT(i / 3, static_cast<int64_t>(p) + 10) << "example " << i << " trained " << p;
    }
    EXPECT_EQ(Epochs(stream, options), epochs);
  }
  // A buffer as large as the share mixes it whole: some example comes
  // before one that preceded it by more than 10.
  const auto whole = Epochs(Stream(*fs, WriteNumbered("numbered.txt", 103), 1000),
                            DealingOptions{0, 1, 8, 1, 5})[0];
  bool far = false;
  for (size_t p = 0; p < whole.size(); ++p) far = far || whole[p] > static_cast<int64_t>(p) + 10;
  EXPECT_TRUE(far);
}

// A job resumed after 5 batches trains the batches the first run would
// have trained from the 6th on; a later epoch dealt over 2 workers instead
// of 3 gives the two of them every example.
TEST(StreamBatcherTest, ResumesWhereItStoppedAndDealsAgainOverTheWorkersLeft) {
  auto fs = MakeLocalFileSystem();
  const ExampleStream stream = Stream(*fs, WriteNumbered("dealt.txt", 96), 7);
  DealingOptions options{1, 3, /*batch_size=*/8, /*epochs=*/2, /*seed=*/3};
  const auto whole = Epochs(stream, options);
  DealingOptions resumed = options;
  resumed.skip = 5;  // epoch 0 has 4: all of it and 1 of epoch 1
  const auto rest = Epochs(stream, resumed);
  EXPECT_TRUE(rest[0].empty());
  EXPECT_EQ(rest[1], std::vector<int64_t>(whole[1].begin() + 8, whole[1].end()));

  std::set<int64_t> epoch1;
  for (int shard = 0; shard < 2; ++shard) {
    DealingOptions dealt{shard, 3, 8, 2, 3};
    dealt.deal = [shard](int64_t epoch) {
      EXPECT_EQ(epoch, 1);
      return Dealing{shard, 2};
    };
    const auto epochs = Epochs(stream, dealt);
    EXPECT_EQ(epochs[0].size(), 32u);  // 96 / 3 / 8 batches
    EXPECT_EQ(epochs[1].size(), 48u);  // 96 / 2 / 8
    epoch1.insert(epochs[1].begin(), epochs[1].end());
  }
  EXPECT_EQ(epoch1.size(), 96u);
}

// A file that lost lines since it was counted, or that cannot be read any
// more, ends the batches with an error that says so.
TEST(StreamBatcherTest, AFileThatChangesOrGoesAwayEndsTheBatchesWithAnError) {
  auto fs = MakeLocalFileSystem();
  const std::string path = WriteNumbered("shrinks.txt", 60);
  const ExampleStream stream = Stream(*fs, path, 5);
  WriteNumbered("shrinks.txt", 20);
  Batcher shrunk(StreamBatches(stream, DealingOptions{0, 1, 10, 1, 1}));
  int batches = 0;
  while (shrunk.Next()) ++batches;
  EXPECT_EQ(batches, 2);  // 20 examples: two batches of 10, then none
  EXPECT_EQ(shrunk.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(shrunk.status().message(), HasSubstr("changed while the job ran"));

  ASSERT_EQ(std::remove(path.c_str()), 0);
  Batcher gone(StreamBatches(stream, DealingOptions{0, 1, 10, 1, 1}));
  EXPECT_FALSE(gone.Next());
  EXPECT_THAT(gone.status().message(), HasSubstr(path));
}

// The data source: only criteo streams, and its counting reads every line,
// so a bad one is named before training starts.
TEST(StreamBatcherTest, OnlyCriteoStreamsAndABadLineIsNamedFirst) {
  auto fs = MakeLocalFileSystem();
  DataSource source;
  source.stream = true;
  EXPECT_THAT(ValidateDataSource(source).message(), HasSubstr("--stream_data streams criteo"));
  source.kind = "criteo";
  source.shuffle_buffer = 0;
  EXPECT_THAT(ValidateDataSource(source).message(), HasSubstr("--shuffle_buffer"));
  source.shuffle_buffer = 4;
  source.data_dir = std::getenv("TEST_TMPDIR");
  const std::string path = WriteNumbered("train.txt", 30);
  absl::StatusOr<TrainingStream> opened = OpenTrainingStream(*fs, source);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->shape.num_examples, 30);
  EXPECT_EQ(opened->shape.ids_per_example, CriteoReader::kFields);
  EXPECT_TRUE(opened->shape.features.empty());
  std::ofstream(path, std::ios::app) << "1\t2\t3\n";
  EXPECT_THAT(OpenTrainingStream(*fs, source).status().message(), HasSubstr(path + ":31: "));
}

}  // namespace
}  // namespace fulcrum
