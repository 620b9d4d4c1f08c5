#include "common/checkpoint/restore.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

VariableSpec W(int64_t rows) {
  VariableSpec v;
  v.set_name("w");
  v.add_shape(rows);
  v.add_shape(3);
  v.set_dtype(DT_FLOAT);
  v.mutable_optimizer()->set_learning_rate(1);
  return v;
}

class RestoreTest : public ::testing::Test {
 protected:
  RestoreTest()
      : fs_(MakeLocalFileSystem()),
        root_(absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    EXPECT_TRUE(fs_->RemoveAll(root_).ok());
    EXPECT_TRUE(fs_->MakeDirs(root_).ok());
  }

  // Checkpoint `step` of one server, holding w [rows, 3] filled with `step`.
  SaveCheckpointResponse Save(int64_t step, int64_t rows) {
    auto saved = SaveServerFile(*fs_, root_, step, 0, 1, [&](CheckpointFileWriter& writer) {
      ShardCheckpoint shard;
      *shard.mutable_spec()->mutable_variable() = W(rows);
      shard.mutable_spec()->set_num_shards(1);
      shard.mutable_spec()->set_rows(rows);
      shard.set_version(step);
      return writer.AddShard(shard, std::vector<float>(rows * 3, static_cast<float>(step)), {});
    });
    EXPECT_TRUE(saved.ok()) << saved.status();
    ManifestFile file;
    file.set_name(saved->file());
    file.set_bytes(saved->bytes());
    file.set_crc32(saved->crc32());
    EXPECT_TRUE(WriteManifest(*fs_, root_, step, 1, {file}).ok());
    return *saved;
  }

  std::unique_ptr<FileSystem> fs_;
  const std::string root_;
};

TEST_F(RestoreTest, SavesAServersFileThatTheNewestRestorePointReads) {
  const SaveCheckpointResponse saved = Save(7, 4);
  EXPECT_EQ(saved.file(), PsFileName(0, 1));
  EXPECT_EQ(saved.shards(), 1);
  EXPECT_GT(saved.bytes(), 4 * 3 * 4);
  Save(9, 4);
  std::vector<std::string> problems;
  auto point = LoadRestorePoint(*fs_, root_, nullptr, nullptr, &problems);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(point->step, 9);
  EXPECT_FALSE(point->adjusted);
  ASSERT_EQ(point->files.size(), 1u);
  ShardContents contents;
  contents.values.resize(12);  // 4 rows of 3
  ASSERT_TRUE(point->variables.at("w").Read(0, 4, &contents).ok());
  EXPECT_EQ(contents.values, std::vector<float>(12, 9.0f));
}

TEST_F(RestoreTest, FallsBackPastACheckpointThatWillNotDo) {
  Save(3, 4);
  Save(5, 6);  // another shape
  std::vector<std::string> problems;
  auto point = LoadRestorePoint(
      *fs_, root_, nullptr,
      [](const RestoredVariables& variables) {
        return CheckRestorable(variables.at("w").spec, W(4));
      },
      &problems);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->step, 3);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("falling back to an older checkpoint"));

  auto none = LoadRestorePoint(
      *fs_, root_, nullptr,
      [](const RestoredVariables&) { return absl::FailedPreconditionError("not this model"); },
      &problems);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RestoreTest, AdjustedFilesAreSaidAndAFinalFileCountsAsStepZero) {
  // A final file alone has no step: -1 counts as 0.
  auto written = WriteServerFile(*fs_, root_ + "/final.ckpt", 0, 1, -1,
                                 [](CheckpointFileWriter&) { return absl::OkStatus(); });
  ASSERT_TRUE(written.ok()) << written.status();
  auto final_file = CheckpointFile::Open(*fs_, root_ + "/final.ckpt");
  ASSERT_TRUE(final_file.ok()) << final_file.status();
  EXPECT_EQ((*final_file)->header().step(), -1);
  auto point = MakeRestorePoint(
      {},
      [&](CheckpointFiles* files) {
        files->push_back(*final_file);
        return true;
      },
      nullptr);
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_TRUE(point->adjusted);
  EXPECT_EQ(point->step, 0);
  EXPECT_TRUE(point->variables.empty());
}

}  // namespace
}  // namespace fulcrum
