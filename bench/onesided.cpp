// bench/onesided: the RDMA lab's measurement of one-sided GET
// (docs/performance.md, "One-sided GET (lab measurement)"). In one run, for a
// small (32 B) and a 64 KiB value: --ops SETs, --ops GETs by message (rpc
// mode) and --ops GETs by RDMA READ (read mode), each at depth 1 (one
// operation at a time, sync API), timed with CLOCK_MONOTONIC; prints ops/s
// and mean latency side by side, optionally a CSV.
//
//   onesided --kvd build/apps/kvd [--ops N] [--csv FILE]     starts kvd on $SOFTROCE_ADDR
//   onesided --server ADDR --port P [--ops N] [--csv FILE]   against a running kvd
//
// Keys cycle over --keys (1000) per size, so memory stays bounded. Every GET
// checks the value's length; the first pass of each GET mode checks its bytes.
// Speed is measured here, never asserted.
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/client/client.hpp"
#include "reactor/reactor.hpp"

namespace {

using rkv::kv::client::Client;
using rkv::kv::client::ClientOptions;
using rkv::kv::client::GetMode;
using rkv::kv::client::Status;

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string value_for(std::size_t size, std::size_t i) {
  std::string v(size, '\0');
  std::uint64_t x = 0x9E3779B97F4A7C15ull ^ (i * 0xD1B54A32D192ED03ull) ^ size;
  for (auto& c : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>('a' + x % 26);
  }
  return v;
}

// kvd as a child: --bind ADDR --port 0, reads "kvd: listening on A:PORT".
struct Kvd {
  pid_t pid = -1;
  std::uint16_t port = 0;
  Kvd(const std::string& exe, const std::string& addr) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      ::execl(exe.c_str(), exe.c_str(), "--bind", addr.c_str(), "--port", "0", "--log-level", "warn",
              static_cast<char*>(nullptr));
      std::perror("exec kvd");
      ::_exit(127);
    }
    ::close(fds[1]);
    FILE* out = ::fdopen(fds[0], "r");
    char line[512];
    while (std::fgets(line, sizeof line, out) != nullptr) {
      if (const char* p = std::strstr(line, "listening on "); p != nullptr) {
        const char* colon = std::strrchr(p, ':');
        if (colon != nullptr) port = static_cast<std::uint16_t>(std::atoi(colon + 1));
        break;
      }
    }
    if (port == 0) throw std::runtime_error("kvd did not start");
  }
  ~Kvd() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      int st = 0;
      ::waitpid(pid, &st, 0);
    }
  }
};

struct Row {
  std::string op;
  std::size_t size;
  std::size_t ops;
  double seconds;
  std::uint64_t messages;
};

}  // namespace

