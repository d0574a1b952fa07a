#include "common/metrics/free_port.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

namespace kubetune::metrics {
namespace {

// Closes the socket and frees the address list on every exit path.
struct SocketGuard {
  int fd = -1;
  addrinfo* info = nullptr;
  ~SocketGuard() {
    if (fd >= 0) ::close(fd);
    if (info != nullptr) ::freeaddrinfo(info);
  }
};

int port_of(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
}

// Ports below this are left to well-known services.
constexpr int kLowestPickedPort = 10000;
constexpr int kCandidatesBelowEphemeralRange = 64;

// The first port of the kernel's ephemeral range (32768 by default on Linux).
int first_ephemeral_port() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (range >> low && low > 0) return low;
  return 32768;
}

// Binds `address`:`port` (0: the kernel picks) and returns the bound port, or 0 when the port
// is taken. Throws when the address itself is unusable.
int bind_and_release(const std::string& address, int port) {
  SocketGuard guard;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(address.c_str(), service.c_str(), &hints, &guard.info); rc != 0) {
    throw std::runtime_error("cannot resolve address \"" + address + "\": " + gai_strerror(rc));
  }
  guard.fd = ::socket(guard.info->ai_family, SOCK_STREAM, 0);
  if (guard.fd < 0) {
    throw std::runtime_error(std::string("cannot open a TCP socket: ") + std::strerror(errno));
  }
  if (::bind(guard.fd, guard.info->ai_addr, guard.info->ai_addrlen) != 0) {
    if (port != 0 && (errno == EADDRINUSE || errno == EACCES)) return 0;
    throw std::runtime_error("cannot bind a TCP socket on \"" + address +
                             "\": " + std::strerror(errno));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (::getsockname(guard.fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    throw std::runtime_error(std::string("getsockname failed: ") + std::strerror(errno));
  }
  return port_of(bound);
}

}  // namespace

int pick_free_port(const std::string& address) {
  const int end = first_ephemeral_port();
  if (end > kLowestPickedPort) {
    std::mt19937 random(std::random_device{}());
    std::uniform_int_distribution<int> below_ephemeral(kLowestPickedPort, end - 1);
    for (int i = 0; i < kCandidatesBelowEphemeralRange; ++i) {
      if (int port = bind_and_release(address, below_ephemeral(random)); port != 0) return port;
    }
  }
  return bind_and_release(address, 0);
}

}  // namespace kubetune::metrics
