#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fulcrum {

Subprocess::Subprocess(std::vector<std::string> argv, SubprocessOptions options) {
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
    for (std::string& var : options.env) putenv(var.data());
    if (options.ignore_interrupts) signal(SIGINT, SIG_IGN);
    std::vector<char*> args;
    for (std::string& arg : argv) args.push_back(arg.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  out_fd_ = fds[0];
  fcntl(out_fd_, F_SETFL, O_NONBLOCK);
}

Subprocess::~Subprocess() {
  if (!Poll()) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
}

std::vector<std::string> Subprocess::ReadLines(absl::Duration timeout) {
  std::vector<std::string> lines;
  if (out_fd_ < 0) return lines;
  pollfd pfd{out_fd_, POLLIN, 0};
  const int wait_ms =
      timeout == absl::InfiniteDuration()
          ? -1
          : static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 0, INT_MAX));
  if (poll(&pfd, 1, wait_ms) <= 0) return lines;
  char buffer[65536];
  bool ended = false;
  for (;;) {
    const ssize_t n = read(out_fd_, buffer, sizeof(buffer));
    if (n > 0) {
      partial_.append(buffer, n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    ended = n == 0 || errno != EAGAIN;
    break;
  }
  for (size_t end; (end = partial_.find('\n')) != std::string::npos;) {
    lines.push_back(partial_.substr(0, end));
    partial_.erase(0, end + 1);
  }
  if (ended) {
    close(out_fd_);
    out_fd_ = -1;
    if (!partial_.empty()) lines.push_back(std::move(partial_));
    partial_.clear();
  }
  return lines;
}

std::optional<int> Subprocess::Poll() {
  int status = 0;
  if (!exit_code_ && waitpid(pid_, &status, WNOHANG) == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return exit_code_;
}

void Subprocess::Signal(int sig) {
  if (!Poll()) kill(pid_, sig);
}

}  // namespace fulcrum
