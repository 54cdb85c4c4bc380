// User-defined operations end to end (docs/protocol.md "CALL"): kvd's INCR
// and CAS under concurrent clients and across kill -9 with --fsync always
// (a kvd child process), and handlers of an in-process Server sharing the
// test's reactor with its clients: a 1 MiB request and reply byte-exact, a
// throwing handler and an unknown opcode answered with a status while the
// other clients keep going.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/server/server.hpp"
#include "kv/store/store.hpp"
#include "kvd_fixture.hpp"
#include "proto/call_ops.hpp"

namespace rkv::test {
namespace {

using kv::client::Client;
using kv::client::Status;
namespace ops = proto::ops;

// The reply bytes of INCR (the new value) / CAS (swapped), or nullopt.
std::optional<std::int64_t> incr_of(std::span<const std::byte> b) { return ops::parse_incr_reply(b); }

std::string value_of(Client& c, const std::string& key) {
  std::string v;
  bool found = false;
  EXPECT_EQ(c.get_sync(key, v, found), Status::ok);
  EXPECT_TRUE(found) << key;
  return v;
}

class CallKvd : public KvdTest {};

TEST_F(CallKvd, EightClientsIncrementOneKeyExactly8000Times) {
  start();
  constexpr int kClients = 8, kEach = 1000;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(open());
  const std::string req = ops::incr_request("counter", 1);
  int ok = 0, done = 0;
  std::vector<std::int64_t> seen;
  seen.reserve(kClients * kEach);
  // Every INCR of every client is submitted before any completes: the 8
  // connections' requests interleave at the server (16 in flight each).
  for (int n = 0; n < kEach; ++n) {
    for (auto& c : clients) {
      ASSERT_EQ(c->call(ops::kIncr, proto::as_bytes(req),
                        [&](Status st, bool, std::span<const std::byte> v) {
                          ++done;
                          if (st != Status::ok) return;
                          if (auto r = incr_of(v)) {
                            ++ok;
                            seen.push_back(*r);
                          }
                        }),
                Status::ok);
    }
  }
  const auto deadline = reactor::Reactor::now() + std::chrono::seconds(300);
  while (done < kClients * kEach && reactor::Reactor::now() < deadline) reactor_.run_once(std::chrono::milliseconds(100));
  ASSERT_EQ(done, kClients * kEach);
  EXPECT_EQ(ok, kClients * kEach);
  EXPECT_EQ(value_of(*clients[0], "counter"), "8000");
  // Each INCR saw its own result: 1..8000 exactly once.
  std::sort(seen.begin(), seen.end());
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], static_cast<std::int64_t>(i + 1));
  const auto stats = kvd_stats();
  EXPECT_GE(stats.at("calls"), static_cast<std::uint64_t>(kClients * kEach));
  EXPECT_EQ(stats.at("calls_failed"), 0u);
}

