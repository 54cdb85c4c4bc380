// rdv_e2e: the rendezvous path (docs/protocol.md) against a kvd child process
// over Soft-RoCE: large values round-trip byte-exactly through kv::client::Client,
// the counters show the documented control messages / RDMA operations /
// registrations / copies per operation, the copy meters (proto/copy.hpp:
// every CPU copy of the data path, counted where it happens, on both ends)
// show that large values are never copied and eager ones are, and a client
// killed in the middle of a large SET or GET leaves the server with no pins
// and no connection of it, and other clients' data intact.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kv/client/client.hpp"
#include "kv/client/client_conn.hpp"
#include "kvd_fixture.hpp"
#include "loopback.hpp"
#include "pattern.hpp"
#include "proto/copy.hpp"
#include "reactor/reactor.hpp"

#ifndef RKV_RDV_HELPER_PATH
#error "RKV_RDV_HELPER_PATH must name the rdv_helper binary"
#endif

namespace rkv::kv::client {
namespace {

using namespace std::chrono_literals;
using Stats = std::map<std::string, std::uint64_t>;

using test::pattern;

std::uint64_t checksum(std::string_view v) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : v) h = (h ^ c) * 1099511628211ull;
  return h;
}

class RdvE2E : public test::KvdTest {
 protected:

  static Stats stats(Client& c) {
    std::string text;
    EXPECT_EQ(c.stats_sync(text), Status::ok);
    Stats out;
    std::istringstream in(text);
    std::string name;
    std::uint64_t v = 0;
    while (in >> name >> v) out[name] = v;
    return out;
  }
  // Polls STATS until pred holds (true) or the timeout passes (false).
  template <class Pred>
  static bool wait_stats(Client& c, Pred pred, std::chrono::seconds timeout, Stats* last = nullptr) {
    const auto deadline = test::deadline_after(timeout);
    for (;;) {
      Stats s = stats(c);
      if (last) *last = s;
      if (pred(s)) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(20ms);
    }
  }

};

TEST_F(RdvE2E, SizesRoundTripByteExactly) {
  start();
  auto a = open();
  auto b = open();
  const std::size_t sizes[] = {4095, 4096, 4097, 64u << 10, 1u << 20, 64u << 20};
  for (std::size_t n : sizes) {
    SCOPED_TRACE("value of " + std::to_string(n) + " bytes");
    const std::string key = "size-" + std::to_string(n);
    const std::string v = pattern(n, n);
    ASSERT_EQ(a->set_sync(key, v), Status::ok);
    Value got;
    bool found = false;
    const ClientCounters k0 = b->counters();
    ASSERT_EQ(b->get_sync(key, got, found), Status::ok);
    const ClientCounters k1 = b->counters();
    EXPECT_TRUE(found);
    ASSERT_EQ(got.size(), n);
    EXPECT_EQ(checksum(got.view()), checksum(v));
    const bool rendezvous = n + key.size() >= proto::kEagerLimit;
    EXPECT_EQ(k1.gets_written + k1.gets_pulled - k0.gets_written - k0.gets_pulled, rendezvous ? 1u : 0u)
        << "rendezvous iff it does not fit eagerly";
    EXPECT_EQ(got.is_large(), rendezvous && n > ClientConn::kCopyOutMax)
        << "handed over in its landing buffer iff rendezvous and over 64 KiB, else copied out";
    // The copying API agrees.
    std::string copy;
    ASSERT_EQ(a->get_sync(key, copy, found), Status::ok);
    EXPECT_EQ(checksum(copy), checksum(v));
  }
  // Overwrite a large value with a small one and back.
  ASSERT_EQ(a->set_sync("size-65536", "small now"), Status::ok);
  std::string s;
  bool found = false;
  ASSERT_EQ(b->get_sync("size-65536", s, found), Status::ok);
  EXPECT_EQ(s, "small now");
  const Stats st = stats(*a);
  EXPECT_EQ(st.at("pinned"), 0u);
  EXPECT_EQ(st.at("transfers"), 0u);
}

