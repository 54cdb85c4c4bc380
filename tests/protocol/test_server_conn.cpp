// protocol suite: kv::server::ServerConn driven through FakeLink (no device). Covers
// replies, coalescing, re-posting and credit return, send-buffer
// back-pressure, stale completions, the eager size boundary, the shard gate,
// time to live and the teardown accounting. Malformed input and credit
// overrun: test_server_conn_refusals.cpp; elastic credits and pools:
// test_elastic_credits.cpp.
#include "server_conn_fixture.hpp"

namespace rkv::kv::server {
namespace {

using namespace conn_test;  // NOLINT(google-build-using-namespace)

TEST_F(ServerConnTest, SetThenGet) {
  const std::string value = "world";
  ASSERT_EQ(deliver(pack({proto::msg::set_request(1, "hello", bytes_of(value))})), Verdict::keep);
  auto r = flush_replies();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.opcode, Opcode::set_reply);
  EXPECT_EQ(r[0].header.status, Status::ok);
  EXPECT_EQ(r[0].header.req_id, 1u);
  EXPECT_EQ(store_.get("hello").value, "world");

  ASSERT_EQ(deliver(pack({proto::msg::get_request(2, "hello")})), Verdict::keep);
  r = flush_replies();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.opcode, Opcode::get_reply);
  EXPECT_TRUE(r[0].header.found());
  EXPECT_EQ(r[0].header.req_id, 2u);
  EXPECT_EQ(r[0].value, "world");
  EXPECT_EQ(counters_.sets, 1u);
  EXPECT_EQ(counters_.gets, 1u);
  EXPECT_EQ(counters_.get_hits, 1u);
  EXPECT_EQ(conn_->state(), ConnState::established);
}

// A cluster member's gate (shard_gate.hpp): before a map nothing keyed is
// answered but not_owner; with a map, only its shards; past its lease,
// reads but no writes. Nothing refused touches the store; STATS is always
// answered.
TEST_F(ServerConnTest, TheShardGateRefusesOtherShardsAndWritesPastTheLease) {
  const std::string value = "v";
  const auto v = bytes_of(value);
  ASSERT_TRUE(store_.set("old", "x"));
  gate_.close_to_cluster();
  EXPECT_EQ(status_of(proto::msg::set_request(1, "k", v)), Status::not_owner);
  EXPECT_EQ(status_of(proto::msg::get_request(2, "old")), Status::not_owner);
  EXPECT_EQ(status_of(proto::msg::del_request(3, "old")), Status::not_owner);
  EXPECT_EQ(status_of(proto::msg::expire_request(4, "old", 1000)), Status::not_owner);
  EXPECT_EQ(status_of(proto::msg::ttl_request(5, "old")), Status::not_owner);
  EXPECT_EQ(status_of(proto::msg::stats_request(6)), Status::ok);
  EXPECT_EQ(counters_.not_owner, 5u);
  EXPECT_EQ(counters_.sets + counters_.gets + counters_.dels, 0u);
  EXPECT_FALSE(store_.get("k").found);
  EXPECT_TRUE(store_.get("old").found);

  // A map that makes it the primary of every shard but "k"'s, and a live lease.
  std::vector<proto::ShardPart> mine(64, proto::ShardPart{proto::ShardRole::primary, 1});
  mine[proto::shard_of("k", 64)] = {};
  std::string other = "a";
  while (proto::shard_of(other, 64) == proto::shard_of("k", 64)) other += "a";
  gate_.serve(mine);
  gate_.lease_held_until(ShardGate::Clock::now() + std::chrono::hours(1));
  EXPECT_EQ(gate_.served(), 63u);
  EXPECT_EQ(status_of(proto::msg::set_request(7, "k", v)), Status::not_owner);
  EXPECT_EQ(status_of(proto::msg::set_request(8, other, v)), Status::ok);
  EXPECT_EQ(status_of(proto::msg::get_request(9, other)), Status::ok);
  EXPECT_FALSE(store_.get("k").found);

  // The lease may have lapsed: reads still, writes not.
  gate_.lease_held_until(ShardGate::Clock::now() - std::chrono::milliseconds(1));
  EXPECT_EQ(status_of(proto::msg::get_request(10, other)), Status::ok);
  EXPECT_EQ(status_of(proto::msg::ttl_request(11, other)), Status::ok);
  EXPECT_EQ(status_of(proto::msg::set_request(12, other, v)), Status::not_owner);
  EXPECT_EQ(status_of(proto::msg::del_request(13, other)), Status::not_owner);
  EXPECT_EQ(status_of(proto::msg::expire_request(14, other, 1000)), Status::not_owner);
  EXPECT_TRUE(store_.get(other).found) << "the refused DEL removed nothing";
  EXPECT_EQ(counters_.not_owner, 9u);
  EXPECT_EQ(conn_->state(), ConnState::established);
}

