// rkv stats: asks a kvd for its statistics over the wire (a STATS request,
// docs/protocol.md) and prints them: "name  value" lines, or with --json one
// JSON object {"name": value, ...} (the same shape as kvd --stats-json). The
// rows are kvd's one table (kv/server/counters.hpp + the gauges of
// Server::stats_rows), so SIGUSR1, the STATS reply and this tool never differ.
//
// Several servers (--server a,b,c, as kv_open and kvload take them): each
// one's rows under a "# server ID" line, or with --json one object per
// server {"ID": {...}, ...}; a server that cannot be asked is reported on
// stderr and the others are still printed (exit status 1).
//
// Exit status: 0 printed, 1 connection failed or a malformed reply, 2 bad flags.
#include "rkv_stats.hpp"

#include "stats_reply.hpp"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "kv/client/client.hpp"
#include "kv/client/server_list.hpp"
#include "kv/load/report.hpp"  // json_escape
#include "kv/store/stats.hpp"
#include "proto/placement.hpp"
#include "reactor/reactor.hpp"

namespace rkv::apps {
namespace {

// One server's STATS rows; false (message printed) when it cannot be asked.
bool fetch_rows(const proto::ServerAddr& server, const std::string& auth_token, std::vector<StatsRow>& rows) {
  try {
    reactor::Reactor reactor;
    auto client = kv::client::Client::connect(reactor, server.host, server.port, stats_client_options(auth_token));
    if (std::string why; !ask_stats(*client, rows, why)) {
      std::fprintf(stderr, "rkv stats: STATS to %s failed: %s\n", server.id.c_str(), why.c_str());
      return false;
    }
    client->close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rkv stats: %s\n", e.what());
    return false;
  }
  return true;
}

}  // namespace

int stats_main(int argc, char** argv) {
  std::string server;
  std::uint16_t port = kv::client::kDefaultPort;
  bool json = false;
  CLI::App app{"rkv stats: a kvd's counters and gauges (uptime, connections, operations by kind, bytes, memory, "
               "durability), from its STATS reply"};
  app.name("rkv stats");
  app.add_option("--server", server,
                 "kvd's address (host, host:port, [v6]:port), or a comma-separated list of them: each server's "
                 "counters in turn")
      ->required();
  app.add_option("--port", port, "kvd's port (for --server entries without one)")->capture_default_str();
  app.add_flag("--json", json, "one JSON object {\"name\": value, ...} instead of name/value lines");
  std::string auth_token_file;
  app.add_option("--auth-token-file", auth_token_file,
                 "present the token in this file to a kvd started with --auth-token-file");
  if (const auto rc = parse_cli(app, argc, argv)) return *rc;
  const std::optional<std::string> auth_token = client_auth_token("rkv stats", auth_token_file);
  if (!auth_token) return 2;

  std::vector<proto::ServerAddr> servers;
  if (std::string why; const int rc = kv::client::resolve_servers(server, port, servers, why)) {
    std::fprintf(stderr, "rkv stats: --server: %s\n", why.c_str());
    return rc == EINVAL ? 2 : 1;
  }
  bool failed = false;
  std::string json_all;
  for (const proto::ServerAddr& srv : servers) {
    std::vector<StatsRow> rows;
    if (!fetch_rows(srv, *auth_token, rows)) {
      failed = true;
      continue;
    }
    kv::store::StatRows view;
    view.reserve(rows.size());
    std::size_t width = 0;
    for (const StatsRow& r : rows) {
      view.push_back({r.name, r.value, kv::store::StatKind::untyped, {}});  // a STATS reply carries no kind
      width = std::max(width, r.name.size());
    }
    if (json) {
      if (servers.size() == 1) {
        std::printf("%s\n", kv::store::format_stats_json(view).c_str());
      } else {
        json_all += (json_all.empty() ? "{\"" : ",\"") + kv::load::json_escape(srv.id) + "\":" +
                    kv::store::format_stats_json(view);
      }
      continue;
    }
    if (servers.size() > 1) std::printf("# server %s\n", srv.id.c_str());
    for (const StatsRow& r : rows) {
      std::printf("%-*s %llu\n", static_cast<int>(width), r.name.c_str(), static_cast<unsigned long long>(r.value));
    }
  }
  if (json && servers.size() > 1) std::printf("%s}\n", json_all.empty() ? "{" : json_all.c_str());
  return failed ? 1 : 0;
}

}  // namespace rkv::apps
