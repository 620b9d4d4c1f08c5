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
    : label_(std::move(label)), process_(std::move(argv), SubprocessOptions{std::move(env)}) {}

bool ChildProcess::ReadSome(absl::Duration timeout) {
  for (std::string& line : process_.ReadLines(timeout)) {
    std::fprintf(stderr, "[%s] %s\n", label_.c_str(), line.c_str());
    lines_.push_back(std::move(line));
  }
  return process_.output_fd() >= 0;
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
    if (left <= absl::ZeroDuration() || !ReadSome(left)) {
      // The output ended: what it ended with is checked once more.
      for (; checked < lines_.size(); ++checked) {
        if (lines_[checked].find(text) != std::string::npos) return lines_[checked];
      }
      return std::nullopt;
    }
  }
}

std::optional<int> ChildProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!process_.Poll()) {
    if (absl::Now() > deadline) return std::nullopt;
    // Reading keeps the child from blocking on a full pipe; once its output
    // has closed, the exit is checked every few milliseconds.
    if (!ReadSome(absl::Milliseconds(10))) absl::SleepFor(absl::Milliseconds(5));
  }
  while (absl::Now() < deadline && ReadSome(absl::Milliseconds(10))) {
  }
  return process_.Poll();
}

void ChildProcess::Signal(int sig) { process_.Signal(sig); }

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
