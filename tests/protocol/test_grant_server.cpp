// protocol suite: ServerConn's grants (docs/protocol.md "SET by grant")
// through FakeLink + FakeRegistrar: a grant rides on the ok reply to a large
// SET, bound before that reply is posted; a SET the client WROTE into it is
// stored once the window's invalidation completed, and its reply carries the
// next grant; refusals (no such grant, a grant written twice, a malformed
// trailer, a value over the limit); the per-connection limit; none for a
// client that did not ask.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fake_link.hpp"
#include "fake_registrar.hpp"
#include "kv/server/arena.hpp"
#include "kv/server/server_conn.hpp"
#include "proto/grant.hpp"
#include "server_request.hpp"
#include "wire_helpers.hpp"

namespace rkv::kv::server::grant_test {
namespace {

using proto::Opcode;
using proto::Status;
using test::FakeLink;
using test::FakeRegistrar;
using verbs::CompletionOpcode;
using verbs::CompletionStatus;

using test::decode;
using test::pack;

class ServerGrant : public ::testing::Test {
 protected:
  void start(std::uint32_t max_grants) {
    ServerConnConfig cfg;
    cfg.credits = 4;
    cfg.generation = 3;
    cfg.peer_recv_size = 8192;
    cfg.max_value = 1u << 20;
    cfg.max_transfers = 4;
    cfg.max_pins = 4;
    cfg.max_grants = max_grants;
    cfg.grant_budget = &budget_;
    cfg.stats = test::stats_of(counters_, store_);
    cfg.latency = &latency_;
    cfg.gate = &gate_;
    store_.attach_large_blocks([a = &arena_](std::size_t n) { return a->allocate(n); });
    sc_ = std::make_unique<ServerConn>(link_, recv_, send_, store_, arena_, counters_, cfg);
    ASSERT_EQ(sc_->start(), Verdict::keep);
    sc_->on_established();
  }
  Verdict request(const std::vector<std::byte>& bytes) { return test::deliver_request(*sc_, link_, next_recv_, bytes); }

  // A large SET by READ, answered: its reply.
  proto::MessageView set_by_read(std::uint32_t req_id, const std::string& key, std::size_t len) {
    const auto before = link_.reads.size();
    EXPECT_EQ(request(pack({proto::msg::set_request_rdv(req_id, key, {0x1000, 77}, len)})), Verdict::keep);
    EXPECT_EQ(link_.reads.size(), before + 1);
    const auto& rd = link_.reads.back();
    std::memset(rd.target.data(), 'r', rd.target.size());
    EXPECT_EQ(sc_->on_completion(FakeLink::complete(rd, CompletionOpcode::rdma_read)), Verdict::keep);
    EXPECT_EQ(sc_->flush(), Verdict::keep);
    const auto r = decode(link_.sends.back().bytes);
    EXPECT_EQ(r.size(), 1u);
    return r.back();
  }

  // What a client WRITEs into a grant: value | key | trailer at the grant's
  // address (a FakeRegistrar block's address is its own), then the receive
  // completion with immediate the WRITE makes. Its verdict.
  Verdict write_into(const proto::GrantDesc& g, std::uint32_t req_id, const std::string& key, std::size_t len,
                     char fill, std::uint32_t imm) {
    auto* at = reinterpret_cast<std::byte*>(g.addr);
    std::memset(at, fill, len);
    std::memcpy(at + len, key.data(), key.size());
    proto::GrantedSet s;
    s.req_id = req_id;
    s.key = key;
    s.value = {at, len};
    proto::write_grant_trailer(std::span<std::byte, proto::kGrantTrailerSize>(at + len + key.size(),
                                                                             proto::kGrantTrailerSize),
                               s);
    const auto written = static_cast<std::uint32_t>(proto::granted_set_size(key.size(), len));
    return sc_->on_completion(FakeLink::deliver_written(link_.recvs[next_recv_++], imm, written));
  }

  // The completion of the last window post (an invalidation).
  Verdict complete_invalidation(CompletionStatus status = CompletionStatus::success) {
    const auto& w = link_.window_posts.back();
    EXPECT_FALSE(w.bind);
    verbs::Completion c;
    c.wr_id = w.id;
    c.status = status;
    c.opcode = CompletionOpcode::invalidate;
    return sc_->on_completion(c);
  }

