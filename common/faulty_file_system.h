// A FileSystem for tests: the local one, with faults injected into
// WriteFile on demand (a full disk, a short write that reports success).
#ifndef FULCRUM_COMMON_FAULTY_FILE_SYSTEM_H_
#define FULCRUM_COMMON_FAULTY_FILE_SYSTEM_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_system.h"

namespace fulcrum {

// The local file system with faults injected into WriteFile.
class FaultyFileSystem final : public FileSystem {
 public:
  enum class Fault { kNone, kDiskFull, kShortWrite };
  Fault fault = Fault::kNone;

  absl::Status WriteFile(const std::string& path, absl::string_view data) override {
    switch (fault) {
      case Fault::kDiskFull:
        // A real full disk leaves a partial file behind.
        local_->WriteFile(path, data.substr(0, data.size() / 3)).IgnoreError();
        return absl::ResourceExhaustedError(
            absl::StrCat("cannot write '", path, "': No space left on device"));
      case Fault::kShortWrite:
        return local_->WriteFile(path, data.substr(0, data.size() / 2));  // and says OK
      default:
        return local_->WriteFile(path, data);
    }
  }
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    return local_->ReadFile(path);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    return local_->Rename(from, to);
  }
  absl::Status SyncDir(const std::string& dir) override { return local_->SyncDir(dir); }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    return local_->ListDir(dir);
  }
  absl::Status MakeDirs(const std::string& dir) override { return local_->MakeDirs(dir); }
  absl::Status RemoveAll(const std::string& path) override { return local_->RemoveAll(path); }

 private:
  std::unique_ptr<FileSystem> local_ = MakeLocalFileSystem();
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_FAULTY_FILE_SYSTEM_H_
