// ProbePlaintext against listeners on 127.0.0.1: one that hangs up at once
// (as a TLS server does on HTTP/2's plaintext preface), one that answers,
// and a port nothing listens on.
#include "client/grpc/plaintext_probe.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

namespace fulcrum {
namespace {

// A listening socket on 127.0.0.1 whose first connection is read (the
// preface) and then closed, after writing `answer` back unless it is empty.
class Listener {
 public:
  explicit Listener(std::string answer) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), length), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this, answer = std::move(answer)] {
      const int peer = accept(fd_, nullptr, nullptr);
      if (peer < 0) return;
      char preface[24];
      size_t got = 0;
      while (got < sizeof(preface)) {
        const ssize_t n = recv(peer, preface + got, sizeof(preface) - got, 0);
        if (n <= 0) break;
        got += static_cast<size_t>(n);
      }
      if (!answer.empty()) send(peer, answer.data(), answer.size(), MSG_NOSIGNAL);
      close(peer);
    });
  }
  ~Listener() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(PlaintextProbeTest, AServerThatHangsUpOnThePrefaceIsTold) {
  Listener tls_like("");
  EXPECT_EQ(ProbePlaintext(tls_like.address(), absl::Seconds(10)),
            PlaintextAnswer::kClosedAtPreface);
}

TEST(PlaintextProbeTest, AServerThatAnswersSpeaksPlaintext) {
  Listener plaintext(std::string("\0\0\0\4\0\0\0\0\0", 9));  // an empty SETTINGS frame
  EXPECT_EQ(ProbePlaintext(plaintext.address(), absl::Seconds(10)), PlaintextAnswer::kAnswered);
}

TEST(PlaintextProbeTest, NothingListeningAndBadAddressesAreNoAnswer) {
  std::string address;
  {
    Listener gone("");
    address = gone.address();
  }  // closed: nothing listens on its port now
  EXPECT_EQ(ProbePlaintext(address, absl::Seconds(10)), PlaintextAnswer::kNoAnswer);
  EXPECT_EQ(ProbePlaintext("no-port-here", absl::Seconds(1)), PlaintextAnswer::kNoAnswer);
}

}  // namespace
}  // namespace fulcrum
