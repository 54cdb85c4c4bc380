// server_clients (rdma suite): kv::server::Server in-process on the test's Reactor,
// raw-verbs clients (raw_client.hpp) in the same thread. A client that sends
// garbage, or more SENDs than its credits, is disconnected; a well-behaved
// client on the same server keeps working; the connection count returns to 0.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "loopback.hpp"
#include "proto/encode.hpp"
#include "raw_client.hpp"
#include "server_harness.hpp"

namespace rkv::test {
namespace {

using namespace std::chrono_literals;

constexpr std::uint16_t kServerCredits = 4;
constexpr auto kStep = 30s;  // per wait; TCG guests are slow

// SET then GET through `c`; returns the value read back.
std::string set_then_get(ServerHarness& h, RawClient& c, std::uint32_t& req, const std::string& key,
                         const std::string& value) {
  const std::uint32_t set_id = ++req;
  EXPECT_EQ(c.send_request(proto::msg::set_request(set_id, key, proto::as_bytes(value))), 0);
  std::optional<RawReply> r;
  EXPECT_TRUE(h.wait([&] { return (r = c.take_reply(set_id)).has_value(); }, kStep, {&c})) << "no SET reply";
  if (!r) return "<no SET reply>";
  EXPECT_EQ(r->header.status, proto::Status::ok);
  const std::uint32_t get_id = ++req;
  EXPECT_EQ(c.send_request(proto::msg::get_request(get_id, key)), 0);
  r.reset();
  EXPECT_TRUE(h.wait([&] { return (r = c.take_reply(get_id)).has_value(); }, kStep, {&c})) << "no GET reply";
  if (!r) return "<no GET reply>";
  EXPECT_TRUE(r->header.found());
  return r->value;
}

TEST(ServerClients, GarbageClientIsDisconnectedOthersUnaffected) {
  const std::string addr = verbs::test::softroce_addr();
  ServerHarness h(addr, kServerCredits);
  RawClient good(addr, h.server->port());
  RawClient bad(addr, h.server->port());
  ASSERT_TRUE(h.wait([&] { return good.established() && bad.established() && h.server->connections() == 2; },
                     kStep, {&good, &bad}))
      << "connect failed: " << good.failure() << " / " << bad.failure();
  EXPECT_EQ(good.credits(), kServerCredits);

  std::uint32_t req = 0;
  EXPECT_EQ(set_then_get(h, good, req, "alpha", "one"), "one");

  const std::vector<std::byte> garbage(40, std::byte{0xFF});
  ASSERT_EQ(bad.send_raw(garbage), 0);
  ASSERT_TRUE(h.wait([&] { return bad.disconnected() && h.server->connections() == 1; }, kStep, {&good, &bad}))
      << "garbage client not disconnected; connections=" << h.server->connections();
  const auto st = h.server->stats();
  EXPECT_EQ(st.counters.protocol_errors, 1u);
  EXPECT_EQ(st.keys, 1u);

  // The well-behaved client is unaffected, and STATS reports one connection.
  EXPECT_EQ(set_then_get(h, good, req, "beta", std::string(3000, 'b')), std::string(3000, 'b'));
  EXPECT_EQ(set_then_get(h, good, req, "alpha", "two"), "two");
  const std::uint32_t stats_id = ++req;
  ASSERT_EQ(good.send_request(proto::msg::stats_request(stats_id)), 0);
  std::optional<RawReply> r;
  ASSERT_TRUE(h.wait([&] { return (r = good.take_reply(stats_id)).has_value(); }, kStep, {&good}));
  EXPECT_NE(r->value.find("connections 1"), std::string::npos) << r->value;
  EXPECT_NE(r->value.find("keys 2"), std::string::npos) << r->value;

  good.disconnect();
  ASSERT_TRUE(h.wait([&] { return h.server->connections() == 0; }, kStep, {&good, &bad}))
      << "connections=" << h.server->connections();
  EXPECT_TRUE(good.send_errors().empty());
  EXPECT_TRUE(h.shutdown(kStep, {&good, &bad}));
}

TEST(ServerClients, CreditOverrunIsDisconnectedOthersUnaffected) {
  const std::string addr = verbs::test::softroce_addr();
  ServerHarness h(addr, kServerCredits);
  RawClient good(addr, h.server->port());
  RawClient over(addr, h.server->port());
  ASSERT_TRUE(h.wait([&] { return good.established() && over.established() && h.server->connections() == 2; },
                     kStep, {&good, &over}))
      << "connect failed: " << good.failure() << " / " << over.failure();

  // credits + 1 SENDs at once. They are empty, so no reply can carry a credit
  // back: the server grants exactly kServerCredits and the extra SEND (which
  // waits in RNR until a buffer is re-posted) is a provable overrun.
  for (unsigned i = 0; i <= kServerCredits; ++i) ASSERT_EQ(over.send_raw({}), 0);
  ASSERT_TRUE(h.wait([&] { return over.disconnected() && h.server->connections() == 1; }, kStep, {&good, &over}))
      << "overrun client not disconnected; connections=" << h.server->connections();
  EXPECT_EQ(h.server->stats().counters.credit_overruns, 1u);

  std::uint32_t req = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string key = "k" + std::to_string(i);
    EXPECT_EQ(set_then_get(h, good, req, key, "v" + std::to_string(i)), "v" + std::to_string(i));
  }
  // Pipelined up to the full window: credits come back and sum correctly.
  for (std::uint32_t i = 0; i < kServerCredits; ++i) {
    ASSERT_EQ(good.send_request(proto::msg::get_request(100 + i, "k1")), 0);
  }
  std::set<std::uint32_t> got;
  ASSERT_TRUE(h.wait(
      [&] {
        for (std::uint32_t i = 0; i < kServerCredits; ++i) {
          if (good.take_reply(100 + i)) got.insert(i);
        }
        return got.size() == kServerCredits;
      },
      kStep, {&good}))
      << "pipelined GETs not all answered";
  ASSERT_TRUE(h.wait([&] { return good.credits() == kServerCredits; }, kStep, {&good}))
      << "credits back: " << good.credits();

  EXPECT_TRUE(h.shutdown(kStep, {&good, &over})) << "connections=" << h.server->connections();
  EXPECT_EQ(h.server->connections(), 0u);
  EXPECT_TRUE(h.wait([&] { return good.disconnected(); }, kStep, {&good}));
}

}  // namespace
}  // namespace rkv::test
