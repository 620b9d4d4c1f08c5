#include "common/checkpoint/directory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/faulty_file_system.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

absl::Status AcceptAll(const CheckpointFiles&) { return absl::OkStatus(); }

FaultyFileSystem::Faults ShortWrites() {
  FaultyFileSystem::Faults faults;
  faults.short_writes = true;
  return faults;
}
FaultyFileSystem::Faults FailedSyncs() {
  FaultyFileSystem::Faults faults;
  faults.fail_syncs = true;
  return faults;
}
FaultyFileSystem::Faults FailedRenames() {
  FaultyFileSystem::Faults faults;
  faults.fail_renames = true;
  return faults;
}
FaultyFileSystem::Faults DiskFullAfter(int64_t bytes) {
  FaultyFileSystem::Faults faults;
  faults.disk_full_after_bytes = bytes;
  return faults;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(fs_.RemoveAll(root_).ok());
    ASSERT_TRUE(fs_.MakeDirs(root_).ok());
  }

  // Writes checkpoint `step` from `num_ps` servers, each file holding its
  // two rows of w [2 * num_ps, 3], at version `step`; the manifest only if
  // `complete`.
  void WriteCheckpoint(int64_t step, int num_ps, bool complete = true) {
    const std::string dir = absl::StrCat(root_, "/", CheckpointDirName(step));
    ASSERT_TRUE(fs_.MakeDirs(dir).ok());
    std::vector<ManifestFile> files;
    for (int ps = 0; ps < num_ps; ++ps) {
      PsCheckpointHeader header;
      header.set_ps_index(ps);
      header.set_num_ps(num_ps);
      header.set_step(step);
      auto writer = CheckpointFileWriter::Open(fs_, PsPath(step, ps, num_ps), header);
      ASSERT_TRUE(writer.ok()) << writer.status();
      ShardCheckpoint shard;
      VariableSpec* v = shard.mutable_spec()->mutable_variable();
      v->set_name("w");
      v->add_shape(int64_t{2} * num_ps);
      v->add_shape(3);
      v->set_dtype(DT_FLOAT);
      v->mutable_optimizer()->set_learning_rate(1);
      shard.mutable_spec()->set_shard(ps);
      shard.mutable_spec()->set_num_shards(num_ps);
      shard.mutable_spec()->set_row_offset(int64_t{2} * ps);
      shard.mutable_spec()->set_rows(2);
      shard.set_version(step);
      const std::vector<float> values(6, static_cast<float>(step));
      // A fault the test injected fails the shard or the commit.
      if (!(*writer)->AddShard(shard, values, {}).ok()) return;
      auto written = (*writer)->Commit();
      if (!written.ok()) return;
      ManifestFile& file = files.emplace_back();
      file.set_name(PsFileName(ps, num_ps));
      file.set_bytes(written->bytes);
      file.set_crc32(written->crc32);
    }
    if (complete) {
      ASSERT_TRUE(WriteManifest(fs_, root_, step, num_ps, files).ok());
    }
  }

  std::string PsPath(int64_t step, int ps, int num_ps) {
    return absl::StrCat(root_, "/", CheckpointDirName(step), "/", PsFileName(ps, num_ps));
  }

  int64_t NewestStep(std::vector<std::string>* problems) {
    auto loaded = LoadNewestCheckpoint(fs_, root_, AcceptAll, problems);
    return loaded.ok() ? (*loaded)[0]->header().step() : -1;
  }

  FaultyFileSystem fs_;
  std::string root_;
};

TEST_F(CheckpointTest, ManifestFramingRoundTripsAndNamesEveryFault) {
  CheckpointManifest manifest;
  manifest.set_step(42);
  const std::string data = *FrameMessage(manifest);
  CheckpointManifest back;
  ASSERT_TRUE(UnframeMessage(data, "f", &back).ok());
  EXPECT_EQ(back.step(), 42);

  auto message = [&](absl::string_view bytes, const std::string& path) {
    return std::string(UnframeMessage(bytes, path, &back).message());
  };
  EXPECT_THAT(message("garbage", "f1"), HasSubstr("'f1' is not a Fulcrum manifest"));
  std::string version = data;
  version[8] = 9;
  EXPECT_THAT(message(version, "f2"),
              HasSubstr("'f2' has format version 9; this build reads version 1"));
  EXPECT_THAT(message(data.substr(0, data.size() - 1), "f3"), HasSubstr("'f3' is truncated"));
  std::string corrupt = data;
  corrupt.back() ^= 0x40;
  EXPECT_THAT(message(corrupt, "f4"), HasSubstr("'f4' is corrupt"));
}

TEST_F(CheckpointTest, NewestCompleteCheckpointLoads) {
  WriteCheckpoint(10, 2);
  WriteCheckpoint(20, 2);
  WriteCheckpoint(30, 2, /*complete=*/false);  // a server wrote, the chief never did
  std::vector<std::string> problems;
  auto loaded = LoadNewestCheckpoint(fs_, root_, AcceptAll, &problems);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ((*loaded)[0]->header().step(), 20);
  EXPECT_EQ((*loaded)[1]->shards()[0].meta.version(), 20);
  EXPECT_TRUE(problems.empty());
}

