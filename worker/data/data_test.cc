#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "common/faulty_file_system.h"
#include "worker/data/batcher.h"
#include "worker/data/dataset.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

std::string BigEndian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

// An IDX images file of n 2x2 images (pixel values i*4+j) and its labels.
std::string Images(uint32_t n) {
  std::string data = BigEndian(0x803) + BigEndian(n) + BigEndian(2) + BigEndian(2);
  for (uint32_t i = 0; i < n * 4; ++i) data.push_back(static_cast<char>(i % 256));
  return data;
}
std::string Labels(uint32_t n, int max_label = 3) {
  std::string data = BigEndian(0x801) + BigEndian(n);
  for (uint32_t i = 0; i < n; ++i) data.push_back(static_cast<char>(i % (max_label + 1)));
  return data;
}

// The file system every read here goes through.
FaultyFileSystem& Fs() {
  static FaultyFileSystem* fs = new FaultyFileSystem;
  return *fs;
}

std::string ReadWholeFile(const std::string& path) { return *ReadFile(Fs(), path); }

std::string Write(const std::string& name, const std::string& bytes, bool gzip = false) {
  std::string path = TempPath(name);
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  return path;
}

TEST(IdxTest, ReadsPlainAndGzipFiles) {
  for (bool gzip : {false, true}) {
    auto data = ReadIdx(Fs(), Write("img", Images(5), gzip), Write("lbl", Labels(5), gzip), 4);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(data->num_examples, 5);
    EXPECT_EQ(data->feature_dim, 4);
    EXPECT_FLOAT_EQ(data->features[5], 5 / 255.0f);
    EXPECT_EQ(data->labels, std::vector<int32_t>({0, 1, 2, 3, 0}));
  }
}

TEST(IdxTest, ReadsEveryMemberOfAGzipFile) {
  // gzip -c a >> f; gzip -c b >> f: one file of two members, as cat makes.
  const std::string images = Images(5);
  const std::string first = Write("part1.gz", images.substr(0, 10), true);
  const std::string second = Write("part2.gz", images.substr(10), true);
  const std::string joined = ReadWholeFile(first) + ReadWholeFile(second);
  auto data = ReadIdx(Fs(), Write("joined.gz", joined), Write("lbl", Labels(5)), 4);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, 5);
  EXPECT_FLOAT_EQ(data->features[19], 19 / 255.0f);
}

TEST(IdxTest, AFileThatCannotBeReadIsNamed) {
  const std::string images = Write("img", Images(5));
  const std::string labels = Write("lbl", Labels(5));
  FaultyFileSystem::Faults unreadable;
  unreadable.fail_reads = true;
  Fs().SetFaults(unreadable);
  const absl::Status status = ReadIdx(Fs(), images, labels, 4).status();
  Fs().SetFaults({});
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(status.message()), HasSubstr("cannot open '" + images + "'"));
}

TEST(IdxTest, CorruptFilesAreNamedClearly) {
  const std::string labels = Write("lbl", Labels(5));
  std::string wrong_magic = Images(5);
  wrong_magic[3] = 0x01;
  EXPECT_THAT(ReadIdx(Fs(), Write("img", wrong_magic), labels, 4).status().message(),
              HasSubstr("magic 0x00000801, expected 0x00000803"));
  const std::string truncated = Images(5).substr(0, 20);
  EXPECT_THAT(ReadIdx(Fs(), Write("img", truncated), labels, 4).status().message(),
              HasSubstr("truncated"));
  const std::string compressed = ReadWholeFile(Write("img.gz", Images(5), true));
  auto cut = ReadIdx(Fs(), Write("cut.gz", compressed.substr(0, compressed.size() / 2)), labels, 4);
  EXPECT_FALSE(cut.ok());
  EXPECT_THAT(cut.status().message(), HasSubstr("cut.gz"));
  EXPECT_THAT(ReadIdx(Fs(), Write("img", Images(6)), labels, 4).status().message(),
              HasSubstr("6 images but"));
  EXPECT_THAT(
      ReadIdx(Fs(), Write("img", Images(5)), Write("lbl", Labels(5, 9)), 4).status().message(),
      HasSubstr("label 4 of example 4 is out of range [0, 4)"));
  EXPECT_EQ(ReadIdx(Fs(), TempPath("nope"), labels, 4).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(IdxTest, MissingFashionMnistNamesTheDebianPackage) {
  DataSource source;
  source.data_dir = TempPath("empty");
  auto data = LoadTrainingSet(Fs(), source);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(data.status().message(), HasSubstr("apt-get install dataset-fashion-mnist"));
}

TEST(IdxTest, ReadsTheRealFashionMnist) {
  DataSource source;  // Debian's dataset-fashion-mnist, which the test script installs
  auto train = LoadTrainingSet(Fs(), source);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->num_examples, 60000);
  EXPECT_EQ(train->feature_dim, 784);
  auto test = LoadTestSet(Fs(), source, train->feature_dim);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->num_examples, 10000);
  std::set<int32_t> classes(train->labels.begin(), train->labels.end());
  EXPECT_EQ(classes.size(), 10u);
}

