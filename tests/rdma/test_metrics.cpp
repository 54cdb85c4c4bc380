// metrics_e2e: kvd --metrics (docs/observability.md) against a kvd child
// process over Soft-RoCE, scraped by a real HTTP client (curl):
// - the exposition passes `promtool check metrics` (Prometheus' own checker)
//   with nothing to say, has every rkv_* name the shipped alert rules use,
//   and its operation counters move by exactly what a kvload run sent (SETs,
//   GETs, hits), its latency histograms counting each request once in its
//   class; /health answers 200 "ok";
// - scrapers that connect and send nothing, send garbage, send half a
//   request, never read their answer, or come more than the endpoint holds
//   at once do not hold up requests: a kvload run beside them ends with 0
//   errors, a proper scrape still works, and each misbehaving one is dropped
//   at its deadline and counted. (Its ops/s beside the run without them is
//   printed, never asserted.)
// - rkv top over two servers while a kvload runs over both: a well-formed
//   line per server per interval, the run's operations seen on each.
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <cctype>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../temp_dir.hpp"
#include "kvd_process.hpp"
#include "loopback.hpp"  // softroce_addr()

#ifndef RKV_KVD_PATH
#error "RKV_KVD_PATH must name the kvd binary"
#endif
#ifndef RKV_KVLOAD_PATH
#error "RKV_KVLOAD_PATH must name the kvload binary"
#endif
#ifndef RKV_PROMETHEUS_RULES
#error "RKV_PROMETHEUS_RULES must name packaging/prometheus/rkv-rules.yml"
#endif

