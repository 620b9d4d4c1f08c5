#include "common/checkpoint/file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

ShardCheckpoint Shard(const std::string& name, int64_t rows, int64_t cols, int slots) {
  ShardCheckpoint shard;
  VariableSpec* v = shard.mutable_spec()->mutable_variable();
  v->set_name(name);
  v->add_shape(rows);
  v->add_shape(cols);
  v->set_dtype(DT_FLOAT);
  v->mutable_optimizer()->set_learning_rate(1);
  shard.mutable_spec()->set_num_shards(1);
  shard.mutable_spec()->set_rows(rows);
  shard.set_version(7);
  shard.set_num_slots(slots);
  return shard;
}

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

class CheckpointFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  // Writes two shards, "a" [10, 3] with two slots and "b" [1, 5], in data
  // records of 2 rows of "a": several records per tensor; then table "t"
  // (width 2, Adagrad's one slot) with 3 rows in two records and 2
  // candidates.
  CheckpointFileWriter::Written Write() {
    PsCheckpointHeader header;
    header.set_ps_index(1);
    header.set_num_ps(2);
    header.set_step(42);
    auto writer = CheckpointFileWriter::Open(*fs_, path_, header, /*max_record_bytes=*/24);
    EXPECT_TRUE(writer.ok()) << writer.status();
    EXPECT_TRUE((*writer)->AddShard(Shard("a", 10, 3, 2), a_values_, {a_slot0_, a_slot1_}).ok());
    EXPECT_TRUE((*writer)->AddShard(Shard("b", 1, 5, 0), b_values_, {}).ok());
    TableCheckpoint table;
    table.mutable_spec()->set_name("t");
    table.mutable_spec()->set_width(2);
    table.mutable_spec()->mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
    table.mutable_spec()->mutable_optimizer()->set_learning_rate(0.1f);
    table.set_version(9);
    table.set_rows(3);
    table.set_candidates(2);
    const absl::Status added = (*writer)->AddTable(table);
    EXPECT_TRUE(added.ok()) << added;
    const std::vector<float> rows = Iota(12, 500);
    EXPECT_TRUE((*writer)->AddTableRows({11, 22}, absl::MakeSpan(rows).subspan(0, 8)).ok());
    EXPECT_TRUE((*writer)->AddTableRows({33}, absl::MakeSpan(rows).subspan(8)).ok());
    EXPECT_TRUE((*writer)->AddTableCandidates({44, 55}, {1, 2}).ok());
    auto written = (*writer)->Commit();
    EXPECT_TRUE(written.ok()) << written.status();
    return written.value_or(CheckpointFileWriter::Written{});
  }

  std::string OpenError(const std::string& contents) {
    EXPECT_TRUE(WriteFile(*fs_, path_, contents).ok());
    auto file = CheckpointFile::Open(*fs_, path_);
    return file.ok() ? "opened" : std::string(file.status().message());
  }

  std::unique_ptr<FileSystem> fs_ = MakeLocalFileSystem();
  std::string path_;
  const std::vector<float> a_values_ = Iota(30, 0), a_slot0_ = Iota(30, 100),
                           a_slot1_ = Iota(30, 200), b_values_ = Iota(5, 300);
};

