#pragma once
// kvload's parsed command line and its two workload commands (kvload.cpp
// parses; kvload_run.cpp runs a file; kvload_gen.cpp writes one).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "cluster/membership.hpp"
#include "kv/client/client.hpp"
#include "kv/load/runner.hpp"
#include "proto/placement.hpp"

namespace rkv::apps {

struct KvloadFlags {
  std::string server;  // --server: one address or a comma-separated list
  std::uint16_t port = kv::client::kDefaultPort;  // for entries without their own
  std::vector<proto::ServerAddr> servers;  // parsed from both
  std::optional<cluster::ClusterView> cluster;  // --server etcd://...: followed while the run lasts
  std::string file;
  bool json = false;
  bool quiet = false;
  unsigned depth = kv::load::kDefaultDepth;
  bool verify = false;
  unsigned stall_timeout_ms = 30'000;
  PollFlags poll;  // --poll-us, --busy-poll
  kv::client::GetMode get_mode = kv::client::GetMode::rpc;
  bool grants = false;  // --grants: ask kvd for grants (docs/protocol.md "SET by grant")
  bool read_from_backups = false;  // --read-from backups (a cluster's in-sync backups answer GETs)
  std::uint32_t request_batch = kv::client::ClientOptions{}.request_batch;
  std::string ack_log;
  std::string expect;  // --expect FILE: values the server holds before the run (checked like --verify)
  std::string auth_token_file;  // --auth-token-file FILE
  std::string auth_token;       // read from it after parsing (ClientOptions::auth_token)
  std::string wait_start;       // --wait-start FILE: connected, write the pid there, run on SIGUSR1
};

// Runs the workload file with up to flags.depth operations in flight; returns the exit status.
int kvload_run_file(const KvloadFlags& flags);

// `kvload gen ...`: argv[0] is "gen". Returns the exit status.
int kvload_gen_main(int argc, char** argv);

}  // namespace rkv::apps
