// Placement and server lists: see placement.hpp.
#include "proto/placement.hpp"

#include <cassert>
#include <charconv>

#include "proto/index_format.hpp"

namespace rkv::proto {

std::string server_id(std::string_view host, std::uint16_t port) {
  std::string id;
  const bool v6 = host.find(':') != std::string_view::npos;
  if (v6) id += '[';
  id.append(host);
  if (v6) id += ']';
  id += ':';
  id += std::to_string(port);
  return id;
}

bool parse_server(std::string_view s, std::uint16_t default_port, ServerAddr& out, std::string& error) {
  std::string_view host;
  std::string_view port_text;
  bool has_port = false;
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    if (close == std::string_view::npos) {
      error = "'" + std::string(s) + "': no ']' after an IPv6 address";
      return false;
    }
    host = s.substr(1, close - 1);
    const auto rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        error = "'" + std::string(s) + "': expected ':port' after ']'";
        return false;
      }
      port_text = rest.substr(1);
      has_port = true;
    }
  } else if (s.find(':') != s.rfind(':')) {
    host = s;  // a bare IPv6 address
  } else if (const auto colon = s.find(':'); colon != std::string_view::npos) {
    host = s.substr(0, colon);
    port_text = s.substr(colon + 1);
    has_port = true;
  } else {
    host = s;
  }
  if (host.empty()) {
    error = "'" + std::string(s) + "': empty host";
    return false;
  }
  std::uint16_t port = default_port;
  if (has_port) {
    unsigned v = 0;
    const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), v);
    if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || v == 0 ||
        v > 65535) {
      error = "'" + std::string(s) + "': bad port '" + std::string(port_text) + "' (expected 1..65535)";
      return false;
    }
    port = static_cast<std::uint16_t>(v);
  }
  if (port == 0) {
    error = "'" + std::string(s) + "': port 0";
    return false;
  }
  out.host.assign(host);
  out.port = port;
  out.id = server_id(host, port);
  return true;
}

bool parse_server_list(std::string_view text, std::uint16_t default_port, std::vector<ServerAddr>& out,
                       std::string& error) {
  out.clear();
  if (text.empty()) {
    error = "empty server list";
    return false;
  }
  std::size_t pos = 0;
  for (;;) {
    const auto comma = text.find(',', pos);
    const std::string_view entry = text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos);
    if (entry.empty()) {
      error = "empty entry in server list '" + std::string(text) + "'";
      return false;
    }
    if (out.size() == kMaxServers) {
      error = "more than " + std::to_string(kMaxServers) + " servers in the list";
      return false;
    }
    ServerAddr a;
    if (!parse_server(entry, default_port, a, error)) return false;
    for (const ServerAddr& b : out) {
      if (b.id == a.id) {
        error = "server " + a.id + " is listed twice";
        return false;
      }
    }
    out.push_back(std::move(a));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return true;
}

std::uint64_t placement_weight(std::string_view key, std::string_view id) noexcept {
  return fmix64(hash64(key) ^ hash64(id));
}

std::size_t place(std::string_view key, std::span<const std::string> ids) noexcept {
  assert(!ids.empty());
  if (ids.size() <= 1) return 0;
  const std::uint64_t hk = hash64(key);
  std::size_t best = 0;
  std::uint64_t best_w = fmix64(hk ^ hash64(ids[0]));
  for (std::size_t i = 1; i < ids.size(); ++i) {
    const std::uint64_t w = fmix64(hk ^ hash64(ids[i]));
    if (w > best_w || (w == best_w && ids[i] < ids[best])) {
      best = i;
      best_w = w;
    }
  }
  return best;
}

std::uint32_t shard_of(std::string_view key, std::uint32_t shards) noexcept {
  assert(shards > 0);
  return static_cast<std::uint32_t>(fmix64(hash64(key) ^ kShardSalt) % shards);
}

}  // namespace rkv::proto
