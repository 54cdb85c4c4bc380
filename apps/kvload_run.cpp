// kvload --file: parse the whole workload, connect, run it through a LoadRun
// (fibers, up to --depth in flight) on this thread's reactor, print the
// summary. A progress line goes to stderr while stderr is a terminal.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "kv/load/fiber.hpp"
#include "kv/load/runner.hpp"
#include "kv/load/report.hpp"
#include "kv/load/workload.hpp"
#include "kvload_flags.hpp"
#include "reactor/reactor.hpp"

namespace rkv::apps {

namespace {

using namespace std::chrono_literals;

void print_progress(const kv::load::LoadRun& run) {
  const double s = run.elapsed_seconds();
  std::fprintf(stderr, "\r%llu/%llu ops  %.0f ops/s  %llu errors  %zu in flight\x1b[K",
               static_cast<unsigned long long>(run.done()), static_cast<unsigned long long>(run.total()),
               s > 0 ? static_cast<double>(run.done()) / s : 0.0, static_cast<unsigned long long>(run.errors()),
               run.in_flight());
  std::fflush(stderr);
}

// Parses a whole workload file; prints its errors and returns nullopt if it has any.
std::optional<kv::load::ParseResult> parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "kvload: %s: cannot open\n", path.c_str());
    return std::nullopt;
  }
  kv::load::ParseResult parsed = kv::load::parse_workload(in);
  if (!parsed.ok()) {
    for (const auto& e : parsed.errors) std::fprintf(stderr, "%s:%u: %s\n", path.c_str(), e.line, e.message.c_str());
    if (parsed.errors_omitted > 0) {
      std::fprintf(stderr, "%s: %zu more errors not shown\n", path.c_str(), parsed.errors_omitted);
    }
    std::fprintf(stderr, "kvload: %s: %zu errors, nothing sent\n", path.c_str(),
                 parsed.errors.size() + parsed.errors_omitted);
    return std::nullopt;
  }
  return parsed;
}

// --wait-start: SIGUSR1 is blocked in every thread from the start (the
// client library's threads inherit the mask), so it is taken only by
// sigtimedwait here and never ends the process.
sigset_t start_signal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  return set;
}

bool block_start_signal() {
  const sigset_t set = start_signal();
  if (const int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr); rc != 0) {
    std::fprintf(stderr, "kvload: --wait-start: cannot block SIGUSR1: %s\n", std::strerror(rc));
    return false;
  }
  return true;
}

// Writes this process's pid to `path` (the caller's sign that it is
// connected), then waits up to `timeout` for SIGUSR1.
bool wait_for_start(const std::string& path, std::chrono::milliseconds timeout) {
  const std::string pid = std::to_string(::getpid()) + "\n";
  const reactor::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd || ::write(fd.get(), pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) {
    std::fprintf(stderr, "kvload: --wait-start %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  const sigset_t set = start_signal();
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const timespec ts{static_cast<time_t>(s.count()),
                    static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout - s).count())};
  for (;;) {
    if (::sigtimedwait(&set, nullptr, &ts) == SIGUSR1) return true;
    if (errno == EINTR) continue;  // another signal: keep waiting (the deadline restarts; it is a bound, not a timer)
    std::fprintf(stderr, "kvload: --wait-start: %s\n",
                 errno == EAGAIN ? ("no SIGUSR1 within " + std::to_string(timeout.count()) + " ms").c_str()
                                 : std::strerror(errno));
    return false;
  }
}

}  // namespace

