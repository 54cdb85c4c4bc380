// protocol suite: ServerConn with a Durability (FakeDurability): deferred SET
// and DEL replies and their credits, io_error replies, the rendezvous SET logged
// straight from its arena block, a connection that goes away while SETs wait.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fake_durability.hpp"
#include "fake_link.hpp"
#include "server_request.hpp"
#include "fake_registrar.hpp"
#include "kv/server/arena.hpp"
#include "kv/server/server_conn.hpp"
#include "wire_helpers.hpp"

namespace rkv::kv::server {
namespace {

using store::DurableAck;

using proto::Opcode;
using test::FakeDurability;
using test::FakeLink;
using test::FakeRegistrar;
using verbs::CompletionOpcode;

using test::decode;
using test::pack;

constexpr std::uint64_t kToken = 0x0000000900000002ull;

class ServerDurable : public ::testing::Test {
 protected:
  ServerDurable() : recv_(4, 8192), send_(8, 8192), arena_(reg_, {4096, 1u << 20, 64u << 20}) {
    ServerConnConfig cfg;
    cfg.credits = 4;
    cfg.generation = 3;
    cfg.peer_recv_size = 8192;
    cfg.max_value = 1u << 20;
    cfg.max_transfers = 2;
    cfg.max_pins = 2;
    cfg.token = kToken;
    cfg.stats = test::stats_of(counters_, store_);
    cfg.latency = &latency_;
    cfg.gate = &gate_;
    store_.attach_large_blocks([a = &arena_](std::size_t n) { return a->allocate(n); });  // as Server::make_pd
    sc_ = std::make_unique<ServerConn>(link_, recv_, send_, store_, arena_, counters_, cfg, &dur_);
    EXPECT_EQ(sc_->start(), Verdict::keep);
    sc_->on_established();
  }
  Verdict request(const std::vector<std::byte>& bytes) { return test::deliver_request(*sc_, link_, next_recv_, bytes); }
  std::vector<proto::MessageView> replies_since(std::size_t sends) { return test::replies_since(link_, sends); }
  static std::span<const std::byte> b(const std::string& s) { return proto::as_bytes(s); }

  FakeLink link_;
  FakeRegistrar reg_;
  FakeDurability dur_;
  BufferPool recv_, send_;
  Store store_;
  ServerCounters counters_;
  kv::server::LatencyHistograms latency_;
  kv::server::ShardGate gate_;  // open: a static list's server
  Arena arena_;
  std::unique_ptr<ServerConn> sc_;
  std::size_t next_recv_ = 0;
};

TEST_F(ServerDurable, AlwaysDefersTheReplyAndItsCreditRidesOnTheNextReply) {
  const std::string v = "durable value";
  ASSERT_EQ(request(pack({proto::msg::set_request(1, "k", b(v))})), Verdict::keep);
  EXPECT_TRUE(link_.sends.empty()) << "no reply before the record is durable";
  ASSERT_EQ(dur_.records.size(), 1u);
  EXPECT_EQ(dur_.records[0].key, "k");
  EXPECT_EQ(dur_.records[0].value, v);
  EXPECT_EQ(dur_.records[0].token, kToken);
  EXPECT_FALSE(dur_.records[0].large);
  EXPECT_EQ(sc_->durable_waits(), 1u);
  EXPECT_EQ(sc_->durable_waits(), 1u);
  EXPECT_EQ(store_.get("k").value, v) << "applied at once: a GET may see a value not yet durable";
  // A GET meanwhile is answered at once and returns both buffers' credits.
  ASSERT_EQ(request(pack({proto::msg::get_request(2, "k")})), Verdict::keep);
  auto r = replies_since(0);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].opcode(), Opcode::get_reply);
  EXPECT_EQ(r[0].header.credits, 2u);
  // Durable: the SET's reply goes out.
  const std::size_t before = link_.sends.size();
  ASSERT_EQ(sc_->on_durable(dur_.records[0].wait, proto::Status::ok), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  r = replies_since(before);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].opcode(), Opcode::set_reply);
  EXPECT_EQ(r[0].header.req_id, 1u);
  EXPECT_EQ(r[0].header.status, proto::Status::ok);
  EXPECT_EQ(r[0].header.credits, 0u);
  EXPECT_EQ(sc_->durable_waits(), 0u);
}