// Replication records (wire.hpp kFlagEpoch, shard_gate.hpp): a backup of a
// shard applies the records of the shard's epoch in its map, and refuses
// those of an older epoch (a replaced primary) or a newer one (a map it has
// not seen), a client's own requests for that shard, and records of shards
// it is the primary of or has no part in. An open gate (a static list's
// server) takes no record.
TEST_F(ServerConnTest, ABackupAppliesOnlyRecordsOfTheShardsEpoch) {
  const std::string value = "v";
  const auto v = bytes_of(value);
  const auto record = [](proto::MessageSpec m, std::uint64_t epoch) {
    m.epoch = epoch;
    return m;
  };
  // Three keys of three shards: backed at epoch 5, primary, none.
  const std::string b = "b";
  std::string p = "p";
  while (proto::shard_of(p, 64) == proto::shard_of(b, 64)) p += "p";
  std::string n = "n";
  while (proto::shard_of(n, 64) == proto::shard_of(b, 64) || proto::shard_of(n, 64) == proto::shard_of(p, 64)) n += "n";
  EXPECT_EQ(status_of(record(proto::msg::set_request(1, b, v), 5)), Status::not_owner) << "an open gate takes no record";

  gate_.close_to_cluster();
  std::vector<proto::ShardPart> parts(64);
  parts[proto::shard_of(b, 64)] = {proto::ShardRole::backup, 5};
  parts[proto::shard_of(p, 64)] = {proto::ShardRole::primary, 3};
  gate_.serve(parts);
  gate_.lease_held_until(ShardGate::Clock::now() + std::chrono::hours(1));
  EXPECT_EQ(gate_.backed(), 1u);
  EXPECT_EQ(status_of(record(proto::msg::set_request(2, b, v), 5)), Status::ok);
  EXPECT_TRUE(store_.get(b).found);
  EXPECT_EQ(status_of(record(proto::msg::set_request(3, b, v), 4)), Status::not_owner) << "a replaced primary's";
  EXPECT_EQ(status_of(record(proto::msg::del_request(4, b), 6)), Status::not_owner) << "a map not seen yet";
  EXPECT_EQ(status_of(proto::msg::del_request(5, b)), Status::not_owner) << "a client's write to a backup";
  EXPECT_EQ(status_of(proto::msg::get_request(6, b)), Status::not_owner) << "a client's read of a backup";
  EXPECT_TRUE(store_.get(b).found) << "nothing refused removed it";
  EXPECT_EQ(status_of(record(proto::msg::set_request(7, p, v), 3)), Status::not_owner) << "a primary sends records";
  EXPECT_EQ(status_of(record(proto::msg::set_request(8, n, v), 5)), Status::not_owner) << "no part in it";
  EXPECT_EQ(status_of(record(proto::msg::expire_request(9, b, 60000), 5)), Status::ok);
  EXPECT_GT(store_.ttl(b).value_or(-1), 0);
  EXPECT_EQ(status_of(record(proto::msg::del_request(10, b), 5)), Status::ok);
  EXPECT_FALSE(store_.get(b).found);
  EXPECT_FALSE(store_.get(p).found);
  EXPECT_FALSE(store_.get(n).found);
  EXPECT_EQ(counters_.records_applied, 3u);
  EXPECT_EQ(counters_.not_owner, 7u);
  // Past its lease a backup applies nothing either.
  gate_.lease_held_until(ShardGate::Clock::now() - std::chrono::milliseconds(1));
  EXPECT_EQ(status_of(record(proto::msg::set_request(11, b, v), 5)), Status::not_owner);
  EXPECT_FALSE(store_.get(b).found);
  EXPECT_EQ(conn_->state(), ConnState::established);
}

