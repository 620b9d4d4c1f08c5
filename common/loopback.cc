#include "common/loopback.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace fulcrum {

std::vector<int> FreeLoopbackPorts(int n) {
  std::vector<int> ports, held;
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    const bool bound = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 &&
                       getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
    ports.push_back(bound ? ntohs(address.sin_port) : 0);
    if (fd >= 0) held.push_back(fd);
  }
  for (int fd : held) close(fd);
  return ports;
}

}  // namespace fulcrum
