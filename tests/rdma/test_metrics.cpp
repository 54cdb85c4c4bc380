// metrics_e2e: kvd --metrics (docs/observability.md) against a kvd child
// process over Soft-RoCE, scraped by a real HTTP client (curl):
// - the exposition passes `promtool check metrics` (Prometheus' own checker)
//   with nothing to say, has every rkv_* name the shipped alert rules use,
//   and its operation counters move by exactly what a kvload run sent (SETs,
//   GETs, hits), its latency histograms counting each request once in its
//   class; /health answers 200 "ok";
// - scrapers that connect and send nothing, send garbage, send half a
//   request, never read their answer, read it a byte a second, or come more than the endpoint holds
//   at once do not hold up requests: a kvload run beside them ends with 0
//   errors, a proper scrape still works, and each misbehaving one is dropped
//   at its deadline and counted. (Its ops/s beside the run without them is
//   printed, never asserted.)
// - rkv top over two servers while a kvload runs over both: a well-formed
//   line per server per interval, the run's operations seen on each.
// - /health follows the RDMA device: kvd on a Soft-RoCE device of its own
//   (a veth pair and an rxe link this test adds) answers 503 once the port
//   goes down and 200 once it is up again, and serves a kvload then.
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
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
#include "kv/load/workload.hpp"
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
  explicit MetricsKvd(std::vector<std::string> extra = {}, const std::string& addr = verbs::test::softroce_addr())
      : kvd(RKV_KVD_PATH, addr, with_metrics(std::move(extra))) {
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

// The sample names an exposition can have: each "# TYPE" family's name, and
// for a histogram its _bucket, _sum and _count.
std::set<std::string> sample_names(const std::string& text) {
  std::set<std::string> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string hash, type, name, kind;
    if (!(words >> hash >> type >> name >> kind) || hash != "#" || type != "TYPE") continue;
    out.insert(name);
    if (kind == "histogram") out.insert({name + "_bucket", name + "_sum", name + "_count"});
  }
  return out;
}

// docs/metrics.md as an exposition generates it: a table row per family
// (name, type, the labels its samples carry besides le, help), in order.
std::string metrics_markdown(const std::string& text) {
  struct Family {
    std::string name, type, help;
    std::map<std::string, std::set<std::string>> labels;
  };
  std::vector<Family> families;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("# HELP ")) {
      const auto sp = line.find(' ', 7);
      families.push_back({line.substr(7, sp - 7), "", line.substr(sp + 1), {}});
    } else if (line.starts_with("# TYPE ") && !families.empty()) {
      families.back().type = line.substr(line.rfind(' ') + 1);
    } else if (!line.empty() && line[0] != '#' && !families.empty()) {
      // name{k="v",k2="v2"} value: the label pairs (values hold no quote or comma here)
      const auto open = line.find('{'), close = line.find('}');
      if (open == std::string::npos || close == std::string::npos) continue;
      std::istringstream pairs(line.substr(open + 1, close - open - 1));
      for (std::string kv; std::getline(pairs, kv, ',');) {
        const auto eq = kv.find('=');
        if (eq == std::string::npos || kv.substr(0, eq) == "le") continue;
        families.back().labels[kv.substr(0, eq)].insert(kv.substr(eq + 2, kv.size() - eq - 3));
      }
    }
  }
  std::string out =
      "# kvd's metrics\n\n"
      "Generated from the `/metrics` exposition of a live `kvd --data-dir DIR --metrics ADDR:PORT` (the log's\n"
      "rows exist only with a `--data-dir`): each row of kvd's one list of statistics\n"
      "(`src/kv/server/counters.hpp` and the rows the Store, arenas, index, log and endpoint add) and each\n"
      "histogram, with its Prometheus type and the row's own help text. Do not edit: `metrics_e2e` compares\n"
      "this file with what kvd exports and, when they differ, writes the fresh text to `metrics.md` in\n"
      "`tests/rdma/` of the build directory. How the names derive: docs/observability.md.\n\n"
      "| metric | type | labels | help |\n|---|---|---|---|\n";
  for (const auto& f : families) {
    std::string labels;
    for (const auto& [k, values] : f.labels) {
      labels += (labels.empty() ? "" : "; ") + k + ":";
      for (const auto& v : values) labels += " `" + v + "`";
    }
    std::string help;
    for (const char c : f.help) help += c == '|' ? std::string("\\|") : std::string(1, c);
    out += "| `" + f.name + "` | " + f.type + " | " + labels + " | " + help + " |\n";
  }
  return out;
}