// Reads from backups (wire.hpp kFlagBackupRead): a GET that says a backup
// may answer is answered by a backup the map lists in the shard's in_sync,
// counted in backup_gets; a backup not in sync (being caught up: it may
// lack keys), a member with no part in the shard, and a GET without the
// flag are answered not_owner. A primary answers it as any GET.
TEST_F(ServerConnTest, AnInSyncBackupAnswersTheGetsThatAllowIt) {
  const auto backup_get = [](std::uint32_t id, std::string_view key) {
    proto::MessageSpec m = proto::msg::get_request(id, key);
    m.backup_read = true;
    return m;
  };
  const std::string s = "s";  // a shard it backs in sync
  std::string c = "c";        // one it backs, being caught up
  while (proto::shard_of(c, 64) == proto::shard_of(s, 64)) c += "c";
  std::string p = "p";  // one it is the primary of
  while (proto::shard_of(p, 64) == proto::shard_of(s, 64) || proto::shard_of(p, 64) == proto::shard_of(c, 64)) p += "p";
  std::string n = "n";  // none
  while (proto::shard_of(n, 64) == proto::shard_of(s, 64) || proto::shard_of(n, 64) == proto::shard_of(c, 64) ||
         proto::shard_of(n, 64) == proto::shard_of(p, 64)) {
    n += "n";
  }
  for (const auto& k : {s, c, p, n}) ASSERT_TRUE(store_.set(k, "v"));
  gate_.close_to_cluster();
  std::vector<proto::ShardPart> parts(64);
  parts[proto::shard_of(s, 64)] = {proto::ShardRole::backup, 5, true};
  parts[proto::shard_of(c, 64)] = {proto::ShardRole::backup, 5, false};
  parts[proto::shard_of(p, 64)] = {proto::ShardRole::primary, 3, true};
  gate_.serve(parts);
  gate_.lease_held_until(ShardGate::Clock::now() + std::chrono::hours(1));
  EXPECT_EQ(status_of(backup_get(1, s)), Status::ok);
  EXPECT_EQ(status_of(proto::msg::get_request(2, s)), Status::not_owner) << "a GET that does not allow a backup";
  EXPECT_EQ(status_of(backup_get(3, c)), Status::not_owner) << "a backup not in sync";
  EXPECT_EQ(status_of(backup_get(4, n)), Status::not_owner) << "no part in the shard";
  EXPECT_EQ(status_of(backup_get(5, p)), Status::ok) << "the primary";
  EXPECT_EQ(counters_.backup_gets, 1u);
  EXPECT_EQ(counters_.gets, 2u);
  // Past its lease a backup still answers (reads need no lease, as a primary's).
  gate_.lease_held_until(ShardGate::Clock::now() - std::chrono::milliseconds(1));
  EXPECT_EQ(status_of(backup_get(6, s)), Status::ok);
  EXPECT_EQ(counters_.backup_gets, 2u);
  EXPECT_EQ(conn_->state(), ConnState::established);
}

TEST_F(ServerConnTest, GetMissingIsOkNotFoundEmpty) {
  ASSERT_EQ(deliver(pack({proto::msg::get_request(9, "nope")})), Verdict::keep);
  const auto r = flush_replies();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.opcode, Opcode::get_reply);
  EXPECT_EQ(r[0].header.status, Status::ok);
  EXPECT_FALSE(r[0].header.found());
  EXPECT_EQ(r[0].header.value_len, 0u);
  EXPECT_TRUE(r[0].value.empty());
}

TEST_F(ServerConnTest, SeveralRequestsInOneBufferShareOneReplySend) {
  const std::string a = "AAA", b = "BB";
  ASSERT_EQ(deliver(pack({proto::msg::set_request(1, "a", bytes_of(a)), proto::msg::set_request(2, "b", bytes_of(b)),
                          proto::msg::get_request(3, "a"), proto::msg::get_request(4, "zz"),
                          proto::msg::stats_request(5)})),
            Verdict::keep);
  ASSERT_EQ(conn_->flush(), Verdict::keep);
  ASSERT_EQ(link_.sends.size(), 1u) << "replies of one buffer must be coalesced";
  const auto r = decode_all(link_.sends[0].bytes);
  ASSERT_EQ(r.size(), 5u);
  for (std::uint32_t i = 0; i < 5; ++i) EXPECT_EQ(r[i].header.req_id, i + 1);
  EXPECT_EQ(r[2].value, "AAA");
  EXPECT_FALSE(r[3].header.found());
  EXPECT_EQ(r[4].header.opcode, Opcode::stats_reply);
  EXPECT_NE(r[4].value.find("keys 2"), std::string::npos) << r[4].value;
  EXPECT_NE(r[4].value.find("sets 2"), std::string::npos) << r[4].value;
  unsigned credits = 0;
  for (const auto& x : r) credits += x.header.credits;
  EXPECT_EQ(credits, 1u);
  EXPECT_EQ(r[4].header.credits, 1u) << "the buffer's credit rides on its last reply";
}

