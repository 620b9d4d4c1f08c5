// A FileSystem for tests, after leveldb's fault-injection environment: the
// local file system, with faults injected on demand (a full disk, writes
// that lie, failed renames, syncs and reads) and a simulated crash that loses
// everything not made durable: file data after the file's last Sync, and
// directory entries created or renamed since the directory's last SyncDir.
// Thread-safe.
#ifndef FULCRUM_COMMON_FAULTY_FILE_SYSTEM_H_
#define FULCRUM_COMMON_FAULTY_FILE_SYSTEM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/file_system.h"

namespace fulcrum {

class FaultyFileSystem final : public FileSystem {
 public:
  struct Faults {
    // Appends past this many bytes (counted from SetFaults) write what fits
    // and fail RESOURCE_EXHAUSTED, as a full disk does; -1: no limit.
    int64_t disk_full_after_bytes = -1;
    bool short_writes = false;  // appends write half their data and report success
    bool fail_renames = false;
    bool fail_syncs = false;  // Sync and SyncDir fail
    bool fail_reads = false;  // opening a file to read fails, as for an unreadable file
  };

  void SetFaults(Faults faults) ABSL_LOCKS_EXCLUDED(mu_);

  // A crash and restart: every file written here is cut back to what its
  // last successful Sync made durable, and every entry created or renamed
  // into a directory since its last successful SyncDir is undone (a
  // renamed-over file comes back). Faults are cleared.
  void DropUnsyncedData() ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override
      ABSL_LOCKS_EXCLUDED(mu_);
  // Appends meet the same faults; a crash keeps what the file held before.
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Rename(const std::string& from, const std::string& to) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SyncDir(const std::string& dir) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    return local_->ListDir(dir);
  }
  absl::Status MakeDirs(const std::string& dir) override { return local_->MakeDirs(dir); }
  absl::Status RemoveAll(const std::string& path) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class File;
  // An entry of a directory that a crash would undo, and what it replaced.
  struct NewEntry {
    std::optional<std::string> replaced;  // the old file's contents, if there was one
  };

  // Bytes an append of `n` may write now: n, fewer when the disk fills.
  // Sets *full when it does.
  size_t Admit(size_t n, bool* full) ABSL_LOCKS_EXCLUDED(mu_);
  void Synced(const std::string& path, int64_t size) ABSL_LOCKS_EXCLUDED(mu_);
  void AddEntryLocked(const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Faults faults() const ABSL_LOCKS_EXCLUDED(mu_);

  const std::unique_ptr<FileSystem> local_ = MakeLocalFileSystem();
  mutable absl::Mutex mu_;
  Faults faults_ ABSL_GUARDED_BY(mu_);
  int64_t written_since_faults_ ABSL_GUARDED_BY(mu_) = 0;
  // The durable size of every file written here, by its current path.
  std::map<std::string, int64_t> synced_sizes_ ABSL_GUARDED_BY(mu_);
  // Entries a crash would undo, by path.
  std::map<std::string, NewEntry> new_entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_FAULTY_FILE_SYSTEM_H_
