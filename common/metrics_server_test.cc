#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/counter.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

// The whole response to `request` (status line, headers and body).
std::string Ask(int port, const std::string& request) {
  const int fd = Connect(port);
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) response.append(buffer, n);
  close(fd);
  return response;
}

// A server whose body is large (`labels` x about 70 bytes).
std::unique_ptr<MetricsServer> StartLargeServer(int labels = 10000) {
  auto server = MetricsServer::Start("127.0.0.1", 0);
  EXPECT_TRUE(server.ok()) << server.status();
  auto& family = prometheus::BuildCounter()
                     .Name("test_counter_total")
                     .Help("A counter with many labels.")
                     .Register((*server)->registry());
  for (int i = 0; i < labels; ++i) {
    family.Add({{"label", absl::StrCat("value_with_some_length_", i)}}).Increment(i);
  }
  return *std::move(server);
}

TEST(MetricsServerTest, ServesMetricsAndRefusesOtherPaths) {
  auto server = StartLargeServer();
  const std::string ok = Ask(server->port(), "GET /metrics HTTP/1.0\r\n\r\n");
  EXPECT_THAT(ok, StartsWith("HTTP/1.0 200 OK"));
  EXPECT_THAT(ok, HasSubstr("test_counter_total{label=\"value_with_some_length_9999\"} 9999"));
  EXPECT_THAT(Ask(server->port(), "GET /other HTTP/1.0\r\n\r\n"), StartsWith("HTTP/1.0 404"));
}

// Clients that reset the connection mid-response: each costs only its own
// connection. Without MSG_NOSIGNAL the first would raise SIGPIPE in this
// process and end the test.
TEST(MetricsServerTest, SurvivesClientsThatResetMidResponse) {
  // 7 MB: more than the kernel buffers between here and a client that
  // reads nothing, so the server is still writing when the reset comes.
  auto server = StartLargeServer(100000);
  for (int i = 0; i < 5; ++i) {
    const int fd = Connect(server->port());
    const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
    ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    char first;
    ASSERT_EQ(recv(fd, &first, 1, 0), 1);  // the server is writing now
    const linger reset{1, 0};              // close with RST, not FIN
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    close(fd);
  }
  EXPECT_THAT(Ask(server->port(), "GET /metrics HTTP/1.0\r\n\r\n"), StartsWith("HTTP/1.0 200 OK"));
}

// A client that connects and says nothing does not hold up the others.
TEST(MetricsServerTest, AnswersScrapesConcurrently) {
  auto server = StartLargeServer();
  std::vector<int> silent;
  for (int i = 0; i + 1 < MetricsServer::kMaxConnections; ++i) {
    silent.push_back(Connect(server->port()));
  }
  EXPECT_THAT(Ask(server->port(), "GET /metrics HTTP/1.0\r\n\r\n"), StartsWith("HTTP/1.0 200 OK"));
  // The silent clients are still waited for: their connections are open,
  // so the scrape above was answered beside them, not after them.
  for (int fd : silent) {
    pollfd pfd{fd, POLLIN, 0};
    EXPECT_EQ(poll(&pfd, 1, 0), 0) << "a silent connection was closed";
  }
  // One more than the limit is told to come back.
  silent.push_back(Connect(server->port()));
  EXPECT_THAT(Ask(server->port(), "GET /metrics HTTP/1.0\r\n\r\n"),
              StartsWith("HTTP/1.0 503 Service Unavailable"));
  for (int fd : silent) close(fd);
}

// The status page at /, HTML, made afresh for each request; loopback-only
// (a daemon with TLS) still serves this test, which asks from 127.0.0.1.
TEST(MetricsServerTest, ServesTheStatusPageAtTheRoot) {
  auto server = MetricsServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT(Ask((*server)->port(), "GET / HTTP/1.0\r\n\r\n"), StartsWith("HTTP/1.0 404"));
  int rendered = 0;
  (*server)->SetPage([&rendered] { return absl::StrCat("<p>page ", ++rendered, "</p>"); },
                     /*loopback_only=*/true);
  const std::string page = Ask((*server)->port(), "GET / HTTP/1.0\r\n\r\n");
  EXPECT_THAT(page, StartsWith("HTTP/1.0 200 OK"));
  EXPECT_THAT(page, HasSubstr("Content-Type: text/html; charset=utf-8"));
  EXPECT_THAT(page, HasSubstr("<p>page 1</p>"));
  EXPECT_THAT(Ask((*server)->port(), "GET /?refresh=1 HTTP/1.0\r\n\r\n"),
              HasSubstr("<p>page 2</p>"));
  EXPECT_THAT(Ask((*server)->port(), "GET /metrics HTTP/1.0\r\n\r\n"),
              StartsWith("HTTP/1.0 200 OK"));
  EXPECT_THAT(Ask((*server)->port(), "GET /other HTTP/1.0\r\n\r\n"),
              HasSubstr("only GET / (the status page) and GET /metrics are served"));
}

// Which peers a loopback-only page answers (tests may send traffic only to
// 127.0.0.1, so the other addresses are made, not connected from).
TEST(MetricsServerTest, OnlyLoopbackPeersAreLoopback) {
  auto v4 = [](const char* address) {
    sockaddr_storage peer{};
    auto& in = reinterpret_cast<sockaddr_in&>(peer);
    in.sin_family = AF_INET;
    EXPECT_EQ(inet_pton(AF_INET, address, &in.sin_addr), 1);
    return peer;
  };
  auto v6 = [](const char* address) {
    sockaddr_storage peer{};
    auto& in = reinterpret_cast<sockaddr_in6&>(peer);
    in.sin6_family = AF_INET6;
    EXPECT_EQ(inet_pton(AF_INET6, address, &in.sin6_addr), 1);
    return peer;
  };
  EXPECT_TRUE(IsLoopback(v4("127.0.0.1")));
  EXPECT_TRUE(IsLoopback(v4("127.8.9.10")));
  EXPECT_FALSE(IsLoopback(v4("10.0.0.1")));
  EXPECT_FALSE(IsLoopback(v4("128.0.0.1")));
  EXPECT_TRUE(IsLoopback(v6("::1")));
  EXPECT_TRUE(IsLoopback(v6("::ffff:127.0.0.1")));
  EXPECT_FALSE(IsLoopback(v6("::ffff:192.168.1.1")));
  EXPECT_FALSE(IsLoopback(v6("fe80::1")));
  EXPECT_FALSE(IsLoopback(sockaddr_storage{}));
}

TEST(MetricsServerTest, ATakenPortIsAClearError) {
  auto first = MetricsServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(first.ok());
  auto second = MetricsServer::Start("127.0.0.1", (*first)->port());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("cannot serve metrics on 127.0.0.1:", (*first)->port(),
                                     ": Address already in use")));
}

}  // namespace
}  // namespace fulcrum