TEST_F(CallKvd, FourClientsCasOneKeyExactlyOneWinsEachRound) {
  start();
  constexpr int kClients = 4, kRounds = 100;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(open());
  ASSERT_EQ(clients[0]->set_sync("cas-key", "v0"), Status::ok);
  for (int r = 0; r < kRounds; ++r) {
    // All four race from the current value (the previous round's winner's),
    // each offering its own v<r+1>:<client>.
    const std::string cur = r == 0 ? "v0" : value_of(*clients[0], "cas-key");
    std::vector<std::string> reqs;
    for (int i = 0; i < kClients; ++i) {
      reqs.push_back(ops::cas_request("cas-key", cur, "v" + std::to_string(r + 1) + ":" + std::to_string(i)));
    }
    int done = 0, wins = 0, losses = 0, winner = -1;
    for (int i = 0; i < kClients; ++i) {
      ASSERT_EQ(clients[static_cast<std::size_t>(i)]->call(
                    ops::kCas, proto::as_bytes(reqs[static_cast<std::size_t>(i)]),
                    [&, i](Status st, bool, std::span<const std::byte> v) {
                      ++done;
                      ASSERT_EQ(st, Status::ok);
                      const auto s = ops::parse_cas_reply(v);
                      ASSERT_TRUE(s.has_value());
                      if (*s) {
                        ++wins;
                        winner = i;
                      } else {
                        ++losses;
                      }
                    }),
                Status::ok);
    }
    const auto deadline = reactor::Reactor::now() + std::chrono::seconds(60);
    while (done < kClients && reactor::Reactor::now() < deadline) reactor_.run_once(std::chrono::milliseconds(100));
    ASSERT_EQ(done, kClients) << "round " << r;
    ASSERT_EQ(wins, 1) << "round " << r;
    ASSERT_EQ(losses, kClients - 1) << "round " << r;
    EXPECT_EQ(value_of(*clients[0], "cas-key"), "v" + std::to_string(r + 1) + ":" + std::to_string(winner));
  }
  // A CAS of a missing key never sets it; kvd's errors are statuses.
  std::string reply;
  ASSERT_EQ(clients[1]->call_sync(ops::kCas, ops::cas_request("missing", "", "x"), reply), Status::ok);
  EXPECT_EQ(ops::parse_cas_reply(proto::as_bytes(reply)), false);
  bool found = true;
  std::string v;
  ASSERT_EQ(clients[1]->get_sync("missing", v, found), Status::ok);
  EXPECT_FALSE(found);
  ASSERT_EQ(clients[1]->set_sync("text", "not a number"), Status::ok);
  EXPECT_EQ(clients[1]->call_sync(ops::kIncr, ops::incr_request("text", 1), reply), Status::refused);
  ASSERT_EQ(clients[1]->set_sync("max", std::to_string(INT64_MAX)), Status::ok);
  EXPECT_EQ(clients[1]->call_sync(ops::kIncr, ops::incr_request("max", 1), reply), Status::refused);  // overflow
  EXPECT_EQ(value_of(*clients[1], "max"), std::to_string(INT64_MAX));
  EXPECT_EQ(clients[1]->call_sync(ops::kIncr, "garbage", reply), Status::refused);
  EXPECT_EQ(clients[1]->call_sync(0x7777, "x", reply), Status::no_handler);
  EXPECT_EQ(clients[1]->state(), kv::client::ConnState::established);
}

// One-sided GETs see INCR'd and CAS'd values like any SET's.
TEST_F(CallKvd, OneSidedGetsSeeIncrAndCas) {
  start();
  auto writer = open();
  kv::client::ClientOptions ro;
  ro.get_mode = kv::client::GetMode::read;
  auto reader = open(ro);
  ASSERT_TRUE(reader->onesided());
  std::string reply;
  for (int i = 0; i < 5; ++i) ASSERT_EQ(writer->call_sync(ops::kIncr, ops::incr_request("hits", 7), reply), Status::ok);
  EXPECT_EQ(value_of(*reader, "hits"), "35");
  ASSERT_EQ(writer->call_sync(ops::kCas, ops::cas_request("hits", "35", "swapped"), reply), Status::ok);
  EXPECT_EQ(value_of(*reader, "hits"), "swapped");
  // A large value set by CAS (from the arena, as a rendezvous SET's).
  const std::string big(100000, 'B');
  ASSERT_EQ(writer->call_sync(ops::kCas, ops::cas_request("hits", "swapped", big), reply), Status::ok);
  EXPECT_EQ(ops::parse_cas_reply(proto::as_bytes(reply)), true);
  EXPECT_EQ(value_of(*reader, "hits"), big);
  EXPECT_EQ(value_of(*writer, "hits"), big);
  EXPECT_GE(reader->counters().onesided_hits, 3u);
}