// Deltas of the server's counters between two STATS on the same connection
// include that first STATS itself: one message received, one reply sent.
TEST_F(RdvE2E, CountersMatchTheDocumentedMessageCounts) {
  start();
  ClientOptions by_read;
  by_read.grants = false;  // the default: every large SET a request kvd answers with a READ (SetByGrant* below: the other way)
  auto c = open(by_read);
  const std::string v1m = pattern(1u << 20, 1);  // fits the 1 MiB landing buffer: WRITE path
  const std::string v2m = pattern(2u << 20, 2);  // does not: pulled in the warm-up, then kept as a spare
  const std::string v3m = pattern(3u << 20, 3);  // larger than every spare: pull path
  // Warm-up: the arena grows its classes, the cache registers the sources,
  // and the buffer "two" was pulled into is kept as a spare.
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(c->set_sync("one", v1m), Status::ok);
    ASSERT_EQ(c->set_sync("two", v2m), Status::ok);
    ASSERT_EQ(c->set_sync("three", v3m), Status::ok);
    std::string out;
    bool found = false;
    ASSERT_EQ(c->get_sync("one", out, found), Status::ok);
    ASSERT_EQ(c->get_sync("two", out, found), Status::ok);
  }

  // The copy meters (proto/copy.hpp) count every byte either end copies with
  // the CPU, wherever the copy is (the layout test refuses a copy that
  // bypasses them): the value's megabytes must not show, only the messages
  // around it (headers, the key, one STATS reply of the measurement itself,
  // the index entry): far below this bound.
  constexpr std::uint64_t kMessagesOnly = 64u << 10;
  auto measure = [&](const char* what, auto&& op, auto&& check) {
    SCOPED_TRACE(what);
    const Stats s0 = stats(*c);
    const ClientCounters k0 = c->counters();
    const std::uint64_t m0 = proto::copied_bytes();
    op();
    const std::uint64_t m1 = proto::copied_bytes();
    const ClientCounters k1 = c->counters();
    const Stats s1 = stats(*c);
    auto d = [&](const char* name) { return s1.at(name) - s0.at(name); };
    check(k0, k1, d);
    EXPECT_EQ(d("registrations"), 0u) << "the server registers nothing per operation";
    EXPECT_EQ(k1.bytes_copied - k0.bytes_copied, 0u) << "no value bytes copied on the client";
    EXPECT_LT(d("bytes_copied_total"), kMessagesOnly) << "kvd's CPU copied more than the messages";
    EXPECT_LT(m1 - m0, kMessagesOnly) << "the client's CPU copied more than the messages";
    std::printf("rdv_e2e: %s: copied %llu B by the client, %llu B by kvd\n", what,
                static_cast<unsigned long long>(m1 - m0), static_cast<unsigned long long>(d("bytes_copied_total")));
    EXPECT_EQ(s1.at("pinned"), 0u);
  };

  measure("large SET: SET{RDV} + SET_REPLY, one RDMA READ by the server",
          [&] { ASSERT_EQ(c->set_sync("one", v1m), Status::ok); },
          [&](const ClientCounters& a, const ClientCounters& b, auto d) {
            EXPECT_EQ(b.sends_posted - a.sends_posted, 1u);
            EXPECT_EQ(b.messages_sent - a.messages_sent, 1u);
            EXPECT_EQ(b.replies - a.replies, 1u);
            EXPECT_EQ(b.sets_large - a.sets_large, 1u);
            EXPECT_EQ(b.rdma_reads - a.rdma_reads, 0u);
            EXPECT_EQ(b.registrations - a.registrations, 0u) << "cache hit";
            EXPECT_EQ(d("messages_received"), 1u + 1u);
            EXPECT_EQ(d("replies_sent"), 1u + 1u);
            EXPECT_EQ(d("rdma_reads"), 1u);
            EXPECT_EQ(d("rdma_writes"), 0u);
            EXPECT_EQ(d("large_sets"), 1u);
          });
  measure("large GET into an offered buffer: GET{RDV}, one RDMA WRITE with the reply in its immediate",
          [&] {
            std::uint64_t sum = 0;
            ASSERT_EQ(c->get(
                          "one",
                          [&sum](Status s, bool found, std::span<const std::byte> v) {
                            EXPECT_EQ(s, Status::ok);
                            EXPECT_TRUE(found);
                            sum = checksum({reinterpret_cast<const char*>(v.data()), v.size()});
                          }),
                      Status::ok);
            ASSERT_TRUE(c->wait_idle(60s));
            EXPECT_EQ(sum, checksum(v1m));
          },
          [&](const ClientCounters& a, const ClientCounters& b, auto d) {
            EXPECT_EQ(b.sends_posted - a.sends_posted, 1u);
            EXPECT_EQ(b.messages_sent - a.messages_sent, 1u);
            EXPECT_EQ(b.replies - a.replies, 0u) << "one control message: the GET";
            EXPECT_EQ(b.gets_written - a.gets_written, 1u);
            EXPECT_EQ(b.rdma_reads - a.rdma_reads, 0u);
            EXPECT_EQ(b.registrations - a.registrations, 0u) << "the landing buffer went back to the spares";
            EXPECT_EQ(d("messages_received"), 1u + 1u);
            EXPECT_EQ(d("replies_sent"), 0u + 1u);
            EXPECT_EQ(d("rdma_writes"), 1u);
            EXPECT_EQ(d("large_gets_written"), 1u);
          });
  measure("large GET of a size pulled before: its buffer was kept, so it is offered and WRITTEN",
          [&] {
            std::uint64_t sum = 0;
            ASSERT_EQ(c->get("two",
                             [&sum](Status s, bool found, std::span<const std::byte> v) {
                               EXPECT_EQ(s, Status::ok);
                               EXPECT_TRUE(found);
                               sum = checksum({reinterpret_cast<const char*>(v.data()), v.size()});
                             }),
                      Status::ok);
            ASSERT_TRUE(c->wait_idle(60s));
            EXPECT_EQ(sum, checksum(v2m));
          },
          [&](const ClientCounters& a, const ClientCounters& b, auto d) {
            EXPECT_EQ(b.messages_sent - a.messages_sent, 1u) << "no RELEASE";
            EXPECT_EQ(b.gets_written - a.gets_written, 1u);
            EXPECT_EQ(b.gets_pulled - a.gets_pulled, 0u);
            EXPECT_EQ(b.registrations - a.registrations, 0u) << "the spare from the warm-up's pull";
            EXPECT_EQ(d("large_gets_written"), 1u);
            EXPECT_EQ(d("large_gets_pulled"), 0u);
          });
  measure("large GET too big for the offer: GET + GET_REPLY{PULL} + RELEASE, one RDMA READ by the client",
          [&] {
            Value out;
            bool found = false;
            ASSERT_EQ(c->get_sync("three", out, found), Status::ok);
            EXPECT_EQ(checksum(out.view()), checksum(v3m));
          },
          [&](const ClientCounters& a, const ClientCounters& b, auto d) {
            EXPECT_EQ(b.messages_sent - a.messages_sent, 2u) << "GET and RELEASE";
            EXPECT_EQ(b.sends_posted - a.sends_posted, 2u) << "idle: the RELEASE went alone";
            EXPECT_EQ(b.releases_sent - a.releases_sent, 1u);
            EXPECT_EQ(b.replies - a.replies, 1u);
            EXPECT_EQ(b.gets_pulled - a.gets_pulled, 1u);
            EXPECT_EQ(b.rdma_reads - a.rdma_reads, 1u);
            EXPECT_LE(b.registrations - a.registrations, 1u) << "the exact-size landing buffer";
            EXPECT_EQ(d("messages_received"), 2u + 1u);
            EXPECT_EQ(d("replies_sent"), 1u + 1u);
            EXPECT_EQ(d("large_gets_pulled"), 1u);
            EXPECT_EQ(d("releases"), 1u);
          });
}

