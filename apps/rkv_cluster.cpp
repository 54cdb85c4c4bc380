// rkv cluster: a cluster as etcd holds it (docs/cluster.md).
//
//   rkv cluster status --server etcd://HOST:PORT/NAME [--json]
//
// Prints "# cluster etcd://HOST:PORT/NAME: N members" and one line per
// member, "member ID capacity BYTES" (ordered by id), or with --json one
// object {"cluster": ..., "members": [{"id", "host", "port", "capacity"}]}.
// A member is a kvd whose lease etcd still holds (kvd --cluster): one that
// died stays listed until its --lease-ttl passes.
//
// Exit status: 0 printed (also with no member), 1 etcd could not be read,
// 2 bad arguments.
#include "rkv_cluster.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli.hpp"
#include "cluster/membership.hpp"
#include "kv/load/report.hpp"  // json_escape

namespace rkv::apps {

int cluster_main(int argc, char** argv) {
  CLI::App app{"rkv cluster: a cluster's members, as etcd holds them (docs/cluster.md)", "rkv cluster"};
  app.require_subcommand(1, 1);
  auto* status = app.add_subcommand("status", "list the members: kvd that joined with --cluster and whose lease lives");
  std::string server;
  bool json = false;
  status->add_option("--server", server, "the cluster: etcd://HOST:PORT/NAME")->required()
      ->check(check_cluster_url);
  status->add_flag("--json", json, "print one JSON object");
  if (const auto rc = parse_cli(app, argc, argv)) return *rc;

  cluster::ClusterUrl url;
  std::string why;
  (void)cluster::parse_cluster_url(server, url, why);  // checked by the option
  std::vector<cluster::Member> members;
  try {
    members = cluster::read_members(url, std::chrono::seconds(5)).members;
  } catch (const cluster::ClusterError& e) {
    std::fprintf(stderr, "rkv cluster: %s\n", e.what());
    return 1;
  }
  if (json) {
    std::string out = "{\"cluster\":\"" + kv::load::json_escape(url.text()) + "\",\"members\":[";
    for (std::size_t i = 0; i < members.size(); ++i) {
      const auto& m = members[i];
      out += (i > 0 ? "," : "");
      out += "{\"id\":\"" + kv::load::json_escape(m.id()) + "\",\"host\":\"" + kv::load::json_escape(m.host) +
             "\",\"port\":" + std::to_string(m.port) + ",\"capacity\":" + std::to_string(m.capacity) + "}";
    }
    std::printf("%s]}\n", out.c_str());
    return 0;
  }
  std::printf("# cluster %s: %zu member%s\n", url.text().c_str(), members.size(), members.size() == 1 ? "" : "s");
  for (const auto& m : members) {
    std::printf("member %s capacity %llu\n", m.id().c_str(), static_cast<unsigned long long>(m.capacity));
  }
  return 0;
}

}  // namespace rkv::apps