TEST_F(CheckpointTest, CorruptOrTruncatedFilesFallBackToThePreviousCheckpoint) {
  WriteCheckpoint(10, 2);
  WriteCheckpoint(20, 2);
  // Flip a byte of one server's file of the newest checkpoint.
  std::string data = *ReadFile(fs_, PsPath(20, 1, 2));
  data[data.size() / 2] ^= 0x01;
  ASSERT_TRUE(WriteFile(fs_, PsPath(20, 1, 2), data).ok());
  std::vector<std::string> problems;
  EXPECT_EQ(NewestStep(&problems), 10);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr(PsFileName(1, 2)));
  EXPECT_THAT(problems[0], HasSubstr("falling back"));

  // A short write that reported success is caught the same way.
  fs_.SetFaults(ShortWrites());
  WriteCheckpoint(30, 1);
  fs_.SetFaults({});
  problems.clear();
  EXPECT_EQ(NewestStep(&problems), 10);
  EXPECT_EQ(problems.size(), 2u);  // 30's manifest is short, 20's file is corrupt
}

// Files that verify but that the caller cannot use (they do not regroup)
// fall back as a corrupt one does.
TEST_F(CheckpointTest, ACheckpointTheCallerRefusesFallsBack) {
  WriteCheckpoint(10, 2);
  WriteCheckpoint(20, 2);
  std::vector<std::string> problems;
  auto loaded = LoadNewestCheckpoint(
      fs_, root_,
      [](const CheckpointFiles& files) {
        return files[0]->header().step() == 20 ? absl::DataLossError("rows do not tile")
                                               : absl::OkStatus();
      },
      &problems);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ((*loaded)[0]->header().step(), 10);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "rows do not tile; falling back to an older checkpoint");
}

// A crash at any point of a checkpoint leaves the newest complete one
// readable: a checkpoint is complete only once everything it holds is
// durable.
TEST_F(CheckpointTest, ACrashMidCheckpointLosesOnlyThatCheckpoint) {
  WriteCheckpoint(10, 2);
  for (const FaultyFileSystem::Faults& faults :
       {FailedSyncs(), FailedRenames(), DiskFullAfter(100)}) {
    fs_.SetFaults(faults);
    WriteCheckpoint(20, 2);
    fs_.DropUnsyncedData();
    std::vector<std::string> problems;
    EXPECT_EQ(NewestStep(&problems), 10);
    EXPECT_TRUE(problems.empty()) << problems[0];
  }
  // Without faults, checkpoint 20 is durable: a crash keeps it.
  WriteCheckpoint(20, 2);
  fs_.DropUnsyncedData();
  std::vector<std::string> problems;
  EXPECT_EQ(NewestStep(&problems), 20);
}

// A manifest is the chief's, but the directory may be shared: one naming a
// file outside its checkpoint, or not one file per server, is refused
// before any file it names is opened, and an older checkpoint loads.
TEST_F(CheckpointTest, AManifestNamingFilesOutsideItsCheckpointIsRefused) {
  WriteCheckpoint(10, 1);
  WriteCheckpoint(20, 1);
  const std::string manifest_path =
      absl::StrCat(root_, "/", CheckpointDirName(20), "/", kManifestName);
  CheckpointManifest manifest;
  ASSERT_TRUE(UnframeMessage(*ReadFile(fs_, manifest_path), manifest_path, &manifest).ok());
  const CheckpointManifest good = manifest;
  for (const std::string& name :
       {std::string("../") + CheckpointDirName(10) + "/" + PsFileName(0, 1), std::string(".."),
        std::string()}) {
    manifest = good;
    manifest.mutable_files(0)->set_name(name);
    ASSERT_TRUE(WriteFile(fs_, manifest_path, *FrameMessage(manifest)).ok());
    std::vector<std::string> problems;
    EXPECT_EQ(NewestStep(&problems), 10) << name;
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_THAT(problems[0], HasSubstr("not a file of its directory"));
  }
  manifest = good;
  manifest.set_num_ps(2);
  ASSERT_TRUE(WriteFile(fs_, manifest_path, *FrameMessage(manifest)).ok());
  std::vector<std::string> problems;
  EXPECT_EQ(NewestStep(&problems), 10);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("lists 1 files for 2 servers"));
}

TEST_F(CheckpointTest, NothingToLoadIsNotFound) {
  std::vector<std::string> problems;
  EXPECT_EQ(LoadNewestCheckpoint(fs_, root_, AcceptAll, &problems).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadNewestCheckpoint(fs_, root_ + "/missing", AcceptAll, &problems).status().code(),
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

}  // namespace
}  // namespace fulcrum
