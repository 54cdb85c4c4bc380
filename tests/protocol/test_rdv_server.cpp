// protocol suite: the rendezvous path of ServerConn through
// FakeLink + FakeRegistrar: what they post (RDMA READ/WRITE, replies,
// RELEASE), pins and their release, errors mid-transfer.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "fake_link.hpp"
#include "server_request.hpp"
#include "fake_registrar.hpp"
#include "wire_helpers.hpp"
#include "kv/server/arena.hpp"
#include "kv/server/server_conn.hpp"
#include "proto/copy.hpp"
#include "proto/decode.hpp"
#include "proto/encode.hpp"

namespace rkv::kv::server {
namespace {

using proto::Opcode;
using test::FakeLink;
using test::FakeRegistrar;
using verbs::CompletionOpcode;
using verbs::CompletionStatus;

using test::decode;
using test::pack;
using test::text;

class ServerRdv : public ::testing::Test {
 protected:
  ServerRdv() : ServerRdv(2) {}
  // Room for `transfers` rendezvous transfers and as many pinned values.
  explicit ServerRdv(std::uint32_t transfers)
      : recv_(4, 8192), send_(8, 8192), arena_(reg_, {4096, 1u << 20, 64u << 20}) {
    ServerConnConfig cfg;
    cfg.credits = 4;
    cfg.generation = 3;
    cfg.peer_recv_size = 8192;
    cfg.max_value = 1u << 20;
    cfg.max_transfers = transfers;
    cfg.max_pins = transfers;
    cfg.stats = test::stats_of(counters_, store_);
    cfg.latency = &latency_;
    cfg.gate = &gate_;
    store_.attach_large_blocks([a = &arena_](std::size_t n) { return a->allocate(n); });  // as Server::make_pd
    sc_ = std::make_unique<ServerConn>(link_, recv_, send_, store_, arena_, counters_, cfg);
    EXPECT_EQ(sc_->start(), Verdict::keep);
    sc_->on_established();
  }
  // Delivers one SEND into the next posted receive, then flushes.
  Verdict request(const std::vector<std::byte>& bytes) { return test::deliver_request(*sc_, link_, next_recv_, bytes); }
  std::vector<proto::MessageView> last_send() { return decode(link_.sends.back().bytes); }

