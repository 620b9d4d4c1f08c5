// The file operations Fulcrum needs (checkpoints, the cluster spec, data
// sets), behind an interface so tests can
// inject faults (faulty_file_system.h: a full disk, short writes, failed
// renames and syncs, a crash that loses what was not synced).
// Implementations are thread-safe; the files they open are
// thread-compatible.
#ifndef FULCRUM_COMMON_FILE_SYSTEM_H_
#define FULCRUM_COMMON_FILE_SYSTEM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fulcrum {

// A file being written from its start. What Append wrote is durable once
// Sync returns OK.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status Append(absl::string_view data) = 0;
  virtual absl::Status Sync() = 0;
  // Closes the file; the destructor closes it too, ignoring errors.
  virtual absl::Status Close() = 0;
};

// A file read at offsets. Reads may run in parallel.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads `n` bytes at `offset` into `scratch` (room for n bytes); fewer
  // only at the end of the file. The view points into `scratch`.
  virtual absl::StatusOr<absl::string_view> Read(uint64_t offset, size_t n,
                                                 char* scratch) const = 0;
  virtual uint64_t Size() const = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Creates or truncates `path`.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // Opens `path` to append to it, creating it if need be.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) = 0;
  // NOT_FOUND when `path` does not exist. The file stays readable, as it
  // was opened, even if it is removed or replaced meanwhile.
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // Makes the creation, renaming and removal of entries in `dir` durable.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
  // Names in `dir` (not . and ..); NOT_FOUND if it does not exist.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  // Creates `dir` and its parents as needed.
  virtual absl::Status MakeDirs(const std::string& dir) = 0;
  // Removes a file or a directory tree; OK if it does not exist.
  virtual absl::Status RemoveAll(const std::string& path) = 0;
};

// The local POSIX file system.
std::unique_ptr<FileSystem> MakeLocalFileSystem();

// Creates or truncates `path`, writes `data` and syncs it.
absl::Status WriteFile(FileSystem& fs, const std::string& path, absl::string_view data);

// The whole file.
absl::StatusOr<std::string> ReadFile(FileSystem& fs, const std::string& path);

// A file's lines, in order, read a chunk at a time (a file far larger than
// memory streams through). Thread-compatible.
class LineReader {
 public:
  // NOT_FOUND (or the file system's error) when `path` cannot be opened.
  static absl::StatusOr<std::unique_ptr<LineReader>> Open(FileSystem& fs, const std::string& path);

  // The next line, without its '\n', into *line: true, or false at the
  // end. A read that fails is DATA_LOSS naming the file.
  absl::StatusOr<bool> Next(std::string* line);

 private:
  LineReader(std::string path, std::unique_ptr<RandomAccessFile> file)
      : path_(std::move(path)), file_(std::move(file)) {}

  const std::string path_;
  const std::unique_ptr<RandomAccessFile> file_;
  uint64_t offset_ = 0;  // of the file, read so far
  std::string buffer_;   // read, not yet returned
  size_t start_ = 0;     // of buffer_'s first byte not yet returned
};

// The directory part of `path`: "a/b" for "a/b/c", "." for "c".
std::string DirName(const std::string& path);

// Writes a file so that a reader sees the old file or the whole new one,
// never a part, also after a crash: the data goes to a temporary file
// beside it, which Commit syncs and renames into place, then syncs the
// directory. A writer not committed removes its temporary file.
// Thread-compatible.
class AtomicFileWriter {
 public:
  // Opens the temporary file for `path`.
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Open(FileSystem& fs,
                                                                const std::string& path);
  ~AtomicFileWriter();

  absl::Status Append(absl::string_view data);
  // On failure `path` is untouched and the temporary file removed.
  absl::Status Commit();

 private:
  AtomicFileWriter(FileSystem& fs, std::string path, std::string temp,
                   std::unique_ptr<WritableFile> file);
  // Removes the temporary file; returns `status`.
  absl::Status Abort(absl::Status status);

  FileSystem& fs_;
  const std::string path_;
  const std::string temp_;
  std::unique_ptr<WritableFile> file_;  // null once committed or aborted
};

// WriteFile through an AtomicFileWriter.
absl::Status WriteFileAtomically(FileSystem& fs, const std::string& path, absl::string_view data);

// OK when `dir` exists (created if needed) and a file can be written there;
// else an error naming the directory and why.
absl::Status CheckWritableDir(FileSystem& fs, const std::string& dir);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_FILE_SYSTEM_H_
