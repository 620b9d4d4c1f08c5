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
    : label_(std::move(label)), process_(std::move(argv), SubprocessOptions{std::move(env)}) {
  reader_ = std::thread([this] { Read(); });
}

ChildProcess::~ChildProcess() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  reader_.join();
}

void ChildProcess::Read() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    std::vector<std::string> lines = process_.ReadLines(absl::Milliseconds(50));
    for (const std::string& line : lines) {
      std::fprintf(stderr, "[%s] %s\n", label_.c_str(), line.c_str());
    }
    absl::MutexLock lock(&mu_);
    for (std::string& line : lines) read_.push_back(std::move(line));
    if (process_.output_fd() < 0) {
      ended_ = true;
      return;
    }
  }
}

bool ChildProcess::Take() const {
  absl::MutexLock lock(&mu_);
  for (std::string& line : read_) lines_.push_back(std::move(line));
  read_.clear();
  return ended_;
}

void ChildProcess::AwaitMore(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto more = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ended_ || !read_.empty(); };
  mu_.AwaitWithDeadline(absl::Condition(&more), deadline);
}

std::optional<std::string> ChildProcess::WaitForLine(const std::string& text,
                                                     absl::Duration timeout, size_t from) {
  const absl::Time deadline = absl::Now() + timeout;
  size_t checked = from;
  while (true) {
    const bool ended = Take();
    for (; checked < lines_.size(); ++checked) {
      if (lines_[checked].find(text) != std::string::npos) return lines_[checked];
    }
    if (ended || absl::Now() >= deadline) return std::nullopt;
    AwaitMore(deadline);
  }
}

std::optional<int> ChildProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!process_.Poll()) {
    if (absl::Now() > deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(5));  // the exit is checked every few milliseconds
  }
  // What it wrote before it exited.
  while (!Take() && absl::Now() < deadline) AwaitMore(deadline);
  return process_.Poll();
}

void ChildProcess::Signal(int sig) { process_.Signal(sig); }

bool ChildProcess::HasLine(const std::string& text) const {
  Take();
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
