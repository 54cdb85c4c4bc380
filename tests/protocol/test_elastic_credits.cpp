// protocol suite: elastic credits (a connection's credits grow while the
// client spends them and shrink while it does not, always backed by posted
// receives) and the buffer pools' chunks added on demand.
#include "server_conn_fixture.hpp"

namespace rkv::kv::server {
namespace {

using namespace conn_test;  // NOLINT(google-build-using-namespace)

TEST(ElasticCredits, GrowWhenSpentShrinkWhenUnspentAlwaysBacked) {
  test::FakeRegistrar buffers;
  BufferPool recv(8, 8192, buffers, verbs::Access::local_write, 4);
  BufferPool send(8, 8192, buffers, verbs::Access::none, 4);
  FakeLink link;
  Store store;
  ServerCounters counters;
  LatencyHistograms latency;
  ShardGate gate;
  test::FakeRegistrar reg;
  Arena arena(reg, {4096, 1u << 20, 64u << 20});
  const ServerConnConfig cfg = fake_conn_config(2, 8, "elastic", counters, store, latency, gate);
  auto conn = std::make_unique<ServerConn>(link, recv, send, store, arena, counters, cfg);
  ASSERT_EQ(conn->start(), Verdict::keep);
  conn->on_established();
  EXPECT_EQ(conn->allowance(), 2u);
  EXPECT_EQ(recv.in_use(), 2u);

  std::int64_t client_credits = 2;  // what the client may still send
  std::size_t next_recv = 0, next_send = 0;
  std::uint32_t id = 0;
  auto send_one = [&] {
    ASSERT_GT(client_credits, 0);
    ASSERT_LT(next_recv, link.recvs.size());
    --client_credits;
    ASSERT_EQ(conn->on_completion(FakeLink::deliver(link.recvs.at(next_recv++), pack({proto::msg::get_request(++id, "k")}))),
              Verdict::keep);
  };
  auto take_replies = [&] {
    ASSERT_EQ(conn->flush(), Verdict::keep);
    for (; next_send < link.sends.size(); ++next_send) {
      for (const auto& r : decode_all(link.sends[next_send].bytes)) client_credits += r.header.credits;
      ASSERT_EQ(conn->on_completion(FakeLink::complete(link.sends[next_send], CompletionOpcode::send)), Verdict::keep);
    }
    // Every credit the client holds is backed by a posted receive.
    EXPECT_EQ(static_cast<std::int64_t>(conn->recvs_posted()), client_credits);
    EXPECT_EQ(conn->allowance(), conn->recvs_posted());
  };

  // Spending both credits before any reply: 2 -> 4 -> (spent again) 8, never past max_credits.
  send_one();
  send_one();
  take_replies();
  EXPECT_EQ(conn->allowance(), 4u);
  EXPECT_EQ(counters.credit_grows, 2u);
  for (int i = 0; i < 4; ++i) send_one();
  take_replies();
  EXPECT_EQ(conn->allowance(), 8u);
  for (int i = 0; i < 8; ++i) send_one();
  take_replies();
  EXPECT_EQ(conn->allowance(), 8u) << "max_credits";
  EXPECT_EQ(counters.credit_grows, 6u);
  EXPECT_EQ(recv.in_use(), 8u);

  // One request at a time (depth 1): the unspent credits go back, down to the initial 2.
  for (int i = 0; i < 30; ++i) {
    send_one();
    take_replies();
  }
  EXPECT_EQ(conn->allowance(), 2u);
  EXPECT_EQ(counters.credit_shrinks, 6u);
  EXPECT_EQ(counters.credit_grows, 6u);
  EXPECT_EQ(recv.in_use(), 2u);
  EXPECT_EQ(conn->state(), ConnState::established);

  conn.reset();  // the QP is gone: what it held goes back
  EXPECT_EQ(recv.in_use(), 0u);
  EXPECT_EQ(send.in_use(), 0u);
}

TEST(ElasticPool, ChunksAreAddedOnDemandAndReleasedWhenASpareOneIsFree) {
  test::FakeRegistrar reg;
  BufferPool pool(4, 128, reg, verbs::Access::local_write, 3);
  EXPECT_EQ(pool.chunk_bytes(), 0u);
  EXPECT_TRUE(pool.may_take());
  std::vector<std::uint32_t> taken(12);
  for (auto& i : taken) ASSERT_TRUE(pool.take(i));
  EXPECT_EQ(reg.live, 3);
  EXPECT_EQ(reg.last_access, verbs::Access::local_write);
  EXPECT_EQ(pool.chunk_bytes(), 12u * 128);
  EXPECT_EQ(pool.lkey(taken[0]), 1001u);
  EXPECT_EQ(pool.lkey(taken[11]), 1003u);
  std::uint32_t more = 0;
  EXPECT_FALSE(pool.may_take());
  EXPECT_FALSE(pool.take(more)) << "max_chunks";
  // Distinct buffers, each inside its chunk.
  std::sort(taken.begin(), taken.end());
  EXPECT_EQ(std::adjacent_find(taken.begin(), taken.end()), taken.end());
  // The last chunk to empty stays: the first two go once another is free.
  for (auto i : taken) pool.give_back(i);
  EXPECT_EQ(reg.live, 1);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(pool.free_count(), 4u);
  // A released chunk's indices come back first; a failed registration is a failed take.
  for (int n = 0; n < 4; ++n) ASSERT_TRUE(pool.take(more));
  reg.fail_next = true;
  EXPECT_FALSE(pool.take(more));
  ASSERT_TRUE(pool.take(more));
  EXPECT_LT(more, 12u);
  EXPECT_EQ(reg.live, 2);
}

}  // namespace
}  // namespace rkv::kv::server