TEST_F(ServerDurable, OutOfOrderCompletionsAnswerTheRightRequests) {
  ASSERT_EQ(request(pack({proto::msg::set_request(7, "a", b("1")), proto::msg::set_request(8, "b", b("2"))})),
            Verdict::keep);
  EXPECT_TRUE(link_.sends.empty());
  ASSERT_EQ(dur_.records.size(), 2u);
  EXPECT_NE(dur_.records[0].wait, dur_.records[1].wait);
  ASSERT_EQ(sc_->on_durable(dur_.records[1].wait, proto::Status::io_error), Verdict::keep);  // disk error for one (req 8)
  ASSERT_EQ(sc_->on_durable(dur_.records[0].wait, proto::Status::ok), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  const auto r = replies_since(0);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].header.req_id, 8u);
  EXPECT_EQ(r[0].header.status, proto::Status::io_error);
  EXPECT_EQ(r[0].header.credits, 1u);
  EXPECT_EQ(r[1].header.req_id, 7u);
  EXPECT_EQ(r[1].header.status, proto::Status::ok);
  EXPECT_EQ(counters_.io_errors, 1u);
  EXPECT_EQ(counters_.error_replies, 1u);
  EXPECT_EQ(sc_->on_durable(dur_.records[0].wait, proto::Status::ok), Verdict::keep) << "a late duplicate is ignored";
  EXPECT_EQ(counters_.stale_completions, 1u);
}

TEST_F(ServerDurable, AWriteWhoseShardMovedIsAnsweredMoved) {
  // Replication's failure (the shard moved before every backup had the
  // record) reaches the client as `moved`, which it may place again; a
  // disk error stays io_error. A CALL's reply takes its first failure.
  ASSERT_EQ(request(pack({proto::msg::set_request(7, "a", b("1")), proto::msg::set_request(8, "b", b("2"))})),
            Verdict::keep);
  ASSERT_EQ(dur_.records.size(), 2u);
  ASSERT_EQ(sc_->on_durable(dur_.records[0].wait, proto::Status::moved), Verdict::keep);
  ASSERT_EQ(sc_->on_durable(dur_.records[1].wait, proto::Status::ok), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  const auto r = replies_since(0);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].header.req_id, 7u);
  EXPECT_EQ(r[0].header.status, proto::Status::moved);
  EXPECT_EQ(r[1].header.req_id, 8u);
  EXPECT_EQ(r[1].header.status, proto::Status::ok);
  EXPECT_EQ(counters_.io_errors, 0u) << "moved is not a disk error";
  EXPECT_EQ(counters_.error_replies, 1u);
}

TEST_F(ServerDurable, NowRepliesAtOnceAndFailedIsIoError) {
  dur_.answer = DurableAck::now;
  ASSERT_EQ(request(pack({proto::msg::set_request(1, "k", b("v"))})), Verdict::keep);
  dur_.answer = DurableAck::failed;
  ASSERT_EQ(request(pack({proto::msg::set_request(2, "k", b("w"))})), Verdict::keep);
  const auto r = replies_since(0);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].header.status, proto::Status::ok);
  EXPECT_EQ(r[1].header.status, proto::Status::io_error);
  EXPECT_EQ(r[1].opcode(), Opcode::set_reply);
  EXPECT_EQ(sc_->durable_waits(), 0u);
  EXPECT_EQ(proto::to_string(proto::Status::io_error), "I/O error");
  EXPECT_EQ(proto::status_from_wire(6), proto::Status::io_error);
}