// reply_batch: a SEND goes out as soon as it holds that many replies, in the
// middle of the buffer's requests; the rest wait for the flush at the end of
// the pass. Same replies, same order, credits still summing to the buffers.
TEST_F(ServerConnTest, ReplyBatchPostsFullSendsMidBuffer) {
  conn_.reset();
  link_ = FakeLink{};
  make(2);
  ASSERT_EQ(deliver(pack({proto::msg::get_request(1, "k"), proto::msg::get_request(2, "k"),
                          proto::msg::get_request(3, "k"), proto::msg::get_request(4, "k"),
                          proto::msg::get_request(5, "k")})),
            Verdict::keep);
  ASSERT_EQ(link_.sends.size(), 2u) << "two full SENDs of 2 replies before the flush";
  ASSERT_EQ(conn_->flush(), Verdict::keep);
  ASSERT_EQ(link_.sends.size(), 3u);
  std::uint32_t next = 1;
  unsigned credits = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const auto r = decode_all(link_.sends[i].bytes);
    ASSERT_EQ(r.size(), i < 2 ? 2u : 1u);
    for (const auto& x : r) {
      EXPECT_EQ(x.header.req_id, next++);
      credits += x.header.credits;
    }
  }
  EXPECT_EQ(credits, 1u);
}

// Crowded (other connections have work waiting): the same buffer's replies
// wait for the flush at the end of the pass and go out as one SEND; back to
// mid-buffer SENDs once the owner says it is alone again.
TEST_F(ServerConnTest, CrowdedConnectionPostsItsRepliesOnceAtTheEndOfThePass) {
  conn_.reset();
  link_ = FakeLink{};
  make(2);
  const auto five = [](std::uint32_t a) {
    return pack({proto::msg::get_request(a, "k"), proto::msg::get_request(a + 1, "k"),
                 proto::msg::get_request(a + 2, "k"), proto::msg::get_request(a + 3, "k"),
                 proto::msg::get_request(a + 4, "k")});
  };
  conn_->set_crowded(true);
  ASSERT_EQ(deliver(five(1)), Verdict::keep);
  EXPECT_TRUE(link_.sends.empty()) << "nothing posted mid-pass while crowded";
  ASSERT_EQ(conn_->flush(), Verdict::keep);
  ASSERT_EQ(link_.sends.size(), 1u);
  const auto r = decode_all(link_.sends[0].bytes);
  ASSERT_EQ(r.size(), 5u);
  for (std::uint32_t i = 0; i < 5; ++i) EXPECT_EQ(r[i].header.req_id, i + 1);

  conn_->set_crowded(false);
  ASSERT_EQ(deliver(five(6)), Verdict::keep);
  EXPECT_EQ(link_.sends.size(), 3u) << "alone again: two full SENDs of 2 replies before the flush";
}

TEST_F(ServerConnTest, ReceiveBufferIsRepostedAfterHandling) {
  const WrId first = link_.recvs[0].id;
  ASSERT_EQ(deliver(pack({proto::msg::get_request(1, "k")})), Verdict::keep);
  ASSERT_EQ(link_.recvs.size(), kCredits + 1u);
  EXPECT_EQ(link_.recvs.back().id, first);
  EXPECT_EQ(link_.recvs.back().id.generation(), kGen);
  EXPECT_EQ(link_.recvs.back().target.data(), link_.recvs[0].target.data());
  EXPECT_EQ(conn_->recvs_posted(), kCredits);
}

TEST_F(ServerConnTest, CreditsReturnedSumToBuffersHandled) {
  unsigned credits = 0;
  std::uint32_t id = 0;
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < kCredits; ++i) {  // a full window per batch
      ASSERT_EQ(deliver(pack({proto::msg::get_request(++id, "k"), proto::msg::get_request(++id, "k")})),
                Verdict::keep);
    }
    for (const auto& r : flush_replies()) credits += r.header.credits;
    for (; completed_ < link_.sends.size(); ++completed_) complete_send(completed_);
  }
  EXPECT_EQ(credits, 5u * kCredits);
  EXPECT_EQ(conn_->credits_granted(), kCredits + 5u * kCredits);
  EXPECT_EQ(conn_->sends_received(), 5u * kCredits);
  EXPECT_EQ(conn_->credits_owed(), 0u);
  EXPECT_EQ(conn_->state(), ConnState::established);
}