namespace rkv::test {
namespace {

using namespace std::chrono_literals;

// kvd with --metrics on the guest's loopback; the port it printed.
struct MetricsKvd {
  KvdProcess kvd;
  std::uint16_t metrics_port = 0;
  explicit MetricsKvd(std::vector<std::string> extra = {})
      : kvd(RKV_KVD_PATH, verbs::test::softroce_addr(), with_metrics(std::move(extra))) {
    const auto deadline = deadline_after(60s);
    while (metrics_port == 0 && std::chrono::steady_clock::now() < deadline) {
      const std::string out = kvd.output();
      static constexpr std::string_view kLine = "kvd: metrics on 127.0.0.1:";
      if (const auto at = out.find(kLine); at != std::string::npos) {
        metrics_port = static_cast<std::uint16_t>(std::stoul(out.substr(at + kLine.size())));
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    if (metrics_port == 0) throw std::runtime_error("kvd did not print 'kvd: metrics on ADDR:PORT'");
  }
  static std::vector<std::string> with_metrics(std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--metrics", "127.0.0.1:0"});
    return extra;
  }
  [[nodiscard]] std::string url(std::string_view path) const {
    return "http://127.0.0.1:" + std::to_string(metrics_port) + std::string(path);
  }
};

// GET url with curl: the body (-f: an HTTP error is a failed command).
CommandResult curl(const std::string& url) { return run_command({"/usr/bin/curl", "-sS", "-f", "-m", "60", url}); }

// The samples of an exposition: metric name -> value.
std::map<std::string, std::uint64_t> samples(const std::string& text) {
  std::map<std::string, std::uint64_t> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.find(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::stoull(line.substr(sp + 1));
  }
  return out;
}

std::map<std::string, std::uint64_t> scrape(const MetricsKvd& m) {
  const auto r = curl(m.url("/metrics"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return samples(r.out);
}

// Counts of the workload file's SET and GET lines.
struct Sent {
  std::uint64_t sets = 0;
  std::uint64_t gets = 0;
};
Sent count_ops(const std::string& path) {
  Sent s;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.starts_with("SET ")) ++s.sets;
    if (line.starts_with("GET ")) ++s.gets;
  }
  return s;
}

std::string make_workload(const TempDir& t, std::uint64_t ops) {
  const std::string path = t.path() + "/wl.txt";
  const auto r = run_command({RKV_KVLOAD_PATH, "gen", "--keys", "200", "--ops", std::to_string(ops), "--get-ratio",
                              "0.5", "--sizes", "32:4,5000:1", "--seed", "7", "-o", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

CommandResult kvload(const MetricsKvd& m, const std::string& wl) {
  return run_command({RKV_KVLOAD_PATH, "--server", verbs::test::softroce_addr(), "--port",
                      std::to_string(m.kvd.port()), "--file", wl, "--depth", "16", "--json"},
                     {}, 600s);
}

double ops_per_s(const CommandResult& r) {
  const auto at = r.out.find("\"ops_per_s\":");
  return at == std::string::npos ? 0.0 : std::stod(r.out.substr(at + 12));
}

// The rkv_* names an expression file uses.
std::set<std::string> names_in(const std::string& path) {
  std::ifstream f(path);
  std::stringstream all;
  all << f.rdbuf();
  const std::string text = all.str();
  std::set<std::string> out;
  for (std::size_t at = text.find("rkv_"); at != std::string::npos; at = text.find("rkv_", at + 1)) {
    if (at > 0 && (std::isalnum(static_cast<unsigned char>(text[at - 1])) || text[at - 1] == '_')) continue;
    std::size_t end = at;
    while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) ++end;
    if (end > at + 4) out.insert(text.substr(at, end - at));  // not the "rkv_*" of a comment
  }
  return out;
}

TEST(MetricsE2E, TheExpositionPassesPromtoolAndCountsWhatARunSent) {
  TempDir t{"metrics"};
  MetricsKvd m({"--data-dir", t.path() + "/data"});  // the log's rows too
  const auto first = curl(m.url("/metrics"));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto check = run_command({"/usr/bin/promtool", "check", "metrics"}, first.out, 120s);
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_EQ(check.out + check.err, "") << "promtool has nothing to say about a well-formed exposition";
  EXPECT_TRUE(contains(first.out, "# TYPE rkv_sets_total counter\n")) << first.out;
  EXPECT_TRUE(contains(first.out, "# TYPE rkv_connections gauge\n")) << first.out;
  // The shipped alert rules only name metrics kvd exports.
  const auto exported = samples(first.out);
  const auto used = names_in(RKV_PROMETHEUS_RULES);
  EXPECT_GE(used.size(), 5u) << RKV_PROMETHEUS_RULES;
  for (const auto& name : used) EXPECT_TRUE(exported.contains(name)) << name << " (" RKV_PROMETHEUS_RULES ")";

  const auto health = run_command({"/usr/bin/curl", "-sS", "-m", "60", "-w", "%{http_code}", m.url("/health")});
  EXPECT_EQ(health.out, "ok\n200");
  const auto missing = run_command({"/usr/bin/curl", "-sS", "-m", "60", "-o", "/dev/null", "-w", "%{http_code}",
                                    m.url("/nothing")});
  EXPECT_EQ(missing.out, "404");

  const std::string wl = make_workload(t, 600);
  const Sent sent = count_ops(wl);
  auto before = samples(first.out);
  const auto load = kvload(m, wl);
  ASSERT_EQ(load.exit_code, 0) << load.err;
  // The run's connection is torn down by now or soon: wait for the gauge.
  std::map<std::string, std::uint64_t> after;
  const auto deadline = deadline_after(60s);
  do {
    after = scrape(m);
  } while (after["rkv_connections"] != 0 && std::chrono::steady_clock::now() < deadline &&
           (std::this_thread::sleep_for(100ms), true));
  EXPECT_EQ(after["rkv_connections"], 0u);
  EXPECT_EQ(after["rkv_sets_total"] - before["rkv_sets_total"], sent.sets);
  EXPECT_EQ(after["rkv_gets_total"] - before["rkv_gets_total"], sent.gets);
  EXPECT_EQ(after["rkv_get_hits_total"] - before["rkv_get_hits_total"], sent.gets) << "every key was preloaded";
  EXPECT_EQ(after["rkv_accepted_total"] - before["rkv_accepted_total"], 1u);
  EXPECT_GT(after["rkv_large_sets_total"], 0u) << "the 5000-byte values took the rendezvous path";
  EXPECT_EQ(after["rkv_keys"], 200u);
  // The server's latency histograms count every request of the run once, by class.
  const auto hist = [&](std::map<std::string, std::uint64_t>& m, const char* op, const char* part = "_count") {
    return m[std::string("rkv_request_duration_seconds") + part + "{op=\"" + op + "\"}"];
  };
  EXPECT_EQ(hist(after, "set") + hist(after, "set_large") - hist(before, "set") - hist(before, "set_large"), sent.sets);
  EXPECT_EQ(hist(after, "get") + hist(after, "get_large") - hist(before, "get") - hist(before, "get_large"), sent.gets);
  EXPECT_EQ(hist(after, "set_large") - hist(before, "set_large"), after["rkv_large_sets_total"]);
  EXPECT_GT(hist(after, "get_large"), 0u) << "the 5000-byte values' GETs";
  for (const char* op : {"get", "get_large", "set", "set_large", "del", "call", "other"}) {
    SCOPED_TRACE(op);
    EXPECT_EQ(after[std::string("rkv_request_duration_seconds_bucket{op=\"") + op + "\",le=\"+Inf\"}"],
              hist(after, op));
  }
  EXPECT_EQ(before["rkv_metrics_scrapes_total"], 1u) << "a scrape counts itself";
  EXPECT_GE(after["rkv_metrics_scrapes_total"], 2u);
  EXPECT_EQ(after["rkv_metrics_health_checks_total"], 1u);
  EXPECT_EQ(after["rkv_metrics_bad_requests_total"], 1u) << "the 404";
}

// A TCP connection to the endpoint that sends `bytes` (maybe none) and then
// holds the socket without reading, until closed.
int hold(std::uint16_t port, std::string_view bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int small = 1024;  // a small receive buffer: the answer does not fit in it
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  if (!bytes.empty() && ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(MetricsE2E, MisbehavingScrapersDoNotHoldUpRequests) {
  TempDir t{"metrics"};
  MetricsKvd m;
  const std::string wl = make_workload(t, 2000);
  const auto alone = kvload(m, wl);
  ASSERT_EQ(alone.exit_code, 0) << alone.err;

  std::vector<int> fds;
  fds.push_back(hold(m.metrics_port, ""));                                    // silent
  fds.push_back(hold(m.metrics_port, "\x16\x03\x01 garbage, no end"));         // garbage, never a whole head
  fds.push_back(hold(m.metrics_port, "GET /metrics HTTP/1.1\r\nHost: x\r\n"));  // half a request
  fds.push_back(hold(m.metrics_port, "GET /metrics HTTP/1.1\r\n\r\n"));       // never reads the answer
  fds.push_back(hold(m.metrics_port, "BREW /coffee HTCPCP/1.0\r\n\r\n"));     // answered 400, closed
  for (int i = 0; i < 20; ++i) fds.push_back(hold(m.metrics_port, ""));      // more than it holds at once
  for (const int fd : fds) ASSERT_GE(fd, 0) << "connect to the metrics port";

  const auto beside = kvload(m, wl);
  EXPECT_EQ(beside.exit_code, 0) << "requests go on beside misbehaving scrapers\n" << beside.err;
  std::printf("kvload, 2,200 ops at depth 16: %.0f ops/s alone, %.0f ops/s beside %zu misbehaving scrapers\n",
              ops_per_s(alone), ops_per_s(beside), fds.size());

  // Once their deadline (5 s) passed, the silent and half ones are gone and a
  // proper scrape is answered.
  std::map<std::string, std::uint64_t> s;
  const auto deadline = deadline_after(120s);
  for (;;) {
    const auto r = curl(m.url("/metrics"));
    if (r.exit_code == 0) {
      s = samples(r.out);
      if (s["rkv_metrics_timeouts_total"] >= 3) break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the misbehaving scrapers were never dropped";
    std::this_thread::sleep_for(500ms);
  }
  EXPECT_GE(s["rkv_metrics_bad_requests_total"], 1u) << "the BREW";
  EXPECT_GE(s["rkv_metrics_refused_total"] + s["rkv_metrics_timeouts_total"], 20u)
      << "every connection beyond the first 16 refused at accept, or dropped at its deadline";
  // Every connection the endpoint took ended: reading each socket gets its end.
  for (const int fd : fds) {
    char buf[4096];
    timeval tv{60, 0};
    (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t n = 0;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) {
    }
    EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << "kvd closed it (n " << n << ", errno " << errno << ")";
    ::close(fd);
  }
  EXPECT_EQ(s["rkv_sets_total"], 2 * count_ops(wl).sets) << "both runs counted, nothing lost";
}

// A child process with stdout and stderr to /dev/null, stopped (SIGKILL) and
// reaped when this goes.
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  [[nodiscard]] bool started() const noexcept { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

// rkv top over two servers while a kvload runs over both: a line per server
// per interval, every one well formed, and the run's operations seen on each.
TEST(RkvTop, ShowsALiveRunOverTwoServers) {
  TempDir t{"top"};
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess a(RKV_KVD_PATH, addr), b(RKV_KVD_PATH, addr);
  const std::string list = addr + ":" + std::to_string(a.port()) + "," + addr + ":" + std::to_string(b.port());
  const std::string wl = t.path() + "/wl.txt";
  ASSERT_EQ(run_command({RKV_KVLOAD_PATH, "gen", "--keys", "500", "--ops", "400000", "--get-ratio", "0.7", "--sizes",
                         "32", "-o", wl})
                .exit_code,
            0);
  Child load({RKV_KVLOAD_PATH, "--server", list, "--file", wl, "--depth", "16", "-q"});
  ASSERT_TRUE(load.started());
  // Wait until both servers are being written to: the run is live.
  for (KvdProcess* k : {&a, &b}) {
    const auto deadline = deadline_after(120s);
    for (;;) {
      const auto st = k->stats();
      if (st && st->at("sets") > 0) break;
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "kvload never reached a server";
      std::this_thread::sleep_for(100ms);
    }
  }
  const auto top = run_command({rkv_beside(RKV_KVD_PATH), "top", "--server", list, "--count", "3", "--interval-ms",
                                "500"},
                               {}, 300s);
  ASSERT_EQ(top.exit_code, 0) << top.out << top.err;
  std::printf("%s", top.out.c_str());
  std::map<std::string, int> lines, busy;
  std::istringstream in(top.out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.size() >= 2 && w[1] == "server") continue;  // the header
    ASSERT_EQ(w.size(), 17u) << "time server conns sets/s gets/s dels/s calls/s touch/s hit% used unit / limit unit "
                                "keys evict/s expir/s: "
                             << line;
    ++lines[w[1]];
    if (std::stod(w[3]) + std::stod(w[4]) > 0) ++busy[w[1]];
    EXPECT_GE(std::stoull(w[2]), 2u) << "kvload's connection and top's own: " << line;
  }
  for (const auto* k : {&a, &b}) {
    const std::string id = addr + ":" + std::to_string(k->port());
    EXPECT_EQ(lines[id], 3) << id << "\n" << top.out;
    EXPECT_GE(busy[id], 1) << id << ": the run's SETs and GETs, seen\n" << top.out;
  }
}

}  // namespace
}  // namespace rkv::test
