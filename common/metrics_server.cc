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

#include "absl/strings/str_cat.h"

namespace fulcrum {

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
  server->collectables_.push_back(server->registry_);
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
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int connection = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    Answer(connection);
    close(connection);
  }
}

void MetricsServer::Answer(int connection) {
  // The request line is enough: GET /metrics. A slow client gets a second.
  std::string request;
  char buffer[2048];
  while (request.find("\r\n") == std::string::npos && request.size() < 8192) {
    pollfd fd{connection, POLLIN, 0};
    if (poll(&fd, 1, 1000) <= 0) return;
    const ssize_t n = read(connection, buffer, sizeof(buffer));
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  std::string status = "404 Not Found", body = "only GET /metrics is served\n";
  if (request.rfind("GET /metrics ", 0) == 0 || request.rfind("GET /metrics?", 0) == 0) {
    std::vector<prometheus::MetricFamily> families;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& collectable : collectables_) {
        for (auto& family : collectable->Collect()) families.push_back(std::move(family));
      }
    }
    status = "200 OK";
    body = prometheus::TextSerializer().Serialize(families);
  }
  const std::string response =
      absl::StrCat("HTTP/1.0 ", status, "\r\nContent-Type: text/plain; version=0.0.4\r\n",
                   "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  for (size_t done = 0; done < response.size();) {
    const ssize_t n = write(connection, response.data() + done, response.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace fulcrum
