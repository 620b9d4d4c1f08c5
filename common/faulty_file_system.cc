#include "common/faulty_file_system.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace fulcrum {

// A file written through the faulty file system.
class FaultyFileSystem::File final : public WritableFile {
 public:
  // `size`: what the file held when opened.
  File(FaultyFileSystem* fs, std::string path, std::unique_ptr<WritableFile> local,
       int64_t size = 0)
      : fs_(fs), path_(std::move(path)), local_(std::move(local)), size_(size) {}

  absl::Status Append(absl::string_view data) override {
    if (fs_->faults().short_writes) data = data.substr(0, data.size() / 2);  // and says OK
    bool full = false;
    const size_t admitted = fs_->Admit(data.size(), &full);
    absl::Status status = local_->Append(data.substr(0, admitted));
    if (status.ok()) size_ += static_cast<int64_t>(admitted);
    if (status.ok() && full) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot write '", path_, "': No space left on device"));
    }
    return status;
  }

  absl::Status Sync() override {
    if (fs_->faults().fail_syncs) {
      return absl::InternalError(absl::StrCat("cannot fsync '", path_, "': Input/output error"));
    }
    absl::Status status = local_->Sync();
    if (status.ok()) fs_->Synced(path_, size_);
    return status;
  }

  absl::Status Close() override { return local_->Close(); }

 private:
  FaultyFileSystem* const fs_;
  const std::string path_;
  const std::unique_ptr<WritableFile> local_;
  int64_t size_;
};

void FaultyFileSystem::SetFaults(Faults faults) {
  absl::MutexLock lock(&mu_);
  faults_ = faults;
  written_since_faults_ = 0;
}

FaultyFileSystem::Faults FaultyFileSystem::faults() const {
  absl::MutexLock lock(&mu_);
  return faults_;
}

size_t FaultyFileSystem::Admit(size_t n, bool* full) {
  absl::MutexLock lock(&mu_);
  size_t admitted = n;
  if (faults_.disk_full_after_bytes >= 0) {
    const int64_t room =
        std::max<int64_t>(0, faults_.disk_full_after_bytes - written_since_faults_);
    admitted = std::min<size_t>(n, static_cast<size_t>(room));
  }
  *full = admitted < n;
  written_since_faults_ += static_cast<int64_t>(admitted);
  return admitted;
}

void FaultyFileSystem::Synced(const std::string& path, int64_t size) {
  absl::MutexLock lock(&mu_);
  synced_sizes_[path] = size;
}

void FaultyFileSystem::AddEntryLocked(const std::string& path) {
  if (new_entries_.count(path) > 0) return;  // what a crash restores is already known
  NewEntry entry;
  auto old = ReadFile(*local_, path);
  if (old.ok()) {
    // What a crash would bring back of it: what its last sync made durable.
    auto synced = synced_sizes_.find(path);
    if (synced != synced_sizes_.end()) old->resize(std::min<size_t>(old->size(), synced->second));
    entry.replaced = *std::move(old);
  }
  new_entries_[path] = std::move(entry);
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultyFileSystem::NewWritableFile(
    const std::string& path) {
  {
    absl::MutexLock lock(&mu_);
    AddEntryLocked(path);
    synced_sizes_[path] = 0;
  }
  auto local = local_->NewWritableFile(path);
  if (!local.ok()) return local.status();
  return std::make_unique<File>(this, path, *std::move(local));
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultyFileSystem::NewAppendableFile(
    const std::string& path) {
  int64_t size = 0;
  if (auto existing = local_->NewRandomAccessFile(path); existing.ok()) {
    size = static_cast<int64_t>((*existing)->Size());
  }
  {
    absl::MutexLock lock(&mu_);
    if (synced_sizes_.count(path) == 0) synced_sizes_[path] = size;
  }
  auto local = local_->NewAppendableFile(path);
  if (!local.ok()) return local.status();
  return std::make_unique<File>(this, path, *std::move(local), size);
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FaultyFileSystem::NewRandomAccessFile(
    const std::string& path) {
  if (faults().fail_reads) {
    return absl::PermissionDeniedError(absl::StrCat("injected: cannot read ", path));
  }
  return local_->NewRandomAccessFile(path);
}

absl::Status FaultyFileSystem::Rename(const std::string& from, const std::string& to) {
  absl::MutexLock lock(&mu_);
  if (faults_.fail_renames) {
    return absl::InternalError(absl::StrCat("cannot rename to '", to, "': Input/output error"));
  }
  AddEntryLocked(to);
  if (absl::Status s = local_->Rename(from, to); !s.ok()) return s;
  if (auto it = synced_sizes_.find(from); it != synced_sizes_.end()) {
    synced_sizes_[to] = it->second;
    synced_sizes_.erase(it);
  }
  new_entries_.erase(from);  // gone from its directory
  return absl::OkStatus();
}

absl::Status FaultyFileSystem::SyncDir(const std::string& dir) {
  absl::MutexLock lock(&mu_);
  if (faults_.fail_syncs) {
    return absl::InternalError(
        absl::StrCat("cannot fsync directory '", dir, "': Input/output error"));
  }
  if (absl::Status s = local_->SyncDir(dir); !s.ok()) return s;
  for (auto it = new_entries_.begin(); it != new_entries_.end();) {
    it = DirName(it->first) == dir ? new_entries_.erase(it) : std::next(it);
  }
  return absl::OkStatus();
}

absl::Status FaultyFileSystem::RemoveAll(const std::string& path) {
  absl::MutexLock lock(&mu_);
  auto under = [&path](const std::string& p) {
    return p == path || absl::StartsWith(p, absl::StrCat(path, "/"));
  };
  for (auto it = synced_sizes_.begin(); it != synced_sizes_.end();) {
    it = under(it->first) ? synced_sizes_.erase(it) : std::next(it);
  }
  for (auto it = new_entries_.begin(); it != new_entries_.end();) {
    it = under(it->first) ? new_entries_.erase(it) : std::next(it);
  }
  return local_->RemoveAll(path);
}

void FaultyFileSystem::DropUnsyncedData() {
  absl::MutexLock lock(&mu_);
  for (const auto& [path, size] : synced_sizes_) {
    // A file since removed stays removed.
    const int cut = truncate(path.c_str(), static_cast<off_t>(size));
    static_cast<void>(cut);
  }
  for (const auto& [path, entry] : new_entries_) {
    if (entry.replaced) {
      WriteFile(*local_, path, *entry.replaced).IgnoreError();
    } else {
      local_->RemoveAll(path).IgnoreError();
    }
    synced_sizes_.erase(path);
  }
  new_entries_.clear();
  faults_ = Faults();
  written_since_faults_ = 0;
}

}  // namespace fulcrum