  FakeLink link_;
  FakeRegistrar reg_;
  BufferPool recv_{4, 8192}, send_{8, 8192};
  Store store_;
  ServerCounters counters_;
  LatencyHistograms latency_;
  ShardGate gate_;  // open: a static list's server
  Arena arena_{reg_, {4096, 1u << 20, 64u << 20}};
  GrantBudget budget_;  // every connection's unwritten grants (the Server's)
  std::unique_ptr<ServerConn> sc_;
  std::size_t next_recv_ = 0;
};

TEST_F(ServerGrant, AGrantRidesOnTheReplyAndAWriteIntoItIsStoredWithoutARead) {
  start(2);
  const proto::MessageView r = set_by_read(5, "big", 100000);
  EXPECT_EQ(r.header.status, Status::ok);
  ASSERT_TRUE(r.grant) << "an ok reply to a large SET carries a grant";
  EXPECT_EQ(r.grant->id, 1u);
  EXPECT_GE(r.header.value_len, proto::granted_set_size(3, 100000)) << "room for the same SET again";
  ASSERT_EQ(link_.window_posts.size(), 1u);
  const FakeLink::WindowPost bind = link_.window_posts[0];
  EXPECT_TRUE(bind.bind);
  EXPECT_FALSE(bind.signaled) << "an unsignaled bind: it completes only if it fails";
  EXPECT_EQ(bind.rkey, r.grant->rkey);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(bind.range.data()), r.grant->addr);
  EXPECT_EQ(bind.range.size(), r.header.value_len);
  EXPECT_EQ(reg_.last_access, verbs::Access::local_write | verbs::Access::remote_read | verbs::Access::mw_bind);
  EXPECT_EQ(link_.posts.back(), (std::vector{verbs::SendOp::bind_window, verbs::SendOp::send}))
      << "the bind and the reply naming its key in one post, the bind first";
  EXPECT_EQ(sc_->grants_held(), 1u);
  EXPECT_EQ(counters_.grants, 1u);

  const auto sends = link_.sends.size();
  const auto reads = link_.reads.size();
  const auto bytes_in = counters_.bytes_received;
  ASSERT_EQ(write_into(*r.grant, 9, "k2", 70000, 'w', r.grant->id), Verdict::keep);
  EXPECT_EQ(link_.window_posts.size(), 1u) << "the invalidation waits for the pass's post";
  const auto posts = link_.posts.size();
  ASSERT_EQ(sc_->flush(), Verdict::keep);
  EXPECT_EQ(link_.posts.size(), posts + 1);
  ASSERT_EQ(link_.window_posts.size(), 2u);
  EXPECT_FALSE(link_.window_posts[1].bind) << "the window is invalidated first";
  EXPECT_TRUE(link_.window_posts[1].signaled) << "its completion installs the SET";
  EXPECT_EQ(link_.window_posts[1].rkey, bind.rkey) << "the key the client wrote with";
  EXPECT_EQ(link_.window_posts[1].window, bind.window);
  EXPECT_FALSE(store_.get("k2").found) << "nothing stored before the invalidation completed";
  EXPECT_EQ(sc_->grants_held(), 0u);
  ASSERT_EQ(complete_invalidation(), Verdict::keep);
  ASSERT_EQ(sc_->flush(), Verdict::keep);
  EXPECT_EQ(link_.reads.size(), reads) << "no READ";
  const auto replies = test::replies_since(link_, sends);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].opcode(), Opcode::set_reply);
  EXPECT_EQ(replies[0].header.req_id, 9u) << "the trailer's req_id";
  EXPECT_EQ(replies[0].header.status, Status::ok);
  EXPECT_GE(replies[0].header.credits, 1u) << "the WRITE took a receive: its credit comes back";
  ASSERT_TRUE(replies[0].grant) << "and the next grant with it";
  EXPECT_EQ(link_.window_posts.back().rkey, replies[0].grant->rkey);
  EXPECT_TRUE(link_.window_posts.back().bind);
  EXPECT_EQ(link_.posts.back(), (std::vector{verbs::SendOp::bind_window, verbs::SendOp::send}));
  const auto hit = store_.get("k2");
  ASSERT_TRUE(hit.found && hit.large);
  EXPECT_EQ(hit.value, std::string(70000, 'w'));
  EXPECT_EQ(counters_.granted_sets, 1u);
  EXPECT_EQ(counters_.grants, 2u);
  EXPECT_EQ(counters_.bytes_received - bytes_in, proto::granted_set_size(2, 70000)) << "what the WRITE wrote, once";
}

