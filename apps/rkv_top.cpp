// rkv top: a live view of one or more kvd, like `redis-cli --stat` or
// `memcached-tool display` (docs/observability.md). Every --interval-ms it
// asks each server for its statistics (a STATS request on a connection kept
// open) and prints one line per server: operations per second by kind (SET,
// GET, DEL, CALL; one-sided GETs are the clients' and reach the server only
// as TOUCH hints, shown as touches/s), the GET hit ratio of the interval,
// bytes in and out per second, the 99th percentile of the server's time per
// request over the interval (from the deltas of the cumulative latency_le_*
// rows: the bound of its power-of-two bucket), connections, memory used of
// the limit, keys, evictions and expirations per second. The first line of
// each server comes one interval after start (a rate needs two samples). A
// server that does not answer gets a "down" line and is asked again at the
// next interval (a new connection).
//
//   rkv top --server ADDR|LIST [--port P] [--interval-ms 1000] [--count N] [--auth-token-file F]
//
// --count N: stop after N lines per server (0: until interrupted).
// Exit status: 0 (stopped by --count or a signal), 1 every server down at the
// last interval, 2 bad flags.
#include "rkv_top.hpp"

#include <signal.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "kv/client/client.hpp"
#include "kv/client/server_list.hpp"
#include "kv/server/latency.hpp"
#include "kv/store/histogram.hpp"
#include "proto/placement.hpp"
#include "reactor/reactor.hpp"
#include "stats_reply.hpp"

namespace rkv::apps {
namespace {

using Sample = std::map<std::string, std::uint64_t>;
using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

struct Server {
  proto::ServerAddr addr;
  std::unique_ptr<kv::client::Client> client;  // null: not connected
  std::optional<Sample> last;
  Clock::time_point last_at{};
  std::uint64_t lines = 0;
};

std::uint64_t get(const Sample& s, const char* name) {
  const auto it = s.find(name);
  return it == s.end() ? 0 : it->second;
}

// Per second over `secs`, of a counter that moved from a to b (a restart
// that reset it counts from zero).
double rate(const Sample& a, const Sample& b, const char* name, double secs) {
  const std::uint64_t x = get(a, name), y = get(b, name);
  return secs <= 0 ? 0.0 : static_cast<double>(y >= x ? y - x : y) / secs;
}

std::string human_bytes(std::uint64_t n) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return buf;
}

// The 99th percentile (µs, a bucket bound) of the requests answered between
// samples a and b, "-" if there were none; "+Inf" past the last bound.
std::string interval_p99(const Sample& a, const Sample& b) {
  const auto& names = kv::server::latency_le_row_names();
  std::array<std::uint64_t, kv::store::Histogram::kBounds + 1> delta{};
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::uint64_t x = get(a, names[i].c_str()), y = get(b, names[i].c_str());
    delta[i] = y >= x ? y - x : y;
  }
  const std::uint64_t p99 = kv::store::quantile_us(delta, 0.99);
  if (p99 == 0) return "-";
  if (p99 > (std::uint64_t{1} << (kv::store::Histogram::kBounds - 1))) return "+Inf";
  return std::to_string(p99);
}

std::string clock_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

// A STATS sample of s (connecting first if needed); nullopt and `why` if it
// cannot be had (the connection is then dropped, to be made again).
std::optional<Sample> sample(reactor::Reactor& reactor, Server& s, const kv::client::ClientOptions& copt,
                             std::string& why) {
  try {
    if (!s.client) s.client = kv::client::Client::connect(reactor, s.addr.host, s.addr.port, copt);
    std::vector<StatsRow> rows;
    if (!ask_stats(*s.client, rows, why)) {
      s.client.reset();
      return std::nullopt;
    }
    Sample out;
    for (auto& r : rows) out.emplace(std::move(r.name), r.value);
    return out;
  } catch (const std::exception& e) {
    why = e.what();
    s.client.reset();
    return std::nullopt;
  }
}

void print_header(std::size_t id_width) {
  std::printf("%-8s %-*s %6s %9s %9s %8s %8s %8s %6s %11s %11s %8s %23s %9s %8s %8s\n", "time",
              static_cast<int>(id_width), "server", "conns", "sets/s", "gets/s", "dels/s", "calls/s", "touch/s", "hit%",
              "in/s", "out/s", "p99us", "memory used / limit", "keys", "evict/s", "expir/s");
}

}  // namespace

