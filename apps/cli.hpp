#pragma once
// Command-line parsing shared by the rkv roles: one place decides the exit
// codes (0 after --help or --version, 2 for bad flags, with CLI11's message)
// and gives every tool its --version.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "cluster/keyspace.hpp"
#include "kv/conn/auth_token.hpp"
#include "reactor/handle.hpp"
#include "version.h"  // generated: RKV_VERSION, RKV_GIT_DESCRIBE

namespace rkv::apps {

// --poll-us N and --busy-poll (the spin budget of reactor.hpp's "Spin, then
// block"), the same on every tool. Call after parsing: the budget they chose.
struct PollFlags {
  unsigned poll_us = 0;
  bool busy = false;
  [[nodiscard]] std::chrono::microseconds budget() const noexcept {
    return busy ? reactor::kSpinForever : std::chrono::microseconds(poll_us);
  }
};

inline void add_poll_flags(CLI::App& app, PollFlags& f, std::chrono::microseconds default_budget) {
  f.poll_us = static_cast<unsigned>(default_budget.count());
  auto* poll = app.add_option("--poll-us", f.poll_us,
                              "after any completion or post, keep polling the completion queue this many "
                              "microseconds before arming it and sleeping (0: completion events only)")
                   ->check(CLI::Range(0u, 10'000'000u))
                   ->capture_default_str();
  app.add_flag("--busy-poll", f.busy,
               "never sleep: poll the completion queues in a spinning loop (lowest latency, one core at 100% "
               "even when idle)")
      ->excludes(poll);
}

// What --version prints: `NAME (rkv) VERSION, git DESCRIBE` (one line, the
// form help2man reads for the man pages' footer).
inline std::string version_line(const std::string& name) {
  return name + " (rkv) " RKV_VERSION ", git " RKV_GIT_DESCRIBE;
}

// Parses argv into `app` (named: its name is what --help and --version print),
// adding --version. nullopt: go on; otherwise the status to exit with.
inline std::optional<int> parse_cli(CLI::App& app, int argc, char** argv) {
  app.set_version_flag("--version", version_line(app.get_name()), "print the version and git describe of this build");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return std::nullopt;
}

// CLI11 check of an etcd://HOST:PORT/NAME option (kvd --cluster, rkv cluster --server).
inline std::string check_cluster_url(const std::string& text) {
  cluster::ClusterUrl url;
  std::string why;
  return cluster::parse_cluster_url(text, url, why) ? std::string{} : why;
}

// The token a client tool presents (its --auth-token-file; "" without one).
// nullopt: the file is unusable, said on stderr as "TOOL: why" (exit 2).
inline std::optional<std::string> client_auth_token(const char* tool, const std::string& file) {
  if (file.empty()) return std::string();
  try {
    return kv::conn::read_auth_token_file(file).token;
  } catch (const kv::conn::AuthTokenError& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return std::nullopt;
  }
}

}  // namespace rkv::apps