TEST_F(ServerConnTest, EmptySendReturnsItsCreditOnTheNextReply) {
  ASSERT_EQ(deliver({}), Verdict::keep);
  EXPECT_EQ(conn_->credits_owed(), 1u);
  EXPECT_EQ(link_.recvs.size(), kCredits + 1u);
  ASSERT_EQ(deliver(pack({proto::msg::get_request(1, "k")})), Verdict::keep);
  const auto r = flush_replies();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.credits, 2u);
}

TEST_F(ServerConnTest, DelFoundThenNotFound) {
  const std::string value = "v";
  ASSERT_EQ(deliver(pack({proto::msg::set_request(1, "k", bytes_of(value)), proto::msg::set_request(2, "other", bytes_of(value))})),
            Verdict::keep);
  ASSERT_EQ(flush_replies().size(), 2u);
  ASSERT_EQ(deliver(pack({proto::msg::del_request(3, "k")})), Verdict::keep);
  auto r = flush_replies();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.opcode, Opcode::del_reply);
  EXPECT_EQ(r[0].header.req_id, 3u);
  EXPECT_EQ(r[0].header.status, Status::ok);
  EXPECT_TRUE(r[0].header.found()) << "the key existed and was removed";
  EXPECT_EQ(r[0].header.value_len, 0u);
  EXPECT_EQ(r[0].header.credits, 1u);
  EXPECT_FALSE(store_.get("k").found);
  EXPECT_TRUE(store_.get("other").found);
  ASSERT_EQ(deliver(pack({proto::msg::del_request(4, "k"), proto::msg::get_request(5, "k"),
                          proto::msg::stats_request(6)})),
            Verdict::keep);
  r = flush_replies();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].header.opcode, Opcode::del_reply);
  EXPECT_EQ(r[0].header.status, Status::ok);
  EXPECT_FALSE(r[0].header.found()) << "no such key";
  EXPECT_FALSE(r[1].header.found());
  EXPECT_NE(r[2].value.find("\ndels 2\n"), std::string::npos) << r[2].value;
  EXPECT_NE(r[2].value.find("\ndel_hits 1\n"), std::string::npos) << r[2].value;
  EXPECT_NE(r[2].value.find("keys 1\n"), std::string::npos) << r[2].value;
  EXPECT_EQ(counters_.dels, 2u);
  EXPECT_EQ(counters_.del_hits, 1u);
  EXPECT_EQ(counters_.error_replies, 0u);
}

TEST_F(ServerConnTest, DelIsOrderedWithTheSetsAndGetsOfItsBuffer) {
  const std::string v = "first", w = "second";
  ASSERT_EQ(deliver(pack({proto::msg::set_request(1, "k", bytes_of(v)), proto::msg::get_request(2, "k"),
                          proto::msg::del_request(3, "k"), proto::msg::get_request(4, "k"),
                          proto::msg::set_request(5, "k", bytes_of(w)), proto::msg::get_request(6, "k"),
                          proto::msg::del_request(7, "k"), proto::msg::del_request(8, "k")})),
            Verdict::keep);
  const auto r = flush_replies();
  ASSERT_EQ(r.size(), 8u);
  for (std::uint32_t i = 0; i < 8; ++i) EXPECT_EQ(r[i].header.req_id, i + 1);
  EXPECT_EQ(r[1].value, "first");
  EXPECT_TRUE(r[2].header.found());
  EXPECT_FALSE(r[3].header.found());
  EXPECT_EQ(r[5].value, "second");
  EXPECT_TRUE(r[6].header.found());
  EXPECT_FALSE(r[7].header.found());
  EXPECT_EQ(store_.size(), 0u);
  EXPECT_EQ(store_.bytes(), 0u);
}

// A DEL with a value (or flags) is malformed: the whole buffer is refused,
// so the valid DEL before it deletes nothing.
TEST_F(ServerConnTest, SetOverTheMemoryLimitIsNoMemoryAndKeepsWhatIsStored) {
  const std::string value(100, 'v');
  store_ = Store(2 * (Store::kEntryOverhead + 2 + value.size()));  // room for two "kN" keys
  ASSERT_EQ(deliver(pack({proto::msg::set_request(1, "k1", bytes_of(value)),
                          proto::msg::set_request(2, "k2", bytes_of(value)),
                          proto::msg::set_request(3, "k3", bytes_of(value))})),
            Verdict::keep);
  auto r = flush_replies();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].header.status, Status::ok);
  EXPECT_EQ(r[1].header.status, Status::ok);
  EXPECT_EQ(r[2].header.opcode, Opcode::set_reply);
  EXPECT_EQ(r[2].header.status, Status::no_memory);
  EXPECT_EQ(counters_.no_memory, 1u);
  EXPECT_FALSE(store_.get("k3").found);
  // The connection goes on: the stored values read back; a DEL makes room.
  ASSERT_EQ(deliver(pack({proto::msg::get_request(4, "k1"), proto::msg::del_request(5, "k2"),
                          proto::msg::set_request(6, "k3", bytes_of(value)), proto::msg::get_request(7, "k3")})),
            Verdict::keep);
  r = flush_replies();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].value, value);
  EXPECT_TRUE(r[1].header.found());
  EXPECT_EQ(r[2].header.status, Status::ok);
  EXPECT_EQ(r[3].value, value);
  EXPECT_EQ(counters_.no_memory, 1u);
  EXPECT_EQ(conn_->state(), ConnState::established);
}

