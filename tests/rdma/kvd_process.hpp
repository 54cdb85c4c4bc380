#pragma once
// Test helper for the rdma suite: run kvd (and kvload) as child processes.
//
// KvdProcess starts `kvd --bind ADDR --port 0` with stdout and stderr on one
// pipe, reads it until the `kvd: listening on ADDR:PORT` line (log lines may
// come first) and keeps draining it on a thread (echoed to stderr, for the
// test log) so the server never blocks on a full pipe. stats() asks kvd for
// its counters (SIGUSR1 -> a `kvd: stats: name=value ...` line). The
// destructor stops it (SIGTERM, then SIGKILL after 10 s). run_command() runs
// a program to completion with a timeout and captures stdout/stderr; Spawned
// runs a helper in the background and reads its stdout by lines. One test
// thread drives a KvdProcess; header-only.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rkv::test {

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// A number from a JSON text (kvload --json, rkv stats --json): the first
// `"key":N` at or after `from`, blanks allowed after the colon; -1 if absent.
inline double json_number(const std::string& json, const std::string& key, std::size_t from = 0) {
  const std::string quoted = "\"" + key + "\":";
  for (std::size_t at = json.find(quoted, std::min(from, json.size())); at != std::string::npos;
       at = json.find(quoted, at + 1)) {
    const char* p = json.c_str() + at + quoted.size();
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') ++p;
    char* end = nullptr;
    const double v = std::strtod(p, &end);
    if (end != p) return v;
  }
  return -1;
}

using namespace std::chrono_literals;

namespace detail {

inline std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> out;
  for (auto& a : args) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

inline std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace detail

// Every timeout these helpers take ends a wait for an event (a process's
// exit, a line it prints, a command's end, kvd's stats) that would otherwise
// hang the test: none is an expectation of speed. What a test passes is
// about what the event may take here with room; each wait allows
// kDeadlineScale times that, so a slow machine or a CPU hog beside the guest
// (scripts/test --repeat, docs/architecture.md "Tests") never hits one, and
// a real hang still ends the test, with the helper's message, before meson's
// own timeout.
inline constexpr int kDeadlineScale = 4;
[[nodiscard]] inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return std::chrono::steady_clock::now() + timeout * kDeadlineScale;
}

// Waits for `pid` to exit within `timeout` (scaled); returns its wait status, or -1 on timeout.
inline int wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(20ms);
  }
}

class KvdProcess {
 public:
  KvdProcess(const std::string& exe, const std::string& addr, std::vector<std::string> extra = {},
             std::chrono::milliseconds startup = 120s) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(detail::errno_text("pipe2"));
    // --port 0 (the kernel picks one) unless `extra` names a port (a test
    // that restarts a kvd where its clients look for it).
    std::vector<std::string> args = {exe, "--bind", addr};
    if (std::find(extra.begin(), extra.end(), "--port") == extra.end()) args.insert(args.end(), {"--port", "0"});
    args.insert(args.end(), extra.begin(), extra.end());
    auto argv = detail::argv_of(args);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(detail::errno_text("fork"));
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(out[1], STDERR_FILENO);
      ::execv(exe.c_str(), argv.data());
      std::fprintf(stderr, "exec %s: %s\n", exe.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    ::close(out[1]);
    fd_ = out[0];
    std::string line;
    const auto deadline = deadline_after(startup);
    while (port_ == 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        stop();
        throw std::runtime_error("kvd did not print 'kvd: listening on ADDR:PORT' within " +
                                 std::to_string(startup.count()) + " ms");
      }
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char c = 0;
      const ssize_t n = ::read(fd_, &c, 1);
      if (n <= 0) {
        stop();
        throw std::runtime_error("kvd exited before listening (see its stderr above)");
      }
      if (c != '\n') {
        line += c;
        continue;
      }
      std::fprintf(stderr, "[kvd] %s\n", line.c_str());
      {
        std::lock_guard lock(mu_);
        output_ += line + "\n";
      }
      // "kvd: listening on ADDR:PORT", or the same line of a program embedding the server.
      static constexpr std::string_view kListening = ": listening on ";
      if (const auto at = line.find(kListening); at != std::string::npos && line.find(' ') > at) {
        const auto colon = line.rfind(':');
        port_ = static_cast<std::uint16_t>(std::stoul(line.substr(colon + 1)));
      }
      line.clear();
    }
    drain_ = std::thread([this, fd = fd_] {
      char buf[4096];
      std::string partial;
      for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) return;
        std::fwrite(buf, 1, static_cast<std::size_t>(n), stderr);
        partial.append(buf, static_cast<std::size_t>(n));
        {
          std::lock_guard lock(mu_);
          output_.append(buf, static_cast<std::size_t>(n));
        }
        for (auto nl = partial.find('\n'); nl != std::string::npos; nl = partial.find('\n')) {
          static constexpr std::string_view kStats = "kvd: stats: ";
          if (partial.compare(0, kStats.size(), kStats) == 0) {
            std::lock_guard lock(mu_);
            stats_line_ = partial.substr(kStats.size(), nl - kStats.size());
            ++stats_seq_;
            cv_.notify_all();
          }
          partial.erase(0, nl + 1);
        }
      }
    });
  }

  // kvd's counters now (name -> value), nullopt if it did not answer in time.
  std::optional<std::map<std::string, std::uint64_t>> stats(std::chrono::milliseconds timeout = 30s) {
    std::unique_lock lock(mu_);
    const std::uint64_t seen = stats_seq_;
    if (pid_ <= 0 || ::kill(pid_, SIGUSR1) != 0) return std::nullopt;
    if (!cv_.wait_until(lock, deadline_after(timeout), [&] { return stats_seq_ != seen; })) return std::nullopt;
    std::map<std::string, std::uint64_t> out;
    std::istringstream words(stats_line_);
    std::string word;
    while (words >> word) {
      const auto eq = word.find('=');
      if (eq == std::string::npos) continue;
      try {
        out[word.substr(0, eq)] = std::stoull(word.substr(eq + 1));
      } catch (const std::exception&) {
      }
    }
    return out;
  }

  KvdProcess(const KvdProcess&) = delete;
  KvdProcess& operator=(const KvdProcess&) = delete;
  ~KvdProcess() { stop(); }

  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  // Everything kvd printed so far (stdout and stderr).
  [[nodiscard]] std::string output() {
    std::lock_guard lock(mu_);
    return output_;
  }

  // SIGKILL (a crash: nothing flushed) and reap; returns the wait status.
  int kill_hard() noexcept {
    int status = -1;
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      status = wait_exit(pid_, 10s);
      pid_ = -1;
    }
    if (drain_.joinable()) drain_.join();
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    return status;
  }
  // Waits up to `timeout` for kvd to exit by itself; the wait status, or -1.
  int wait(std::chrono::milliseconds timeout) noexcept {
    if (pid_ <= 0) return -1;
    const int status = wait_exit(pid_, timeout);
    if (status != -1) {
      pid_ = -1;
      if (drain_.joinable()) drain_.join();
      if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
      }
    }
    return status;
  }
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  // SIGTERM (then SIGKILL) and reap; returns the wait status (-1 if unknown).
  int stop() noexcept {
    int status = -1;
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      status = wait_exit(pid_, 10s);
      if (status == -1) {
        ::kill(pid_, SIGKILL);
        status = wait_exit(pid_, 10s);
      }
      pid_ = -1;
    }
    if (drain_.joinable()) drain_.join();  // EOF once kvd is gone
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    return status;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::mutex mu_;  // the stats line, shared with the drain thread
  std::condition_variable cv_;
  std::string stats_line_;
  std::string output_;
  std::uint64_t stats_seq_ = 0;
  std::thread drain_;
};

