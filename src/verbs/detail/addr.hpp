#pragma once
// INTERNAL: numeric IP string <-> sockaddr.
#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace rkv::verbs::detail {

// Throws verbs::Error(EINVAL) if `ip` is not a numeric IPv4/IPv6 address.
sockaddr_storage parse_address(const std::string& ip, std::uint16_t port);
// "ip:port" ("[ip]:port" for IPv6); "?" for an unset/unknown family.
std::string format_address(const sockaddr* sa);

}  // namespace rkv::verbs::detail
