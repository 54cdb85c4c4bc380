// bench/idle_conns: holds N idle client connections to a kvd, for bench/idle
// (docs/performance.md, "What an idle connection costs kvd"). Connects them
// one after another on one reactor, with a client's default credits and
// buffers (what kvd sizes its per-connection buffers by) but no spare landing
// buffers, prints "held N" on stdout, then sleeps until SIGTERM or SIGINT and
// closes them all.
//
//   idle_conns --server ADDR --port P --conns N
//
// Exit status: 0 after holding and closing N connections, 1 if one failed to
// connect (the line says which and why), 2 bad flags.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "kv/client/client.hpp"
#include "reactor/reactor.hpp"

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

// Each connection takes a few descriptors (its event channel, its CQ's
// completion channel): allow as many as the hard limit does.
void raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &r);  // best effort: a low limit shows as a failed connect
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string server;
  std::uint16_t port = rkv::kv::client::kDefaultPort;
  std::size_t conns = 1000;
  CLI::App app{"idle_conns: hold N idle connections to a kvd until SIGTERM"};
  app.add_option("--server", server, "kvd's address")->required();
  app.add_option("--port", port, "kvd's port")->capture_default_str();
  app.add_option("--conns", conns, "connections to hold")->check(CLI::Range(1, 100000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  raise_fd_limit();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);

  rkv::kv::client::ClientOptions o;
  o.rdv.landing_spares = 0;  // idle: no landing buffer registered ahead
  o.poll = std::chrono::microseconds{0};  // events only: an idle client takes no CPU
  rkv::reactor::Reactor reactor;
  std::vector<std::unique_ptr<rkv::kv::client::Client>> held;
  held.reserve(conns);
  for (std::size_t i = 0; i < conns; ++i) {
    try {
      held.push_back(rkv::kv::client::Client::connect(reactor, server, port, o));
    } catch (const std::exception& e) {
      std::printf("idle_conns: connection %zu of %zu failed: %s\n", i + 1, conns, e.what());
      return 1;
    }
    if ((i + 1) % 100 == 0) std::fprintf(stderr, "idle_conns: %zu connected\n", i + 1);
  }
  std::printf("held %zu\n", held.size());
  std::fflush(stdout);
  while (g_stop == 0) ::pause();
  held.clear();  // each Client disconnects and waits for DISCONNECTED
  return 0;
}
