#include "common/metrics/free_port.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
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

}  // namespace

int pick_free_port(const std::string& address) {
  SocketGuard guard;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (int rc = ::getaddrinfo(address.c_str(), "0", &hints, &guard.info); rc != 0) {
    throw std::runtime_error("cannot resolve address \"" + address + "\": " + gai_strerror(rc));
  }
  guard.fd = ::socket(guard.info->ai_family, SOCK_STREAM, 0);
  if (guard.fd < 0 || ::bind(guard.fd, guard.info->ai_addr, guard.info->ai_addrlen) != 0) {
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

}  // namespace kubetune::metrics