  FakeLink link_;
  FakeRegistrar reg_;
  BufferPool recv_, send_;
  Store store_;
  ServerCounters counters_;
  kv::server::LatencyHistograms latency_;
  kv::server::ShardGate gate_;  // open: a static list's server
  Arena arena_;
  std::unique_ptr<ServerConn> sc_;
  std::size_t next_recv_ = 0;
};

TEST_F(ServerRdv, LargeSetIsOneReadThenTheReply) {
  std::vector<std::byte> client(100000);
  const proto::RdvDesc desc{0x1000, 77};
  const auto set = pack({proto::msg::set_request_rdv(5, "big", desc, client.size())});
  const std::uint64_t copied0 = proto::copied_bytes();
  ASSERT_EQ(request(set), Verdict::keep);
  ASSERT_EQ(link_.reads.size(), 1u);
  EXPECT_TRUE(link_.sends.empty()) << "the reply waits for the READ";
  const auto& rd = link_.reads[0];
  EXPECT_EQ(rd.remote_addr, 0x1000u);
  EXPECT_EQ(rd.rkey, 77u);
  ASSERT_EQ(rd.target.size(), client.size());
  EXPECT_EQ(sc_->pins(), 1u);
  EXPECT_EQ(sc_->transfers_in_flight(), 1u);
  std::memset(rd.target.data(), 'x', rd.target.size());  // the HCA's READ
  EXPECT_EQ(sc_->on_completion(FakeLink::complete(rd, CompletionOpcode::rdma_read)), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  ASSERT_EQ(link_.sends.size(), 1u);
  const auto r = last_send();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].opcode(), Opcode::set_reply);
  EXPECT_EQ(r[0].header.req_id, 5u);
  EXPECT_EQ(r[0].header.status, proto::Status::ok);
  EXPECT_EQ(r[0].header.credits, 1u) << "the request's buffer credit rides on the deferred reply";
  const auto hit = store_.get("big");
  ASSERT_TRUE(hit.found && hit.large);
  EXPECT_EQ(hit.value, std::string(client.size(), 'x'));
  EXPECT_EQ(sc_->pins(), 0u);
  EXPECT_EQ(sc_->transfers_in_flight(), 0u);
  EXPECT_EQ(counters_.rdma_reads, 1u);
  EXPECT_LT(proto::copied_bytes() - copied0, 4096u) << "the value is never copied by the CPU (the copy meter)";
}

// A large replication record (a rendezvous SET with an epoch) is READ like
// any large SET and stored if the shard's epoch is still the one it carried
// when the READ completes; a map that moved the epoch meanwhile (a new
// primary) stores nothing.
TEST_F(ServerRdv, ALargeRecordIsStoredOnlyAtItsEpoch) {
  gate_.close_to_cluster();
  gate_.serve(std::vector<proto::ShardPart>(4, proto::ShardPart{proto::ShardRole::backup, 7}));
  gate_.lease_held_until(ShardGate::Clock::now() + std::chrono::hours(1));
  std::vector<std::byte> client(100000);
  auto first = proto::msg::set_request_rdv(5, "big", {0x1000, 77}, client.size());
  first.epoch = 7;
  ASSERT_EQ(request(pack({first})), Verdict::keep);
  ASSERT_EQ(link_.reads.size(), 1u) << "admitted: the READ is posted";
  EXPECT_EQ(sc_->on_completion(FakeLink::complete(link_.reads[0], CompletionOpcode::rdma_read)), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  ASSERT_FALSE(last_send().empty());
  EXPECT_EQ(last_send().back().header.status, proto::Status::ok);
  EXPECT_TRUE(store_.get("big").found);
  EXPECT_EQ(counters_.records_applied, 1u);

  auto second = proto::msg::set_request_rdv(6, "big2", {0x1000, 77}, client.size());
  second.epoch = 7;
  ASSERT_EQ(request(pack({second})), Verdict::keep);
  ASSERT_EQ(link_.reads.size(), 2u);
  gate_.serve(std::vector<proto::ShardPart>(4, proto::ShardPart{proto::ShardRole::backup, 8}));  // a new primary
  EXPECT_EQ(sc_->on_completion(FakeLink::complete(link_.reads[1], CompletionOpcode::rdma_read)), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  EXPECT_EQ(last_send().back().header.status, proto::Status::not_owner);
  EXPECT_FALSE(store_.get("big2").found);
  EXPECT_EQ(counters_.pinned, 0u);
}

// A member whose shard moves (or whose lease may lapse) while a large SET's
// value is being READ stores nothing: the reply, when the READ completes, is
// not_owner (the client places it again), and the block goes.
TEST_F(ServerRdv, LargeSetWhoseShardMovedDuringTheReadIsNotStored) {
  gate_.close_to_cluster();
  gate_.serve(std::vector<proto::ShardPart>(4, proto::ShardPart{proto::ShardRole::primary, 1}));
  gate_.lease_held_until(ShardGate::Clock::now() + std::chrono::hours(1));
  std::vector<std::byte> client(100000);
  ASSERT_EQ(request(pack({proto::msg::set_request_rdv(5, "big", {0x1000, 77}, client.size())})), Verdict::keep);
  ASSERT_EQ(link_.reads.size(), 1u) << "admitted: the READ is posted";
  gate_.serve(std::vector<proto::ShardPart>(4));  // a new map: another member is its primary
  EXPECT_EQ(sc_->on_completion(FakeLink::complete(link_.reads[0], CompletionOpcode::rdma_read)), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  ASSERT_EQ(link_.sends.size(), 1u);
  const auto r = last_send();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].opcode(), Opcode::set_reply);
  EXPECT_EQ(r[0].header.status, proto::Status::not_owner);
  EXPECT_FALSE(store_.peek("big").found) << "stored on a member that is no longer its primary";
  EXPECT_EQ(counters_.not_owner, 1u);
  EXPECT_EQ(sc_->pins(), 0u);
  EXPECT_EQ(sc_->transfers_in_flight(), 0u);
}

TEST_F(ServerRdv, OverTheLimitIsTooLargeBeforeAllocating) {
  ASSERT_EQ(request(pack({proto::msg::set_request_rdv(1, "k", {0x1000, 1}, (1u << 20) + 1)})), Verdict::keep);
  EXPECT_TRUE(link_.reads.empty());
  EXPECT_EQ(reg_.registrations(), 0u) << "nothing allocated";
  const auto r = last_send();
  EXPECT_EQ(r[0].header.status, proto::Status::too_large);
  EXPECT_EQ(counters_.too_large, 1u);
}

// Stores a large value the way a SET does.
void put_large(Arena& arena, Store& store, std::string_view key, char fill, std::size_t n) {
  auto v = arena.allocate(n);
  std::memset(v->bytes.data(), fill, n);
  EXPECT_TRUE(store.set_large(key, v));
}

TEST_F(ServerRdv, GetWritesIntoTheOfferedBufferWithItsReplyInTheImmediate) {
  put_large(arena_, store_, "v", 'a', 10000);
  const auto sends0 = link_.sends.size();
  ASSERT_EQ(request(pack({proto::msg::get_request_rdv(9, "v", {0x5000, 55}, 16384)})), Verdict::keep);
  ASSERT_EQ(link_.writes.size(), 1u);
  EXPECT_TRUE(link_.writes[0].with_imm);
  EXPECT_EQ(link_.writes[0].remote_addr, 0x5000u);
  EXPECT_EQ(link_.writes[0].rkey, 55u);
  EXPECT_EQ(text(link_.writes[0].bytes), std::string(10000, 'a'));
  // The reply is the immediate: req 9, and the credit of the request's buffer, re-posted before it.
  EXPECT_EQ(link_.writes[0].imm, proto::pack_written_reply(9, 1));
  EXPECT_EQ(link_.sends.size(), sends0) << "no reply message";
  EXPECT_EQ(counters_.replies_sent, 0u);
  EXPECT_EQ(counters_.large_gets_written, 1u);
  EXPECT_EQ(sc_->credits_granted(), 4u + 1u) << "the immediate's credit counts as granted once posted";
  EXPECT_EQ(sc_->pins(), 1u) << "until the WRITE completes";
  put_large(arena_, store_, "v", 'b', 10000);  // overwrite during the transfer
  EXPECT_EQ(text(link_.writes[0].bytes), std::string(10000, 'a'));
  EXPECT_EQ(sc_->on_completion(FakeLink::complete(link_.writes[0], CompletionOpcode::rdma_write)), Verdict::keep);
  EXPECT_EQ(sc_->pins(), 0u);
}

// The WRITEs of a buffer's large GETs, each with its reply, leave in ONE
// post (one ibv_post_send) with no SEND; the buffer's credit rides on the
// last one, whose request was executed after the buffer went back.
TEST_F(ServerRdv, TheWritesOfABatchOfGetsLeaveInOnePost) {
  put_large(arena_, store_, "v", 'a', 10000);
  put_large(arena_, store_, "w", 'b', 20000);
  const auto posts0 = link_.posts.size();
  const auto sends0 = link_.sends.size();
  ASSERT_EQ(request(pack({proto::msg::get_request_rdv(1, "v", {0x5000, 55}, 16384),
                          proto::msg::get_request_rdv(2, "w", {0x9000, 56}, 32768)})),
            Verdict::keep);
  ASSERT_EQ(link_.posts.size(), posts0 + 1) << "one post for the batch";
  using verbs::SendOp;
  EXPECT_EQ(link_.posts.back(), (std::vector<SendOp>{SendOp::rdma_write_imm, SendOp::rdma_write_imm}));
  EXPECT_EQ(link_.sends.size(), sends0);
  EXPECT_EQ(counters_.post_calls, link_.posts.size() - posts0) << "kvd's post_calls counts them";
  ASSERT_EQ(link_.writes.size(), 2u);
  EXPECT_EQ(counters_.rdma_writes, 2u);
  EXPECT_EQ(counters_.bytes_sent, 10000u + 20000u) << "both values, as posted";
  EXPECT_EQ(text(link_.writes[1].bytes), std::string(20000, 'b'));
  EXPECT_EQ(link_.writes[0].imm, proto::pack_written_reply(1, 0));
  EXPECT_EQ(link_.writes[1].imm, proto::pack_written_reply(2, 1));
  EXPECT_EQ(sc_->pins(), 2u) << "until the WRITEs complete";
  for (const auto& w : link_.writes) {
    EXPECT_EQ(sc_->on_completion(FakeLink::complete(w, CompletionOpcode::rdma_write)), Verdict::keep);
  }
  EXPECT_EQ(sc_->pins(), 0u);
}

// A post that fails before the batch's transfers went out: the connection
// closes, and the transfers that were never posted (no completion will come
// for them) give their pins and entries back at once, so it drains.
TEST_F(ServerRdv, TransfersNeverPostedAreDroppedWhenThePostFails) {
  put_large(arena_, store_, "v", 'a', 10000);
  link_.fail_next_post = ENOMEM;
  const auto batch = pack({proto::msg::get_request_rdv(1, "v", {0x5000, 55}, 16384),
                           proto::msg::set_request_rdv(2, "big", {0x1000, 7}, 100000)});
  ASSERT_EQ(sc_->on_completion(FakeLink::deliver(link_.recvs[next_recv_++], batch)), Verdict::keep);
  EXPECT_EQ(sc_->pins(), 2u) << "the GET's value and the SET's block, queued";
  EXPECT_EQ(sc_->flush(), Verdict::disconnect);
  EXPECT_EQ(sc_->close_cause(), CloseCause::post_error);
  EXPECT_TRUE(link_.writes.empty());
  EXPECT_TRUE(link_.reads.empty());
  // kvd's counters count a transfer when it is posted, never when it is queued.
  EXPECT_EQ(counters_.rdma_writes, 0u);
  EXPECT_EQ(counters_.rdma_reads, 0u);
  EXPECT_EQ(counters_.bytes_sent, 0u) << "neither the value nor a reply went out";
  EXPECT_EQ(counters_.bytes_received, batch.size()) << "the request's SEND, not the value never READ";
  EXPECT_EQ(sc_->pins(), 0u) << "the GET's pin and the SET's block went with their entries";
  EXPECT_EQ(sc_->transfers_in_flight(), 0u);
  EXPECT_EQ(arena_.stats().blocks_in_use, 1u) << "only the stored value's block";
  EXPECT_TRUE(sc_->cm_done());
  for (std::size_t i = next_recv_; i < link_.recvs.size(); ++i) {
    EXPECT_EQ(sc_->on_completion(FakeLink::failed(link_.recvs[i], CompletionStatus::flushed)), Verdict::keep);
  }
  EXPECT_TRUE(sc_->drained()) << "nothing waits for a completion that cannot come";
}

TEST_F(ServerRdv, GetWithoutABigEnoughOfferIsPulledAndReleased) {
  put_large(arena_, store_, "v", 'c', 50000);
  ASSERT_EQ(request(pack({proto::msg::get_request_rdv(4, "v", {0x5000, 55}, 4096)})), Verdict::keep);
  EXPECT_TRUE(link_.writes.empty());
  auto r = last_send();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].header.pull());
  const auto hit = store_.get("v");
  EXPECT_EQ(r[0].rdv->addr, hit.large->addr);
  EXPECT_EQ(r[0].rdv->rkey, hit.large->rkey);
  EXPECT_EQ(sc_->pins(), 1u);
  // Overwritten while pinned: the pinned bytes stay whole.
  const std::byte* old = hit.large->bytes.data();
  put_large(arena_, store_, "v", 'd', 50000);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(old), 50000), std::string(50000, 'c'));
  // RELEASE coalesced with the next request: no reply of its own.
  const auto sends = link_.sends.size();
  ASSERT_EQ(request(pack({proto::msg::release(4), proto::msg::get_request(5, "nope")})), Verdict::keep);
  EXPECT_EQ(link_.sends.size(), sends + 1);
  r = last_send();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.req_id, 5u);
  EXPECT_EQ(sc_->pins(), 0u);
  EXPECT_EQ(counters_.releases, 1u);
  // A RELEASE of nothing is a protocol error.
  EXPECT_EQ(request(pack({proto::msg::release(4)})), Verdict::disconnect);
  EXPECT_EQ(sc_->close_cause(), CloseCause::protocol_error);
}

