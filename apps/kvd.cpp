// kvd: the server role. Parses flags, runs a kv::server::Server on a Reactor in the
// main thread, prints `kvd: listening on ADDR:PORT` (stdout, flushed) once
// listening, shuts down cleanly on SIGINT/SIGTERM and prints stats to stderr
// on SIGUSR1. Single-threaded: everything runs on the main (reactor) thread.
//
// With --data-dir, the store is durable (docs/durability.md): before
// listening kvd replays DIR (printing `kvd: recovered N records (B bytes) in
// T ms`, or refusing to start with exit status 1 on corruption in the middle
// of a file unless --repair), then logs every SET and DEL through io_uring.
//
// --max-memory BYTES bounds the store (kv/store/memory_budget.hpp; the
// default is half of the machine's memory or of the cgroup's limit, whichever
// is smaller): SETs beyond it are answered no_memory, or with --eviction
// lru|lfu make room by dropping cold keys (kv/store/eviction.cpp).
//
// --cluster etcd://HOST:PORT/NAME joins a cluster described in etcd
// (docs/cluster.md): before the listening line kvd publishes itself as a
// member under a lease it renews from the reactor, and takes its part in
// keeping the cluster's shard map (cluster/map_keeper.hpp); it answers only
// for the shards the map gives it, and writes only while its lease surely
// holds (kv/server/shard_gate.hpp). On SIGINT/SIGTERM, with --replicas, it
// first marks itself draining and keeps serving until the map names it the
// primary of no shard (or --drain-timeout passed); then it stops writing,
// revokes the lease, serves reads until no client is connected (clients that
// follow the cluster drop it) or --drain-timeout passed, and shuts down.
#include "cli.hpp"
#include "kvd.hpp"
#include "kvd_ops.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "cluster/map_keeper.hpp"
#include "cluster/membership.hpp"
#include "durable/log.hpp"
#include "durable/recovery.hpp"
#include "kv/conn/auth_token.hpp"
#include "kv/replica/replicator.hpp"
#include "kv/server/server.hpp"
#include "kv/store/store.hpp"
#include "proto/placement.hpp"
#include "reactor/reactor.hpp"