// docs/protocol.md "SET by grant": a client that asks (ClientOptions::grants) holds
// the grants its large SETs' replies bring, and each large SET that fits one
// is ONE RDMA WRITE WITH IMMEDIATE and its reply: no request message, no READ
// by kvd, no value byte copied by either CPU. Every size from just past the
// eager limit to 1 MiB, read back byte for byte by another client.
TEST_F(RdvE2E, SetByGrantIsOneWriteAndItsReply) {
  start();
  ClientOptions granted;
  granted.grants = true;
  auto c = open(granted);
  auto reader = open();
  const std::size_t sizes[] = {4096, 4097, 16u << 10, 64u << 10, 256u << 10, 1u << 20};
  for (std::size_t n : sizes) {
    SCOPED_TRACE("value of " + std::to_string(n) + " bytes");
    const std::string key = "granted-" + std::to_string(n);
    // The first SET of a size class goes by READ and brings a grant of it;
    // the one after that goes into it, and its reply brings the next.
    ASSERT_EQ(c->set_sync(key, pattern(n, n + 1)), Status::ok);
    const std::string v = pattern(n, n);
    const Stats s0 = stats(*c);
    const ClientCounters k0 = c->counters();
    const std::uint64_t m0 = proto::copied_bytes();
    ASSERT_EQ(c->set_sync(key, v), Status::ok);
    const std::uint64_t m1 = proto::copied_bytes();
    const ClientCounters k1 = c->counters();
    const Stats s1 = stats(*c);
    auto d = [&](const char* name) { return s1.at(name) - s0.at(name); };
    EXPECT_EQ(k1.sets_granted - k0.sets_granted, 1u);
    EXPECT_EQ(k1.sets_large - k0.sets_large, 0u);
    EXPECT_EQ(k1.sends_posted - k0.sends_posted, 0u) << "no request message";
    EXPECT_EQ(k1.messages_sent - k0.messages_sent, 0u);
    EXPECT_EQ(k1.replies - k0.replies, 1u);
    EXPECT_EQ(k1.rdma_reads - k0.rdma_reads, 0u);
    EXPECT_EQ(k1.grants_received - k0.grants_received, 1u) << "the reply brings the next grant";
    EXPECT_EQ(k1.bytes_copied - k0.bytes_copied, 0u);
    // kvd counts the SET as a request received (it came in the WRITE) and a large SET installed.
    EXPECT_EQ(d("messages_received"), 1u + 1u);
    EXPECT_EQ(d("replies_sent"), 1u + 1u);
    EXPECT_EQ(d("granted_sets"), 1u);
    EXPECT_EQ(d("rdma_reads"), 0u) << "kvd READ nothing";
    EXPECT_EQ(d("large_sets"), 1u);
    EXPECT_LT(d("bytes_copied_total"), 64u << 10) << "kvd's CPU copied more than the messages";
    EXPECT_LT(m1 - m0, 64u << 10) << "the client's CPU copied more than the messages";
    std::string got;
    bool found = false;
    ASSERT_EQ(reader->get_sync(key, got, found), Status::ok);
    ASSERT_TRUE(found);
    ASSERT_EQ(got.size(), n);
    EXPECT_EQ(checksum(got), checksum(v));
  }
  const Stats st = stats(*c);
  EXPECT_GE(st.at("grant_bytes_held"), 1u) << "the client holds the grants the last replies brought";
}

