// A cluster's keys in etcd: see keyspace.hpp.
#include "cluster/keyspace.hpp"

#include <nlohmann/json.hpp>

#include "proto/placement.hpp"

namespace rkv::cluster {

namespace {

bool name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '-';
}

}  // namespace

std::vector<std::string> ClusterUrl::endpoints() const {
  std::vector<std::string> out;
  out.reserve(etcd.size());
  for (const proto::ServerAddr& e : etcd) out.push_back("http://" + e.id);  // the id brackets a v6 host
  return out;
}
std::string ClusterUrl::prefix() const { return "/rkv/" + name + "/"; }
std::string ClusterUrl::members_prefix() const { return prefix() + "members/"; }
std::string ClusterUrl::map_key() const { return prefix() + "map"; }
std::string ClusterUrl::text() const {
  std::string out(kScheme);
  for (const proto::ServerAddr& e : etcd) out += (&e == etcd.data() ? "" : ",") + e.id;
  return out + "/" + name;
}

bool is_cluster_url(std::string_view text) noexcept { return text.starts_with(kScheme); }

bool parse_cluster_url(std::string_view text, ClusterUrl& out, std::string& error) {
  if (!is_cluster_url(text)) {
    error = "'" + std::string(text) + "' does not start with etcd://";
    return false;
  }
  const std::string_view rest = text.substr(kScheme.size());
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos) {
    error = "'" + std::string(text) + "': no /NAME after etcd's address";
    return false;
  }
  std::vector<proto::ServerAddr> etcd;
  if (!proto::parse_server_list(rest.substr(0, slash), kDefaultEtcdPort, etcd, error)) {
    error = "'" + std::string(text) + "': etcd's address: " + error;
    return false;
  }
  for (const proto::ServerAddr& addr : etcd) {
    for (const char c : addr.host) {
      // A host name or an IP address (v6 with ':' and a zone's '%'): nothing a URL would need escaped.
      if (!(name_char(c) || c == ':' || c == '%') || c == '_') {
        error = "'" + std::string(text) + "': etcd's host may hold only letters, digits, '.', '-' (and ':' '%' in IPv6)";
        return false;
      }
    }
  }
  const std::string_view name = rest.substr(slash + 1);
  if (name.empty() || name.size() > 64) {
    error = "'" + std::string(text) + "': the cluster name must have 1 to 64 characters";
    return false;
  }
  for (const char c : name) {
    if (!name_char(c)) {
      error = "'" + std::string(text) + "': the cluster name may hold only letters, digits, '_', '.' and '-'";
      return false;
    }
  }
  out = ClusterUrl{std::move(etcd), std::string(name)};
  return true;
}

std::string Member::id() const { return proto::server_id(host, port); }

std::string member_key(const ClusterUrl& url, const Member& m) { return url.members_prefix() + m.id(); }

std::string member_value(const Member& m) {
  nlohmann::json j{{"host", m.host}, {"port", m.port}, {"capacity", m.capacity}};
  if (m.draining) j["draining"] = true;
  return j.dump();
}

std::optional<Member> parse_member(std::string_view value, std::string& error) {
  const auto j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    error = "not a JSON object";
    return std::nullopt;
  }
  const auto host = j.find("host");
  const auto port = j.find("port");
  const auto cap = j.find("capacity");
  if (host == j.end() || !host->is_string() || host->get_ref<const std::string&>().empty()) {
    error = "no host";
    return std::nullopt;
  }
  if (port == j.end() || !port->is_number_unsigned() || port->get<std::uint64_t>() == 0 ||
      port->get<std::uint64_t>() > 65535) {
    error = "no port from 1 to 65535";
    return std::nullopt;
  }
  Member m{host->get<std::string>(), static_cast<std::uint16_t>(port->get<std::uint64_t>()), 0};
  if (cap != j.end()) {
    if (!cap->is_number_unsigned()) {
      error = "a bad capacity";
      return std::nullopt;
    }
    m.capacity = cap->get<std::uint64_t>();
  }
  if (const auto d = j.find("draining"); d != j.end()) {
    if (!d->is_boolean()) {
      error = "a draining that is not true or false";
      return std::nullopt;
    }
    m.draining = d->get<bool>();
  }
  return m;
}

}  // namespace rkv::cluster
