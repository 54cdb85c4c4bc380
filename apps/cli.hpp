#pragma once
// Command-line parsing shared by the rkv roles: one place decides the exit
// codes (0 after --help, 2 for bad flags, with CLI11's message).
#include <CLI/CLI.hpp>

#include <chrono>
#include <optional>
#include <string>

#include "reactor/handle.hpp"

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

// Parses argv into `app`. nullopt: go on; otherwise the status to exit with.
inline std::optional<int> parse_cli(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
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

}  // namespace rkv::apps
