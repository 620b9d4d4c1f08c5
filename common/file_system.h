// The file operations checkpoints need, behind an interface so tests can
// inject faults (disk full, short writes, corruption). Implementations are
// thread-safe.
#ifndef FULCRUM_COMMON_FILE_SYSTEM_H_
#define FULCRUM_COMMON_FILE_SYSTEM_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fulcrum {

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Creates or truncates `path` and writes `data`, then fsyncs it.
  virtual absl::Status WriteFile(const std::string& path, absl::string_view data) = 0;
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // Makes a rename inside `dir` durable.
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

// Writes `data` to `path` so that a reader sees the old file or the whole
// new one, never a part: a temporary file beside it, fsync, rename, and a
// sync of the directory. On failure the temporary file is removed and
// `path` is untouched.
absl::Status WriteFileAtomically(FileSystem& fs, const std::string& path, absl::string_view data);

// OK when `dir` exists (created if needed) and a file can be written there;
// else an error naming the directory and why.
absl::Status CheckWritableDir(FileSystem& fs, const std::string& dir);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_FILE_SYSTEM_H_