namespace rkv::apps {

namespace {

// "64m", "2G", "4096", "1.5g": bytes (k/m/g/t = powers of 1024, case
// insensitive, an optional trailing b/B); nullopt if not a positive size.
std::optional<std::uint64_t> parse_bytes(const std::string& text) {
  std::size_t used = 0;
  double n = 0;
  try {
    n = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string rest = text.substr(used);
  if (!rest.empty() && (rest.back() == 'b' || rest.back() == 'B') && rest.size() == 2) rest.pop_back();
  double mult = 1;
  if (rest.size() == 1) {
    switch (rest[0]) {
      case 'k': case 'K': mult = 1024.0; break;
      case 'm': case 'M': mult = 1024.0 * 1024; break;
      case 'g': case 'G': mult = 1024.0 * 1024 * 1024; break;
      case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; break;
      default: return std::nullopt;
    }
  } else if (!rest.empty()) {
    return std::nullopt;
  }
  const double bytes = n * mult;
  if (!(bytes >= 1) || bytes >= 1.8e19) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

// "ADDR:PORT" or "[V6]:PORT" into o.address / o.port; false if malformed
// (MetricsEndpoint checks that the address is numeric).
bool parse_listen_address(std::string_view text, kv::server::MetricsEndpoint::Options& o) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) return false;
  std::string_view host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return false;
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return false;  // a bare IPv6 address needs brackets to carry a port
  }
  unsigned long port = 0;
  for (const char c : text.substr(colon + 1)) {
    if (c < '0' || c > '9') return false;
    port = port * 10 + static_cast<unsigned long>(c - '0');
    if (port > 65535) return false;
  }
  o.address = std::string(host);
  o.port = static_cast<std::uint16_t>(port);
  return true;
}

// An owner of shard `shard` of `map` as the Replicator addresses it: its id,
// host and port, and the lease the map made that incarnation an owner under.
std::optional<kv::replica::Backup> owner_of(const cluster::ShardMap& map, std::size_t shard, const std::string& id) {
  proto::ServerAddr a;
  std::string why;
  if (!proto::parse_server(id, 1, a, why)) {
    spdlog::warn("kvd: owner {} of shard {}: {} (not replicated to, not probed)", id, shard, why);
    return std::nullopt;
  }
  const auto lease = map.leases.find(id);
  return kv::replica::Backup{id, a.host, a.port, lease == map.leases.end() ? 0 : lease->second};
}

// What the Replicator needs of a map: for each shard `parts` (this member's
// parts in `map`) make it the primary of, its epoch and its backups.
std::vector<kv::replica::ShardBackups> backups_of(const std::optional<cluster::ShardMap>& map,
                                                  const std::vector<proto::ShardPart>& parts) {
  std::vector<kv::replica::ShardBackups> out;
  if (!map) return out;
  out.resize(map->shards.size());
  for (std::size_t i = 0; i < parts.size() && i < out.size(); ++i) {
    if (parts[i].role != proto::ShardRole::primary) continue;
    out[i].epoch = parts[i].epoch;
    const auto& owners = map->shards[i].owners;
    for (std::size_t b = 1; b < owners.size(); ++b) {
      if (auto backup = owner_of(*map, i, owners[b])) out[i].backups.push_back(std::move(*backup));
    }
  }
  return out;
}

// Half of the memory this process may use: the machine's (sysconf), or the
// cgroup v2 limit (/sys/fs/cgroup/memory.max) when that is smaller.
std::uint64_t default_max_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  std::uint64_t total = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
                                              : std::uint64_t{1} << 30;
  std::ifstream cg("/sys/fs/cgroup/memory.max");
  std::string limit;
  if (cg >> limit && limit != "max") {
    try {
      total = std::min<std::uint64_t>(total, std::stoull(limit));
    } catch (const std::exception&) {
    }
  }
  return total / 2;
}

}  // namespace