TEST_F(ServerConnTest, StaleGenerationCompletionIsDropped) {
  verbs::Completion c = FakeLink::deliver(link_.recvs[0], pack({proto::msg::set_request(1, "k", bytes_of("v"))}));
  c.wr_id = WrId(0, kGen - 1, WrKind::recv);
  EXPECT_EQ(conn_->on_completion(c), Verdict::keep);
  EXPECT_EQ(counters_.stale_completions, 1u);
  EXPECT_EQ(store_.size(), 0u);
  EXPECT_EQ(conn_->recvs_posted(), kCredits);
  EXPECT_EQ(conn_->sends_received(), 0u);
  // A stale send completion too.
  verbs::Completion s;
  s.wr_id = WrId(0, kGen + 1, WrKind::send);
  s.status = CompletionStatus::flushed;
  EXPECT_EQ(conn_->on_completion(s), Verdict::keep);
  EXPECT_EQ(conn_->state(), ConnState::established);
}

TEST_F(ServerConnTest, EagerBoundary4095) {
  const std::string v4094(4094, 'x');
  ASSERT_EQ(deliver(pack({proto::msg::set_request(1, "k", bytes_of(v4094))})), Verdict::keep);
  const std::string key1024(1024, 'K');
  const std::string v3071(3071, 'y');
  ASSERT_EQ(deliver(pack({proto::msg::set_request(2, key1024, bytes_of(v3071))})), Verdict::keep);
  ASSERT_EQ(deliver(pack({proto::msg::get_request(3, "k"), proto::msg::get_request(4, key1024)})), Verdict::keep);
  const auto r = flush_replies();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[2].value, v4094);
  EXPECT_EQ(r[3].value, v3071);

  // key + value = 4096: the encoder refuses it, so forge it.
  proto::RawHeader h;
  h.opcode = 0x01;
  h.key_len = 1;
  h.value_len = 4095;
  auto bad = raw_header(h);
  bad.push_back(std::byte{'k'});
  bad.resize(bad.size() + 4095, std::byte{'z'});
  EXPECT_EQ(deliver(bad), Verdict::disconnect);
  EXPECT_NE(conn_->disconnect_reason().find(to_string(proto::Reason::eager_too_large)), std::string::npos);
}

TEST_F(ServerConnTest, ErrorCompletionDisconnectsAndFlushesDrain) {
  ASSERT_EQ(deliver(pack({proto::msg::get_request(1, "k")})), Verdict::keep);
  ASSERT_EQ(conn_->flush(), Verdict::keep);
  ASSERT_EQ(link_.sends.size(), 1u);
  EXPECT_EQ(conn_->on_completion(FakeLink::failed(link_.sends[0], CompletionStatus::retry_exceeded)),
            Verdict::disconnect);
  EXPECT_EQ(conn_->close_cause(), CloseCause::completion_error);
  EXPECT_EQ(conn_->state(), ConnState::draining);
  EXPECT_EQ(conn_->begin_draining(CloseCause::peer_left, "later"), Verdict::keep) << "decided once";
  EXPECT_EQ(conn_->close_cause(), CloseCause::completion_error);
  EXPECT_TRUE(conn_->cm_done());
  EXPECT_FALSE(conn_->cm_done()) << "flushing already";
  EXPECT_EQ(conn_->state(), ConnState::flushing);
  EXPECT_FALSE(conn_->drained());
  // The owner moved the QP to error: every posted receive comes back flushed.
  for (std::size_t i = next_recv_; i < link_.recvs.size(); ++i) {
    EXPECT_EQ(conn_->on_completion(FakeLink::failed(link_.recvs[i], CompletionStatus::flushed)), Verdict::keep);
  }
  EXPECT_TRUE(conn_->drained());
  EXPECT_EQ(counters_.completion_errors, 1u);
}