TEST_F(CheckpointFileTest, RoundTripsAndReadsAnyRows) {
  const CheckpointFileWriter::Written written = Write();
  EXPECT_EQ(written.shards, 2);
  ManifestFile entry;
  entry.set_bytes(written.bytes);
  entry.set_crc32(written.crc32);
  auto file = CheckpointFile::Open(*fs_, path_, &entry);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->header().step(), 42);
  ASSERT_EQ((*file)->shards().size(), 2u);
  const CheckpointShard& a = (*file)->shards()[0];
  EXPECT_EQ(a.meta.version(), 7);
  EXPECT_EQ(a.data.size(), 15u);  // 5 records of 2 rows for each of 3 tensors
  // Rows 3..7 of the second slot cross three records.
  std::vector<float> rows(15);
  ASSERT_TRUE((*file)->ReadRows(a, 2, 3, absl::MakeSpan(rows)).ok());
  EXPECT_EQ(rows, std::vector<float>(a_slot1_.begin() + 9, a_slot1_.begin() + 24));
  std::vector<float> b(5);
  ASSERT_TRUE((*file)->ReadRows((*file)->shards()[1], 0, 0, absl::MakeSpan(b)).ok());
  EXPECT_EQ(b, b_values_);

  ASSERT_EQ((*file)->tables().size(), 1u);
  const CheckpointTable& t = (*file)->tables()[0];
  EXPECT_EQ(t.meta.version(), 9);
  std::vector<int64_t> ids;
  std::vector<float> values;
  std::vector<std::pair<int64_t, uint32_t>> candidates;
  ASSERT_TRUE((*file)
                  ->ReadTable(
                      t,
                      [&](int64_t id, absl::Span<const float> row) {
                        ids.push_back(id);
                        values.insert(values.end(), row.begin(), row.end());
                      },
                      [&](int64_t id, uint32_t touches) { candidates.emplace_back(id, touches); })
                  .ok());
  EXPECT_EQ(ids, (std::vector<int64_t>{11, 22, 33}));
  EXPECT_EQ(values, Iota(12, 500));
  EXPECT_EQ(candidates, (std::vector<std::pair<int64_t, uint32_t>>{{44, 1}, {55, 2}}));
}

// Cut anywhere, or with any byte changed, the file is refused naming the
// fault; it never opens with wrong data.
TEST_F(CheckpointFileTest, EveryTruncationAndCorruptionIsFound) {
  Write();
  const std::string good = *ReadFile(*fs_, path_);
  for (size_t size = 0; size < good.size(); size += 7) {
    const std::string error = OpenError(good.substr(0, size));
    EXPECT_TRUE(error.find("truncated") != std::string::npos ||
                error.find("not a Fulcrum checkpoint file") != std::string::npos)
        << "cut at " << size << ": " << error;
  }
  for (size_t at = 12; at < good.size(); at += 5) {
    std::string corrupt = good;
    corrupt[at] ^= 0x20;
    EXPECT_NE(OpenError(corrupt), "opened") << "byte " << at;
  }
  std::string version = good;
  version[8] = 1;
  EXPECT_THAT(OpenError(version), HasSubstr("has format version 1; this build reads version 3"));
  EXPECT_THAT(OpenError(good + "x"), HasSubstr("has data after its end record"));
  EXPECT_EQ(OpenError(good), "opened");
}

TEST_F(CheckpointFileTest, AFileThatIsNotItsManifestsIsRefused) {
  const CheckpointFileWriter::Written written = Write();
  ManifestFile entry;
  entry.set_bytes(written.bytes);
  entry.set_crc32(written.crc32 ^ 1);
  EXPECT_THAT(std::string(CheckpointFile::Open(*fs_, path_, &entry).status().message()),
              HasSubstr("does not match its manifest: its checksum differs"));
  entry.set_bytes(written.bytes + 1);
  EXPECT_THAT(std::string(CheckpointFile::Open(*fs_, path_, &entry).status().message()),
              HasSubstr("does not match its manifest"));
}

TEST_F(CheckpointFileTest, ShardsWhoseSizesDisagreeAreRefused) {
  auto writer = CheckpointFileWriter::Open(*fs_, path_, PsCheckpointHeader());
  ASSERT_TRUE(writer.ok());
  const absl::Status status = (*writer)->AddShard(Shard("a", 10, 3, 1), a_values_, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("has 30 values and 0 slots"));
  EXPECT_FALSE((*writer)->Commit().ok());
  EXPECT_EQ(fs_->NewRandomAccessFile(path_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointFileTest, DataChangedAfterOpeningIsDataLoss) {
  Write();
  auto file = CheckpointFile::Open(*fs_, path_);
  ASSERT_TRUE(file.ok());
  std::string data = *ReadFile(*fs_, path_);
  data[data.size() / 2] ^= 0x20;
  // Written in place, as a disk going bad would.
  auto out = fs_->NewWritableFile(path_);
  ASSERT_TRUE(out.ok() && (*out)->Append(data).ok() && (*out)->Close().ok());
  std::vector<float> all(30);
  absl::Status status;
  for (uint32_t tensor = 0; tensor < 3 && status.ok(); ++tensor) {
    status = (*file)->ReadRows((*file)->shards()[0], tensor, 0, absl::MakeSpan(all));
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), StartsWith("'" + path_ + "' changed"));
}

}  // namespace
}  // namespace fulcrum