TEST_F(ServerRdv, FailedReadReleasesEverything) {
  ASSERT_EQ(request(pack({proto::msg::set_request_rdv(5, "big", {0x1000, 7}, 100000)})), Verdict::keep);
  ASSERT_EQ(arena_.stats().blocks_in_use, 1u);
  EXPECT_EQ(sc_->on_completion(FakeLink::failed(link_.reads[0], CompletionStatus::remote_access_error)),
            Verdict::disconnect);
  EXPECT_EQ(sc_->pins(), 0u);
  EXPECT_EQ(sc_->transfers_in_flight(), 0u);
  EXPECT_EQ(arena_.stats().blocks_in_use, 0u);
  EXPECT_FALSE(store_.get("big").found);
}

TEST_F(ServerRdv, DisconnectMidTransferFreesAtDestruction) {
  put_large(arena_, store_, "v", 'a', 10000);
  ASSERT_EQ(request(pack({proto::msg::set_request_rdv(1, "big", {0x1000, 7}, 100000),
                          proto::msg::get_request(2, "v")})),
            Verdict::keep);
  EXPECT_EQ(sc_->pins(), 2u);  // the SET's block and the pulled value
  EXPECT_EQ(sc_->begin_draining(CloseCause::peer_left, "peer left"), Verdict::disconnect);
  EXPECT_TRUE(sc_->cm_done());
  EXPECT_FALSE(sc_->drained()) << "the READ has not come back";
  // Flushed completions after the QP went to error.
  for (std::size_t i = next_recv_; i < link_.recvs.size(); ++i) {
    EXPECT_EQ(sc_->on_completion(FakeLink::failed(link_.recvs[i], CompletionStatus::flushed)), Verdict::keep);
  }
  EXPECT_EQ(sc_->on_completion(FakeLink::failed(link_.reads[0], CompletionStatus::flushed)), Verdict::keep);
  for (const auto& s : link_.sends) {
    EXPECT_EQ(sc_->on_completion(FakeLink::complete(s, CompletionOpcode::send)), Verdict::keep);
  }
  EXPECT_TRUE(sc_->drained());
  EXPECT_EQ(sc_->transfers_in_flight(), 0u);
  EXPECT_EQ(sc_->pins(), 0u) << "the pull went when the QP went to error (cm_done)";
  sc_.reset();
  EXPECT_EQ(store_.get("v").large.use_count(), 2) << "only the Store (and this lookup) hold it";
}

