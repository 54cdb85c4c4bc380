// server_shards (rdma suite): a cluster member's Server drops its keys of the
// shards it no longer serves (Server::serve_shards, docs/cluster.md
// "Fencing"), in steps between reactor turns, each with a tombstone in the
// log; a shard served again before its sweep ended is swept first, so a
// client over verbs never gets a value held from before. A backup keeps
// what it backs and takes replication records of its shards' epochs, from a
// raw verbs client and from kv::Client (docs/cluster.md "Replication
// records"); a connection that brought records is reported when lost.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "../protocol/fake_durability.hpp"
#include "kv/client/client.hpp"
#include "loopback.hpp"
#include "proto/encode.hpp"
#include "proto/placement.hpp"
#include "raw_client.hpp"
#include "server_harness.hpp"

namespace rkv::test {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kShards = 64;
constexpr int kKeys = 20000;  // more buckets than one sweep step visits
constexpr auto kShardStep = 30s;   // per wait; TCG guests are slow

std::string key(int i) { return "held-" + std::to_string(i); }
std::uint32_t shard(const std::string& k) { return proto::shard_of(k, kShards); }

struct Member {
  Member() {
    kv::server::ServerOptions opt;
    opt.bind_address = verbs::test::softroce_addr();
    opt.port = 0;
    server.emplace(reactor, store, opt, &log);
  }
  ~Member() { server.reset(); }
  void step() { reactor.run_once(1ms); }
  // Keys i < kKeys still in the store, by whether their shard is in `shards`.
  std::pair<int, int> held(const std::set<std::uint32_t>& shards) {
    std::pair<int, int> n{0, 0};
    for (int i = 0; i < kKeys; ++i) {
      if (!store.peek(key(i)).found) continue;
      (shards.count(shard(key(i))) != 0 ? n.first : n.second) += 1;
    }
    return n;
  }