// The copy meters see copies: eager values are copied (into the send buffer,
// out of the receive buffer, into the store's block) and move both ends'
// meters by at least their bytes, so the large-value bounds above can fail.
TEST_F(RdvE2E, CopyMetersCountEagerValues) {
  start();
  auto c = open();
  constexpr int kOps = 64;
  const std::string v = pattern(3000, 9);
  const Stats s0 = stats(*c);
  const std::uint64_t m0 = proto::copied_bytes();
  for (int i = 0; i < kOps; ++i) {
    const std::string key = "eager-" + std::to_string(i);
    ASSERT_EQ(c->set_sync(key, v), Status::ok);
    bool found = false;
    std::uint64_t sum = 0;
    ASSERT_EQ(c->get(key,
                     [&](Status s, bool f, std::span<const std::byte> got) {
                       EXPECT_EQ(s, Status::ok);
                       found = f;
                       sum = checksum({reinterpret_cast<const char*>(got.data()), got.size()});
                     }),
              Status::ok);
    ASSERT_TRUE(c->wait_idle(60s));
    EXPECT_TRUE(found);
    EXPECT_EQ(sum, checksum(v));
  }
  const std::uint64_t m1 = proto::copied_bytes();
  const Stats s1 = stats(*c);
  const std::uint64_t values = std::uint64_t{kOps} * v.size();
  // Client: each SET's value encoded, each GET reply copied out of its receive buffer.
  EXPECT_GE(m1 - m0, 2 * values);
  // kvd: each SET's value into a small block, each GET reply's value encoded.
  EXPECT_GE(s1.at("bytes_copied_total") - s0.at("bytes_copied_total"), 2 * values);
  std::printf("rdv_e2e: %d eager SETs and GETs of %zu B: copied %llu B by the client, %llu B by kvd\n", kOps,
              v.size(), static_cast<unsigned long long>(m1 - m0),
              static_cast<unsigned long long>(s1.at("bytes_copied_total") - s0.at("bytes_copied_total")));
}