TEST_F(ServerDurable, LargeSetIsLoggedStraightFromItsArenaBlock) {
  std::vector<std::byte> client(100000);
  ASSERT_EQ(request(pack({proto::msg::set_request_rdv(5, "big", {0x1000, 77}, client.size())})), Verdict::keep);
  ASSERT_EQ(link_.reads.size(), 1u);
  EXPECT_TRUE(dur_.records.empty()) << "nothing to log before the READ landed";
  const auto& rd = link_.reads[0];
  std::memset(rd.target.data(), 'x', rd.target.size());
  EXPECT_EQ(sc_->on_completion(FakeLink::complete(rd, CompletionOpcode::rdma_read)), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  EXPECT_TRUE(link_.sends.empty()) << "the reply waits for the log";
  ASSERT_EQ(dur_.records.size(), 1u);
  const auto hit = store_.get("big");
  ASSERT_TRUE(hit.large);
  EXPECT_EQ(dur_.records[0].large, hit.large) << "the log pins the block";
  EXPECT_EQ(dur_.records[0].value_ptr, hit.value.data()) << "no copy: the value is read from the arena";
  ASSERT_EQ(sc_->on_durable(dur_.records[0].wait, proto::Status::ok), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  const auto r = replies_since(0);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.req_id, 5u);
  EXPECT_EQ(r[0].header.status, proto::Status::ok);
  EXPECT_EQ(r[0].header.credits, 1u);
}

TEST_F(ServerDurable, ConnectionGoingAwayWhileSetsWaitLeavesNothingBehind) {
  ASSERT_EQ(request(pack({proto::msg::set_request(1, "a", b("1")), proto::msg::set_request(2, "b", b("2"))})),
            Verdict::keep);
  EXPECT_EQ(sc_->durable_waits(), 2u);
  EXPECT_EQ(sc_->begin_draining(CloseCause::peer_left, "peer left"), Verdict::disconnect);
  EXPECT_EQ(sc_->on_durable(dur_.records[0].wait, proto::Status::ok), Verdict::keep);  // nothing is sent any more
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  EXPECT_TRUE(link_.sends.empty());
  EXPECT_EQ(sc_->durable_waits(), 0u) << "the waiting replies went with the close";
  sc_.reset();
}

// DEL: erased at once, recorded as a tombstone (found or not), and with
// `later` its reply waits for the record exactly like a SET's: DEL_REPLY
// with FOUND as the erase found it, or io_error.
TEST_F(ServerDurable, DelIsRecordedAndItsReplyWaitsForTheLog) {
  dur_.answer = DurableAck::now;
  ASSERT_EQ(request(pack({proto::msg::set_request(1, "a", b("1")), proto::msg::set_request(2, "b", b("2"))})),
            Verdict::keep);
  dur_.answer = DurableAck::later;
  const std::size_t before = link_.sends.size();
  ASSERT_EQ(request(pack({proto::msg::del_request(3, "a"), proto::msg::del_request(4, "missing"),
                          proto::msg::del_request(5, "b")})),
            Verdict::keep);
  EXPECT_EQ(link_.sends.size(), before) << "no DEL_REPLY before its tombstone is durable";
  ASSERT_EQ(dur_.records.size(), 5u);
  for (std::size_t i = 2; i < 5; ++i) {
    EXPECT_TRUE(dur_.records[i].del);
    EXPECT_EQ(dur_.records[i].token, kToken);
    EXPECT_TRUE(dur_.records[i].value.empty());
  }
  EXPECT_EQ(dur_.records[2].key, "a");
  EXPECT_EQ(dur_.records[3].key, "missing") << "a DEL of a missing key is logged too";
  EXPECT_FALSE(store_.get("a").found) << "applied at once";
  EXPECT_FALSE(store_.get("b").found);
  EXPECT_EQ(sc_->durable_waits(), 3u);
  ASSERT_EQ(sc_->on_durable(dur_.records[3].wait, proto::Status::ok), Verdict::keep);   // req 4
  ASSERT_EQ(sc_->on_durable(dur_.records[2].wait, proto::Status::ok), Verdict::keep);   // req 3
  ASSERT_EQ(sc_->on_durable(dur_.records[4].wait, proto::Status::io_error), Verdict::keep);  // req 5: the disk failed under this one
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  const auto r = replies_since(before);
  ASSERT_EQ(r.size(), 3u);
  for (const auto& m : r) EXPECT_EQ(m.opcode(), Opcode::del_reply);
  EXPECT_EQ(r[0].header.req_id, 4u);
  EXPECT_EQ(r[0].header.status, proto::Status::ok);
  EXPECT_FALSE(r[0].found());
  EXPECT_EQ(r[0].header.credits, 1u) << "the DEL buffer's credit rides on the first reply out";
  EXPECT_EQ(r[1].header.req_id, 3u);
  EXPECT_TRUE(r[1].found());
  EXPECT_EQ(r[2].header.req_id, 5u);
  EXPECT_EQ(r[2].header.status, proto::Status::io_error);
  EXPECT_FALSE(r[2].found()) << "an error reply is bare";
  EXPECT_EQ(sc_->durable_waits(), 0u);
  EXPECT_EQ(counters_.io_errors, 1u);
  EXPECT_EQ(counters_.dels, 3u);
  EXPECT_EQ(counters_.del_hits, 2u);
  // A SET deferred after those is still answered with a SET_REPLY.
  ASSERT_EQ(request(pack({proto::msg::set_request(3, "a", b("again"))})), Verdict::keep);
  ASSERT_EQ(sc_->on_durable(dur_.records[5].wait, proto::Status::ok), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  EXPECT_EQ(replies_since(before + 1).back().opcode(), Opcode::set_reply);
}

TEST_F(ServerDurable, DelNowAndFailed) {
  EXPECT_TRUE(store_.set("k", "v"));
  dur_.answer = DurableAck::now;
  ASSERT_EQ(request(pack({proto::msg::del_request(1, "k")})), Verdict::keep);
  dur_.answer = DurableAck::failed;
  EXPECT_TRUE(store_.set("k", "v"));
  ASSERT_EQ(request(pack({proto::msg::del_request(2, "k")})), Verdict::keep);
  const auto r = replies_since(0);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].opcode(), Opcode::del_reply);
  EXPECT_EQ(r[0].header.status, proto::Status::ok);
  EXPECT_TRUE(r[0].found());
  EXPECT_EQ(r[1].opcode(), Opcode::del_reply);
  EXPECT_EQ(r[1].header.status, proto::Status::io_error);
  EXPECT_EQ(sc_->durable_waits(), 0u);
  EXPECT_EQ(counters_.io_errors, 1u);
  EXPECT_EQ(sc_->on_durable(dur_.records[0].wait, proto::Status::ok), Verdict::keep) << "nothing waits: ignored";
  EXPECT_EQ(counters_.stale_completions, 1u);
}