  reactor::Reactor reactor;
  kv::store::Store store;
  FakeDurability log;
  std::optional<kv::server::Server> server;
};

std::vector<rkv::proto::ShardPart> serving(const std::set<std::uint32_t>& shards) {
  std::vector<rkv::proto::ShardPart> v(kShards);
  for (const auto s : shards) v[s] = {rkv::proto::ShardRole::primary, 1};
  return v;
}

TEST(ServerShards, LostShardsAreDroppedAndNeverServedAgain) {
  Member m;
  std::set<std::uint32_t> mine;  // the even shards
  for (std::uint32_t s = 0; s < kShards; s += 2) mine.insert(s);
  int in_mine = 0;
  for (int i = 0; i < kKeys; ++i) {  // as recovered from a log: before any map
    ASSERT_TRUE(m.store.set(key(i), "before"));
    in_mine += mine.count(shard(key(i))) != 0 ? 1 : 0;
  }
  m.server->gate().close_to_cluster();

  // The first map: every odd shard is lost. The sweep goes in steps.
  m.server->serve_shards(serving(mine));
  ASSERT_TRUE(m.server->dropping()) << "20,000 keys were swept in one step";
  EXPECT_GT(m.held({}).second, in_mine) << "nothing left for the next steps";

  // Shard 1 comes back before the sweep ended: its old keys go first.
  int in_1 = 0;
  for (int i = 0; i < kKeys; ++i) in_1 += shard(key(i)) == 1 ? 1 : 0;
  ASSERT_GT(in_1, 0);
  mine.insert(1);
  m.server->serve_shards(serving(mine));
  EXPECT_FALSE(m.server->dropping());
  EXPECT_EQ(m.held(mine), std::make_pair(in_mine, 0)) << "a lost shard's key is still held";
  EXPECT_EQ(m.store.dropped_keys(), static_cast<std::uint64_t>(kKeys - in_mine));
  std::set<std::string> tombstones;
  for (const auto& r : m.log.records) {
    EXPECT_TRUE(r.del) << r.key;
    tombstones.insert(r.key);
  }
  EXPECT_EQ(tombstones.size(), static_cast<std::size_t>(kKeys - in_mine)) << "a tombstone per dropped key";

  // Over verbs: a key of shard 1 is a miss, not its value from before, and
  // a write to it is served (the member is its primary again).
  m.server->gate().lease_held_until(kv::server::ShardGate::Clock::now() + 1h);
  RawClient c(verbs::test::softroce_addr(), m.server->port());
  ASSERT_TRUE(wait_until([&] { return c.established(); }, kShardStep, [&] { m.step(); }, {&c})) << c.failure();
  std::string k1;
  for (int i = 0; k1.empty(); ++i) {
    if (shard(key(i)) == 1) k1 = key(i);
  }
  ASSERT_EQ(c.send_request(proto::msg::get_request(1, k1)), 0);
  std::optional<RawReply> r;
  ASSERT_TRUE(wait_until([&] { return (r = c.take_reply(1)).has_value(); }, kShardStep, [&] { m.step(); }, {&c}));
  EXPECT_EQ(r->header.status, proto::Status::ok);
  EXPECT_FALSE(r->header.found()) << "shard 1's value from before it was lost: " << r->value;

  // Shard 0 is lost later: swept between reactor turns, the rest stays.
  int in_0 = 0;
  for (int i = 0; i < kKeys; ++i) in_0 += shard(key(i)) == 0 ? 1 : 0;
  mine.erase(0);
  m.server->serve_shards(serving(mine));
  ASSERT_TRUE(wait_until([&] { return !m.server->dropping(); }, kShardStep, [&] { m.step(); }, {&c}));
  EXPECT_EQ(m.held(mine), std::make_pair(in_mine - in_0, 0));

  // No map (a new incarnation before its first): nothing is dropped.
  m.server->serve_shards({});
  EXPECT_FALSE(m.server->dropping());
  EXPECT_EQ(m.held(mine).first, in_mine - in_0);

  bool down = false;
  m.server->shutdown([&] { down = true; });
  EXPECT_TRUE(wait_until([&] { return down; }, kShardStep, [&] { m.step(); }, {&c}));
}

// A backup (docs/cluster.md "Replication records"): a shard it starts to
// back having had no part in it is emptied (what it held may be stale: the
// primary's catch-up brings what is current), one it was the primary of
// keeps its keys; it applies a record of the shard's epoch sent over verbs,
// answers no client request of those shards, and once a map makes it their
// primary (a failover) serves what it was sent.
TEST(ServerShards, ABackupStartsEmptyUnlessItWasThePrimaryAndServesItsRecordsOncePromoted) {
  Member m;
  m.log.answer = kv::store::DurableAck::now;  // replies need no log acknowledgement here
  constexpr int kSome = 2000;
  for (int i = 0; i < kSome; ++i) ASSERT_TRUE(m.store.set(key(i), "before"));
  // The first map: primary of the even shards, backup of the odd ones.
  std::vector<proto::ShardPart> parts(kShards);
  for (std::uint32_t s = 0; s < kShards; ++s) {
    parts[s] = {s % 2 == 0 ? proto::ShardRole::primary : proto::ShardRole::backup, 4};
  }
  int in_even = 0;
  for (int i = 0; i < kSome; ++i) in_even += shard(key(i)) % 2 == 0 ? 1 : 0;
  m.server->gate().close_to_cluster();
  m.server->serve_shards(parts);
  EXPECT_FALSE(m.server->dropping()) << "a newly backed shard is emptied at once, not across turns";
  int kept = 0;
  for (int i = 0; i < kSome; ++i) kept += m.store.peek(key(i)).found ? 1 : 0;
  EXPECT_EQ(kept, in_even) << "recovered keys of the shards it backs are dropped, its primaries' kept";
  const std::uint64_t dropped = m.store.dropped_keys();
  EXPECT_EQ(dropped, static_cast<std::uint64_t>(kSome - in_even));

  // Shard 0 goes to another primary and this member backs it: its keys stay.
  parts[0] = {proto::ShardRole::backup, 5};
  m.server->serve_shards(parts);
  EXPECT_FALSE(m.server->dropping());
  EXPECT_EQ(m.store.dropped_keys(), dropped) << "a primary that becomes a backup keeps what it held";

  m.server->gate().lease_held_until(kv::server::ShardGate::Clock::now() + 1h);
  RawClient c(verbs::test::softroce_addr(), m.server->port());
  ASSERT_TRUE(wait_until([&] { return c.established(); }, kShardStep, [&] { m.step(); }, {&c})) << c.failure();
  std::string k1;
  for (int i = kSome; k1.empty(); ++i) {
    if (shard(key(i)) == 1) k1 = key(i);
  }
  const auto ask = [&](proto::MessageSpec req) {
    EXPECT_EQ(c.send_request(req), 0);
    std::optional<RawReply> r;
    EXPECT_TRUE(wait_until([&] { return (r = c.take_reply(req.req_id)).has_value(); }, kShardStep, [&] { m.step(); }, {&c}));
    return r.value_or(RawReply{});
  };
  const std::string value = "replicated";
  auto rec = proto::msg::set_request(1, k1, proto::as_bytes(value));
  rec.epoch = 4;
  EXPECT_EQ(ask(rec).header.status, proto::Status::ok);
  EXPECT_EQ(ask(proto::msg::get_request(2, k1)).header.status, proto::Status::not_owner) << "a backup serves no client";
  const std::string old = "stale";
  auto stale = proto::msg::set_request(3, k1, proto::as_bytes(old));
  stale.epoch = 3;
  EXPECT_EQ(ask(stale).header.status, proto::Status::not_owner) << "a record of a replaced primary";

  // The failover: a map makes it the primary of shard 1 (at a new epoch).
  parts[1] = {proto::ShardRole::primary, 6};
  m.server->serve_shards(parts);
  const RawReply got = ask(proto::msg::get_request(4, k1));
  EXPECT_EQ(got.header.status, proto::Status::ok);
  EXPECT_TRUE(got.header.found());
  EXPECT_EQ(got.value, value);
  EXPECT_EQ(m.store.dropped_keys(), dropped) << "promotion drops nothing";

  bool down = false;
  m.server->shutdown([&] { down = true; });
  EXPECT_TRUE(wait_until([&] { return down; }, kShardStep, [&] { m.step(); }, {&c}));
}

// kv::Client::record, what a primary will send its backups: a small and a
// large (rendezvous: the backup READs it) SET, an EXPIRE and a DEL at the
// shard's epoch are applied; a record at an older epoch is refused.
TEST(ServerShards, AClientsRecordsReachABackup) {
  Member m;
  m.log.answer = kv::store::DurableAck::now;
  m.server->gate().close_to_cluster();
  m.server->serve_shards(std::vector<proto::ShardPart>(kShards, proto::ShardPart{proto::ShardRole::backup, 9}));
  m.server->gate().lease_held_until(kv::server::ShardGate::Clock::now() + 1h);
  auto c = kv::client::Client::connect(m.reactor, verbs::test::softroce_addr(), m.server->port());
  const auto send = [&](proto::Opcode op, const std::string& k, const std::string& v, std::uint64_t ttl,
                        std::uint64_t epoch) {
    std::optional<kv::client::Status> got;
    const auto st = c->record(op, k, proto::as_bytes(v), ttl, epoch,
                              [&](kv::client::Status s, bool, std::span<const std::byte>) { got = s; });
    EXPECT_EQ(st, kv::client::Status::ok);
    EXPECT_TRUE(wait_until([&] { return got.has_value(); }, kShardStep, [&] { m.step(); }, {}));
    return got.value_or(kv::client::Status::timeout);
  };
  const std::string small = "small";
  const std::string large(200000, 'L');
  EXPECT_EQ(send(proto::Opcode::set, "a", small, 0, 9), kv::client::Status::ok);
  EXPECT_EQ(send(proto::Opcode::set, "b", large, 0, 9), kv::client::Status::ok);
  EXPECT_EQ(send(proto::Opcode::expire, "a", "", 60000, 9), kv::client::Status::ok);
  EXPECT_EQ(send(proto::Opcode::set, "c", small, 0, 8), kv::client::Status::not_owner) << "a replaced primary's";
  EXPECT_EQ(m.store.get("a").value, small);
  EXPECT_GT(m.store.ttl("a").value_or(-1), 0);
  EXPECT_EQ(m.store.get("b").value.size(), large.size());
  EXPECT_FALSE(m.store.peek("c").found);
  EXPECT_EQ(send(proto::Opcode::del, "b", "", 0, 9), kv::client::Status::ok);
  EXPECT_FALSE(m.store.peek("b").found);
  EXPECT_EQ(m.server->counters().records_applied, 4u);
  // Its connection lost (not by a shutdown): the hook hears the shard of
  // the last record admitted on it (kvd probes that shard's primary). A
  // connection that brought no record is lost silently.
  std::vector<std::uint32_t> lost;
  m.server->set_on_record_peer_lost([&](std::uint32_t s) { lost.push_back(s); });
  c->close();
  EXPECT_TRUE(wait_until([&] { return !lost.empty(); }, kShardStep, [&] { m.step(); }, {}));
  EXPECT_EQ(lost, std::vector<std::uint32_t>{shard("b")});
  const auto closed = m.server->counters().closed;
  auto plain = kv::client::Client::connect(m.reactor, verbs::test::softroce_addr(), m.server->port());
  plain->close();
  EXPECT_TRUE(wait_until([&] { return m.server->counters().closed > closed; }, kShardStep, [&] { m.step(); }, {}));
  EXPECT_EQ(lost.size(), 1u) << "a connection that brought no record was reported";
  bool down = false;
  m.server->shutdown([&] { down = true; });
  EXPECT_TRUE(wait_until([&] { return down; }, kShardStep, [&] { m.step(); }, {}));
}

}  // namespace
}  // namespace rkv::test
