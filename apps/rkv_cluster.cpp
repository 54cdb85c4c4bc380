// rkv cluster: a cluster as etcd holds it (docs/cluster.md).
//
//   rkv cluster status --server etcd://HOST:PORT/NAME [--json]
//
// Prints "# cluster etcd://HOST:PORT/NAME: N members", the shard map's
// "# map epoch E shards S replicas R catching_up C" (or "# no map"; C:
// owners of a shard not yet in sync with it, being caught up), and one line per
// member, "member ID capacity BYTES primaries P backups B most_of_one M"
// (ordered by id; P: shards it is the primary of; B: shards it backs; M: the
// most shards of one primary it backs, the most it takes over when one
// member dies), then "absent ID primaries P" for an owner in the
// map that is no member (the map not yet planned again since it left). With
// --json one object {"cluster": ..., "map": {"epoch", "shards", "replicas", "catching_up"}
// or null, "members": [{"id", "host", "port", "capacity", "primaries", "backups",
// "backs": {PRIMARY: shards of it backed}}],
// "absent": [{"id", "primaries"}]}. A member is a kvd whose lease etcd
// still holds (kvd --cluster): one that died stays listed until its
// --lease-ttl passes.
//
//   rkv cluster remove ID --server etcd://HOST:PORT/NAME
//
// Asks member ID (as status lists it) to leave: marks its record draining in
// etcd (cluster::mark_draining). The kvd then leaves as on SIGTERM: with
// --replicas it first hands each shard it is the primary of to an in-sync
// backup, then revokes its lease and exits once its clients moved. Prints
// "rkv cluster: ID marked draining" and returns at once; the member is gone
// from status once it left. (A kvd is added by starting it with --cluster.)
//
// Exit status: 0 printed or marked (status also with no member), 1 etcd
// could not be read or written, or no member ID, 2 bad arguments.
#include "rkv_cluster.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cli.hpp"
#include "cluster/membership.hpp"
#include "kv/load/report.hpp"  // json_escape