TEST(LibsvmTest, ReadsSparseLinesIntoDenseRows) {
  const std::string path =
      Write("train.libsvm", "1 1:0.5 3:2\n# a comment\n\n0 2:-1  # trailing\n2 4:1\n");
  auto data = ReadLibsvm(Fs(), path, 3);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, 3);
  EXPECT_EQ(data->feature_dim, 4);
  EXPECT_EQ(data->features, std::vector<float>({0.5f, 0, 2, 0, 0, -1, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(data->labels, std::vector<int32_t>({1, 0, 2}));
}

TEST(LibsvmTest, BadLinesAreNamed) {
  EXPECT_THAT(ReadLibsvm(Fs(), Write("a", "1 1:1\n7 2:1\n"), 3).status().message(),
              HasSubstr("line 2: label '7'"));
  EXPECT_THAT(ReadLibsvm(Fs(), Write("b", "1 0:1\n"), 3).status().message(), HasSubstr("'0:1'"));
  EXPECT_THAT(ReadLibsvm(Fs(), Write("c", "1 x\n"), 3).status().message(), HasSubstr("'x'"));
  EXPECT_THAT(ReadLibsvm(Fs(), Write("d", "1 9:1\n"), 3, 4).status().message(),
              HasSubstr("exceeds the 4 features"));
  EXPECT_THAT(ReadLibsvm(Fs(), Write("e", "\n"), 3).status().message(), HasSubstr("no examples"));
}

Dataset Numbered(int64_t n) {
  Dataset data;
  data.num_examples = n;
  data.feature_dim = 1;
  data.num_classes = 2;
  for (int64_t i = 0; i < n; ++i) {
    data.features.push_back(static_cast<float>(i));
    data.labels.push_back(static_cast<int32_t>(i % 2));
  }
  return data;
}

std::vector<std::vector<float>> Epochs(const Dataset& data, const DealingOptions& options) {
  Batcher batcher(data, options);
  std::vector<std::vector<float>> epochs(options.epochs);
  while (auto batch = batcher.Next()) {
    EXPECT_EQ(batch->size, options.batch_size);
    for (float f : batch->features) epochs[batch->epoch].push_back(f);
  }
  return epochs;
}

TEST(BatcherTest, ShardsAreDisjointEqualAndReshuffledEachEpoch) {
  const Dataset data = Numbered(103);
  std::set<float> seen;
  for (int shard = 0; shard < 3; ++shard) {
    DealingOptions options{shard, 3, /*batch_size=*/8, /*epochs=*/2, /*seed=*/5};
    EXPECT_EQ(StepsPerEpoch(103, 3, 8), 4);  // floor(103 / 3 / 8), on every shard
    auto epochs = Epochs(data, options);
    ASSERT_EQ(epochs[0].size(), 32u);  // its 4 batches of 8
    EXPECT_NE(epochs[0], epochs[1]);   // reshuffled
    for (float f : epochs[0]) {
      EXPECT_EQ(static_cast<int>(f) % 3, shard);  // its own shard only
      EXPECT_TRUE(seen.insert(f).second);
    }
    EXPECT_EQ(Epochs(data, options), epochs);  // the seed fixes the order
  }
}

// Worker 2 of 3 is gone after epoch 0: from epoch 1 on, workers 0 and 1
// take its share too, so the two of them still see every example.
TEST(BatcherTest, ALaterEpochIsReDealtOverTheWorkersLeft) {
  const Dataset data = Numbered(96);
  std::set<float> epoch1;
  for (int shard = 0; shard < 2; ++shard) {
    DealingOptions options{shard, 3, /*batch_size=*/8, /*epochs=*/2, /*seed=*/5};
    options.deal = [shard](int64_t epoch) {
      EXPECT_EQ(epoch, 1);  // asked only as later epochs begin
      return Dealing{shard, 2};
    };
    Batcher batcher(data, options);
    std::vector<int64_t> steps(2);
    while (auto batch = batcher.Next()) {
      EXPECT_EQ(batch->steps_in_epoch, batch->epoch == 0 ? 4 : 6);  // 96 / 3 / 8, 96 / 2 / 8
      ++steps[batch->epoch];
      if (batch->epoch == 1) epoch1.insert(batch->features.begin(), batch->features.end());
    }
    EXPECT_EQ(steps, (std::vector<int64_t>{4, 6}));
  }
  EXPECT_EQ(epoch1.size(), 96u);  // every example
}

TEST(BatcherTest, StopsEarlyWithoutHanging) {
  const Dataset data = Numbered(1000);
  Batcher batcher(data, DealingOptions{0, 1, 10, 5, 1}, /*prefetch=*/2);
  ASSERT_TRUE(batcher.Next().has_value());
  // Destroying it with the producer blocked on a full queue must return.
}

TEST(BatcherTest, SequentialBatchesCoverEverything) {
  auto batches = SequentialBatches(Numbered(10), 4);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].size, 2);
  EXPECT_EQ(batches[2].features, std::vector<float>({8, 9}));
}

}  // namespace
}  // namespace fulcrum