// kvload: CALL lines mixed with SET/GET/DEL in a file (depth 16), and in
// interactive mode; --verify refuses a file with CALLs.
TEST_F(CallKvd, KvloadCallLines) {
  start();
  char tmpl[] = "/tmp/rkv-call-wl-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::close(fd);
  const std::string file = tmpl;
  {
    std::ofstream w(file, std::ios::trunc);
    // INCR "hits" by 1: key_len 4, "hits", delta 1 (little-endian).
    const std::string incr = "CALL 0x0100 \\x04\\x00hits\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00";
    for (int i = 0; i < 300; ++i) {
      w << incr << "\n";
      w << "SET k" << i << " v" << i << "\n";
      if (i % 3 == 0) w << "GET k" << i << "\n";
    }
    w << "CALL 0x7777 no handler here\n";  // an error line, the run goes on
  }
  const std::string port = std::to_string(kvd_->port());
  auto r = run_command({RKV_KVLOAD_PATH, "--server", addr_, "--port", port, "--file", file, "--depth", "16", "--json"},
                       {}, std::chrono::seconds(300));
  EXPECT_NE(r.exit_code, 0) << r.err;  // the no_handler line is an error
  EXPECT_NE(r.err.find("call 0x7777: no_handler"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("\"op\":\"call\""), std::string::npos) << r.out;
  auto c = open();
  EXPECT_EQ(value_of(*c, "hits"), "300");
  EXPECT_EQ(value_of(*c, "k299"), "v299");
  r = run_command({RKV_KVLOAD_PATH, "--server", addr_, "--port", port, "--file", file, "--verify"}, {},
                  std::chrono::seconds(60));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("CALL lines"), std::string::npos) << r.err;
  // Interactive: the reply bytes are printed (INCR's are 8 binary bytes, quoted).
  r = run_command({RKV_KVLOAD_PATH, "--server", addr_, "--port", port},
                  "CALL 0x0101 \\x04\\x00hits\\x03\\x00\\x00\\x00300done\nGET hits\n", std::chrono::seconds(60));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("done"), std::string::npos) << r.out;
  std::remove(file.c_str());
}

