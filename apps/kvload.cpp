// kvload: the client role. Runs a workload file against a kvd server and
// prints a summary (text or JSON), or, without --file, reads commands from
// stdin interactively. Single-threaded: the Client runs on a Reactor in the
// main thread.
//
// Exit status: 0 all operations succeeded, 1 an operation/connection/file
// error (or a --verify mismatch), 2 bad command-line flags.
#include "kvload.hpp"

#include <unistd.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
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

#include "kv/client.hpp"
#include "kv/report.hpp"
#include "kv/workload.hpp"
#include "reactor/reactor.hpp"

namespace rkv::apps {

namespace {

struct Flags {
  std::string server;
  std::uint16_t port = kv::kDefaultPort;
  std::string file;
  bool json = false;
  bool quiet = false;
  unsigned depth = 1;
  bool verify = false;
};

std::string value_bytes(const kv::ValueSpec& v) {
  std::string out(kv::value_size(v), '\0');
  kv::write_value(v, std::as_writable_bytes(std::span<char>(out.data(), out.size())));
  return out;
}

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

std::unique_ptr<kv::Client> connect(reactor::Reactor& reactor, const Flags& f) {
  try {
    return kv::Client::connect(reactor, f.server, f.port, {});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvload: %s\n", e.what());
    return nullptr;
  }
}

// Runs every op in order; returns the exit status.
int run_file(const Flags& f) {
  std::ifstream in(f.file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "kvload: %s: cannot open\n", f.file.c_str());
    return 1;
  }
  // Parse everything first: a bad file sends nothing.
  const kv::ParseResult parsed = kv::parse_workload(in);
  if (!parsed.ok()) {
    for (const auto& e : parsed.errors) std::fprintf(stderr, "%s:%u: %s\n", f.file.c_str(), e.line, e.message.c_str());
    if (parsed.errors_omitted > 0) {
      std::fprintf(stderr, "%s: %zu more errors not shown\n", f.file.c_str(), parsed.errors_omitted);
    }
    std::fprintf(stderr, "kvload: %s: %zu errors, nothing sent\n", f.file.c_str(),
                 parsed.errors.size() + parsed.errors_omitted);
    return 1;
  }

  reactor::Reactor reactor;
  auto client = connect(reactor, f);
  if (!client) return 1;

  kv::Report report;
  report.name = f.file;
  std::unordered_map<std::string, kv::ValueSpec> expected;  // --verify: last value SET per key
  std::string got;
  const auto start = std::chrono::steady_clock::now();
  for (const kv::Op& op : parsed.ops) {
    const auto t0 = std::chrono::steady_clock::now();
    kv::Status st = kv::Status::ok;
    std::uint64_t value_len = 0;
    bool found = false;
    if (op.kind == kv::Op::Kind::set) {
      const std::string value = value_bytes(op.value);
      value_len = value.size();
      st = client->set_sync(op.key, value);
      if (st == kv::Status::ok && f.verify) expected.insert_or_assign(op.key, op.value);
    } else {
      st = client->get_sync(op.key, got, found);
      if (st == kv::Status::ok) value_len = found ? got.size() : 0;
      if (st == kv::Status::ok && f.verify) {
        const auto it = expected.find(op.key);
        if (it != expected.end() && (!found || !kv::matches(it->second, as_bytes(got)))) {
          ++report.mismatches;
          if (!f.quiet) std::fprintf(stderr, "%s:%u: GET %s returned other bytes than were SET\n", f.file.c_str(),
                                     op.line, op.key.c_str());
        }
      }
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    const bool ok = st == kv::Status::ok;
    report.record(op.kind, kv::size_class(op.key.size(), op.kind == kv::Op::Kind::set ? value_len : 0),
                  op.key.size() + value_len, static_cast<std::uint64_t>(ns.count()), ok);
    if (!ok && !f.quiet) {
      std::fprintf(stderr, "%s:%u: %s %s: %s\n", f.file.c_str(), op.line, std::string(kv::to_string(op.kind)).c_str(),
                   op.key.c_str(), std::string(kv::to_string(st)).c_str());
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto& c = client->counters();
  if (!f.quiet && !f.json) {
    std::fprintf(stderr, "kvload: %llu requests in %llu sends (%.2f per send)\n",
                 static_cast<unsigned long long>(c.messages_sent), static_cast<unsigned long long>(c.sends_posted),
                 c.messages_per_send());
  }
  client->close();
  if (f.json) {
    std::printf("%s\n", kv::to_json(report).c_str());
  } else {
    std::printf("%s", kv::to_text(report).c_str());
  }
  return report.errors() > 0 || report.mismatches > 0 ? 1 : 0;
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
    const auto op = kv::parse_command(line, error);
    if (!op) {
      if (!error.empty()) {
        std::printf("error: %s\n", error.c_str());
        errors = true;
      }
      continue;
    }
    if (op->kind == kv::Op::Kind::set) {
      const kv::Status st = client->set_sync(op->key, value_bytes(op->value));
      if (st == kv::Status::ok) {
        std::printf("OK\n");
      } else {
        std::printf("error: %s\n", std::string(kv::to_string(st)).c_str());
        errors = true;
      }
    } else {
      bool found = false;
      const kv::Status st = client->get_sync(op->key, got, found);
      if (st != kv::Status::ok) {
        std::printf("error: %s\n", std::string(kv::to_string(st)).c_str());
        errors = true;
      } else if (found) {
        std::printf("%s\n", quote_value(got).c_str());
      } else {
        std::printf("(not found)\n");
      }
    }
    std::fflush(stdout);
    if (client->state() == kv::ConnState::failed) {
      std::fprintf(stderr, "kvload: connection failed: %s\n", client->failure().c_str());
      return 1;
    }
  }
  client->close();
  return errors ? 1 : 0;
}

}  // namespace

int kvload_main(int argc, char** argv) {
  Flags f;
  CLI::App app{"kvload: RDMA key-value client (workload runner and interactive shell)"};
  app.add_option("--server", f.server, "server address (numeric or a name)")->required();
  app.add_option("--port", f.port, "server port")->capture_default_str();
  app.add_option("--file", f.file,
                 "workload file: one `SET key value`, `SET key @size[:seed]` or `GET key` per line; "
                 "parsed completely before anything is sent. Without it: commands from stdin");
  app.add_flag("--json", f.json, "print the summary as one JSON object");
  app.add_flag("-q,--quiet", f.quiet, "no prompt, no per-operation error lines, warnings only in the log");
  app.add_option("--depth", f.depth,
                 "requests in flight (accepted; values above 1 take effect with the coroutine load "
                 "generator, operations run one at a time for now)")
      ->check(CLI::Range(1u, 65535u))
      ->capture_default_str();
  app.add_flag("--verify", f.verify, "check every GET against the last value this run SET for the key");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  // Logs go to stderr: stdout carries results (the JSON summary, GET values).
  spdlog::set_default_logger(spdlog::stderr_color_mt("kvload"));
  spdlog::set_level(f.quiet ? spdlog::level::err : spdlog::level::warn);
  try {
    return f.file.empty() ? run_interactive(f) : run_file(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvload: %s\n", e.what());
    return 1;
  }
}

}  // namespace rkv::apps
