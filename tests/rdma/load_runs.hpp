#pragma once
// Many in-process clients at once (kvload_many, no_rnr): one verified
// kv::load::LoadRun per client, all driven on the caller's reactor until
// every run finished or `timeout` passed; then every client is closed (before
// the runs' Scheduler goes, as LoadRun requires).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kv/client/shard_set.hpp"
#include "kv/load/drive.hpp"
#include "kv/load/runner.hpp"
#include "kv/load/workload.hpp"
#include "reactor/reactor.hpp"

namespace rkv::test {

struct LoadRuns {
  bool finished = false;                  // every run ended within the timeout
  std::vector<kv::load::Report> reports;  // one per client, in order
  std::size_t most_in_flight = 0;         // the most operations any run had in flight at once
};

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
