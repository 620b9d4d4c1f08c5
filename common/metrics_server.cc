#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace fulcrum {

bool IsLoopback(const sockaddr_storage& peer) {
  if (peer.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(peer);
    return (ntohl(v4.sin_addr.s_addr) >> 24) == 127;
  }
  if (peer.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host,
                                                                    int port) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  const std::string address = absl::StrCat(host, ":", port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (port < 0 || port > 65535 || inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address ", address, " is not an IPv4 host and a port"));
  }
  server->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(server->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(addr);
  if (bind(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(server->listen_fd_, 16) != 0 ||
      getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      pipe2(server->wake_fds_, O_CLOEXEC) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", std::strerror(errno)));
  }
  server->port_ = ntohs(addr.sin_port);
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->Add(server->registry_);
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

MetricsServer::~MetricsServer() {
  if (thread_.joinable()) {
    const char stop = 0;
    if (write(wake_fds_[1], &stop, 1) != 1) shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_fds_[0], wake_fds_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void MetricsServer::Add(const std::shared_ptr<prometheus::Collectable>& collectable) {
  absl::MutexLock lock(&mu_);
  collectables_.push_back(collectable);
}

void MetricsServer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents != 0) break;
    if ((fds[0].revents & POLLIN) == 0) continue;
    sockaddr_storage peer{};
    socklen_t peer_size = sizeof(peer);
    const int connection = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_size,
                                   SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (connection < 0) continue;
    bool accepted = false;
    {
      absl::MutexLock lock(&mu_);
      if (connections_ < kMaxConnections) {
        ++connections_;
        accepted = true;
      }
    }
    if (!accepted) {
      static constexpr char kBusy[] =
          "HTTP/1.0 503 Service Unavailable\r\nConnection: close\r\n\r\n";
      send(connection, kBusy, sizeof(kBusy) - 1, MSG_NOSIGNAL);  // best effort
      close(connection);
      continue;
    }
    std::thread([this, connection, loopback = IsLoopback(peer)] {
      Answer(connection, loopback);
      {
        absl::MutexLock lock(&mu_);
        --connections_;
      }
      // Closed after its slot is free: a client that has read the whole
      // answer finds the slot free for its next connection.
      close(connection);
    }).detach();
  }
  // The answering threads use this object: wait for them.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* connections) { return *connections == 0; }, &connections_));
}

namespace {

// Waits until `fd` is ready for `events` or `deadline` passes; false then.
bool WaitFor(int fd, short events, absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  if (ms <= 0) return false;
  pollfd pfd{fd, events, 0};
  return poll(&pfd, 1, static_cast<int>(ms)) > 0;
}

}  // namespace

std::string MetricsServer::Body() {
  std::vector<prometheus::MetricFamily> families;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& collectable : collectables_) {
      for (auto& family : collectable->Collect()) families.push_back(std::move(family));
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

void MetricsServer::SetPage(std::function<std::string()> render, bool loopback_only) {
  absl::MutexLock lock(&mu_);
  page_ = std::move(render);
  page_loopback_only_ = loopback_only;
}

MetricsServer::Response MetricsServer::Route(absl::string_view request, bool from_loopback) {
  auto is = [request](absl::string_view path) {
    return absl::StartsWith(request, absl::StrCat("GET ", path, " ")) ||
           absl::StartsWith(request, absl::StrCat("GET ", path, "?"));
  };
  if (is("/metrics")) return {"200 OK", "text/plain; version=0.0.4", Body()};
  std::function<std::string()> page;
  bool loopback_only = false;
  {
    absl::MutexLock lock(&mu_);
    page = page_;
    loopback_only = page_loopback_only_;
  }
  if (is("/") && page) {
    if (loopback_only && !from_loopback) {
      return {"403 Forbidden", "text/plain",
              "this daemon runs with TLS: its status page is served on loopback only; reach it "
              "through ssh -L or kubectl port-forward (docs/watching.md)\n"};
    }
    return {"200 OK", "text/html; charset=utf-8", page()};
  }
  return {"404 Not Found", "text/plain",
          page ? "only GET / (the status page) and GET /metrics are served\n"
               : "only GET /metrics is served\n"};
}

void MetricsServer::Answer(int connection, bool from_loopback) {
  const absl::Time deadline = absl::Now() + kConnectionTimeout;
  // The request line is enough: GET /metrics.
  std::string request;
  char buffer[2048];
  while (request.find("\r\n") == std::string::npos && request.size() < 8192) {
    if (!WaitFor(connection, POLLIN, deadline)) break;
    const ssize_t n = recv(connection, buffer, sizeof(buffer), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;
    request.append(buffer, static_cast<size_t>(n));
  }
  const Response answer = Route(request, from_loopback);
  const std::string response = absl::StrCat(
      "HTTP/1.0 ", answer.status, "\r\nContent-Type: ", answer.content_type,
      "\r\nContent-Length: ", answer.body.size(), "\r\nConnection: close\r\n\r\n", answer.body);
  // MSG_NOSIGNAL: a client that reset the connection is an EPIPE here, not
  // a SIGPIPE that ends the process.
  for (size_t done = 0; done < response.size();) {
    const ssize_t n =
        send(connection, response.data() + done, response.size() - done, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFor(connection, POLLOUT, deadline)) break;
      continue;
    }
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

}  // namespace fulcrum