int kvd_main(int argc, char** argv) {
  kv::server::ServerOptions opt;
  opt.port = 7471;
  std::string log_level = "info";
  CLI::App app{"kvd: RDMA key-value server", "kvd"};
  app.add_option("--port", opt.port, "port to listen on (0: pick a free one; printed)")->capture_default_str();
  app.add_option("--bind", opt.bind_address,
                 "numeric address to bind (0.0.0.0: every RDMA device; use the device's address, e.g. "
                 "$SOFTROCE_ADDR, to bind one)")
      ->capture_default_str();
  app.add_option("--credits", opt.credits,
                 "receive buffers (send credits) a client may hold at most: it grows to them while it spends every "
                 "credit it has")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--initial-credits", opt.initial_credits,
                 "receive buffers (send credits) a client starts with (at most --credits); an idle client holds no "
                 "more")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--max-clients", opt.max_clients, "connections accepted at once")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-value", opt.max_value, "largest value accepted, bytes")
      ->check(CLI::Range(1u, 0xFFFFFFFFu))
      ->capture_default_str();
  unsigned transfer_timeout_ms = static_cast<unsigned>(opt.transfer_timeout.count());
  app.add_option("--transfer-timeout-ms", transfer_timeout_ms,
                 "drop a connection whose RDMA transfers in flight made no progress for this long (the peer is gone)")
      ->check(CLI::Range(1u, 3600000u))
      ->capture_default_str();
  unsigned connect_timeout_ms = static_cast<unsigned>(opt.connect_timeout.count());
  app.add_option("--connect-timeout-ms", connect_timeout_ms,
                 "drop a connection whose handshake (accept to established) takes longer than this")
      ->check(CLI::Range(1u, 3600000u))
      ->capture_default_str();
  app.add_option("--reply-batch", opt.reply_batch,
                 "post a SEND of replies as soon as it holds this many, so the client starts on them while the "
                 "rest of a batch runs, while no other connection has work waiting (0: one SEND per batch of "
                 "requests)")
      ->check(CLI::Range(0u, 4096u))
      ->capture_default_str();
  PollFlags poll;
  add_poll_flags(app, poll, reactor::kDefaultSpin);
  app.add_option("--index-buckets", opt.index_buckets,
                 "buckets of the one-sided GET index (a power of two; 128 B each; 0: no index, clients in "
                 "read mode GET by message)")
      ->check([](const std::string& v) -> std::string {
        try {
          const unsigned long n = std::stoul(v);
          if (n == 0 || (n <= (1ul << 30) && (n & (n - 1)) == 0)) return {};
        } catch (...) {
        }
        return "must be 0 or a power of two up to 1073741824";
      })
      ->capture_default_str();
  app.add_option("--max-grants", opt.max_grants,
                 "landing space a client that asks may hold for its next large SETs, in grants (each one value's "
                 "arena block, capped by the client's credits; every connection's unwritten grants together hold "
                 "at most an eighth of --max-memory); a large SET into one is a single RDMA WRITE WITH IMMEDIATE "
                 "instead of a request and a READ (docs/protocol.md \"SET by grant\"); 0: none")
      ->check(CLI::Range(0u, 64u))
      ->capture_default_str();
  std::string max_memory_text;
  app.add_option("--max-memory", max_memory_text,
                 "bound on the store's memory: values, keys, the one-sided index and the registered arenas (not "
                 "the per-connection buffers); a SET beyond it is answered no_memory. BYTES with an optional k/m/g "
                 "suffix (powers of 1024); default: half of the machine's memory (or of the cgroup's limit)")
      ->check([](const std::string& v) -> std::string {
        return parse_bytes(v) ? std::string{} : std::string{"must be a size in bytes, e.g. 64m, 2g, 1048576"};
      });
  std::string eviction = "noeviction";
  app.add_option("--eviction", eviction,
                 "what a write that does not fit --max-memory does: noeviction (refused, no_memory), lru (the least "
                 "recently used of a few sampled keys is dropped until it fits), lfu (the least frequently used)")
      ->check(CLI::IsMember({"noeviction", "lru", "lfu"}))
      ->capture_default_str();
  std::string auth_token_file;
  app.add_option("--auth-token-file", auth_token_file,
                 "require clients to present the token in this file (its bytes without the trailing newline, 1 to "
                 "4096; only a 16-byte digest travels); others are rejected before any resource is made for them")
      ->check(CLI::ExistingFile);
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|critical|off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  durable::LogOptions lopt;
  bool repair = false;
  unsigned interval_ms = 1000;
  auto* dir_opt = app.add_option("--data-dir", lopt.dir,
                                 "directory for the durability log and snapshots (created if missing); without "
                                 "it the store is memory only");
  std::string fsync = "batch";
  app.add_option("--fsync", fsync,
                 "always: acknowledge a SET or DEL once its record is on disk (group commit); batch: acknowledge at once, "
                 "fdatasync every --fsync-interval-ms; never: leave write-back to the OS")
      ->check(CLI::IsMember({"always", "batch", "never"}))
      ->needs(dir_opt)
      ->capture_default_str();
  app.add_option("--fsync-interval-ms", interval_ms, "--fsync batch: at most this long between syncs")
      ->check(CLI::Range(1u, 60'000u))
      ->needs(dir_opt)
      ->capture_default_str();
  app.add_option("--compact-ratio", lopt.compact_ratio,
                 "compact when the log exceeds this multiple of the live data (and --compact-min-bytes)")
      ->check(CLI::Range(1.1, 1000.0))
      ->needs(dir_opt)
      ->capture_default_str();
  app.add_option("--compact-min-bytes", lopt.compact_min_bytes, "never compact a log smaller than this")
      ->check(CLI::Range(std::uint64_t{4096}, std::uint64_t{1} << 50))
      ->needs(dir_opt)
      ->capture_default_str();
  bool stats_json = false;
  app.add_flag("--stats-json", stats_json, "print the stats (SIGUSR1, exit) as one JSON object instead of name=value");
  std::string metrics_text;
  app.add_option("--metrics", metrics_text,
                 "serve GET /metrics (Prometheus text format) and GET /health over HTTP on ADDR:PORT (numeric "
                 "address; [v6]:PORT; port 0: the kernel picks one, printed as 'kvd: metrics on ADDR:PORT')")
      ->check([](const std::string& v) -> std::string {
        kv::server::MetricsEndpoint::Options o;
        return parse_listen_address(v, o) ? std::string{} : "must be ADDR:PORT (numeric address, port 0-65535)";
      });
  std::string cluster_text;
  std::string advertise;
  unsigned lease_ttl_s = 5;
  unsigned drain_timeout_s = 5;
  auto* cluster_opt =
      app.add_option("--cluster", cluster_text,
                     "join the cluster etcd://HOST:PORT/NAME (docs/cluster.md): publish this kvd as a member under an "
                     "etcd lease, renewed from the event loop; clients opened on the cluster find it there")
          ->check(check_cluster_url);
  app.add_option("--advertise", advertise,
                 "--cluster: the address clients connect to, as they must write it (default: --bind, which must then "
                 "be one address)")
      ->check([](const std::string& v) -> std::string {
        proto::ServerAddr a;
        std::string why;
        if (!proto::parse_server(v, 1, a, why)) return why;
        return a.host == v || "[" + a.host + "]" == v ? std::string{}
                                                      : "an address without a port (the port is --port's)";
      })
      ->needs(cluster_opt);
  app.add_option("--lease-ttl", lease_ttl_s,
                 "--cluster: seconds without a renewal after which etcd drops this kvd from the members")
      ->check(CLI::Range(2u, 600u))
      ->needs(cluster_opt)
      ->capture_default_str();
  app.add_option("--drain-timeout", drain_timeout_s,
                 "--cluster: on SIGINT/SIGTERM (with --replicas, once the members moved its primaries to others, "
                 "or this many seconds passed), leave the cluster, then keep serving until every client "
                 "disconnected (clients that follow the cluster drop this kvd once they see it leave) or this many "
                 "seconds passed, then shut down")
      ->check(CLI::Range(0u, 3600u))
      ->needs(cluster_opt)
      ->capture_default_str();
  unsigned replicas = 0;
  app.add_option("--replicas", replicas,
                 "--cluster: backups per shard in the shard maps this kvd writes (give every member the same); each "
                 "write of a shard is sent to its backups over RDMA (docs/cluster.md \"Replication\")")
      ->check(CLI::Range(0u, cluster::kMaxReplicas))
      ->needs(cluster_opt)
      ->capture_default_str();
  std::string ack = std::string(to_string(kv::replica::AckMode::replicas));
  app.add_option("--ack", ack,
                 "--cluster: when a write is acknowledged: replicas (once every backup the map names applied it, "
                 "and the log has it per --fsync) or primary (as the log alone says; backups follow)")
      ->check(CLI::IsMember({"replicas", "primary"}))
      ->needs(cluster_opt)
      ->capture_default_str();
  app.add_flag("--repair", repair,
               "start even if a log or snapshot is corrupt in the middle: drop the damaged bytes (logged), keep "
               "every good record, rewrite the directory")
      ->needs(dir_opt);
  if (auto code = parse_cli(app, argc, argv)) return *code;
  std::optional<cluster::ClusterUrl> cluster_url;
  if (!cluster_text.empty()) {
    std::string why;
    cluster_url.emplace();
    (void)cluster::parse_cluster_url(cluster_text, *cluster_url, why);  // checked by the option
    if (proto::ServerAddr a; !advertise.empty() && proto::parse_server(advertise, 1, a, why)) {
      advertise = a.host;  // "[v6]" as the bare address: the member's id brackets it again
    }
    if (advertise.empty()) {
      if (opt.bind_address == "0.0.0.0" || opt.bind_address == "::") {
        std::fprintf(stderr, "kvd: --cluster with --bind %s: say where clients connect with --advertise ADDR\n",
                     opt.bind_address.c_str());
        return 2;
      }
      advertise = opt.bind_address;
    }
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  lopt.interval = std::chrono::milliseconds(interval_ms);
  opt.connect_timeout = std::chrono::milliseconds(connect_timeout_ms);
  opt.transfer_timeout = std::chrono::milliseconds(transfer_timeout_ms);
  lopt.mode = fsync == "always" ? durable::FsyncMode::always
              : fsync == "never" ? durable::FsyncMode::never
                                 : durable::FsyncMode::batch;

  if (!metrics_text.empty()) {
    opt.metrics.emplace();
    (void)parse_listen_address(metrics_text, *opt.metrics);  // checked by the option
  }
  const std::uint64_t max_memory = max_memory_text.empty() ? default_max_memory() : *parse_bytes(max_memory_text);
  // The budget bounds the arenas: their own caps must not bind first.
  opt.arena.max_bytes = opt.small_arena.max_bytes = static_cast<std::size_t>(max_memory);

  try {
    if (!auth_token_file.empty()) {
      try {
        auto t = kv::conn::read_auth_token_file(auth_token_file);
        if (t.others_can_read) {
          spdlog::warn("kvd: {} is readable by group or others: chmod 600 it", auth_token_file);
        }
        opt.auth_token = std::move(t.token);
      } catch (const kv::conn::AuthTokenError& e) {
        std::fprintf(stderr, "kvd: %s\n", e.what());
        return 2;
      }
    }
    if (opt.auth_token.empty() && (opt.bind_address == "0.0.0.0" || opt.bind_address == "::")) {
      spdlog::warn("kvd: bound to every address ({}) without an auth token: anyone who can reach port {} can "
                   "read, write and delete every key and READ the index (--auth-token-file FILE, or --bind one "
                   "address)",
                   opt.bind_address, opt.port);
    }
    reactor::Reactor reactor;
    opt.poll = poll.budget();
    const kv::store::Eviction policy = *kv::store::eviction_from(eviction);
    kv::store::Store store(static_cast<std::size_t>(max_memory), policy);
    spdlog::info("kvd: memory limit {} bytes{}, eviction {}", max_memory,
                 max_memory_text.empty() ? " (default: half of the machine)" : "", kv::store::to_string(policy));
    std::unique_ptr<durable::Log> log;
    if (!lopt.dir.empty()) {
      durable::RecoveryResult rec;
      try {
        rec = durable::recover({lopt.dir, repair, opt.max_value}, store);
      } catch (const durable::RecoveryError& e) {
        std::fprintf(stderr, "kvd: %s\n", e.what());
        return 1;
      }
      std::printf("kvd: recovered %llu records (%llu bytes) in %.1f ms from %s; %llu had expired\n",
                  static_cast<unsigned long long>(rec.records), static_cast<unsigned long long>(rec.bytes), rec.ms,
                  lopt.dir.c_str(), static_cast<unsigned long long>(rec.expired));
      std::fflush(stdout);
      log = std::make_unique<durable::Log>(reactor, store, lopt, rec);
    }
    // Signals first: they must be blocked before anything could start a thread.
    kv::server::Server* server_ptr = nullptr;
    std::unique_ptr<cluster::MemberLease> member;
    std::unique_ptr<cluster::MapKeeper> keeper;  // with member: this kvd's part in keeping the shard map
    reactor::Timer drain;  // leaving a cluster: until no client is connected, or the drain timeout
    reactor::Timer handover;  // leaving with --replicas: until the map names it the primary of no shard
    bool leaving = false;  // a signal or `rkv cluster remove` started that (a second signal stops at once)
    const auto shut_down = [&] {
      drain.reset();
      server_ptr->shutdown([&reactor] { reactor.stop(); });
    };
    // A member leaves first, so clients that follow the cluster move its
    // keys elsewhere and disconnect; it serves them until they did.
    const auto leave = [&] {
      spdlog::info("kvd: leaving the cluster, then shutting down once no client is connected (at most {} s)",
                   drain_timeout_s);
      server_ptr->gate().lease_held_until({});  // no more writes: the members are about to move its shards
      member->leave_async([&] {
        const auto deadline = reactor::Reactor::now() + std::chrono::seconds(drain_timeout_s);
        const auto check = [&, deadline] {
          if (server_ptr->connections() > 0 && reactor::Reactor::now() < deadline) return;
          if (server_ptr->connections() > 0) {
            spdlog::warn("kvd: {} client(s) still connected after {} s; shutting down", server_ptr->connections(),
                         drain_timeout_s);
          }
          shut_down();
        };
        drain = reactor.every(std::chrono::milliseconds(100), check);
        check();
      });
    };
    // Leaving the cluster, on a signal or `rkv cluster remove` (this
    // member's record marked draining). With replicas it hands its shards
    // over first: marked draining, the members' plans move each of its
    // primaries to an in-sync backup (or catch a taker up), while it keeps
    // serving and replicating.
    const auto start_leaving = [&](const std::string& why) {
      leaving = true;
      if (replicas == 0) {
        spdlog::info("kvd: {}", why);
        return leave();
      }
      spdlog::info("kvd: {}: draining: handing the primaries of {} shard(s) over (at most {} s)", why,
                   server_ptr->gate().served(), drain_timeout_s);
      member->drain_async([&](bool ok) {
        if (!ok) {
          spdlog::warn("kvd: could not mark this member draining in etcd; leaving at once");
          return leave();
        }
        const auto deadline = reactor::Reactor::now() + std::chrono::seconds(drain_timeout_s);
        handover = reactor.every(std::chrono::milliseconds(100), [&, deadline] {
          if (server_ptr->gate().served() > 0 && reactor::Reactor::now() < deadline) return;
          if (server_ptr->gate().served() > 0) {
            spdlog::warn("kvd: still the primary of {} shard(s) after {} s; leaving anyway", server_ptr->gate().served(),
                         drain_timeout_s);
          }
          handover.reset();
          leave();
        });
      });
    };
    auto signals = reactor.on_signals({SIGINT, SIGTERM, SIGUSR1}, [&](int signo) {
      if (signo == SIGUSR1) {
        if (server_ptr != nullptr) {
          const auto text = stats_json ? server_ptr->stats_json() : server_ptr->stats_text();
          std::fprintf(stderr, "kvd: stats: %s\n", text.c_str());
        }
        return;
      }
      if (server_ptr == nullptr || server_ptr->shutting_down() || leaving) {
        reactor.stop();  // a second signal: stop now
        return;
      }
      if (!member) {
        spdlog::info("kvd: signal {}: shutting down", signo);
        return shut_down();
      }
      start_leaving("signal " + std::to_string(signo));
    });
    // A member replicates the writes of the shards it is the primary of
    // (a thread: started after the signals were blocked).
    std::unique_ptr<kv::replica::Replicator> replicator;
    if (cluster_url) {
      kv::client::ClientOptions copt;
      copt.auth_token = opt.auth_token;
      copt.connect_timeout = std::chrono::seconds(2);
      copt.op_timeout = std::chrono::seconds(10);
      copt.close_timeout = std::chrono::seconds(1);  // at exit, per backup
      replicator = std::make_unique<kv::replica::Replicator>(reactor, store, log.get(), *kv::replica::ack_mode_from(ack),
                                                             std::move(copt));
    }
    kv::store::Durability* durability = replicator ? static_cast<kv::store::Durability*>(replicator.get()) : log.get();
    kv::server::Server server(reactor, store, opt, durability);
    server_ptr = &server;
    register_kvd_ops(server);  // INCR and CAS through the public handler API
    if (replicator) {
      replicator->set_sink([&server](std::uint64_t tok, std::uint32_t wait, proto::Status status) {
        server.on_durable(tok, wait, status);
      });
    }
    if (log && replicator) {
      log->set_sink([&replicator](std::uint64_t tok, std::uint32_t wait, bool ok) {
        replicator->on_inner_durable(tok, wait, ok);
      });
    } else if (log) {
      log->set_sink([&server](std::uint64_t tok, std::uint32_t wait, bool ok) {
        server.on_durable(tok, wait, ok ? proto::Status::ok : proto::Status::io_error);
      });
    }
    // A member serves the shards the map names this incarnation (its id
    // under its lease) the primary of, and writes only while its lease
    // surely holds (kv/server/shard_gate.hpp, docs/cluster.md "Fencing").
    std::optional<cluster::ShardMap> seen_map;  // the latest map the watch reported
    std::string self_id;
    // A lease that lapsed is asked for again (MemberLease), so the map may
    // still name this incarnation. Until its watch showed a view at or
    // after the record's put, the kvd is `rejoining`: writes wait (a map
    // planned while the record was gone, one that dropped this member, has
    // landed by then or never will: MapKeeper's transactions), and a shard
    // whose part changed otherwise than to none is emptied first (while
    // the record was gone no map could give this member anything; a view
    // that shows such a change skipped maps, e.g. a watch read again, and
    // what it holds of that shard may be stale). docs/cluster.md
    // "Membership", A lease that lapsed.
    std::int64_t seen_revision = 0;  // the latest view's
    std::optional<cluster::MemberLease::Clock::time_point> held_pending;  // `until`, waiting for that view
    const auto rejoining = [&] {
      return member && (member->state() == cluster::LeaseState::rejoining || seen_revision < member->record_revision());
    };
    const auto serve_shards = [&] {
      std::vector<proto::ShardPart> mine;
      if (seen_map && member) mine = seen_map->parts_of(self_id, member->lease());
      if (replicator) replicator->set_backups(seen_map ? seen_map->epoch : 0, backups_of(seen_map, mine));
      const std::size_t before = server.gate().served();
      const std::size_t backed_before = server.gate().backed();
      if (const auto& had = server.gate().shards(); rejoining() && had.size() == mine.size()) {
        std::vector<proto::ShardPart> first = mine;
        std::size_t reset = 0;
        for (std::size_t i = 0; i < mine.size(); ++i) {
          if (mine[i].role != proto::ShardRole::none && mine[i] != had[i]) {
            first[i] = {};
            ++reset;
          }
        }
        if (reset > 0) {
          spdlog::warn("kvd: joining again, the map changed this member's part in {} shard(s) it holds: their keys "
                       "are dropped first (what it holds of them may be stale)", reset);
          server.serve_shards(std::move(first));
        }
      }
      server.serve_shards(std::move(mine));
      if (server.gate().served() != before || server.gate().backed() != backed_before) {
        spdlog::info("kvd: primary of {} shard(s), backup of {} (map epoch {})", server.gate().served(),
                     server.gate().backed(), seen_map ? seen_map->epoch : 0);
      }
    };
    if (cluster_url) {
      try {
        const cluster::Member self{advertise, server.port(), max_memory};
        self_id = self.id();
        server.gate().close_to_cluster();
        member = std::make_unique<cluster::MemberLease>(
            reactor, *cluster_url, self, std::chrono::seconds(lease_ttl_s),
            [&](cluster::MemberLease::Clock::time_point until) {
              if (keeper) keeper->lease_held_until(until);
              if (rejoining()) {
                held_pending = until;
                return;
              }
              server.gate().lease_held_until(until);
              serve_shards();  // a new lease (joined again as a new incarnation) serves no shard of the old one
            });
        keeper = std::make_unique<cluster::MapKeeper>(
            reactor, cluster::read_cluster(*cluster_url, std::chrono::seconds(15)), cluster::MapShape{.replicas = replicas},
            self_id, std::chrono::seconds(lease_ttl_s),
            [&](const cluster::ClusterView& view) {
              seen_map = view.map;
              serve_shards();  // still `rejoining` for this view, if it ends it
              seen_revision = std::max(seen_revision, view.revision);
              if (held_pending && !rejoining()) {
                if (!leaving) server.gate().lease_held_until(*held_pending);  // leaving: writes stay off
                held_pending.reset();
              }
              // `rkv cluster remove`: this incarnation's record marked draining.
              const bool removed = std::ranges::any_of(view.members, [&](const cluster::Member& m) {
                return m.draining && m.id() == self_id && m.lease == member->lease();
              });
              if (removed && !leaving) start_leaving("marked draining in etcd (rkv cluster remove)");
            });
        // The membership's own figures, beside the server's (STATS, SIGUSR1,
        // /metrics): none of them is in the map or the members' records.
        server.set_extra_stats([&](kv::store::StatRows& rows) {
          if (!member || !keeper) return;  // torn down: the final stats go without them
          rows.insert(rows.end(), {
              {"cluster_lease_renew_failures", member->renew_failures(), kv::store::StatKind::counter,
               "lease keepalives that did not reach etcd"},
              {"cluster_lease_rejoins", member->rejoins(), kv::store::StatKind::counter,
               "times this member found its lease expired and joined again"},
              {"cluster_rejoining", rejoining() ? 1u : 0u, kv::store::StatKind::gauge,
               "1 while writes wait: the lease lapsed, or the watch has not yet shown the record's put"},
              {"cluster_map_holds", keeper->holds(), kv::store::StatKind::counter,
               "shard-map plans held back because they dropped owners that may be back soon"},
              {"cluster_map_holding", keeper->state() == cluster::KeeperState::holding ? 1u : 0u,
               kv::store::StatKind::gauge, "1 while a plan is held back (logged: holding the next shard map back)"},
              {"cluster_revokes_asked", keeper->revoking(), kv::store::StatKind::counter,
               "leases of members found gone that this member asked etcd to revoke"},
              {"cluster_leases_revoked", keeper->revoked(), kv::store::StatKind::counter,
               "leases of members found gone that etcd revoked at this member's request"},
          });
        });
        if (replicator) {  // its caught-up backups are marked in sync in the map
          replicator->set_on_in_sync([&keeper](std::uint32_t shard, const std::string& id, std::uint64_t epoch) {
            if (keeper) keeper->mark_in_sync(shard, id, epoch);
          });
          // A member whose node says nothing listens on its port is gone:
          // its lease is revoked now rather than left to expire. The
          // primaries this one ships to find that when they reconnect; a
          // primary whose shipping connection into this one dropped is
          // probed, so a member that backs nothing is found too.
          replicator->set_on_member_gone([&keeper](const std::string& id, std::int64_t lease) {
            if (keeper) keeper->member_gone(id, lease);
          });
          server.set_on_record_peer_lost([&](std::uint32_t shard) {
            if (!seen_map || shard >= seen_map->shards.size()) return;
            const std::string& primary = seen_map->shards[shard].owners.front();
            if (primary == self_id) return;
            if (auto p = owner_of(*seen_map, shard, primary)) replicator->probe(*p);
          });
        }
      } catch (const cluster::ClusterError& e) {
        std::fprintf(stderr, "kvd: --cluster %s: %s\n", cluster_text.c_str(), e.what());
        return 1;
      }
      std::printf("kvd: member %s of %s\n", member->key().c_str(), cluster_url->text().c_str());
    }
    // Last: whoever waits for this line (scripts/kvds, the tests) may use the server, and find it in its cluster.
    std::printf("kvd: listening on %s:%u\n", opt.bind_address.c_str(), static_cast<unsigned>(server.port()));
    if (opt.metrics) {
      std::printf("kvd: metrics on %s:%u\n", opt.metrics->address.c_str(), static_cast<unsigned>(server.metrics_port()));
    }
    std::fflush(stdout);
    reactor.run();
    keeper.reset();
    if (member) member->leave();  // the record goes now, not when the lease expires
    member.reset();
    server_ptr = nullptr;
    if (log) log->close_sync();  // writes and syncs what is queued
    const auto final_stats = stats_json ? server.stats_json() : server.stats_text();
    std::fprintf(stderr, "kvd: final stats: %s\n", final_stats.c_str());
    signals.reset();  // handles die before the reactor
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvd: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace rkv::apps