int top_main(int argc, char** argv) {
  std::string server;
  std::uint16_t port = kv::client::kDefaultPort;
  unsigned interval_ms = 1000;
  std::uint64_t count = 0;
  std::string auth_token_file;
  CLI::App app{"rkv top: one line per second per kvd: operations per second by kind, hit ratio, bytes in and "
               "out, p99 server time, connections, memory, keys, evictions (from its STATS reply)"};
  app.name("rkv top");
  app.add_option("--server", server,
                 "kvd's address (host, host:port, [v6]:port), or a comma-separated list of them: a line for each")
      ->required();
  app.add_option("--port", port, "kvd's port (for --server entries without one)")->capture_default_str();
  app.add_option("--interval-ms", interval_ms, "between two lines of a server")
      ->check(CLI::Range(100u, 3600000u))
      ->capture_default_str();
  app.add_option("--count", count, "stop after this many lines per server (0: until interrupted)")
      ->capture_default_str();
  app.add_option("--auth-token-file", auth_token_file,
                 "present the token in this file to a kvd started with --auth-token-file");
  if (const auto rc = parse_cli(app, argc, argv)) return *rc;
  const std::optional<std::string> auth_token = client_auth_token("rkv top", auth_token_file);
  if (!auth_token) return 2;
  const kv::client::ClientOptions copt = stats_client_options(*auth_token);
  std::vector<proto::ServerAddr> addrs;
  if (std::string why; const int rc = kv::client::resolve_servers(server, port, addrs, why)) {
    std::fprintf(stderr, "rkv top: --server: %s\n", why.c_str());
    return rc == EINVAL ? 2 : 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  std::vector<Server> servers;
  std::size_t id_width = 6;
  for (auto& a : addrs) {
    id_width = std::max(id_width, a.id.size());
    servers.push_back(Server{std::move(a), nullptr, std::nullopt, {}, 0});
  }
  reactor::Reactor reactor;
  const auto interval = std::chrono::milliseconds(interval_ms);
  std::uint64_t printed = 0;
  bool all_down = false;
  auto next = Clock::now();
  while (g_stop == 0) {
    all_down = true;
    for (Server& s : servers) {
      std::string why;
      const auto now_sample = sample(reactor, s, copt, why);
      const auto at = Clock::now();
      if (!now_sample) {
        if (printed++ % 20 == 0) print_header(id_width);
        std::printf("%-8s %-*s down: %s\n", clock_now().c_str(), static_cast<int>(id_width), s.addr.id.c_str(),
                    why.c_str());
        s.last.reset();
        ++s.lines;
        continue;
      }
      all_down = false;
      if (s.last) {
        const Sample& a = *s.last;
        const Sample& b = *now_sample;
        const double secs = std::chrono::duration<double>(at - s.last_at).count();
        const double gets = rate(a, b, "gets", secs);
        const double hits = rate(a, b, "get_hits", secs);
        char hit[16] = "-";
        if (gets > 0) std::snprintf(hit, sizeof hit, "%.1f", 100.0 * hits / gets);
        const std::uint64_t limit = get(b, "max_memory_bytes");
        const std::string mem = human_bytes(get(b, "memory_used_bytes")) + " / " + (limit == 0 ? "none" : human_bytes(limit));
        if (printed++ % 20 == 0) print_header(id_width);
        const std::string in = human_bytes(static_cast<std::uint64_t>(rate(a, b, "bytes_received", secs)));
        const std::string out = human_bytes(static_cast<std::uint64_t>(rate(a, b, "bytes_sent", secs)));
        std::printf("%-8s %-*s %6llu %9.0f %9.0f %8.0f %8.0f %8.0f %6s %11s %11s %8s %23s %9llu %8.0f %8.0f\n",
                    clock_now().c_str(), static_cast<int>(id_width), s.addr.id.c_str(),
                    static_cast<unsigned long long>(get(b, "connections")), rate(a, b, "sets", secs), gets,
                    rate(a, b, "dels", secs), rate(a, b, "calls", secs), rate(a, b, "touches", secs), hit, in.c_str(),
                    out.c_str(), interval_p99(a, b).c_str(), mem.c_str(), static_cast<unsigned long long>(get(b, "keys")),
                    rate(a, b, "evicted_keys", secs), rate(a, b, "expired_keys", secs));
        ++s.lines;
      }
      s.last = *now_sample;
      s.last_at = at;
    }
    std::fflush(stdout);
    bool done = count != 0;
    for (const Server& s : servers) done = done && s.lines >= count;
    if (done) break;
    next += interval;
    const auto now = Clock::now();
    if (next < now) next = now;  // a slow round: no burst of catch-up lines
    while (g_stop == 0 && Clock::now() < next) {
      std::this_thread::sleep_for(std::min<Clock::duration>(next - Clock::now(), std::chrono::milliseconds(100)));
    }
  }
  for (Server& s : servers) {
    if (s.client) s.client->close();
  }
  return all_down ? 1 : 0;
}

}  // namespace rkv::apps
