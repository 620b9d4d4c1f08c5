#include "common/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
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

class LocalWritableFile final : public WritableFile {
 public:
  LocalWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~LocalWritableFile() override {
    if (fd_ >= 0) close(fd_);
  }

  absl::Status Append(absl::string_view data) override {
    for (size_t done = 0; done < data.size();) {
      const ssize_t n = write(fd_, data.data() + done, data.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno("cannot write", path_);
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fsync(fd_) != 0) return Errno("cannot fsync", path_);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    const int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && close(fd) != 0) return Errno("cannot close", path_);
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  int fd_;
};

class LocalRandomAccessFile final : public RandomAccessFile {
 public:
  LocalRandomAccessFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~LocalRandomAccessFile() override { close(fd_); }

  absl::StatusOr<absl::string_view> Read(uint64_t offset, size_t n, char* scratch) const override {
    size_t done = 0;
    while (done < n) {
      const ssize_t got = pread(fd_, scratch + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0) {
        if (errno == EINTR) continue;
        return Errno("cannot read", path_);
      }
      if (got == 0) break;  // the end of the file
      done += static_cast<size_t>(got);
    }
    return absl::string_view(scratch, done);
  }

  uint64_t Size() const override { return size_; }

 private:
  const std::string path_;
  const int fd_;
  const uint64_t size_;
};

class LocalFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("cannot create", path);
    return std::make_unique<LocalWritableFile>(path, fd);
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("cannot open", path);
    return std::make_unique<LocalWritableFile>(path, fd);
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno("cannot open", path);
    struct stat info;
    if (fstat(fd, &info) != 0) {
      absl::Status status = Errno("cannot stat", path);
      close(fd);
      return status;
    }
    return std::make_unique<LocalRandomAccessFile>(path, fd, static_cast<uint64_t>(info.st_size));
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

}  // namespace

std::unique_ptr<FileSystem> MakeLocalFileSystem() { return std::make_unique<LocalFileSystem>(); }

absl::Status WriteFile(FileSystem& fs, const std::string& path, absl::string_view data) {
  auto file = fs.NewWritableFile(path);
  if (!file.ok()) return file.status();
  absl::Status status = (*file)->Append(data);
  if (status.ok()) status = (*file)->Sync();
  absl::Status closed = (*file)->Close();
  return status.ok() ? closed : status;
}

absl::StatusOr<std::string> ReadFile(FileSystem& fs, const std::string& path) {
  auto file = fs.NewRandomAccessFile(path);
  if (!file.ok()) return file.status();
  std::string data((*file)->Size(), '\0');
  auto read = (*file)->Read(0, data.size(), data.data());
  if (!read.ok()) return read.status();
  data.resize(read->size());
  return data;
}

absl::StatusOr<std::unique_ptr<LineReader>> LineReader::Open(FileSystem& fs,
                                                             const std::string& path) {
  auto file = fs.NewRandomAccessFile(path);
  if (!file.ok()) return file.status();
  return std::unique_ptr<LineReader>(new LineReader(path, *std::move(file)));
}

absl::StatusOr<bool> LineReader::Next(std::string* line) {
  constexpr size_t kChunk = 1 << 20;
  for (;;) {
    const size_t end = buffer_.find('\n', start_);
    if (end != std::string::npos) {
      line->assign(buffer_, start_, end - start_);
      start_ = end + 1;
      return true;
    }
    if (offset_ >= file_->Size()) {  // the last line may lack its '\n'
      if (start_ >= buffer_.size()) return false;
      line->assign(buffer_, start_, std::string::npos);
      start_ = buffer_.size();
      return true;
    }
    buffer_.erase(0, start_);
    start_ = 0;
    const size_t kept = buffer_.size();
    buffer_.resize(kept + kChunk);
    auto read = file_->Read(offset_, kChunk, buffer_.data() + kept);
    if (!read.ok()) {
      return absl::DataLossError(
          absl::StrCat("reading ", path_, " failed: ", read.status().message()));
    }
    // The view may lie in the scratch space or elsewhere (a memory map).
    if (read->data() != buffer_.data() + kept)
      std::memmove(buffer_.data() + kept, read->data(), read->size());
    buffer_.resize(kept + read->size());
    offset_ += read->size();
    if (read->empty()) offset_ = file_->Size();  // the file shrank: nothing more comes
  }
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Open(FileSystem& fs,
                                                                         const std::string& path) {
  // Unique within this process too: two writers of one path may overlap.
  static std::atomic<uint64_t> next{0};
  std::string temp = absl::StrCat(path, ".tmp-", getpid(), "-", next++);
  auto file = fs.NewWritableFile(temp);
  if (!file.ok()) return file.status();
  return std::unique_ptr<AtomicFileWriter>(
      new AtomicFileWriter(fs, path, std::move(temp), *std::move(file)));
}

AtomicFileWriter::AtomicFileWriter(FileSystem& fs, std::string path, std::string temp,
                                   std::unique_ptr<WritableFile> file)
    : fs_(fs), path_(std::move(path)), temp_(std::move(temp)), file_(std::move(file)) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (file_ != nullptr) Abort(absl::OkStatus()).IgnoreError();
}

absl::Status AtomicFileWriter::Abort(absl::Status status) {
  file_.reset();
  fs_.RemoveAll(temp_).IgnoreError();
  return status;
}

absl::Status AtomicFileWriter::Append(absl::string_view data) {
  if (file_ == nullptr) return absl::FailedPreconditionError("the file was committed or aborted");
  absl::Status status = file_->Append(data);
  return status.ok() ? status : Abort(status);
}

absl::Status AtomicFileWriter::Commit() {
  if (file_ == nullptr) return absl::FailedPreconditionError("the file was committed or aborted");
  absl::Status status = file_->Sync();
  if (status.ok()) status = file_->Close();
  if (status.ok()) status = fs_.Rename(temp_, path_);
  if (!status.ok()) return Abort(status);
  file_.reset();
  return fs_.SyncDir(DirName(path_));
}

absl::Status WriteFileAtomically(FileSystem& fs, const std::string& path, absl::string_view data) {
  auto writer = AtomicFileWriter::Open(fs, path);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = (*writer)->Append(data); !s.ok()) return s;
  return (*writer)->Commit();
}

absl::Status CheckWritableDir(FileSystem& fs, const std::string& dir) {
  if (absl::Status s = fs.MakeDirs(dir); !s.ok()) return s;
  const std::string probe = absl::StrCat(dir, "/.write-test-", getpid());
  absl::Status status = WriteFile(fs, probe, "ok");
  fs.RemoveAll(probe).IgnoreError();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("checkpoint directory '", dir,
                                                    "' is not writable: ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace fulcrum