namespace rkv::apps {

int cluster_main(int argc, char** argv) {
  CLI::App app{"rkv cluster: a cluster's members and shard map, as etcd holds them (docs/cluster.md)", "rkv cluster"};
  app.require_subcommand(1, 1);
  auto* status = app.add_subcommand("status", "list the members (kvd that joined with --cluster and whose lease lives) and the shards each is the primary of");
  auto* remove = app.add_subcommand("remove", "ask a member to leave: it hands its shards over (with --replicas), then exits");
  std::string server, remove_id;
  bool json = false;
  for (auto* sub : {status, remove}) {
    sub->add_option("--server", server, "the cluster: etcd://HOST:PORT/NAME")->required()->check(check_cluster_url);
  }
  status->add_flag("--json", json, "print one JSON object");
  remove->add_option("id", remove_id, "the member's id, HOST:PORT as rkv cluster status lists it")->required();
  if (const auto rc = parse_cli(app, argc, argv)) return *rc;

  cluster::ClusterUrl url;
  std::string why;
  (void)cluster::parse_cluster_url(server, url, why);  // checked by the option
  cluster::ClusterView view;
  try {
    view = cluster::read_cluster(url, std::chrono::seconds(5));
    if (remove->parsed()) {
      const auto it = std::ranges::find_if(view.members, [&](const cluster::Member& m) { return m.id() == remove_id; });
      if (it == view.members.end()) {
        std::fprintf(stderr, "rkv cluster: no member %s in %s\n", remove_id.c_str(), url.text().c_str());
        return 1;
      }
      cluster::mark_draining(url, *it, std::chrono::seconds(5));
      std::printf("rkv cluster: %s marked draining\n", remove_id.c_str());
      return 0;
    }
  } catch (const cluster::ClusterError& e) {
    std::fprintf(stderr, "rkv cluster: %s\n", e.what());
    return 1;
  }
  const auto& members = view.members;
  // Primaries per id; what is left once the members took theirs: owners in the map that are not members.
  std::map<std::string, std::uint32_t> absent = view.map ? view.map->primaries() : std::map<std::string, std::uint32_t>{};
  std::size_t behind = 0;  // owners of a shard not in sync with it (being caught up)
  if (view.map) {
    for (const auto& s : view.map->shards) behind += s.owners.size() - s.in_sync.size();
  }
  std::vector<std::uint32_t> primaries;  // members[i]'s
  for (const auto& m : members) {
    const auto node = absent.extract(m.id());
    primaries.push_back(node.empty() ? 0u : node.mapped());
  }
  // Per member: how many shards of each primary it backs.
  std::map<std::string, std::map<std::string, std::uint32_t>> backs;
  if (view.map) {
    for (const auto& s : view.map->shards) {
      for (std::size_t k = 1; k < s.owners.size(); ++k) ++backs[s.owners[k]][s.owners.front()];
    }
  }
  const auto backups = [&](const std::string& id) {
    std::uint32_t n = 0;
    std::uint32_t most = 0;
    if (const auto it = backs.find(id); it != backs.end()) {
      for (const auto& [primary, k] : it->second) {
        n += k;
        most = std::max(most, k);
      }
    }
    return std::pair{n, most};
  };
  if (json) {
    std::string out = "{\"cluster\":\"" + kv::load::json_escape(url.text()) + "\",\"map\":";
    out += view.map ? "{\"epoch\":" + std::to_string(view.map->epoch) + ",\"shards\":" +
                          std::to_string(view.map->shards.size()) + ",\"replicas\":" +
                          std::to_string(view.map->replicas) + ",\"catching_up\":" + std::to_string(behind) + "}"
                    : std::string("null");
    out += ",\"members\":[";
    for (std::size_t i = 0; i < members.size(); ++i) {
      const auto& m = members[i];
      out += (i > 0 ? "," : "");
      out += "{\"id\":\"" + kv::load::json_escape(m.id()) + "\",\"host\":\"" + kv::load::json_escape(m.host) +
             "\",\"port\":" + std::to_string(m.port) + ",\"capacity\":" + std::to_string(m.capacity) +
             ",\"primaries\":" + std::to_string(primaries[i]) + ",\"backups\":" +
             std::to_string(backups(m.id()).first) + ",\"backs\":{";
      bool first_primary = true;
      for (const auto& [primary, k] : backs[m.id()]) {
        out += (first_primary ? "\"" : ",\"") + kv::load::json_escape(primary) + "\":" + std::to_string(k);
        first_primary = false;
      }
      out += "}}";
    }
    out += "],\"absent\":[";
    bool first = true;
    for (const auto& [id, n] : absent) {
      out += (first ? "" : ",");
      out += "{\"id\":\"" + kv::load::json_escape(id) + "\",\"primaries\":" + std::to_string(n) + "}";
      first = false;
    }
    std::printf("%s]}\n", out.c_str());
    return 0;
  }
  std::printf("# cluster %s: %zu member%s\n", url.text().c_str(), members.size(), members.size() == 1 ? "" : "s");
  if (view.map) {
    std::printf("# map epoch %llu shards %zu replicas %u catching_up %zu\n",
                static_cast<unsigned long long>(view.map->epoch), view.map->shards.size(), view.map->replicas, behind);
  } else {
    std::printf("# no map\n");
  }
  for (std::size_t i = 0; i < members.size(); ++i) {
    const auto [n, most] = backups(members[i].id());
    std::printf("member %s capacity %llu primaries %u backups %u most_of_one %u\n", members[i].id().c_str(),
                static_cast<unsigned long long>(members[i].capacity), primaries[i], n, most);
  }
  for (const auto& [id, n] : absent) std::printf("absent %s primaries %u\n", id.c_str(), n);
  return 0;
}

}  // namespace rkv::apps