// Each waiting request has its own entry: a req_id the client reuses while
// the first DEL still waits confuses nothing on the server.
TEST_F(ServerDurable, TwoDelsWithOneReqIdEachGetTheirReply) {
  ASSERT_EQ(request(pack({proto::msg::del_request(7, "a")})), Verdict::keep);
  ASSERT_EQ(request(pack({proto::msg::del_request(7, "b")})), Verdict::keep);
  ASSERT_EQ(dur_.records.size(), 2u);
  ASSERT_EQ(sc_->on_durable(dur_.records[1].wait, proto::Status::ok), Verdict::keep);
  ASSERT_EQ(sc_->on_durable(dur_.records[0].wait, proto::Status::ok), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  const auto r = replies_since(0);
  ASSERT_EQ(r.size(), 2u);
  for (const auto& m : r) {
    EXPECT_EQ(m.opcode(), Opcode::del_reply);
    EXPECT_EQ(m.header.req_id, 7u);
  }
  EXPECT_EQ(sc_->durable_waits(), 0u);
  EXPECT_EQ(sc_->state(), ConnState::established);
}

TEST_F(ServerDurable, TtlsAreRecordedAbsoluteAndExpireWaitsForTheLog) {
  dur_.answer = DurableAck::now;
  const std::string v = "v";
  auto set = proto::msg::set_request(1, "k", b(v));
  set.ttl = 60'000;
  const store::ExpireAt before = store_.now();
  ASSERT_EQ(request(pack({set, proto::msg::set_request(2, "p", b(v))})), Verdict::keep);
  ASSERT_EQ(dur_.records.size(), 2u);
  EXPECT_GE(dur_.records[0].expire_at, before + 60'000) << "the absolute time, as the Store holds it";
  EXPECT_EQ(dur_.records[0].expire_at, store_.peek("k").expire_at);
  EXPECT_EQ(dur_.records[1].expire_at, store::kNoExpiry);
  dur_.answer = DurableAck::later;
  const std::size_t sends = link_.sends.size();
  ASSERT_EQ(request(pack({proto::msg::expire_request(3, "p", 1000), proto::msg::expire_request(4, "nope", 5)})),
            Verdict::keep);
  ASSERT_EQ(dur_.records.size(), 3u) << "an EXPIRE of no key changes nothing and logs nothing";
  EXPECT_TRUE(dur_.records[2].expire);
  EXPECT_EQ(dur_.records[2].key, "p");
  EXPECT_EQ(dur_.records[2].expire_at, store_.peek("p").expire_at);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  auto r = replies_since(sends);
  ASSERT_EQ(r.size(), 1u) << "the missing key's answer goes now, the other waits for its record";
  EXPECT_EQ(r[0].header.req_id, 4u);
  ASSERT_EQ(sc_->on_durable(dur_.records[2].wait, proto::Status::ok), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  r = replies_since(sends);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].header.req_id, 3u);
  EXPECT_TRUE(r[1].found());
}

}  // namespace
}  // namespace rkv::kv::server
