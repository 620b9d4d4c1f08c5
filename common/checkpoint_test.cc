#include "common/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/faulty_file_system.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(fs_.RemoveAll(root_).ok());
    ASSERT_TRUE(fs_.MakeDirs(root_).ok());
  }

  // Writes checkpoint `step` from `num_ps` servers, each file holding one
  // shard whose version is `step`; the manifest only if `complete`.
  void WriteCheckpoint(int64_t step, int num_ps, bool complete = true) {
    const std::string dir = absl::StrCat(root_, "/", CheckpointDirName(step));
    ASSERT_TRUE(fs_.MakeDirs(dir).ok());
    std::vector<ManifestFile> files;
    for (int ps = 0; ps < num_ps; ++ps) {
      PsCheckpoint checkpoint;
      checkpoint.set_ps_index(ps);
      checkpoint.set_num_ps(num_ps);
      checkpoint.set_step(step);
      checkpoint.add_shards()->set_version(step);
      const std::string data = FrameMessage(checkpoint);
      ManifestFile& file = files.emplace_back();
      file.set_name(PsFileName(ps, num_ps));
      file.set_bytes(static_cast<int64_t>(data.size()));
      file.set_crc32(Crc32(data));
      ASSERT_TRUE(WriteFileAtomically(fs_, absl::StrCat(dir, "/", file.name()), data).ok());
    }
    if (complete) ASSERT_TRUE(WriteManifest(fs_, root_, step, num_ps, files).ok());
  }

  std::string PsPath(int64_t step, int ps, int num_ps) {
    return absl::StrCat(root_, "/", CheckpointDirName(step), "/", PsFileName(ps, num_ps));
  }

  FaultyFileSystem fs_;
  std::string root_;
};

TEST_F(CheckpointTest, FramingRoundTripsAndNamesEveryFault) {
  PsCheckpoint checkpoint;
  checkpoint.set_step(42);
  const std::string data = FrameMessage(checkpoint);
  PsCheckpoint back;
  ASSERT_TRUE(UnframeMessage(data, "f", &back).ok());
  EXPECT_EQ(back.step(), 42);

  EXPECT_THAT(UnframeMessage("garbage", "f1", &back).message(), HasSubstr("'f1' is not a Fulcrum"));
  std::string version = data;
  version[8] = 9;
  EXPECT_THAT(UnframeMessage(version, "f2", &back).message(),
              HasSubstr("'f2' has format version 9; this build reads version 1"));
  EXPECT_THAT(UnframeMessage(data.substr(0, data.size() - 1), "f3", &back).message(),
              HasSubstr("'f3' is truncated"));
  std::string corrupt = data;
  corrupt.back() ^= 0x40;
  EXPECT_THAT(UnframeMessage(corrupt, "f4", &back).message(), HasSubstr("'f4' is corrupt"));
}

TEST_F(CheckpointTest, AtomicWriteLeavesTheOldFileWhenTheDiskIsFull) {
  const std::string path = root_ + "/file";
  ASSERT_TRUE(WriteFileAtomically(fs_, path, "old contents").ok());
  fs_.fault = FaultyFileSystem::Fault::kDiskFull;
  absl::Status status = WriteFileAtomically(fs_, path, "new contents that do not fit");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*fs_.ReadFile(path), "old contents");
  EXPECT_EQ(fs_.ListDir(root_)->size(), 1u);  // no temporary file left behind
}

TEST_F(CheckpointTest, NewestCompleteCheckpointLoads) {
  WriteCheckpoint(10, 2);
  WriteCheckpoint(20, 2);
  WriteCheckpoint(30, 2, /*complete=*/false);  // a server wrote, the chief never did
  std::vector<std::string> problems;
  auto loaded = LoadNewestCheckpoint(fs_, root_, &problems);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ((*loaded)[0].step(), 20);
  EXPECT_TRUE(problems.empty());
}

TEST_F(CheckpointTest, CorruptOrTruncatedFilesFallBackToThePreviousCheckpoint) {
  WriteCheckpoint(10, 2);
  WriteCheckpoint(20, 2);
  // Flip a byte of one server's file of the newest checkpoint.
  std::string data = *fs_.ReadFile(PsPath(20, 1, 2));
  data[data.size() / 2] ^= 0x01;
  ASSERT_TRUE(fs_.WriteFile(PsPath(20, 1, 2), data).ok());
  std::vector<std::string> problems;
  auto loaded = LoadNewestCheckpoint(fs_, root_, &problems);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ((*loaded)[0].step(), 10);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr(PsFileName(1, 2)));
  EXPECT_THAT(problems[0], HasSubstr("falling back"));

  // A short write that reported success is caught the same way.
  fs_.fault = FaultyFileSystem::Fault::kShortWrite;
  WriteCheckpoint(30, 1);
  fs_.fault = FaultyFileSystem::Fault::kNone;
  problems.clear();
  loaded = LoadNewestCheckpoint(fs_, root_, &problems);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ((*loaded)[0].step(), 10);
  EXPECT_EQ(problems.size(), 2u);  // 30's manifest is short, 20's file is corrupt
}

TEST_F(CheckpointTest, NothingToLoadIsNotFound) {
  std::vector<std::string> problems;
  EXPECT_EQ(LoadNewestCheckpoint(fs_, root_, &problems).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadNewestCheckpoint(fs_, root_ + "/missing", &problems).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CheckpointTest, PruneKeepsTheNewestComplete) {
  for (int64_t step : {10, 20, 30, 40}) WriteCheckpoint(step, 1);
  WriteCheckpoint(35, 1, /*complete=*/false);  // older than the newest complete: garbage
  WriteCheckpoint(50, 1, /*complete=*/false);  // may still be in progress: kept
  ASSERT_TRUE(PruneCheckpoints(fs_, root_, 2).ok());
  auto names = *fs_.ListDir(root_);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, std::vector<std::string>(
                       {CheckpointDirName(30), CheckpointDirName(40), CheckpointDirName(50)}));
}

TEST_F(CheckpointTest, UnwritableDirectoryIsNamed) {
  ASSERT_TRUE(fs_.WriteFile(root_ + "/a-file", "x").ok());
  absl::Status status = CheckWritableDir(fs_, root_ + "/a-file/checkpoints");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("a-file/checkpoints"));
  EXPECT_TRUE(CheckWritableDir(fs_, root_ + "/new/dir").ok());
  fs_.fault = FaultyFileSystem::Fault::kDiskFull;
  EXPECT_THAT(CheckWritableDir(fs_, root_).message(), HasSubstr("is not writable"));
}

}  // namespace
}  // namespace fulcrum