std::map<std::string, std::uint64_t> scrape(const MetricsKvd& m) {
  const auto r = curl(m.url("/metrics"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return samples(r.out);
}

// Counts of the workload file's SET and GET lines, and the value bytes they
// move: each SET's value, each GET's (its key's latest, kvload keeping
// each key's order). Read with kvload's own parser.
struct Sent {
  std::uint64_t sets = 0;
  std::uint64_t gets = 0;
  std::uint64_t set_bytes = 0;
  std::uint64_t get_bytes = 0;
};
Sent count_ops(const std::string& path) {
  Sent s;
  std::map<std::string, std::uint64_t> size;
  std::ifstream f(path);
  const auto parsed = kv::load::parse_workload(f);
  EXPECT_TRUE(parsed.ok()) << path;
  for (const auto& op : parsed.ops) {
    if (op.kind == kv::load::Op::Kind::set) {
      ++s.sets;
      s.set_bytes += size[op.key] = kv::load::value_size(op.value);
    }
    if (op.kind == kv::load::Op::Kind::get) {
      ++s.gets;
      s.get_bytes += size[op.key];
    }
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
  const auto exported = sample_names(first.out);
  const auto used = names_in(RKV_PROMETHEUS_RULES);
  EXPECT_GE(used.size(), 6u) << RKV_PROMETHEUS_RULES;
  EXPECT_TRUE(used.contains("rkv_request_duration_seconds_bucket")) << "the p99 alert";
  // docs/metrics.md is generated from this exposition: the README's list of names cannot drift.
  {
    const std::string fresh = metrics_markdown(first.out);
    std::ifstream f(RKV_METRICS_DOC);
    std::stringstream doc;
    doc << f.rdbuf();
    if (doc.str() != fresh) {
      std::ofstream(RKV_METRICS_DOC_OUT) << fresh;
      ADD_FAILURE() << RKV_METRICS_DOC " is not what kvd exports; the fresh text is in " RKV_METRICS_DOC_OUT
                       " (copy it over)";
    }
  }
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
  // Bytes in and out: at least the values, plus headers and keys; not wildly more.
  const std::uint64_t in = after["rkv_bytes_received_total"] - before["rkv_bytes_received_total"];
  const std::uint64_t out = after["rkv_bytes_sent_total"] - before["rkv_bytes_sent_total"];
  EXPECT_GT(in, sent.set_bytes) << "every SET value came in, by SEND or by kvd's READ";
  EXPECT_LT(in, sent.set_bytes + 200 * (sent.sets + sent.gets)) << "a request's overhead is its header and key";
  EXPECT_GT(out, sent.get_bytes) << "every GET value went out, by SEND or WRITE or pull";
  EXPECT_LT(out, sent.get_bytes + 200 * (sent.sets + sent.gets));
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
  // One that reads its answer one byte a second, all through the run.
  const int slow = hold(m.metrics_port, "GET /metrics HTTP/1.1\r\n\r\n");
  ASSERT_GE(slow, 0) << "connect to the metrics port";
  timeval two_s{2, 0};
  (void)::setsockopt(slow, SOL_SOCKET, SO_RCVTIMEO, &two_s, sizeof two_s);
  std::atomic<bool> stop_slow{false};
  std::size_t slow_bytes = 0;
  std::thread slow_reader([&] {
    char c = 0;
    do {  // the first byte whatever the run's length; then one a second until it ends
      if (::recv(slow, &c, 1, 0) != 1) break;
      ++slow_bytes;
      std::this_thread::sleep_for(1s);
    } while (!stop_slow.load());
  });
  for (int i = 0; i < 20; ++i) fds.push_back(hold(m.metrics_port, ""));      // more than it holds at once
  for (const int fd : fds) ASSERT_GE(fd, 0) << "connect to the metrics port";

  const auto beside = kvload(m, wl);
  stop_slow = true;
  slow_reader.join();
  ::close(slow);
  EXPECT_EQ(beside.exit_code, 0) << "requests go on beside misbehaving scrapers\n" << beside.err;
  EXPECT_GE(slow_bytes, 1u) << "the slow reader was answered, a byte a second";
  std::printf("kvload, 2,200 ops at depth 16: %.0f ops/s alone, %.0f ops/s beside %zu misbehaving scrapers "
              "(one of them read %zu bytes, one a second)\n",
              ops_per_s(alone), ops_per_s(beside), fds.size() + 1, slow_bytes);

  // Once their deadline (5 s) passed, the silent and half ones are gone and a
  // proper scrape is answered.
  std::map<std::string, std::uint64_t> s;
  const auto deadline = deadline_after(120s);
  for (;;) {
    const auto r = curl(m.url("/metrics"));
    if (r.exit_code == 0) {
      s = samples(r.out);
      // Deadlines of connections accepted a little apart pass a little apart: wait for all of them.
      if (s["rkv_metrics_timeouts_total"] >= 3 &&
          s["rkv_metrics_refused_total"] + s["rkv_metrics_timeouts_total"] >= 20) {
        break;
      }
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
// per interval, every one well formed, and the run's operations seen on each
// (with bytes in and out and a p99 in the lines that saw them).
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
    ASSERT_EQ(w.size(), 22u) << "time server conns sets/s gets/s dels/s calls/s touch/s hit% in unit out unit p99us "
                                "used unit / limit unit keys evict/s expir/s: "
                             << line;
    ++lines[w[1]];
    if (std::stod(w[3]) + std::stod(w[4]) > 0) {
      ++busy[w[1]];
      // Requests came in and replies went out, and the interval's p99 is a bucket bound.
      EXPECT_GT(std::stod(w[9]), 0.0) << "in/s: " << line;
      EXPECT_GT(std::stod(w[11]), 0.0) << "out/s: " << line;
      EXPECT_TRUE(w[13] == "+Inf" || std::has_single_bit(std::stoull(w[13]))) << "p99us: " << line;
    }
    EXPECT_GE(std::stoull(w[2]), 2u) << "kvload's connection and top's own: " << line;
  }
  for (const auto* k : {&a, &b}) {
    const std::string id = addr + ":" + std::to_string(k->port());
    EXPECT_EQ(lines[id], 3) << id << "\n" << top.out;
    EXPECT_GE(busy[id], 1) << id << ": the run's SETs and GETs, seen\n" << top.out;
  }
}

// An rxe device on a veth pair of its own, so that its port can go down
// without touching the device every other test uses. Removed at the end.
class PrivateDevice {
 public:
  PrivateDevice() {
    const std::string id = std::to_string(::getpid() % 100000);
    name_ = "rkvh" + id;
    netdev_ = name_ + "a";
    for (const auto& cmd : std::vector<std::vector<std::string>>{
             {"/usr/bin/ip", "link", "add", netdev_, "mtu", "9000", "type", "veth", "peer", "name", name_ + "b", "mtu", "9000"},
             {"/usr/bin/ip", "addr", "add", std::string(kAddr) + "/24", "dev", netdev_},
             {"/usr/bin/ip", "link", "set", netdev_, "up"},
             {"/usr/bin/ip", "link", "set", name_ + "b", "up"},
             {"/usr/bin/rdma", "link", "add", name_, "type", "rxe", "netdev", netdev_}}) {
      const auto r = run_command(cmd);
      if (r.exit_code != 0) throw std::runtime_error(cmd[0] + " " + cmd[1] + " " + cmd[2] + ": " + r.err);
    }
  }
  ~PrivateDevice() {
    (void)run_command({"/usr/bin/rdma", "link", "delete", name_});
    (void)run_command({"/usr/bin/ip", "link", "delete", netdev_});
  }
  PrivateDevice(const PrivateDevice&) = delete;
  PrivateDevice& operator=(const PrivateDevice&) = delete;
  void set_link(bool up) const {
    const auto r = run_command({"/usr/bin/ip", "link", "set", netdev_, up ? "up" : "down"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  static constexpr const char* kAddr = "198.51.100.1";

 private:
  std::string name_, netdev_;
};

// /health's status code, once the deadline passes or it is `want`.
std::string wait_health(const MetricsKvd& m, const std::string& want) {
  const auto deadline = deadline_after(60s);
  std::string code;
  do {
    code = run_command({"/usr/bin/curl", "-sS", "-m", "60", "-o", "/dev/null", "-w", "%{http_code}",
                        m.url("/health")})
               .out;
  } while (code != want && std::chrono::steady_clock::now() < deadline && (std::this_thread::sleep_for(50ms), true));
  return code;
}

TEST(MetricsE2E, HealthFollowsTheDevicePort) {
  PrivateDevice dev;
  TempDir t{"health"};
  MetricsKvd m({}, PrivateDevice::kAddr);
  EXPECT_EQ(wait_health(m, "200"), "200");
  EXPECT_EQ(scrape(m)["rkv_device_usable"], 1u);

  dev.set_link(false);  // rxe: IBV_EVENT_PORT_ERR
  EXPECT_EQ(wait_health(m, "503"), "503") << "the port is down: /health must say so\n" << m.kvd.output();
  auto down = scrape(m);
  EXPECT_EQ(down["rkv_device_usable"], 0u);
  EXPECT_GE(down["rkv_device_events_total"], 1u);
  EXPECT_TRUE(contains(m.kvd.output(), "RDMA port 1 down")) << m.kvd.output();

  dev.set_link(true);  // IBV_EVENT_PORT_ACTIVE
  EXPECT_EQ(wait_health(m, "200"), "200") << "the port is up again\n" << m.kvd.output();
  EXPECT_EQ(scrape(m)["rkv_device_usable"], 1u);
  // And it serves.
  const std::string wl = make_workload(t, 200);
  const auto load = run_command({RKV_KVLOAD_PATH, "--server", PrivateDevice::kAddr, "--port",
                                 std::to_string(m.kvd.port()), "--file", wl, "--depth", "4", "--verify"},
                                {}, 300s);
  EXPECT_EQ(load.exit_code, 0) << load.out << load.err;
}

}  // namespace
}  // namespace rkv::test
