#include "client/grpc/plaintext_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/time/clock.h"

namespace fulcrum {
namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Waits for `events` on `fd` until `deadline`; false on timeout or error.
bool Await(int fd, int events, absl::Time deadline) {
  pollfd p{fd, static_cast<decltype(pollfd::events)>(events), 0};
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    const int ready = poll(&p, 1, static_cast<int>(ms));
    if (ready > 0) return true;
    if (ready == 0 || errno != EINTR) return false;
  }
}

// A socket connected to `host`:`port` before `deadline`, or -1.
int Connect(const std::string& host, const std::string& port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int error = 0;
    socklen_t length = sizeof(error);
    const bool connected =
        connect(fd, a->ai_addr, a->ai_addrlen) == 0 ||
        (errno == EINPROGRESS && Await(fd, POLLOUT, deadline) &&
         getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0);
    if (!connected) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  return fd;
}

}  // namespace

PlaintextAnswer ProbePlaintext(const std::string& address, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return PlaintextAnswer::kNoAnswer;
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const int fd = Connect(host, address.substr(colon + 1), deadline);
  if (fd < 0) return PlaintextAnswer::kNoAnswer;
  PlaintextAnswer answer = PlaintextAnswer::kNoAnswer;
  char byte = 0;
  if (send(fd, kPreface, sizeof(kPreface) - 1, MSG_NOSIGNAL) ==
          static_cast<ssize_t>(sizeof(kPreface) - 1) &&
      Await(fd, POLLIN, deadline)) {
    const ssize_t got = recv(fd, &byte, 1, 0);
    if (got > 0) {
      answer = PlaintextAnswer::kAnswered;
    } else if (got == 0 || errno == ECONNRESET) {
      answer = PlaintextAnswer::kClosedAtPreface;
    }
  }
  close(fd);
  return answer;
}

}  // namespace fulcrum