int kvload_run_file(const KvloadFlags& f) {
  if (!f.wait_start.empty() && !block_start_signal()) return 1;
  // Parse everything first: a bad file sends nothing.
  const std::optional<kv::load::ParseResult> parsed = parse_file(f.file);
  if (!parsed) return 1;
  std::optional<kv::load::ParseResult> expect;
  if (!f.expect.empty()) {
    expect = parse_file(f.expect);
    if (!expect) return 1;
  }
  if (f.verify || expect) {
    const auto has_call = [](const kv::load::ParseResult& p) {
      return std::any_of(p.ops.begin(), p.ops.end(), [](const kv::load::Op& op) { return op.kind == kv::load::Op::Kind::call; });
    };
    if (has_call(*parsed) || (expect && has_call(*expect))) {
      std::fprintf(stderr, "kvload: --verify and --expect cannot check a workload with CALL lines (a handler may "
                           "write any key)\n");
      return 1;
    }
  }

  if ((f.servers.size() > 1 || f.cluster) &&
      std::any_of(parsed->ops.begin(), parsed->ops.end(), [](const kv::load::Op& op) { return op.kind == kv::load::Op::Kind::call; })) {
    std::fprintf(stderr, "kvload: a workload with CALL lines runs against one server (a CALL has no key, so no "
                         "server of the list or cluster is its own)\n");
    return 1;
  }

  reactor::Reactor reactor;
  kv::client::ClientOptions copt;
  copt.max_in_flight = f.depth;  // receive buffers = requests in flight
  copt.poll = f.poll.budget();
  copt.get_mode = f.get_mode;
  copt.grants = f.grants;
  copt.request_batch = f.request_batch;
  copt.auth_token = f.auth_token;
  copt.op_timeout = std::chrono::milliseconds(f.stall_timeout_ms);  // the client's watchdog agrees with --stall-timeout
  std::unique_ptr<kv::client::ShardSet> client;  // one Client per server, all on this reactor
  try {
    kv::client::ShardSetOptions so;
    so.cluster = f.cluster;  // a cluster's members are followed (maintain(), between reactor turns)
    so.read_from_backups = f.read_from_backups;
    client = kv::client::ShardSet::connect(reactor, f.servers, copt, std::move(so));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvload: %s\n", e.what());
    return 1;
  }

  reactor::UniqueFd ack_fd;
  if (!f.ack_log.empty()) {
    ack_fd.reset(::open(f.ack_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!ack_fd) {
      std::fprintf(stderr, "kvload: --ack-log %s: %s\n", f.ack_log.c_str(), std::strerror(errno));
      return 1;
    }
  }
  if (!f.wait_start.empty() && !wait_for_start(f.wait_start, std::chrono::milliseconds(f.stall_timeout_ms))) {
    client->close();
    return 1;
  }
  kv::load::LoadOptions lopt;
  if (ack_fd) {
    // One write(2) per acknowledgement: nothing is buffered in this process,
    // so the file holds every ack that arrived whatever happens to kvd.
    lopt.on_set_ok = [fd = ack_fd.get()](const kv::load::Op& op, std::span<const std::byte> value) {
      char line[1200];
      const int n = std::snprintf(line, sizeof line, "%u %s %zu %016llx\n", op.line, op.key.c_str(), value.size(),
                                  static_cast<unsigned long long>(kv::load::checksum(value)));
      if (n > 0 && ::write(fd, line, static_cast<std::size_t>(std::min<int>(n, sizeof line - 1))) < 0) {
        std::fprintf(stderr, "kvload: --ack-log write: %s\n", std::strerror(errno));
      }
    };
  }
  if (ack_fd) {
    lopt.on_del_ok = [fd = ack_fd.get()](const kv::load::Op& op, bool) {
      char line[1100];
      const int n = std::snprintf(line, sizeof line, "%u %s DEL\n", op.line, op.key.c_str());
      if (n > 0 && ::write(fd, line, static_cast<std::size_t>(std::min<int>(n, sizeof line - 1))) < 0) {
        std::fprintf(stderr, "kvload: --ack-log write: %s\n", std::strerror(errno));
      }
    };
  }
  lopt.depth = f.depth;
  lopt.verify = f.verify || expect.has_value();
  if (expect) lopt.expect = std::move(expect->ops);
  lopt.name = f.file;
  lopt.stall_timeout = std::chrono::milliseconds(f.stall_timeout_ms);
  const bool show_progress = !f.quiet && ::isatty(STDERR_FILENO) == 1;
  if (!f.quiet) {
    lopt.on_error = [show_progress](const std::string& line) {  // over the progress line, if any
      std::fprintf(stderr, show_progress ? "\r%s\x1b[K\n" : "%s\n", line.c_str());
    };
  }
  std::optional<kv::load::Report> report;
  kv::client::ClientCounters counters;
  std::size_t max_in_flight = 0;
  {
    kv::load::Scheduler scheduler;
    kv::load::LoadRun run(scheduler, *client, parsed->ops, lopt);
    run.start();
    reactor::Timer progress;
    if (show_progress) progress = reactor.every(500ms, [&run] { print_progress(run); });
    // Stall checks on a timer (a quarter of the stall timeout, at most 1 s), not per loop turn.
    const auto period = std::clamp<std::chrono::milliseconds>(lopt.stall_timeout / 4, 10ms, 1000ms);
    const reactor::Timer stall_check = reactor.every(period, [&run] { run.check_stall(reactor::Reactor::now()); });
    // Between reactor turns (never inside a callback): a server that went
    // down is reconnected when its backoff has passed (ShardSet::maintain).
    kv::load::drive(reactor, scheduler, [&run] { return run.finished(); }, std::chrono::hours(24 * 365),
                    [&client] { client->maintain(); });
    progress.reset();
    if (show_progress) std::fputs("\r\x1b[K", stderr);
    counters = client->counters();
    max_in_flight = run.max_in_flight();
    client->close();  // before the scheduler goes: callbacks wake its fibers
    report = run.report();
  }
  for (const auto& c : kv::client::kClientCounterTable) report->client.emplace_back(c.name, counters.*c.member);
  if (!f.quiet) {
    for (std::size_t i = 0; i < client->size(); ++i) {
      const std::string why = client->failure(i);
      if (why.empty()) continue;
      if (client->sharded()) {
        std::fprintf(stderr, "kvload: server %s: connection failed: %s\n", client->server(i).id.c_str(), why.c_str());
      } else {
        std::fprintf(stderr, "kvload: connection failed: %s\n", why.c_str());
      }
    }
  }
  client.reset();
  if (!f.quiet && !f.json) {
    std::fprintf(stderr, "kvload: %llu requests in %llu sends (%.2f per send), up to %zu in flight (depth %u)\n",
                 static_cast<unsigned long long>(counters.messages_sent),
                 static_cast<unsigned long long>(counters.sends_posted), counters.messages_per_send(), max_in_flight,
                 f.depth);
    if (counters.sets_large > 0) {
      const auto lookups = counters.reg_cache_hits + counters.reg_cache_misses;
      std::fprintf(stderr,
                   "kvload: large SETs %llu: source registrations cached %.1f %% (hits %llu, misses %llu); "
                   "registrations in all %llu\n",
                   static_cast<unsigned long long>(counters.sets_large),
                   lookups == 0 ? 0.0 : 100.0 * static_cast<double>(counters.reg_cache_hits) / static_cast<double>(lookups),
                   static_cast<unsigned long long>(counters.reg_cache_hits),
                   static_cast<unsigned long long>(counters.reg_cache_misses),
                   static_cast<unsigned long long>(counters.registrations));
    }
    if (f.get_mode == kv::client::GetMode::read) {
      std::fprintf(stderr,
                   "kvload: one-sided GETs %llu (hits %llu, misses %llu, retries %llu, fallbacks %llu), "
                   "%.2f READs per one-sided GET; RDMA READs %llu in %llu posts (%llu unsignaled)\n",
                   static_cast<unsigned long long>(counters.onesided_gets),
                   static_cast<unsigned long long>(counters.onesided_hits),
                   static_cast<unsigned long long>(counters.onesided_misses),
                   static_cast<unsigned long long>(counters.onesided_retries),
                   static_cast<unsigned long long>(counters.onesided_fallbacks),
                   counters.onesided_gets == 0 ? 0.0
                                               : static_cast<double>(counters.onesided_reads) /
                                                     static_cast<double>(counters.onesided_gets),
                   static_cast<unsigned long long>(counters.rdma_reads),
                   static_cast<unsigned long long>(counters.read_posts),
                   static_cast<unsigned long long>(counters.reads_unsignaled));
    }
  }
  if (f.json) {
    std::printf("%s\n", kv::load::to_json(*report).c_str());
  } else {
    std::printf("%s", kv::load::to_text(*report).c_str());
  }
  return report->errors() > 0 || report->mismatches > 0 ? 1 : 0;
}

}  // namespace rkv::apps