TEST_F(ServerConnTest, OwnerInitiatedDrain) {
  EXPECT_EQ(conn_->begin_draining(CloseCause::peer_left, "peer disconnected"), Verdict::disconnect);
  EXPECT_EQ(conn_->begin_draining(CloseCause::shutdown, "again"), Verdict::keep);
  EXPECT_EQ(conn_->state(), ConnState::draining);
  EXPECT_EQ(conn_->disconnect_reason(), "peer disconnected");
  for (std::size_t i = 0; i < link_.recvs.size(); ++i) {
    EXPECT_EQ(conn_->on_completion(FakeLink::failed(link_.recvs[i], CompletionStatus::flushed)), Verdict::keep);
  }
  EXPECT_FALSE(conn_->drained()) << "DISCONNECTED not seen yet";
  EXPECT_TRUE(conn_->cm_done());
  EXPECT_TRUE(conn_->drained());
  conn_->close();
  EXPECT_EQ(conn_->state(), ConnState::closed);
}

// Two send buffers of 4160 bytes: one 3000-byte GET reply fills one.
class ServerConnBackPressure : public ServerConnTest {
 protected:
  ServerConnBackPressure() : ServerConnTest(2, 4160) {}
};

TEST_F(ServerConnBackPressure, PausesUntilASendCompletesAndLosesNothing) {
  const std::string big(3000, 'b');
  ASSERT_EQ(deliver(pack({proto::msg::set_request(1, "k", bytes_of(big))})), Verdict::keep);
  ASSERT_EQ(conn_->flush(), Verdict::keep);  // send 0 in flight (set reply, buffer 0)
  ASSERT_EQ(link_.sends.size(), 1u);

  ASSERT_EQ(deliver(pack({proto::msg::get_request(2, "k"), proto::msg::get_request(3, "k"),
                          proto::msg::get_request(4, "k")})),
            Verdict::keep);
  // GET 2 took buffer 1; GET 3 has no buffer: paused, buffer held, not re-posted.
  EXPECT_EQ(conn_->held_buffers(), 1u);
  EXPECT_EQ(link_.recvs.size(), kCredits + 1u);
  EXPECT_EQ(counters_.pauses, 1u);
  // A later buffer queues behind the held one.
  ASSERT_EQ(deliver(pack({proto::msg::get_request(5, "missing")})), Verdict::keep);
  EXPECT_EQ(conn_->held_buffers(), 2u);

  ASSERT_EQ(conn_->flush(), Verdict::keep);  // posts buffer 1 (GET 2)
  ASSERT_EQ(link_.sends.size(), 2u);
  complete_send(0);  // frees buffer 0: GET 3 goes, GET 4 waits again
  EXPECT_EQ(conn_->held_buffers(), 2u);
  ASSERT_EQ(conn_->flush(), Verdict::keep);
  ASSERT_EQ(link_.sends.size(), 3u);
  complete_send(1);  // GET 4 and then GET 5 (small, same buffer)
  EXPECT_EQ(conn_->held_buffers(), 0u);
  ASSERT_EQ(conn_->flush(), Verdict::keep);
  complete_send(2);

  std::vector<Reply> all;
  for (const auto& s : link_.sends) {
    auto r = decode_all(s.bytes);
    all.insert(all.end(), r.begin(), r.end());
  }
  ASSERT_EQ(all.size(), 5u);
  unsigned credits = 0;
  for (std::uint32_t i = 0; i < 5; ++i) {
    EXPECT_EQ(all[i].header.req_id, i + 1) << "replies in request order";
    credits += all[i].header.credits;
  }
  for (int i = 1; i < 4; ++i) EXPECT_EQ(all[static_cast<std::size_t>(i)].value, big);
  EXPECT_FALSE(all[4].header.found());
  EXPECT_EQ(credits, 3u);
  EXPECT_EQ(link_.recvs.size(), kCredits + 3u);
  EXPECT_EQ(conn_->state(), ConnState::established);
}

// A test clock for the Store: the connection's expiry reads the Store's.
store::ExpireAt g_now = 5'000'000;
store::ExpireAt test_now() noexcept { return g_now; }

std::uint64_t ttl_field(const std::vector<std::byte>& send, std::size_t nth) {
  proto::Decoder dec(send);
  for (std::size_t i = 0;; ++i) {
    auto r = dec.next();
    if (!std::holds_alternative<proto::MessageView>(r)) break;
    if (i == nth) return std::get<proto::MessageView>(r).ttl;
  }
  ADD_FAILURE() << "no message " << nth;
  return 0;
}

