// kvload: the client role. Runs a workload file against a kvd server with up
// to --depth operations in flight (kvload_run.cpp) and prints a summary (text
// or JSON); without --file, reads commands from stdin interactively (one at a
// time); `kvload gen ...` writes a workload file (kvload_gen.cpp).
// Single-threaded: the Client runs on a Reactor in the main thread.
//
// Exit status: 0 all operations succeeded, 1 an operation/connection/file
// error (or a --verify mismatch), 2 bad command-line flags.
#include "cli.hpp"
#include "kvload.hpp"
#include "kvload_flags.hpp"

#include <unistd.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/client/client.hpp"
#include "kv/client/server_list.hpp"
#include "kv/load/report.hpp"
#include "kv/load/workload.hpp"
#include "reactor/reactor.hpp"

namespace rkv::apps {

namespace {

using Flags = KvloadFlags;

std::string value_bytes(const kv::load::ValueSpec& v) {
  std::string out(kv::load::value_size(v), '\0');
  kv::load::write_value(v, std::as_writable_bytes(std::span<char>(out.data(), out.size())));
  return out;
}

std::unique_ptr<kv::client::Client> connect(reactor::Reactor& reactor, const Flags& f) {
  try {
    kv::client::ClientOptions copt;
    copt.poll = f.poll.budget();
    copt.get_mode = f.get_mode;
    copt.grants = f.grants;
    copt.request_batch = f.request_batch;
    copt.auth_token = f.auth_token;
    return kv::client::Client::connect(reactor, f.servers.at(0).host, f.servers.at(0).port, copt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvload: %s\n", e.what());
    return nullptr;
  }
}

bool is_quit(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
    line.remove_suffix(1);
  }
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  std::string lower(line);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return lower == "quit" || lower == "exit";
}

std::string quote_value(const std::string& v) {
  std::string out = "\"";
  for (const char ch : v) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

int run_interactive(const Flags& f) {
  if (f.servers.size() != 1) {
    std::fprintf(stderr, "kvload: commands from stdin go to one server; give --file to run over several\n");
    return 2;
  }
  reactor::Reactor reactor;
  auto client = connect(reactor, f);
  if (!client) return 1;
  const bool prompt = !f.quiet && ::isatty(STDIN_FILENO) == 1;
  bool errors = false;
  std::string line;
  std::string got;
  for (;;) {
    if (prompt) {
      std::fputs("kv> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (is_quit(line)) break;
    std::string error;
    const auto op = kv::load::parse_command(line, error);
    if (!op) {
      if (!error.empty()) {
        std::printf("error: %s\n", error.c_str());
        errors = true;
      }
      continue;
    }
    switch (op->kind) {
      case kv::load::Op::Kind::set: {
        const kv::client::Status st = client->set_sync(op->key, value_bytes(op->value), op->ttl_ms);
        if (st == kv::client::Status::ok) {
          std::printf("OK\n");
        } else {
          std::printf("error: %s\n", std::string(kv::client::to_string(st)).c_str());
          errors = true;
        }
        break;
      }
      case kv::load::Op::Kind::get: {
        bool found = false;
        const kv::client::Status st = client->get_sync(op->key, got, found);
        if (st != kv::client::Status::ok) {
          std::printf("error: %s\n", std::string(kv::client::to_string(st)).c_str());
          errors = true;
        } else if (found) {
          std::printf("%s\n", quote_value(got).c_str());
        } else {
          std::printf("(not found)\n");
        }
        break;
      }
      case kv::load::Op::Kind::call: {
        std::string reply;
        const std::string request = value_bytes(op->value);
        const kv::client::Status st = client->call_sync(op->call_op, request, reply);
        if (st != kv::client::Status::ok) {
          std::printf("error: %s\n", std::string(kv::client::to_string(st)).c_str());
          errors = true;
        } else {
          std::printf("%s\n", quote_value(reply).c_str());
        }
        break;
      }
      case kv::load::Op::Kind::expire: {
        bool found = false;
        const kv::client::Status st = client->expire_sync(op->key, op->ttl_ms, found);
        if (st != kv::client::Status::ok) {
          std::printf("error: %s\n", std::string(kv::client::to_string(st)).c_str());
          errors = true;
        } else {
          std::printf(found ? "OK\n" : "(not found)\n");
        }
        break;
      }
      case kv::load::Op::Kind::ttl: {
        bool found = false;
        std::int64_t left = -1;
        const kv::client::Status st = client->ttl_sync(op->key, left, found);
        if (st != kv::client::Status::ok) {
          std::printf("error: %s\n", std::string(kv::client::to_string(st)).c_str());
          errors = true;
        } else if (!found) {
          std::printf("(not found)\n");
        } else if (left < 0) {
          std::printf("(no expiry)\n");
        } else {
          std::printf("%lld ms\n", static_cast<long long>(left));
        }
        break;
      }
      case kv::load::Op::Kind::del: {
        bool found = false;
        const kv::client::Status st = client->del_sync(op->key, found);
        if (st != kv::client::Status::ok) {
          std::printf("error: %s\n", std::string(kv::client::to_string(st)).c_str());
          errors = true;
        } else {
          std::printf(found ? "(deleted)\n" : "(not found)\n");
        }
        break;
      }
    }
    std::fflush(stdout);
    if (const auto cs = client->state();
        cs == kv::client::ConnState::failed || cs == kv::client::ConnState::disconnected) {
      std::fprintf(stderr, "kvload: connection failed: %s\n", client->failure().c_str());
      return 1;
    }
  }
  client->close();
  return errors ? 1 : 0;
}

}  // namespace

int kvload_main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "gen") return kvload_gen_main(argc - 1, argv + 1);
  Flags f;
  CLI::App app{"kvload: RDMA key-value client (workload runner and interactive shell)", "kvload"};
  app.add_option("--server", f.server,
                 "server address (numeric or a name, host:port, [v6]:port), or a comma-separated list of them: "
                 "--file runs over all, each key on the server placement picks (docs/protocol.md \"Several "
                 "servers\"); --depth counts across them")
      ->required();
  app.add_option("--port", f.port, "server port (for --server entries without one)")->capture_default_str();
  app.add_option("--file", f.file,
                 "workload file: one `SET key value`, `SET key @size[:seed]`, `GET key`, `DEL key` or `CALL op payload` per line; "
                 "parsed completely before anything is sent. Without it: commands from stdin");
  app.add_flag("--json", f.json, "print the summary as one JSON object");
  app.add_flag("-q,--quiet", f.quiet, "no prompt, no per-operation error lines, warnings only in the log");
  app.add_option("--depth", f.depth,
                 "--file: operations in flight at once (each in its own fiber); operations on one key still "
                 "go in file order")
      ->check(CLI::Range(1u, kv::load::kMaxDepth))
      ->capture_default_str();
  add_poll_flags(app, f.poll, reactor::kDefaultSpin);
  app.add_flag("--verify", f.verify,
               "--file: check every GET of a key this run SET or DELeted against what it last did (the value, "
               "or nothing), and that a DEL finds the key iff it holds a value (the keys it writes must be its "
               "own); mismatches count as errors");
  app.add_option("--stall-timeout", f.stall_timeout_ms,
                 "--file: close the connection (failing what is pending) when requests are in flight and "
                 "none completed for this many ms")
      ->check(CLI::Range(100u, 3'600'000u))
      ->capture_default_str();
  app.add_option("--wait-start", f.wait_start,
                 "--file: once connected, write this process's pid to FILE and start the run only on SIGUSR1 "
                 "(at most --stall-timeout ms later, else exit 1): several processes' runs start together, "
                 "after all of them have connected");
  app.add_option("--request-batch", f.request_batch,
                 "--file: post requests as soon as this many are queued, so kvd starts on them while the rest "
                 "are submitted (0: one SEND per loop turn)")
      ->check(CLI::Range(0u, 4096u))
      ->capture_default_str();
  std::string get_mode = "rpc";
  app.add_option("--get-mode", get_mode,
                 "rpc: GET by message; read: GET by RDMA READ of the server's index, no message (falls back "
                 "to a message GET when the index cannot answer; docs/protocol.md)")
      ->check(CLI::IsMember({"rpc", "read"}))
      ->capture_default_str();
  std::string grants = "off";
  app.add_option("--grants", grants,
                 "on: ask kvd for landing space, so a large SET goes as one RDMA WRITE WITH IMMEDIATE into it "
                 "(docs/protocol.md \"SET by grant\"; half the control messages, slower on Soft-RoCE so far: "
                 "docs/performance.md); off: every large SET is a request kvd answers with a READ")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  std::string read_from = "primary";
  app.add_option("--read-from", read_from,
                 "--file over a cluster (etcd://): primary: every GET goes to its shard's primary; backups: to one "
                 "of the shard's in-sync backups when the map names one (docs/cluster.md \"Reads from backups\": "
                 "what such a read may miss)")
      ->check(CLI::IsMember({"primary", "backups"}))
      ->capture_default_str();
  app.add_option("--ack-log", f.ack_log,
                 "--file: append one line per acknowledged SET or DEL to this file, written (unbuffered) as each "
                 "reply arrives: `LINE KEY SIZE FNV1A64` for a SET (workload line, key, value bytes, 16 hex digits "
                 "of the value's FNV-1a checksum), `LINE KEY DEL` for a DEL");
  app.add_option("--expect", f.expect,
                 "--file: a workload file whose SET and DEL lines are not sent but say what the server already "
                 "holds: every GET of such a key (until this run writes it) is checked against the last value "
                 "given there (nothing after a DEL), as --verify checks its own SETs and DELs (implies --verify; "
                 "its GET lines are ignored)");
  app.add_option("--auth-token-file", f.auth_token_file,
                 "present the token in this file to a kvd started with --auth-token-file (the file's bytes "
                 "without the trailing newline)");
  app.footer("Write a workload file: kvload gen --help");
  if (auto code = parse_cli(app, argc, argv)) return *code;
  if (std::string why; const int rc = kv::client::resolve_servers(f.server, f.port, f.servers, why, &f.cluster)) {
    std::fprintf(stderr, "kvload: --server: %s\n", why.c_str());
    return rc == EINVAL ? 2 : 1;
  }
  if (auto token = client_auth_token("kvload", f.auth_token_file)) {
    f.auth_token = std::move(*token);
  } else {
    return 2;
  }
  (void)kv::client::parse_get_mode(get_mode, f.get_mode);  // checked by IsMember
  f.read_from_backups = read_from == "backups";
  f.grants = grants == "on";
  // Logs go to stderr: stdout carries results (the JSON summary, GET values).
  spdlog::set_default_logger(spdlog::stderr_color_mt("kvload"));
  spdlog::set_level(f.quiet ? spdlog::level::err : spdlog::level::warn);
  try {
    return f.file.empty() ? run_interactive(f) : kvload_run_file(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvload: %s\n", e.what());
    return 1;
  }
}

}  // namespace rkv::apps