// DEL of a large value a transfer still reads: the key is gone at once, the
// block stays whole (not back in the arena) until the WRITE completes / the
// client's RELEASE arrives, as on an overwrite.
TEST_F(ServerRdv, DelOfAValueInTransferFreesItOnlyWhenTheTransferEnds) {
  put_large(arena_, store_, "w", 'w', 10000);
  put_large(arena_, store_, "p", 'p', 50000);
  ASSERT_EQ(request(pack({proto::msg::get_request_rdv(1, "w", {0x5000, 55}, 16384),  // pushed by a WRITE
                          proto::msg::get_request(2, "p"),                           // pulled by the client
                          proto::msg::del_request(3, "w"), proto::msg::del_request(4, "p")})),
            Verdict::keep);
  auto r = last_send();
  ASSERT_EQ(r.size(), 3u) << "the WRITTEN GET's reply is its WRITE's immediate";
  EXPECT_EQ(r[1].opcode(), Opcode::del_reply);
  EXPECT_TRUE(r[1].found());
  EXPECT_TRUE(r[2].found());
  EXPECT_FALSE(store_.get("w").found);
  EXPECT_FALSE(store_.get("p").found);
  EXPECT_EQ(sc_->pins(), 2u);
  EXPECT_EQ(arena_.stats().blocks_in_use, 2u) << "neither block may be reused while a transfer reads it";
  EXPECT_EQ(text(link_.writes[0].bytes), std::string(10000, 'w'));
  const auto* pulled = reinterpret_cast<const char*>(r[0].rdv->addr);
  EXPECT_EQ(std::string(pulled, 50000), std::string(50000, 'p'));
  // A new value allocated meanwhile gets other memory.
  put_large(arena_, store_, "x", 'x', 10000);
  EXPECT_EQ(text(link_.writes[0].bytes), std::string(10000, 'w'));
  EXPECT_EQ(std::string(pulled, 50000), std::string(50000, 'p'));
  EXPECT_EQ(sc_->on_completion(FakeLink::complete(link_.writes[0], CompletionOpcode::rdma_write)), Verdict::keep);
  EXPECT_EQ(arena_.stats().blocks_in_use, 2u) << "the WRITE's block went back; the pulled one and x remain";
  ASSERT_EQ(request(pack({proto::msg::release(2)})), Verdict::keep);
  EXPECT_EQ(sc_->pins(), 0u);
  EXPECT_EQ(arena_.stats().blocks_in_use, 1u) << "only x";
  EXPECT_EQ(counters_.dels, 2u);
  EXPECT_EQ(counters_.del_hits, 2u);
}