// kill -9 with --fsync always: every INCR and CAS that was acknowledged is
// in the recovered values.
TEST(CallDurable, AcknowledgedIncrAndCasSurviveSigkill) {
  const std::string addr = verbs::test::softroce_addr();
  char tmpl[] = "/tmp/rkv-call-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::vector<std::string> flags = {"--data-dir", dir + "/data", "--fsync", "always"};
  constexpr int kKeys = 4;
  std::vector<std::int64_t> acked_incr(kKeys, 0);  // the largest acknowledged INCR result per key
  std::vector<int> acked_cas(kKeys, 0);            // the last acknowledged CAS step per key
  int submitted_incr = 0;
  {
    KvdProcess kvd(RKV_KVD_PATH, addr, flags);
    reactor::Reactor reactor;
    auto client = Client::connect(reactor, addr, kvd.port(), {});
    for (int k = 0; k < kKeys; ++k) ASSERT_EQ(client->set_sync("c" + std::to_string(k), "s0"), Status::ok);
    int acks = 0;
    bool killed = false;
    // INCRs at depth on kKeys keys, and a chain of CAS steps per key (each
    // submitted once the one before it was acknowledged), until kvd is killed.
    std::vector<std::string> incr_reqs, cas_reqs(kKeys);
    for (int k = 0; k < kKeys; ++k) incr_reqs.push_back(ops::incr_request("n" + std::to_string(k), 1));
    std::function<void(int, int)> cas_step = [&](int k, int step) {
      cas_reqs[static_cast<std::size_t>(k)] =
          ops::cas_request("c" + std::to_string(k), "s" + std::to_string(step), "s" + std::to_string(step + 1));
      EXPECT_EQ(client->call(ops::kCas, proto::as_bytes(cas_reqs[static_cast<std::size_t>(k)]),
                             [&, k, step](Status st, bool, std::span<const std::byte> v) {
                               if (st != Status::ok) return;
                               if (ops::parse_cas_reply(v) == true) {
                                 acked_cas[static_cast<std::size_t>(k)] = step + 1;
                                 ++acks;
                                 if (!killed) cas_step(k, step + 1);
                               }
                             }),
                Status::ok);
    };
    for (int k = 0; k < kKeys; ++k) cas_step(k, 0);
    std::function<void()> incr_more = [&] {
      const int k = submitted_incr++ % kKeys;
      ASSERT_EQ(client->call(ops::kIncr, proto::as_bytes(incr_reqs[static_cast<std::size_t>(k)]),
                             [&, k](Status st, bool, std::span<const std::byte> v) {
                               if (st != Status::ok) return;
                               if (auto r = incr_of(v)) {
                                 acked_incr[static_cast<std::size_t>(k)] =
                                     std::max(acked_incr[static_cast<std::size_t>(k)], *r);
                                 ++acks;
                               }
                               if (!killed) incr_more();
                             }),
                Status::ok);
    };
    for (int i = 0; i < 12; ++i) incr_more();
    const auto deadline = reactor::Reactor::now() + std::chrono::seconds(120);
    while (acks < 400 && reactor::Reactor::now() < deadline) reactor.run_once(std::chrono::milliseconds(100));
    ASSERT_GE(acks, 400);
    killed = true;
    const int st = kvd.kill_hard();  // with INCRs and CASes in flight
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    client->close();
  }
  KvdProcess kvd(RKV_KVD_PATH, addr, flags);
  reactor::Reactor reactor;
  auto client = Client::connect(reactor, addr, kvd.port(), {});
  std::int64_t total = 0;
  for (int k = 0; k < kKeys; ++k) {
    const auto n = ops::parse_decimal(value_of(*client, "n" + std::to_string(k)));
    ASSERT_TRUE(n.has_value());
    EXPECT_GE(*n, acked_incr[static_cast<std::size_t>(k)]) << "an acknowledged INCR of n" << k << " was lost";
    total += *n;
    const std::string c = value_of(*client, "c" + std::to_string(k));
    ASSERT_EQ(c.front(), 's');
    const int step = std::atoi(c.c_str() + 1);
    EXPECT_GE(step, acked_cas[static_cast<std::size_t>(k)]) << "an acknowledged CAS of c" << k << " was lost";
    EXPECT_LE(step, acked_cas[static_cast<std::size_t>(k)] + 1);  // at most the one in flight
  }
  EXPECT_LE(total, submitted_incr);
  client->close();
  EXPECT_EQ(kvd.stop(), 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// Handlers of an in-process Server on the test's reactor (its clients share it).
class CallHandlers : public ::testing::Test {
 protected:
  static constexpr std::uint16_t kEcho = 0x1000;   // the request, each byte + 1
  static constexpr std::uint16_t kThrow = 0x1001;  // throws
  static constexpr std::uint16_t kRefuse = 0x1002; // refuses
  void SetUp() override {
    addr_ = verbs::test::softroce_addr();
    kv::server::ServerOptions opt;
    opt.bind_address = addr_;
    server_.emplace(reactor_, store_, opt);
    server_->handle(kEcho, [](std::span<const std::byte> req, kv::server::ReplyWriter& reply, kv::server::StoreAccess&) {
      reply.reserve(req.size());
      auto out = reply.extend(req.size());
      for (std::size_t i = 0; i < req.size(); ++i) out[i] = std::byte{static_cast<unsigned char>(std::to_integer<unsigned>(req[i]) + 1)};
    });
    server_->handle(kThrow, [](std::span<const std::byte>, kv::server::ReplyWriter& reply, kv::server::StoreAccess& s) {
      reply.append(std::string_view("partial"));
      EXPECT_TRUE(s.set("written-before-throw", std::string_view("yes")));
      throw std::runtime_error("handler bug");
    });
    server_->handle(kRefuse, [](std::span<const std::byte>, kv::server::ReplyWriter& reply, kv::server::StoreAccess&) {
      reply.refuse();
    });
    EXPECT_THROW(server_->handle(0x0005, [](auto, auto&, auto&) {}), std::invalid_argument);  // reserved
  }
  void TearDown() override {
    clients_.clear();
    bool done = false;
    server_->shutdown([&done] { done = true; });
    const auto deadline = reactor::Reactor::now() + std::chrono::seconds(10);
    while (!done && reactor::Reactor::now() < deadline) reactor_.run_once(std::chrono::milliseconds(10));
    EXPECT_TRUE(done);
    server_.reset();
  }
  Client& open() {
    clients_.push_back(Client::connect(reactor_, addr_, server_->port(), {}));
    return *clients_.back();
  }
  static std::string plus_one(const std::string& s) {
    std::string out = s;
    for (char& c : out) c = static_cast<char>(static_cast<unsigned char>(c) + 1);
    return out;
  }

  std::string addr_;
  reactor::Reactor reactor_;  // first: destroyed last
  kv::store::Store store_;
  std::optional<kv::server::Server> server_;
  std::vector<std::unique_ptr<Client>> clients_;
};

TEST_F(CallHandlers, OneMebibyteRequestAndReplyRoundTripByteExact) {
  Client& c = open();
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4000}, std::size_t{4093}, std::size_t{4096},
                           std::size_t{65536}, std::size_t{1} << 20}) {
    std::string req(size, '\0');
    for (std::size_t i = 0; i < size; ++i) req[i] = static_cast<char>((i * 131 + size) & 0xFF);
    kv::client::Value reply;
    ASSERT_EQ(c.call_sync(kEcho, proto::as_bytes(req), reply), Status::ok) << size;
    ASSERT_EQ(reply.size(), size);
    EXPECT_TRUE(reply.view() == plus_one(req)) << "size " << size;
    c.forget(proto::as_bytes(req));
  }
  EXPECT_GE(c.counters().calls_large, 3u);   // requests of 4 KiB+ READ by the server
  EXPECT_GE(c.counters().calls_pulled, 3u);  // replies of 4 KiB+ READ by the client
  // Every pulled reply is RELEASEd (the last RELEASE goes out on the client's next loop turn).
  const auto deadline = reactor::Reactor::now() + std::chrono::seconds(10);
  while (server_->stats().counters.pinned != 0 && reactor::Reactor::now() < deadline) {
    reactor_.run_once(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->stats().counters.pinned, 0u);
  EXPECT_GE(server_->stats().counters.releases, 3u);
}

