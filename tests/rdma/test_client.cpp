// client_e2e: kv::client::Client against a real kvd child process over Soft-RoCE.
// Two clients at once, SET/GET round trips, missing keys, the eager size
// boundary, coalescing of async requests, refused connections; a ShardSet
// closed again from a callback during its own close; closes from callbacks
// that still wait for DISCONNECTED (a Client's, a ShardSet's).
#include <signal.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kv/client/client.hpp"
#include "kv/client/shard_set.hpp"
#include "kvd_fixture.hpp"
#include "loopback.hpp"  // softroce_addr(): fails, never skips, without a device
#include "proto/placement.hpp"
#include "reactor/reactor.hpp"


namespace rkv::kv::client {
namespace {

using namespace std::chrono_literals;

class ClientE2E : public test::KvdTest {
 protected:
  void SetUp() override {
    KvdTest::SetUp();
    start();
  }
  // The fixture's kvd and `second`, as a ShardSet's list.
  [[nodiscard]] std::vector<proto::ServerAddr> two_servers(const test::KvdProcess& second) const {
    std::vector<proto::ServerAddr> servers;
    for (const std::uint16_t port : {kvd_->port(), second.port()}) {
      servers.push_back({addr_, port, proto::server_id(addr_, port)});
    }
    return servers;
  }
  // Runs the reactor until `fired` (a timer's callback sets it), 30 s at most.
  void run_until_fired(const bool& fired) {
    const auto deadline = reactor::Reactor::now() + 30s;
    while (!fired && reactor::Reactor::now() < deadline) reactor_.run_once(1000ms);
  }
};

TEST_F(ClientE2E, TwoClientsSetThenGet) {
  auto a = open();
  auto b = open();
  ASSERT_EQ(a->state(), ConnState::established);
  ASSERT_EQ(b->state(), ConnState::established);
  EXPECT_GT(a->server_credits(), 0u);
  EXPECT_EQ(a->set_sync("alpha", "from a"), Status::ok);
  EXPECT_EQ(b->set_sync("beta", "from b with spaces"), Status::ok);

  std::string v;
  bool found = false;
  EXPECT_EQ(b->get_sync("alpha", v, found), Status::ok);
  EXPECT_TRUE(found);
  EXPECT_EQ(v, "from a");
  EXPECT_EQ(a->get_sync("beta", v, found), Status::ok);
  EXPECT_TRUE(found);
  EXPECT_EQ(v, "from b with spaces");

  // Overwrite, then read back through the other client.
  EXPECT_EQ(a->set_sync("beta", "overwritten"), Status::ok);
  EXPECT_EQ(b->get_sync("beta", v, found), Status::ok);
  EXPECT_EQ(v, "overwritten");

  // Missing key: ok, not found, empty value.
  v = "stale";
  found = true;
  EXPECT_EQ(a->get_sync("no-such-key", v, found), Status::ok);
  EXPECT_FALSE(found);
  EXPECT_EQ(v, "");

  a->close();
  b->close();
  EXPECT_EQ(a->state(), ConnState::closed);
  EXPECT_EQ(a->set_sync("x", "y"), Status::not_connected);
}

TEST_F(ClientE2E, EagerLimitBoundary) {
  auto c = open();
  const std::string key(95, 'k');
  const std::string value_ok(4095 - key.size(), 'v');   // key + value = 4095
  const std::string value_big(4096 - key.size(), 'v');  // key + value = 4096
  EXPECT_EQ(c->set_sync(key, value_ok), Status::ok);
  std::string v;
  bool found = false;
  EXPECT_EQ(c->get_sync(key, v, found), Status::ok);
  EXPECT_TRUE(found);
  EXPECT_EQ(v, value_ok);
  // key + value = 4096 crosses to the rendezvous path (docs/protocol.md).
  const auto large_before = c->counters().sets_large;
  EXPECT_EQ(c->set_sync(key, value_big), Status::ok);
  EXPECT_EQ(c->counters().sets_large, large_before + 1);
  EXPECT_EQ(c->get_sync(key, v, found), Status::ok);
  EXPECT_EQ(v, value_big);
  // Over the server's value limit: refused before anything is sent.
  const std::string too_big(c->server_max_value() + 1, 'x');
  const auto sends_before = c->counters().sends_posted;
  EXPECT_EQ(c->set_sync(key, too_big), Status::too_large);
  EXPECT_EQ(c->counters().sends_posted, sends_before) << "a refused request must not be sent";
  EXPECT_EQ(to_errno(Status::too_large), E2BIG);
  // Key limits.
  EXPECT_EQ(c->set_sync("", "v"), Status::bad_key);
  EXPECT_EQ(c->set_sync(std::string(1025, 'k'), "v"), Status::bad_key);
  EXPECT_EQ(c->set_sync(std::string(1024, 'k'), "max key"), Status::ok);
  EXPECT_EQ(c->state(), ConnState::established);
}

TEST_F(ClientE2E, AsyncRequestsCoalesce) {
  auto c = open();
  constexpr int kOps = 8;
  std::vector<std::string> values;
  for (int i = 0; i < kOps; ++i) values.push_back("value-" + std::to_string(i));
  int done = 0;
  for (int i = 0; i < kOps; ++i) {
    ASSERT_EQ(c->set("key-" + std::to_string(i), values[static_cast<std::size_t>(i)],
                     [&](Status st, bool, std::span<const std::byte>) {
                       EXPECT_EQ(st, Status::ok);
                       ++done;
                     }),
              Status::ok);
  }
  ASSERT_TRUE(c->wait_idle(120s));
  EXPECT_EQ(done, kOps);
  const auto& k = c->counters();
  EXPECT_EQ(k.messages_sent, static_cast<std::uint64_t>(kOps));
  EXPECT_LT(k.sends_posted, static_cast<std::uint64_t>(kOps)) << "requests submitted together share SENDs";
  EXPECT_GT(k.max_coalesced, 1u);

  // Read them back asynchronously, values checked in the callbacks.
  int got = 0;
  for (int i = 0; i < kOps; ++i) {
    ASSERT_EQ(c->get("key-" + std::to_string(i),
                     [&, i](Status st, bool found, std::span<const std::byte> v) {
                       EXPECT_EQ(st, Status::ok);
                       EXPECT_TRUE(found);
                       EXPECT_EQ(std::string(reinterpret_cast<const char*>(v.data()), v.size()),
                                 values[static_cast<std::size_t>(i)]);
                       ++got;
                     }),
              Status::ok);
  }
  ASSERT_TRUE(c->wait_idle(120s));
  EXPECT_EQ(got, kOps);
}

TEST_F(ClientE2E, NothingListeningIsRefused) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    auto c = Client::connect(reactor_, addr_, 1, {});
    FAIL() << "connect to a port nobody listens on succeeded";
  } catch (const ConnectError& e) {
    EXPECT_EQ(e.code(), ECONNREFUSED) << e.what();
    EXPECT_NE(std::string(e.what()).find(":1"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 60s);
}

TEST_F(ClientE2E, ServerExitFailsTheClientNotHangs) {
  ClientOptions opt;
  opt.op_timeout = 60s;
  auto c = Client::connect(reactor_, addr_, kvd_->port(), opt);
  ASSERT_EQ(c->set_sync("k", "v"), Status::ok);
  EXPECT_EQ(kvd_->stop(), 0);  // SIGTERM: kvd disconnects its clients and exits
  kvd_.reset();
  std::string v;
  bool found = false;
  const Status st = c->get_sync("k", v, found);
  EXPECT_NE(st, Status::ok);
  // Failed by the DISCONNECTED (disconnected), or by an error completion
  // first (failed, until the DISCONNECTED is handled).
  EXPECT_TRUE(c->state() == ConnState::disconnected || c->state() == ConnState::failed)
      << to_string(st) << ", " << to_string(c->state());
}

// A server that stops answering while its transport still acknowledges
// (SIGSTOP: the kernel's rxe keeps the QP alive): async requests must not
// wait forever. The watchdog fails the connection after op_timeout without a
// reply; an idle connection is never failed by it.
TEST_F(ClientE2E, AStoppedServerFailsAsyncRequestsAfterTheOpTimeout) {
  ClientOptions opt;
  opt.op_timeout = 2s;
  auto c = Client::connect(reactor_, addr_, kvd_->port(), opt);
  ASSERT_EQ(c->set_sync("k", "v"), Status::ok);
  // Idle for three op timeouts: nothing in flight, nothing fails.
  const auto idle_until = reactor::Reactor::now() + 6s;
  while (reactor::Reactor::now() < idle_until) reactor_.run_once(500ms);
  ASSERT_EQ(c->state(), ConnState::established);
  std::string v;
  bool found = false;
  ASSERT_EQ(c->get_sync("k", v, found), Status::ok);
  ASSERT_EQ(v, "v");

  ASSERT_EQ(::kill(kvd_->pid(), SIGSTOP), 0);
  // kill() returns before the process is stopped: wait until /proc says so.
  const auto stat_path = "/proc/" + std::to_string(kvd_->pid()) + "/stat";
  bool stopped = false;
  for (int i = 0; i < 500 && !stopped; ++i) {
    std::ifstream f(stat_path);
    std::string line;
    std::getline(f, line);
    const auto paren = line.rfind(')');
    stopped = paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'T';
    if (!stopped) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(stopped) << "kvd did not stop";
  std::vector<Status> got;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(c->get("k", [&](Status st, bool, std::span<const std::byte>) { got.push_back(st); }), Status::ok);
  }
  // Not before the op timeout (the property, a lower bound no slow machine
  // breaks); the upper bound is only the wait's generous deadline: without
  // the watchdog the requests would never complete.
  const bool finished = c->wait_idle(60s);
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  ASSERT_EQ(::kill(kvd_->pid(), SIGCONT), 0);
  ASSERT_TRUE(finished) << "async requests to a stopped server never completed";
  std::printf("the stopped server's requests failed after %lld ms (op timeout %lld ms)\n",
              static_cast<long long>(waited.count()), static_cast<long long>(opt.op_timeout.count()));
  EXPECT_GE(waited, opt.op_timeout);
  ASSERT_EQ(got.size(), 3u);
  for (const Status st : got) EXPECT_EQ(st, Status::connection_failed) << to_string(st);
  EXPECT_EQ(c->state(), ConnState::failed);
  EXPECT_NE(c->failure().find("no reply for"), std::string::npos) << c->failure();
}

// A ShardSet closed again from a reactor callback while its own close() tears
// a shard's connection down (that teardown runs the loop until DISCONNECTED):
// the inner close must not free the Client the outer one is still closing.
// kvload's stall timer did this from inside ShardSet::maintain's retire
// under load (ASan: heap-use-after-free in Client::teardown).
TEST_F(ClientE2E, AShardSetClosedAgainFromACallbackDuringItsClose) {
  test::KvdProcess second(RKV_KVD_PATH, addr_);
  const std::vector<proto::ServerAddr> servers = two_servers(second);
  auto set = ShardSet::connect(reactor_, servers, {});
  ASSERT_EQ(set->size(), 2u);
  int inner = 0;
  const reactor::Timer again = reactor_.after(0ms, [&] {
    ++inner;
    set->close();
  });
  set->close();
  EXPECT_EQ(inner, 1) << "the close's teardown never ran the loop: nothing was re-entered";
  for (std::size_t i = 0; i < set->size(); ++i) {
    EXPECT_EQ(set->get(i, "k", [](Status, bool, std::span<const std::byte>) {}), Status::not_connected) << i;
  }
}

// A close() inside a callback only disconnects (the loop cannot run there);
// the close() after it, outside callbacks, waits for that DISCONNECTED
// before it releases the QP.
TEST_F(ClientE2E, ClosedInACallbackThenOutsideWaitsForTheDisconnect) {
  ClientOptions o;
  o.close_timeout = 30s;  // generous: the guest may be slow; the wait ends on the event
  auto c = open(o);
  bool fired = false;
  const reactor::Timer t = reactor_.after(0ms, [&] {
    fired = true;
    c->close();
    EXPECT_EQ(c->state(), ConnState::closing);
  });
  run_until_fired(fired);
  ASSERT_TRUE(fired);
  c->close();
  EXPECT_EQ(c->state(), ConnState::closed);
  EXPECT_EQ(c->counters().disconnects, 1u) << "the server's answer to the disconnect was seen";
  EXPECT_EQ(c->counters().unconfirmed_disconnects, 0u);
}

// A ShardSet closed from a callback parks its Clients (destroying them there
// would release their QPs without DISCONNECTED); closing it again outside
// callbacks waits for each one's DISCONNECTED.
TEST_F(ClientE2E, AShardSetClosedInACallbackWaitsForEachDisconnectOutsideIt) {
  test::KvdProcess second(RKV_KVD_PATH, addr_);
  const std::vector<proto::ServerAddr> servers = two_servers(second);
  ClientOptions o;
  o.close_timeout = 30s;
  auto set = ShardSet::connect(reactor_, servers, o);
  ASSERT_EQ(set->size(), 2u);
  bool fired = false;
  const reactor::Timer t = reactor_.after(0ms, [&] {
    fired = true;
    set->close();
  });
  run_until_fired(fired);
  ASSERT_TRUE(fired);
  set->close();
  const ClientCounters c = set->counters();
  EXPECT_EQ(c.disconnects, 2u) << "each connection's DISCONNECTED was seen before its QP went";
  EXPECT_EQ(c.unconfirmed_disconnects, 0u);
}

}  // namespace
}  // namespace rkv::kv::client
