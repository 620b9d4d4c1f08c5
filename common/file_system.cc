#include "common/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int err = errno;
  const std::string message = absl::StrCat(what, " '", path, "': ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(message);
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM || err == EROFS) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

class LocalFileSystem final : public FileSystem {
 public:
  absl::Status WriteFile(const std::string& path, absl::string_view data) override {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("cannot create", path);
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = write(fd, data.data() + done, data.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        absl::Status status = Errno("cannot write", path);
        close(fd);
        return status;
      }
      done += static_cast<size_t>(n);
    }
    if (fsync(fd) != 0) {
      absl::Status status = Errno("cannot fsync", path);
      close(fd);
      return status;
    }
    if (close(fd) != 0) return Errno("cannot close", path);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno("cannot open", path);
    std::string data;
    char buffer[1 << 16];
    ssize_t n;
    while ((n = read(fd, buffer, sizeof(buffer))) != 0) {
      if (n < 0) {
        if (errno == EINTR) continue;
        absl::Status status = Errno("cannot read", path);
        close(fd);
        return status;
      }
      data.append(buffer, static_cast<size_t>(n));
    }
    close(fd);
    return data;
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (rename(from.c_str(), to.c_str()) != 0) return Errno("cannot rename to", to);
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& dir) override {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno("cannot open directory", dir);
    const int rc = fsync(fd);
    absl::Status status = rc == 0 ? absl::OkStatus() : Errno("cannot fsync directory", dir);
    close(fd);
    return status;
  }

  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return Errno("cannot list", dir);
    std::vector<std::string> names;
    while (dirent* entry = readdir(d)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(d);
    return names;
  }

  absl::Status MakeDirs(const std::string& dir) override {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create directory '", dir, "': ", error.message()));
    }
    return absl::OkStatus();
  }

  absl::Status RemoveAll(const std::string& path) override {
    std::error_code error;
    std::filesystem::remove_all(path, error);
    if (error) {
      return absl::InternalError(absl::StrCat("cannot remove '", path, "': ", error.message()));
    }
    return absl::OkStatus();
  }
};

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

}  // namespace

std::unique_ptr<FileSystem> MakeLocalFileSystem() { return std::make_unique<LocalFileSystem>(); }

absl::Status WriteFileAtomically(FileSystem& fs, const std::string& path, absl::string_view data) {
  const std::string temp = absl::StrCat(path, ".tmp-", getpid());
  absl::Status status = fs.WriteFile(temp, data);
  if (status.ok()) status = fs.Rename(temp, path);
  if (!status.ok()) {
    fs.RemoveAll(temp).IgnoreError();
    return status;
  }
  return fs.SyncDir(Parent(path));
}

absl::Status CheckWritableDir(FileSystem& fs, const std::string& dir) {
  if (absl::Status s = fs.MakeDirs(dir); !s.ok()) return s;
  const std::string probe = absl::StrCat(dir, "/.write-test-", getpid());
  absl::Status status = fs.WriteFile(probe, "ok");
  fs.RemoveAll(probe).IgnoreError();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("checkpoint directory '", dir,
                                                    "' is not writable: ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace fulcrum