TEST_F(CallHandlers, ThrowingHandlerAndUnknownOpcodeGetAStatusOthersKeepGoing) {
  Client& bad = open();
  Client& good = open();
  int good_ok = 0, good_done = 0;
  const std::string req = "ping";
  // The good client's CALLs and SETs in flight while the other one's fail.
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(good.call(kEcho, proto::as_bytes(req),
                        [&](Status st, bool, std::span<const std::byte> v) {
                          ++good_done;
                          good_ok += st == Status::ok && proto::as_string_view(v) == "qjoh";
                        }),
              Status::ok);
    ASSERT_EQ(good.set("k" + std::to_string(i), "v", [&](Status st, bool, auto) {
                ++good_done;
                good_ok += st == Status::ok;
              }),
              Status::ok);
  }
  std::vector<Status> bad_st;
  for (int i = 0; i < 50; ++i) {
    for (std::uint16_t op : {kThrow, std::uint16_t{0x4321}, kRefuse, std::uint16_t{0x0001}}) {
      ASSERT_EQ(bad.call(op, proto::as_bytes(req), [&](Status st, bool, auto) { bad_st.push_back(st); }), Status::ok);
    }
  }
  const auto deadline = reactor::Reactor::now() + std::chrono::seconds(60);
  while ((good_done < 400 || bad_st.size() < 200) && reactor::Reactor::now() < deadline) {
    reactor_.run_once(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(good_ok, 400);
  ASSERT_EQ(bad_st.size(), 200u);
  for (std::size_t i = 0; i < bad_st.size(); i += 4) {
    EXPECT_EQ(bad_st[i], Status::handler_failed);
    EXPECT_EQ(bad_st[i + 1], Status::no_handler);
    EXPECT_EQ(bad_st[i + 2], Status::refused);
    EXPECT_EQ(bad_st[i + 3], Status::no_handler);  // a reserved opcode has no handler either
  }
  // Both connections are still up and serve more.
  std::string reply;
  EXPECT_EQ(bad.call_sync(kEcho, "abc", reply), Status::ok);
  EXPECT_EQ(reply, "bcd");
  EXPECT_EQ(good.call_sync(kEcho, "", reply), Status::ok);
  EXPECT_EQ(reply, "");
  // What the throwing handler wrote before it threw stays.
  EXPECT_TRUE(store_.get("written-before-throw").found);
  const auto c = server_->stats().counters;
  EXPECT_EQ(c.calls_failed, 50u);
  EXPECT_EQ(c.calls_no_handler, 100u);
  EXPECT_EQ(c.protocol_errors, 0u);
  EXPECT_EQ(server_->connections(), 2u);
}

}  // namespace
}  // namespace rkv::test
