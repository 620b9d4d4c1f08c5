// The file system checkpoints use, and the faults tests inject into it.
#include "common/file_system.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/faulty_file_system.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

class FileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(fs_.RemoveAll(root_).ok());
    ASSERT_TRUE(fs_.MakeDirs(root_).ok());
    ASSERT_TRUE(fs_.SyncDir(root_).ok());
    path_ = root_ + "/file";
  }

  void SetFaults(void (*set)(FaultyFileSystem::Faults&)) {
    FaultyFileSystem::Faults faults;
    set(faults);
    fs_.SetFaults(faults);
  }

  std::string Contents() {
    auto data = ReadFile(fs_, path_);
    return data.ok() ? *data : absl::StrCat("<", data.status().ToString(), ">");
  }

  FaultyFileSystem fs_;
  std::string root_, path_;
};

TEST_F(FileSystemTest, AtomicWriteLeavesTheOldFileWhenTheDiskIsFull) {
  ASSERT_TRUE(WriteFileAtomically(fs_, path_, "old contents").ok());
  SetFaults([](FaultyFileSystem::Faults& f) { f.disk_full_after_bytes = 4; });
  absl::Status status = WriteFileAtomically(fs_, path_, "new contents that do not fit");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr("No space left on device"));
  EXPECT_EQ(Contents(), "old contents");
  EXPECT_EQ(fs_.ListDir(root_)->size(), 1u);  // no temporary file left behind
}

// Each fault on the way fails the write and leaves the old file, also after
// a crash; a write that returned OK survives a crash whole.
TEST_F(FileSystemTest, AtomicWriteIsOldOrNewAfterAnyFaultAndACrash) {
  ASSERT_TRUE(WriteFileAtomically(fs_, path_, "old").ok());
  for (auto set : {+[](FaultyFileSystem::Faults& f) { f.fail_syncs = true; },
                   +[](FaultyFileSystem::Faults& f) { f.fail_renames = true; },
                   +[](FaultyFileSystem::Faults& f) { f.disk_full_after_bytes = 1; }}) {
    SetFaults(set);
    EXPECT_FALSE(WriteFileAtomically(fs_, path_, "new").ok());
    fs_.DropUnsyncedData();
    EXPECT_EQ(Contents(), "old");
    EXPECT_EQ(fs_.ListDir(root_)->size(), 1u);
  }
  ASSERT_TRUE(WriteFileAtomically(fs_, path_, "new").ok());
  fs_.DropUnsyncedData();
  EXPECT_EQ(Contents(), "new");
}

// What the crash takes: data after the last sync, entries made since the
// directory's last sync.
TEST_F(FileSystemTest, ACrashDropsWhatWasNotSynced) {
  auto file = fs_.NewWritableFile(path_);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Append("durable").ok());
  ASSERT_TRUE((*file)->Sync().ok());
  ASSERT_TRUE(fs_.SyncDir(root_).ok());
  ASSERT_TRUE((*file)->Append(" and lost").ok());
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ(Contents(), "durable and lost");
  // A rename over the file, not made durable by a directory sync.
  ASSERT_TRUE(WriteFile(fs_, root_ + "/replacement", "replacement").ok());
  ASSERT_TRUE(fs_.SyncDir(root_).ok());
  ASSERT_TRUE(fs_.Rename(root_ + "/replacement", path_).ok());
  EXPECT_EQ(Contents(), "replacement");
  // A file synced, whose directory entry is not.
  ASSERT_TRUE(WriteFile(fs_, root_ + "/unlisted", "synced").ok());
  fs_.DropUnsyncedData();
  EXPECT_EQ(Contents(), "durable");
  EXPECT_EQ(ReadFile(fs_, root_ + "/unlisted").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(FileSystemTest, AShortWriteSaysOk) {
  SetFaults([](FaultyFileSystem::Faults& f) { f.short_writes = true; });
  ASSERT_TRUE(WriteFile(fs_, path_, "12345678").ok());
  EXPECT_EQ(Contents(), "1234");
}

TEST_F(FileSystemTest, AnUnwritableDirectoryIsNamed) {
  ASSERT_TRUE(WriteFile(fs_, root_ + "/a-file", "x").ok());
  absl::Status status = CheckWritableDir(fs_, root_ + "/a-file/checkpoints");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("a-file/checkpoints"));
  EXPECT_TRUE(CheckWritableDir(fs_, root_ + "/new/dir").ok());
  SetFaults([](FaultyFileSystem::Faults& f) { f.disk_full_after_bytes = 0; });
  EXPECT_THAT(std::string(CheckWritableDir(fs_, root_).message()), HasSubstr("is not writable"));
}

TEST_F(FileSystemTest, AnOpenFileStaysReadableWhenRemoved) {
  ASSERT_TRUE(WriteFile(fs_, path_, "still here").ok());
  auto file = fs_.NewRandomAccessFile(path_);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(fs_.RemoveAll(path_).ok());
  char scratch[16];
  auto read = (*file)->Read(6, 10, scratch);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, "here");
  EXPECT_EQ(fs_.NewRandomAccessFile(path_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(FileSystemTest, LinesAreReadAcrossChunksAndTheLastMayLackItsNewline) {
  // Lines longer than the reader's 1 MiB chunks, an empty one, and a last
  // one without its newline.
  const std::string long_line(3 << 20, 'x');
  ASSERT_TRUE(WriteFile(fs_, path_, "first\n" + long_line + "\n\nlast").ok());
  auto reader = LineReader::Open(fs_, path_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<std::string> lines;
  std::string line;
  while (*(*reader)->Next(&line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "first");
  EXPECT_EQ(lines[1], long_line);
  EXPECT_EQ(lines[2], "");
  EXPECT_EQ(lines[3], "last");
  EXPECT_FALSE(*(*reader)->Next(&line)) << "the end stays the end";

  ASSERT_TRUE(WriteFile(fs_, path_, "").ok());
  auto empty = LineReader::Open(fs_, path_);
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(*(*empty)->Next(&line));
  EXPECT_EQ(LineReader::Open(fs_, root_ + "/missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace fulcrum