// A helper process in the background: argv[0] is a path; its stdout is a
// pipe read by lines (its stderr goes to the test's). The destructor SIGKILLs
// and reaps it. One test thread uses it.
class Spawned {
 public:
  explicit Spawned(std::vector<std::string> args) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(detail::errno_text("pipe2"));
    auto argv = detail::argv_of(args);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(detail::errno_text("fork"));
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::execv(args[0].c_str(), argv.data());
      std::fprintf(stderr, "exec %s: %s\n", args[0].c_str(), std::strerror(errno));
      ::_exit(127);
    }
    ::close(out[1]);
    fd_ = out[0];
  }
  ~Spawned() {
    kill();
    if (fd_ >= 0) ::close(fd_);
  }
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;

  // The next line it printed (without the newline), nullopt at EOF or timeout.
  std::optional<std::string> next_line(std::chrono::milliseconds timeout) {
    const auto deadline = deadline_after(timeout);
    for (;;) {
      if (const auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[512];
      const ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }
  // SIGKILL and reap (no-op once reaped); the wait status.
  int kill() noexcept {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGKILL);
    status_ = wait_exit(pid_, 10s);
    pid_ = -1;
    return status_;
  }
  // Waits for it to exit by itself; the wait status, or -1 on timeout.
  int wait(std::chrono::milliseconds timeout) noexcept {
    if (pid_ <= 0) return status_;
    const int st = wait_exit(pid_, timeout);
    if (st != -1) {
      status_ = st;
      pid_ = -1;
    }
    return st;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  int status_ = -1;
  std::string buf_;
};

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal or timed out
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with `input` on stdin; captures stdout and stderr.
// The rkv executable beside a role link (kvd and kvload are links to it).
inline std::string rkv_beside(const std::string& role_path) {
  return role_path.substr(0, role_path.rfind('/') + 1) + "rkv";
}

inline CommandResult run_command(std::vector<std::string> args, const std::string& input = {},
                                 std::chrono::milliseconds timeout = 300s) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    throw std::runtime_error(detail::errno_text("pipe2"));
  }
  auto argv = detail::argv_of(args);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(detail::errno_text("fork"));
  if (pid == 0) {
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::execv(args[0].c_str(), argv.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0].c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  // Inputs here are small (well under a pipe buffer): write all, then close.
  if (!input.empty() && ::write(in[1], input.data(), input.size()) < 0) {
    std::fprintf(stderr, "run_command: writing stdin: %s\n", std::strerror(errno));
  }
  ::close(in[1]);
  CommandResult r;
  const auto deadline = deadline_after(timeout);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open = 2;
  while (open > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left.count())) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  const int status = wait_exit(pid, r.timed_out ? 10s : timeout);
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

}  // namespace rkv::test
