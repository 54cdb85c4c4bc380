// A client's servers: see server_list.hpp.
#include "kv/client/server_list.hpp"

#include <cerrno>

#include "cluster/membership.hpp"

namespace rkv::kv::client {

proto::ServerAddr server_of(const cluster::Member& m) { return proto::ServerAddr{m.host, m.port, m.id()}; }

int resolve_servers(std::string_view text, std::uint16_t default_port, std::vector<proto::ServerAddr>& out,
                    std::string& error, std::optional<cluster::ClusterView>* cluster) {
  if (!cluster::is_cluster_url(text)) {
    if (proto::parse_server_list(text, default_port, out, error)) return 0;
    error += " (expected host, host:port, a comma-separated list of them, or etcd://HOST:PORT/NAME)";
    return EINVAL;
  }
  cluster::ClusterUrl url;
  if (!cluster::parse_cluster_url(text, url, error)) return EINVAL;
  try {
    cluster::ClusterView view = cluster::read_cluster(url, kClusterReadTimeout);
    std::vector<proto::ServerAddr> servers;
    for (const auto& m : view.members) servers.push_back(server_of(m));
    if (servers.empty()) {
      error = "cluster " + url.text() + " has no members (no kvd --cluster joined it, or every one's lease expired)";
      return EHOSTDOWN;
    }
    if (servers.size() > proto::kMaxServers) {
      error = "cluster " + url.text() + " has " + std::to_string(servers.size()) + " members, more than the " +
              std::to_string(proto::kMaxServers) + " a client connects";
      return E2BIG;
    }
    out = std::move(servers);
    if (cluster != nullptr) *cluster = std::move(view);
    return 0;
  } catch (const cluster::ClusterError& e) {
    error = e.what();
    return e.code();
  }
}

}  // namespace rkv::kv::client
