// server_vanish (rdma suite): a client process that is SIGKILLed while
// connected is cleaned up: the server's connection count returns to zero
// within a bounded time. The child is forked before this process touches
// any verbs state (an inherited uverbs context would keep the child's
// resources alive after its death), and talks to the in-process server of
// the parent through a raw-verbs client.
#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "loopback.hpp"
#include "raw_client.hpp"
#include "server_harness.hpp"

namespace rkv::test {
namespace {

using namespace std::chrono_literals;

// Child: connect, SET one key, report 'R' (or 'F'), then wait to be killed.
[[noreturn]] void child_main(int port_fd, int ready_fd, const std::string& addr) {
  std::uint16_t port = 0;
  if (::read(port_fd, &port, sizeof port) != static_cast<ssize_t>(sizeof port)) ::_exit(3);
  char verdict = 'F';
  try {
    RawClient c(addr, port);
    auto nap = [] { std::this_thread::sleep_for(1ms); };
    if (wait_until([&] { return c.established() || c.failed(); }, 60s, nap, {&c}) && c.established()) {
      const std::string v = "from-the-child";
      if (c.send_request(proto::msg::set_request(1, "child", proto::as_bytes(v))) == 0 &&
          wait_until([&] { return c.take_reply(1).has_value(); }, 60s, nap, {&c})) {
        verdict = 'R';
      }
    }
    (void)::write(ready_fd, &verdict, 1);
    for (;;) {  // stay connected (and keep polling) until SIGKILL
      c.poll();
      std::this_thread::sleep_for(10ms);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child: %s\n", e.what());
  }
  (void)::write(ready_fd, &verdict, 1);
  ::_exit(4);
}

TEST(ServerVanish, KilledClientIsCleanedUp) {
  const std::string addr = verbs::test::softroce_addr();  // sysfs only: no verbs context yet
  int to_child[2];
  int to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(to_child[1]);
    ::close(to_parent[0]);
    child_main(to_child[0], to_parent[1], addr);
  }
  ::close(to_child[0]);
  ::close(to_parent[1]);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } reaper{pid};

  ServerHarness h(addr, 4);
  const std::uint16_t port = h.server->port();
  ASSERT_EQ(::write(to_child[1], &port, sizeof port), static_cast<ssize_t>(sizeof port));

  // Serve until the child reports.
  char verdict = 0;
  ASSERT_TRUE(h.wait(
      [&] {
        pollfd p{to_parent[0], POLLIN, 0};
        if (::poll(&p, 1, 0) == 1) return ::read(to_parent[0], &verdict, 1) == 1;
        return false;
      },
      90s, {}));
  ASSERT_EQ(verdict, 'R') << "the child could not connect and SET";
  EXPECT_EQ(h.server->connections(), 1u);
  EXPECT_EQ(h.store.get("child").value, "from-the-child");

  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  reaper.pid = 0;

  const bool cleaned = h.wait([&] { return h.server->connections() == 0; }, 45s, {});
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed_at);
  std::printf("server_vanish: connection count back to %zu %lld ms after SIGKILL (closed=%llu)\n",
              h.server->connections(), static_cast<long long>(took.count()),
              static_cast<unsigned long long>(h.server->stats().counters.closed));
  EXPECT_TRUE(cleaned) << "connection of the killed client still counted after " << took.count() << " ms";

  // The server still serves new clients.
  RawClient again(addr, port);
  ASSERT_TRUE(h.wait([&] { return again.established() || again.failed(); }, 30s, {&again})) << again.failure();
  ASSERT_TRUE(again.established()) << again.failure();
  ASSERT_EQ(again.send_request(proto::msg::get_request(7, "child")), 0);
  std::optional<RawReply> r;
  ASSERT_TRUE(h.wait([&] { return (r = again.take_reply(7)).has_value(); }, 30s, {&again}));
  EXPECT_EQ(r->value, "from-the-child");
  EXPECT_TRUE(h.shutdown(30s, {&again}));
  ::close(to_child[1]);
  ::close(to_parent[0]);
}

}  // namespace
}  // namespace rkv::test