int main(int argc, char** argv) {
  std::string kvd_path, server, csv;
  std::uint16_t port = rkv::kv::client::kDefaultPort;
  std::size_t ops = 100000, keys = 1000;
  std::vector<std::size_t> sizes = {32, 64 * 1024};
  CLI::App app{"onesided: SET vs GET by message vs GET by RDMA READ (depth 1)"};
  app.add_option("--kvd", kvd_path, "start this kvd on $SOFTROCE_ADDR (else --server/--port)");
  app.add_option("--server", server, "a running kvd's address");
  app.add_option("--port", port, "its port");
  app.add_option("--ops", ops, "operations per phase")->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--keys", keys, "distinct keys per size")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--sizes", sizes, "value sizes, bytes")->capture_default_str();
  app.add_option("--csv", csv, "also write op,size,ops,seconds,ops_per_s,mean_us,messages_sent to FILE");
  CLI11_PARSE(app, argc, argv);
  try {
    std::unique_ptr<Kvd> kvd;
    if (!kvd_path.empty()) {
      const char* addr = std::getenv("SOFTROCE_ADDR");
      server = addr != nullptr ? addr : "127.0.0.1";
      kvd = std::make_unique<Kvd>(kvd_path, server);
      port = kvd->port;
    }
    if (server.empty()) throw std::runtime_error("give --kvd PATH or --server ADDR");
    rkv::reactor::Reactor reactor;
    ClientOptions rpc_opt, read_opt;
    read_opt.get_mode = GetMode::read;
    auto rpc = Client::connect(reactor, server, port, rpc_opt);
    auto rd = Client::connect(reactor, server, port, read_opt);
    if (!rd->onesided()) throw std::runtime_error("the server has no readable index (kvd --index-buckets 0?)");
    std::vector<Row> rows;
    for (const std::size_t size : sizes) {
      std::vector<std::string> names, values;
      for (std::size_t k = 0; k < std::min(keys, ops); ++k) {
        names.push_back("bench-" + std::to_string(size) + "-" + std::to_string(k));
        values.push_back(value_for(size, k));
      }
      const std::size_t n_keys = names.size();
      double t0 = now_s();
      std::uint64_t m0 = rpc->counters().messages_sent;
      for (std::size_t i = 0; i < ops; ++i) {
        if (const Status st = rpc->set_sync(names[i % n_keys], values[i % n_keys]); st != Status::ok) {
          throw std::runtime_error("SET failed: " + std::string(rkv::kv::client::to_string(st)));
        }
      }
      rows.push_back({"SET", size, ops, now_s() - t0, rpc->counters().messages_sent - m0});
      for (Client* c : {rpc.get(), rd.get()}) {
        const bool one_sided = c == rd.get();
        m0 = c->counters().messages_sent;
        t0 = now_s();
        for (std::size_t i = 0; i < ops; ++i) {
          rkv::kv::client::Value v;
          bool found = false;
          if (const Status st = c->get_sync(names[i % n_keys], v, found); st != Status::ok || !found) {
            throw std::runtime_error("GET failed: " + std::string(rkv::kv::client::to_string(st)));
          }
          if (v.size() != size || (i < n_keys && v.view() != values[i])) {
            throw std::runtime_error("GET returned a wrong value for " + names[i % n_keys]);
          }
        }
        rows.push_back({one_sided ? "GET (RDMA READ)" : "GET (message)", size, ops, now_s() - t0,
                        c->counters().messages_sent - m0});
      }
    }
    const auto& oc = rd->counters();
    std::printf("%-16s %9s %9s %12s %14s %14s\n", "op", "size", "ops", "ops/s", "mean latency us", "messages sent");
    for (const Row& r : rows) {
      std::printf("%-16s %9zu %9zu %12.0f %14.1f %14llu\n", r.op.c_str(), r.size, r.ops,
                  static_cast<double>(r.ops) / r.seconds, r.seconds * 1e6 / static_cast<double>(r.ops),
                  static_cast<unsigned long long>(r.messages));
    }
    std::printf("one-sided: hits %llu misses %llu retries %llu fallbacks %llu\n",
                static_cast<unsigned long long>(oc.onesided_hits), static_cast<unsigned long long>(oc.onesided_misses),
                static_cast<unsigned long long>(oc.onesided_retries),
                static_cast<unsigned long long>(oc.onesided_fallbacks));
    if (!csv.empty()) {
      FILE* f = std::fopen(csv.c_str(), "w");
      if (f == nullptr) throw std::runtime_error("cannot write " + csv);
      std::fprintf(f, "op,size,ops,seconds,ops_per_s,mean_us,messages_sent\n");
      for (const Row& r : rows) {
        std::fprintf(f, "%s,%zu,%zu,%.6f,%.1f,%.2f,%llu\n", r.op.c_str(), r.size, r.ops, r.seconds,
                     static_cast<double>(r.ops) / r.seconds, r.seconds * 1e6 / static_cast<double>(r.ops),
                     static_cast<unsigned long long>(r.messages));
      }
      std::fclose(f);
    }
    rpc->close();
    rd->close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onesided: %s\n", e.what());
    return 1;
  }
  return 0;
}