TEST_F(ServerGrant, AClientThatDidNotAskGetsNone) {
  start(0);
  const proto::MessageView r = set_by_read(5, "big", 100000);
  EXPECT_EQ(r.header.status, Status::ok);
  EXPECT_FALSE(r.grant);
  EXPECT_TRUE(link_.window_posts.empty());
  EXPECT_EQ(reg_.registrations(), 1u) << "one chunk for the value, no grantable block";
}

TEST_F(ServerGrant, NoMoreThanMaxGrantsAreHeld) {
  start(2);
  EXPECT_TRUE(set_by_read(1, "a", 10000).grant);
  EXPECT_TRUE(set_by_read(2, "b", 10000).grant);
  const proto::MessageView third = set_by_read(3, "c", 10000);
  EXPECT_EQ(third.header.status, Status::ok);
  EXPECT_FALSE(third.grant) << "the client holds two already";
  EXPECT_EQ(sc_->grants_held(), 2u);
}

TEST_F(ServerGrant, UnwrittenGrantsStayWithinTheServersBudget) {
  start(4);
  const proto::MessageView first = set_by_read(1, "a", 10000);
  ASSERT_TRUE(first.grant);
  const std::uint64_t capacity = first.header.value_len;
  EXPECT_EQ(budget_.held, capacity);
  budget_.limit = capacity + capacity / 2;  // room for one grant, not two
  const proto::MessageView second = set_by_read(2, "b", 10000);
  EXPECT_EQ(second.header.status, Status::ok);
  EXPECT_FALSE(second.grant) << "a second grant would take every connection's past the budget";
  EXPECT_EQ(counters_.grants_withheld, 1u);
  EXPECT_EQ(budget_.held, capacity);
  // Written, the grant leaves the budget, and the reply can carry the next.
  ASSERT_EQ(write_into(*first.grant, 3, "c", 9000, 'w', first.grant->id), Verdict::keep);
  EXPECT_EQ(budget_.held, 0u);
  ASSERT_EQ(sc_->flush(), Verdict::keep);  // the invalidation
  ASSERT_EQ(complete_invalidation(), Verdict::keep);
  const auto sends = link_.sends.size();
  ASSERT_EQ(sc_->flush(), Verdict::keep);
  const auto replies = test::replies_since(link_, sends);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_TRUE(replies[0].grant);
  EXPECT_EQ(budget_.held, capacity);
  // The connection's unwritten grants leave with it.
  sc_.reset();
  EXPECT_EQ(budget_.held, 0u);
}

TEST_F(ServerGrant, AWriteNamingNoGrantDropsTheClient) {
  start(2);
  const proto::MessageView r = set_by_read(5, "big", 100000);
  ASSERT_TRUE(r.grant);
  EXPECT_EQ(sc_->on_completion(FakeLink::deliver_written(link_.recvs[next_recv_++], 2, 100)), Verdict::disconnect);
  EXPECT_EQ(sc_->close_cause(), CloseCause::protocol_error);
  EXPECT_EQ(counters_.protocol_errors, 1u);
}

TEST_F(ServerGrant, AGrantWrittenTwiceDropsTheClient) {
  start(2);
  const proto::MessageView r = set_by_read(5, "big", 100000);
  ASSERT_TRUE(r.grant);
  ASSERT_EQ(write_into(*r.grant, 9, "k2", 1000, 'w', r.grant->id), Verdict::keep);
  ASSERT_EQ(sc_->flush(), Verdict::keep);  // the invalidation is posted
  EXPECT_EQ(write_into(*r.grant, 10, "k3", 1000, 'x', r.grant->id), Verdict::disconnect);
  EXPECT_EQ(sc_->close_cause(), CloseCause::protocol_error);
  // The invalidation still comes back (flushed): the entry and its block go with it.
  EXPECT_EQ(complete_invalidation(CompletionStatus::flushed), Verdict::keep);
  EXPECT_FALSE(store_.get("k2").found);
}

