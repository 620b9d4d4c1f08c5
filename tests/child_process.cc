#include "tests/child_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/time/clock.h"

namespace fulcrum {

ChildProcess::ChildProcess(std::string label, std::vector<std::string> argv,
                           std::vector<std::string> env)
    : label_(std::move(label)) {
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("pipe");
    std::abort();
  }
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    for (std::string& var : env) putenv(var.data());
    std::vector<char*> args;
    for (std::string& arg : argv) args.push_back(arg.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "cannot exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  out_fd_ = fds[0];
}

ChildProcess::~ChildProcess() {
  if (!exit_code_) {
    kill(pid_, SIGKILL);
    Wait(absl::Seconds(10));
  }
  if (out_fd_ >= 0) close(out_fd_);
}

bool ChildProcess::ReadSome(absl::Duration timeout) {
  if (out_fd_ < 0) return false;
  pollfd pfd{out_fd_, POLLIN, 0};
  if (poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) <= 0) return true;
  char buffer[4096];
  const ssize_t n = read(out_fd_, buffer, sizeof(buffer));
  if (n <= 0) {
    close(out_fd_);
    out_fd_ = -1;
    return false;
  }
  partial_.append(buffer, n);
  for (size_t end; (end = partial_.find('\n')) != std::string::npos;) {
    lines_.push_back(partial_.substr(0, end));
    std::fprintf(stderr, "[%s] %s\n", label_.c_str(), lines_.back().c_str());
    partial_.erase(0, end + 1);
  }
  return true;
}

std::optional<std::string> ChildProcess::WaitForLine(const std::string& text,
                                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  size_t checked = 0;
  while (true) {
    for (; checked < lines_.size(); ++checked) {
      if (lines_[checked].find(text) != std::string::npos) return lines_[checked];
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration() || !ReadSome(left)) return std::nullopt;
  }
}

std::optional<int> ChildProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!exit_code_) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (absl::Now() > deadline) return std::nullopt;
    // Reading keeps the child from blocking on a full pipe; once its output
    // has closed, the exit is checked every few milliseconds.
    if (!ReadSome(absl::Milliseconds(10))) absl::SleepFor(absl::Milliseconds(5));
  }
  while (out_fd_ >= 0 && absl::Now() < deadline && ReadSome(absl::Milliseconds(10))) {
  }
  return exit_code_;
}

void ChildProcess::Signal(int sig) {
  if (!exit_code_) kill(pid_, sig);
}

bool ChildProcess::HasLine(const std::string& text) const {
  for (const std::string& line : lines_) {
    if (line.find(text) != std::string::npos) return true;
  }
  return false;
}

std::optional<int> WaitForPort(ChildProcess& process, const std::string& marker,
                               absl::Duration timeout) {
  const std::optional<std::string> line = process.WaitForLine(marker, timeout);
  if (!line) return std::nullopt;
  std::smatch match;
  const std::string rest = line->substr(line->find(marker) + marker.size());
  if (!std::regex_search(rest, match, std::regex(":(\\d+)"))) return std::nullopt;
  return std::stoi(match[1]);
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  std::string response;
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    ssize_t n;
    while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

std::string RunfilePath(const std::string& path) {
  const char* root = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return std::string(root ? root : ".") + "/" + (workspace ? workspace : "fulcrum") + "/" + path;
}

}  // namespace fulcrum