// Large GETs and SETs in one SEND each. The GETs' WRITEs (their replies ride
// in the immediates: a completion only drops a pin) leave in one chain with
// only every 16th and the last signaled, and a signaled completion also
// completes the unsignaled WRITEs posted before it (the send queue completes
// in order): two completions drop twenty pins, and one that comes again for
// a WRITE already completed that way is stale. The SETs' READs are each
// signaled: a READ's completion installs and answers its SET at once.
// Room for 32 transfers: chains of 20 WRITEs.
class ServerRdvSignaling : public ServerRdv {
 protected:
  ServerRdvSignaling() : ServerRdv(32) {}
};

TEST_F(ServerRdvSignaling, WritesAreSignaledByIntervalAndEveryReadIsSignaled) {
  constexpr std::size_t kGets = 20;
  std::vector<proto::MessageSpec> gets;
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < kGets; ++i) keys.push_back("k" + std::to_string(i));
  for (std::size_t i = 0; i < kGets; ++i) {
    put_large(arena_, store_, keys[i], static_cast<char>('a' + i), 5000);
    gets.push_back(proto::msg::get_request_rdv(static_cast<std::uint32_t>(i + 1), keys[i],
                                               {0x1000 + 0x10000 * i, 77}, 8192));
  }
  ASSERT_EQ(request(pack(gets)), Verdict::keep);
  ASSERT_EQ(link_.writes.size(), kGets);
  for (std::size_t i = 0; i < kGets; ++i) {
    EXPECT_EQ(link_.writes[i].signaled, i == 15 || i == kGets - 1) << "WRITE " << i;
    EXPECT_EQ(text(link_.writes[i].bytes), std::string(5000, static_cast<char>('a' + i)));
  }
  EXPECT_EQ(sc_->pins(), kGets);
  ASSERT_EQ(sc_->on_completion(FakeLink::complete(link_.writes[15], CompletionOpcode::rdma_write)), Verdict::keep);
  EXPECT_EQ(sc_->pins(), kGets - 16) << "the 16th WRITE's completion completes the 15 before it";
  const auto stale0 = counters_.stale_completions;
  ASSERT_EQ(sc_->on_completion(FakeLink::complete(link_.writes[3], CompletionOpcode::rdma_write)), Verdict::keep);
  EXPECT_EQ(counters_.stale_completions, stale0 + 1) << "again for a WRITE already complete: stale";
  ASSERT_EQ(sc_->on_completion(FakeLink::complete(link_.writes[kGets - 1], CompletionOpcode::rdma_write)),
            Verdict::keep);
  EXPECT_EQ(sc_->pins(), 0u);
  EXPECT_EQ(sc_->transfers_in_flight(), 0u);

  std::vector<proto::MessageSpec> sets;
  for (std::size_t i = 0; i < 3; ++i) {
    sets.push_back(proto::msg::set_request_rdv(static_cast<std::uint32_t>(100 + i), keys[i],
                                               {0x1000 + 0x10000 * i, 77}, 4096));
  }
  ASSERT_EQ(request(pack(sets)), Verdict::keep);
  ASSERT_EQ(link_.reads.size(), 3u);
  for (const auto& r : link_.reads) EXPECT_TRUE(r.signaled) << "every READ";
  std::memset(link_.reads[0].target.data(), 'z', link_.reads[0].target.size());
  ASSERT_EQ(sc_->on_completion(FakeLink::complete(link_.reads[0], CompletionOpcode::rdma_read)), Verdict::keep);
  ASSERT_EQ(sc_->flush(), Verdict::keep);
  const auto r = decode(link_.sends.back().bytes);
  ASSERT_EQ(r.size(), 1u) << "the first SET is answered on its own READ's completion";
  EXPECT_EQ(r[0].header.req_id, 100u);
  EXPECT_EQ(store_.get(keys[0]).value, std::string(4096, 'z'));
  for (std::size_t i = 1; i < 3; ++i) {
    ASSERT_EQ(sc_->on_completion(FakeLink::complete(link_.reads[i], CompletionOpcode::rdma_read)), Verdict::keep);
  }

  // A failed WRITE (the last of its chain): the connection fails, and the
  // unsignaled WRITEs before it close with it (none trusted), so every pin
  // goes and nothing is left in flight to wait for.
  std::vector<proto::MessageSpec> more;
  for (std::size_t i = 0; i < 3; ++i) {
    more.push_back(proto::msg::get_request_rdv(static_cast<std::uint32_t>(200 + i), keys[10 + i],
                                               {0x1000 + 0x10000 * i, 77}, 8192));
  }
  ASSERT_EQ(request(pack(more)), Verdict::keep);
  ASSERT_EQ(link_.writes.size(), kGets + 3);
  EXPECT_FALSE(link_.writes[kGets].signaled);
  EXPECT_TRUE(link_.writes[kGets + 2].signaled);
  EXPECT_EQ(sc_->pins(), 3u);
  EXPECT_NE(sc_->on_completion(FakeLink::failed(link_.writes[kGets + 2], CompletionStatus::remote_access_error)),
            Verdict::keep);
  EXPECT_EQ(sc_->pins(), 0u);
  EXPECT_EQ(sc_->transfers_in_flight(), 0u);
  EXPECT_EQ(counters_.transfers_aborted, 3u);
}