TEST_F(ServerGrant, AMalformedTrailerDropsTheClientAndStoresNothing) {
  start(2);
  const proto::MessageView r = set_by_read(5, "big", 100000);
  ASSERT_TRUE(r.grant);
  auto* at = reinterpret_cast<std::byte*>(r.grant->addr);
  std::memset(at, 0xFF, 200);  // key_len 0xFFFF, reserved bits: no SET
  ASSERT_EQ(sc_->on_completion(FakeLink::deliver_written(link_.recvs[next_recv_++], r.grant->id, 200)), Verdict::keep);
  ASSERT_EQ(sc_->flush(), Verdict::keep);
  EXPECT_EQ(complete_invalidation(), Verdict::disconnect);
  EXPECT_EQ(sc_->close_cause(), CloseCause::protocol_error);
  EXPECT_EQ(store_.size(), 1u) << "only the SET by READ";
}

TEST_F(ServerGrant, AValueOverTheLimitIsRefusedAndTheConnectionKept) {
  start(2);
  const proto::MessageView r = set_by_read(5, "big", (1u << 20) - 16);  // with key and trailer: past 1 MiB
  ASSERT_TRUE(r.grant);
  ASSERT_GT(r.header.value_len, (1u << 20) + 100);  // a 2 MiB block: room past max_value
  const auto sends = link_.sends.size();
  ASSERT_EQ(write_into(*r.grant, 9, "k2", (1u << 20) + 1, 'w', r.grant->id), Verdict::keep);
  ASSERT_EQ(sc_->flush(), Verdict::keep);
  ASSERT_EQ(complete_invalidation(), Verdict::keep);
  ASSERT_EQ(sc_->flush(), Verdict::keep);
  const auto replies = test::replies_since(link_, sends);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].header.status, Status::too_large);
  EXPECT_FALSE(replies[0].grant) << "no grant on an error reply";
  EXPECT_FALSE(store_.get("k2").found);
  EXPECT_EQ(sc_->state(), ConnState::established);
}

// A granted SET whose connection is dropped in the same pass: its
// invalidation was queued, never posted, so no completion will come; the
// SET's entry and the grant's block go at once, nothing is stored, and the
// connection drains.
TEST_F(ServerGrant, AnInvalidationNeverPostedIsDroppedWithItsSet) {
  start(2);
  const proto::MessageView r = set_by_read(5, "big", 100000);
  ASSERT_TRUE(r.grant);
  const auto blocks = arena_.stats().blocks_in_use;
  ASSERT_EQ(write_into(*r.grant, 9, "k2", 1000, 'w', r.grant->id), Verdict::keep);
  EXPECT_EQ(sc_->on_completion(FakeLink::deliver_written(link_.recvs[next_recv_++], 7, 100)), Verdict::disconnect);
  EXPECT_EQ(sc_->close_cause(), CloseCause::protocol_error);
  EXPECT_EQ(sc_->flush(), Verdict::keep) << "closing: nothing new is posted";
  EXPECT_EQ(link_.window_posts.size(), 1u) << "only the bind: the invalidation was never posted";
  EXPECT_FALSE(store_.get("k2").found);
  EXPECT_LT(arena_.stats().blocks_in_use, blocks) << "the written grant's block went with its SET";
  EXPECT_TRUE(sc_->cm_done());
  for (std::size_t i = next_recv_; i < link_.recvs.size(); ++i) {
    EXPECT_EQ(sc_->on_completion(FakeLink::failed(link_.recvs[i], CompletionStatus::flushed)), Verdict::keep);
  }
  for (const auto& send : link_.sends) {  // the reply that carried the grant
    EXPECT_EQ(sc_->on_completion(FakeLink::complete(send, CompletionOpcode::send)), Verdict::keep);
  }
  EXPECT_TRUE(sc_->drained()) << "nothing waits for an invalidation that cannot complete";
}

}  // namespace
}  // namespace rkv::kv::server::grant_test