TEST_F(RdvE2E, OverTheLimitIsRefusedBeforeSending) {
  start({"--max-value", "1048576"});
  auto c = open();
  EXPECT_EQ(c->server_max_value(), 1048576u);
  const std::string ok = pattern(1u << 20, 3);
  const std::string big = pattern((1u << 20) + 1, 4);
  const auto sends = c->counters().sends_posted;
  EXPECT_EQ(c->set_sync("big", big), Status::too_large);
  EXPECT_EQ(c->counters().sends_posted, sends);
  EXPECT_EQ(c->set_sync("ok", ok), Status::ok);
  std::string out;
  bool found = false;
  EXPECT_EQ(c->get_sync("ok", out, found), Status::ok);
  EXPECT_EQ(checksum(out), checksum(ok));
}

// A child running rdv_helper; SIGKILLed by the test.
class Helper {
 public:
  Helper(const std::string& mode, const std::string& server, const std::string& key, std::size_t size) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      const std::string n = std::to_string(size);
      ::execl(RKV_RDV_HELPER_PATH, RKV_RDV_HELPER_PATH, mode.c_str(), server.c_str(), key.c_str(), n.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    fd_ = out[0];
  }
  ~Helper() {
    kill();
    if (fd_ >= 0) ::close(fd_);
  }
  bool wait_go(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char buf[3] = {};
    return ::read(fd_, buf, sizeof buf) == 3 && std::memcmp(buf, "go\n", 3) == 0;
  }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    (void)test::wait_exit(pid_, 10s);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

class RdvKill : public RdvE2E, public ::testing::WithParamInterface<const char*> {};

TEST_P(RdvKill, ClientKilledMidTransferReleasesEverything) {
  const std::string mode = GetParam();
  start();
  auto a = open();
  const std::string keep = pattern(1u << 20, 7);
  ASSERT_EQ(a->set_sync("keep", keep), Status::ok);
  const std::size_t big = 64u << 20;
  if (mode == "get") {
    ASSERT_EQ(a->set_sync("victim", pattern(big, 8)), Status::ok);
  }

  Helper h(mode, addr_ + ":" + std::to_string(kvd_->port()), "victim", big);
  ASSERT_TRUE(h.wait_go(120s)) << "rdv_helper did not connect";
  Stats s;
  // Mid-flight: a READ/WRITE in progress or a value pinned for the victim.
  ASSERT_TRUE(wait_stats(
      *a, [](const Stats& st) { return st.at("transfers") + st.at("pinned") > 0 && st.at("connections") == 2; },
      120s, &s))
      << "the helper's transfer never showed up";
  h.kill();
  ASSERT_TRUE(wait_stats(
      *a,
      [](const Stats& st) { return st.at("connections") == 1 && st.at("pinned") == 0 && st.at("transfers") == 0; },
      120s, &s))
      << "after the kill: connections " << s["connections"] << ", pinned " << s["pinned"] << ", transfers "
      << s["transfers"];
  Value out;
  bool found = false;
  ASSERT_EQ(a->get_sync("keep", out, found), Status::ok);
  EXPECT_TRUE(found);
  EXPECT_EQ(checksum(out.view()), checksum(keep));
  // The server still serves large values.
  ASSERT_EQ(a->set_sync("after", keep), Status::ok);
  ASSERT_EQ(a->get_sync("after", out, found), Status::ok);
  EXPECT_EQ(checksum(out.view()), checksum(keep));
  if (mode == "get") {
    ASSERT_EQ(a->get_sync("victim", out, found), Status::ok);
    EXPECT_EQ(out.size(), big);
  }
  EXPECT_EQ(stats(*a).at("arena_used") > 0, true);
}

INSTANTIATE_TEST_SUITE_P(SetAndGet, RdvKill, ::testing::Values("set", "get"));

}  // namespace
}  // namespace rkv::kv::client
