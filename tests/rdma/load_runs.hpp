#pragma once
// Many in-process clients at once (kvload_many, no_rnr): one verified
// kv::load::LoadRun per client, all driven on the caller's reactor until
// every run finished or `timeout` passed; then every client is closed (before
// the runs' Scheduler goes, as LoadRun requires).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kv/client/shard_set.hpp"
#include "kv/load/drive.hpp"
#include "kv/load/runner.hpp"
#include "kv/load/workload.hpp"
#include "proto/placement.hpp"
#include "reactor/reactor.hpp"

namespace rkv::test {

// kvload's own parser over a test's workload text (fails the test on an error).
[[nodiscard]] inline std::vector<kv::load::Op> parse_ops(const std::string& text) {
  std::istringstream in(text);
  auto parsed = kv::load::parse_workload(in);
  EXPECT_TRUE(parsed.ok()) << text.substr(0, 200);
  return std::move(parsed.ops);
}

// `n` clients, each one connection to the one server at addr:port.
[[nodiscard]] inline std::vector<std::unique_ptr<kv::client::ShardSet>> connect_clients(
    reactor::Reactor& reactor, const std::string& addr, std::uint16_t port, int n,
    const kv::client::ClientOptions& options) {
  std::vector<proto::ServerAddr> one(1);
  one[0] = {addr, port, proto::server_id(addr, port)};
  std::vector<std::unique_ptr<kv::client::ShardSet>> clients;
  for (int c = 0; c < n; ++c) clients.push_back(kv::client::ShardSet::connect(reactor, one, options));
  return clients;
}

struct LoadRuns {
  bool finished = false;                  // every run ended within the timeout
  std::vector<kv::load::Report> reports;  // one per client, in order
  std::size_t most_in_flight = 0;         // the most operations any run had in flight at once
};

// Every run ended with 0 errors and 0 mismatches (each a test failure
// naming its client); returns the operations of all runs.
inline std::uint64_t expect_clean(const LoadRuns& runs) {
  std::uint64_t ops = 0;
  for (const auto& r : runs.reports) {
    EXPECT_EQ(r.errors(), 0u) << r.name;
    EXPECT_EQ(r.mismatches, 0u) << r.name;
    ops += r.ops();
  }
  return ops;
}

// workloads[i] runs on clients[i] at `depth`, with --verify; errors go to stderr.
[[nodiscard]] inline LoadRuns run_verified(reactor::Reactor& reactor,
                                           std::vector<std::unique_ptr<kv::client::ShardSet>>& clients,
                                           const std::vector<std::vector<kv::load::Op>>& workloads,
                                           std::size_t depth, std::chrono::milliseconds timeout) {
  LoadRuns out;
  kv::load::Scheduler scheduler;
  std::vector<std::unique_ptr<kv::load::LoadRun>> runs;
  for (std::size_t c = 0; c < clients.size(); ++c) {
    kv::load::LoadOptions lo;
    lo.depth = depth;
    lo.verify = true;
    lo.name = "client" + std::to_string(c);
    lo.on_error = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    runs.push_back(std::make_unique<kv::load::LoadRun>(scheduler, *clients[c], workloads.at(c), lo));
    runs.back()->start();
  }
  out.finished = kv::load::drive(
      reactor, scheduler,
      [&] {
        for (const auto& r : runs) {
          if (!r->finished()) return false;
        }
        return true;
      },
      timeout);
  for (const auto& r : runs) {
    out.reports.push_back(r->report());
    out.most_in_flight = std::max(out.most_in_flight, r->max_in_flight());
  }
  for (auto& c : clients) c->close();  // before the scheduler goes
  return out;
}

}  // namespace rkv::test
