// examples/leaderboard end to end: the example program (a server embedding
// its own CALL handler, TOPK_ADD) run as a child process, called by a C++
// client; its boards are ordinary values (GET by message and one-sided).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "kv/client/client.hpp"
#include "kvd_process.hpp"
#include "loopback.hpp"
#include "reactor/reactor.hpp"

#ifndef RKV_LEADERBOARD_PATH
#error "RKV_LEADERBOARD_PATH must name the example's binary"
#endif

namespace rkv::test {
namespace {

using kv::client::Client;
using kv::client::Status;

constexpr std::uint16_t kTopkAdd = 0x1000;

std::string topk_request(const std::string& key, std::int64_t score, const std::string& member) {
  std::string r;
  r.push_back(static_cast<char>(key.size() & 0xFF));
  r.push_back(static_cast<char>(key.size() >> 8));
  r += key;
  for (int i = 0; i < 8; ++i) r.push_back(static_cast<char>((static_cast<std::uint64_t>(score) >> (8 * i)) & 0xFF));
  r += member;
  return r;
}

TEST(ExampleLeaderboard, TopkAddKeepsTheTenBestAndGetsReadTheBoard) {
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess server(RKV_LEADERBOARD_PATH, addr);
  reactor::Reactor reactor;
  auto c = Client::connect(reactor, addr, server.port(), {});
  std::string board;
  ASSERT_EQ(c->call_sync(kTopkAdd, topk_request("game", 50, "alice"), board), Status::ok);
  EXPECT_EQ(board, "50 alice\n");
  ASSERT_EQ(c->call_sync(kTopkAdd, topk_request("game", 70, "bob"), board), Status::ok);
  EXPECT_EQ(board, "70 bob\n50 alice\n");
  ASSERT_EQ(c->call_sync(kTopkAdd, topk_request("game", 40, "alice"), board), Status::ok);  // keeps her best
  EXPECT_EQ(board, "70 bob\n50 alice\n");
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(c->call_sync(kTopkAdd, topk_request("game", i, "p" + std::to_string(i)), board), Status::ok);
  }
  EXPECT_EQ(board, "70 bob\n50 alice\n19 p19\n18 p18\n17 p17\n16 p16\n15 p15\n14 p14\n13 p13\n12 p12\n");
  // The board is an ordinary value, for message and one-sided GETs alike.
  std::string v;
  bool found = false;
  ASSERT_EQ(c->get_sync("game", v, found), Status::ok);
  EXPECT_TRUE(found);
  EXPECT_EQ(v, board);
  kv::client::ClientOptions ro;
  ro.get_mode = kv::client::GetMode::read;
  auto reader = Client::connect(reactor, addr, server.port(), ro);
  ASSERT_TRUE(reader->onesided());
  ASSERT_EQ(reader->get_sync("game", v, found), Status::ok);
  EXPECT_EQ(v, board);
  EXPECT_EQ(reader->counters().onesided_hits, 1u);
  // Malformed requests are refused; kvd's INCR is not in this program.
  EXPECT_EQ(c->call_sync(kTopkAdd, "x", board), Status::refused);
  EXPECT_EQ(c->call_sync(kTopkAdd, topk_request("game", 1, ""), board), Status::refused);
  EXPECT_EQ(c->call_sync(0x0100, "", board), Status::no_handler);
  ASSERT_EQ(c->set_sync("plain", "value"), Status::ok);  // the stock operations are all there
  reader->close();
  c->close();
  EXPECT_EQ(server.stop(), 0) << "leaderboard did not exit cleanly on SIGTERM";
}

}  // namespace
}  // namespace rkv::test
