#include "verbs/detail/addr.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>

#include "verbs/error.hpp"

namespace rkv::verbs::detail {

sockaddr_storage parse_address(const std::string& ip, std::uint16_t port) {
  sockaddr_storage ss{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return ss;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    return ss;
  }
  throw Error("inet_pton(\"" + ip + "\")", EINVAL);
}

std::string format_address(const sockaddr* sa) {
  if (sa == nullptr) return "?";
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(v6->sin6_port));
  }
  return "?";
}

}  // namespace rkv::verbs::detail