TEST_F(ServerConnTest, SetWithTtlExpireAndTtl) {
  g_now = 5'000'000;
  store_.set_clock(&test_now);
  const std::string v = "v", w = "w";
  auto set = proto::msg::set_request(1, "k", bytes_of(v));
  set.ttl = 500;
  ASSERT_EQ(deliver(pack({set, proto::msg::ttl_request(2, "k"), proto::msg::ttl_request(3, "nope"),
                          proto::msg::set_request(4, "p", bytes_of(v)), proto::msg::ttl_request(5, "p")})),
            Verdict::keep);
  auto r = flush_replies();
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(store_.peek("k").expire_at, g_now + 500) << "absolute: the arrival plus the TTL";
  EXPECT_EQ(r[1].header.opcode, Opcode::ttl_reply);
  EXPECT_TRUE(r[1].header.found());
  EXPECT_EQ(ttl_field(link_.sends.back().bytes, 1), 500u);
  EXPECT_FALSE(r[2].header.found()) << "no key: not found, no field";
  EXPECT_FALSE(r[2].header.has_ttl());
  EXPECT_TRUE(r[4].header.found());
  EXPECT_EQ(ttl_field(link_.sends.back().bytes, 4), proto::kNoTtl) << "a key without expiry";

  // EXPIRE: set, clear (persist), and of a missing key.
  ASSERT_EQ(deliver(pack({proto::msg::expire_request(6, "p", 100), proto::msg::expire_request(7, "k", 0),
                          proto::msg::expire_request(8, "nope", 100)})),
            Verdict::keep);
  r = flush_replies();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].header.opcode, Opcode::expire_reply);
  EXPECT_TRUE(r[0].header.found());
  EXPECT_TRUE(r[1].header.found());
  EXPECT_FALSE(r[2].header.found());
  EXPECT_EQ(store_.peek("p").expire_at, g_now + 100);
  EXPECT_EQ(store_.peek("k").expire_at, store::kNoExpiry);
  EXPECT_EQ(counters_.expires, 3u);
  EXPECT_EQ(counters_.ttls, 3u);

  // Expired: a GET by message never returns it, at once.
  g_now += 100;
  ASSERT_EQ(deliver(pack({proto::msg::get_request(9, "p"), proto::msg::get_request(10, "k")})), Verdict::keep);
  r = flush_replies();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_FALSE(r[0].header.found()) << "expired at its time";
  EXPECT_TRUE(r[1].header.found()) << "persisted";
  // A SET without a TTL clears one.
  ASSERT_EQ(deliver(pack({set, proto::msg::set_request(12, "k", bytes_of(w))})), Verdict::keep);
  (void)flush_replies();
  EXPECT_EQ(store_.peek("k").expire_at, store::kNoExpiry);
}

TEST_F(ServerConnTest, TouchIsAnAccessAnsweredBareAndToleratesABadTail) {
  const std::string one = "1";
  ASSERT_EQ(deliver(pack({proto::msg::set_request(1, "a", bytes_of(one))})), Verdict::keep);
  (void)flush_replies();
  // Two keys, one missing, then a malformed tail (a length past the end): ignored.
  std::vector<std::byte> keys;
  auto add = [&keys](std::string_view k, std::size_t claimed) {
    keys.push_back(static_cast<std::byte>(claimed & 0xFF));
    keys.push_back(static_cast<std::byte>(claimed >> 8));
    for (char c : k) keys.push_back(static_cast<std::byte>(c));
  };
  add("a", 1);
  add("zz", 2);
  add("b", 9);
  ASSERT_EQ(deliver(pack({proto::msg::touch(2, keys), proto::msg::get_request(3, "a")})), Verdict::keep);
  const auto r = flush_replies();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].header.opcode, Opcode::touch_reply);
  EXPECT_EQ(r[0].header.req_id, 2u);
  EXPECT_EQ(r[0].header.value_len, 0u);
  EXPECT_EQ(r[1].header.req_id, 3u);
  EXPECT_EQ(counters_.touches, 2u) << "the two well-formed keys";
  EXPECT_EQ(conn_->state(), ConnState::established);
}

// Elastic credits over shared pools (docs/protocol.md "Flow control"): a
// connection starts with 2 receive buffers, doubles them when a SEND spends
// the client's last credit, and gives one back per buffer executed while the
// client left half its credits unspent. Every credit the client holds is a
// posted receive at every step, and every buffer is back in the pools after.

}  // namespace
}  // namespace rkv::kv::server