// A GET's client has its reply when the WRITE lands, and may ask again
// before kvd sees the signaled WRITE after it complete: up to 15 more large
// GETs than max_transfers are still pushed (one WRITE, the reply in its
// immediate) rather than pulled (a reply, the client's READ, a RELEASE);
// the one after those is pulled.
TEST_F(ServerRdvSignaling, GetsBeyondMaxTransfersArePushedWhileTheLandedWritesAreUnseen) {
  const std::size_t room = ServerConn::transfer_room(32);
  ASSERT_EQ(room, 32u + 15u);
  std::vector<std::string> keys;
  for (std::size_t i = 0; i <= room; ++i) keys.push_back("k" + std::to_string(i));
  std::vector<proto::MessageSpec> gets;
  for (std::size_t i = 0; i <= room; ++i) {
    put_large(arena_, store_, keys[i], 'g', 5000);
    gets.push_back(proto::msg::get_request_rdv(static_cast<std::uint32_t>(i + 1), keys[i], {0x1000, 77}, 8192));
  }
  ASSERT_EQ(request(pack(gets)), Verdict::keep);
  EXPECT_EQ(link_.writes.size(), room) << "pushed up to the room";
  EXPECT_EQ(sc_->transfers_in_flight(), room);
  EXPECT_EQ(sc_->pulls_pinned(), 1u) << "the one beyond it is pulled";
  ASSERT_FALSE(link_.sends.empty());
  const auto r = last_send();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.req_id, room + 1) << "its reply (a descriptor to READ) is the only SEND";
  ASSERT_TRUE(r[0].rdv.has_value());
  ASSERT_EQ(sc_->on_completion(FakeLink::complete(link_.writes.back(), CompletionOpcode::rdma_write)),
            Verdict::keep);
  EXPECT_EQ(sc_->transfers_in_flight(), 0u) << "the last one's completion completes them all";
}

}  // namespace
}  // namespace rkv::kv::server
