// Unit tests for cluster/shard_map: the stored form and its hostile
// variants, and plan_map's rule (docs/cluster.md "The shard map"): a first
// map, failover to the first live backup with the shard's epoch raised, a
// join taking a fair share with the fewest moves, orphaned shards, and over
// random member changes: every plan is a fixed point, balanced, owned only
// by live members, as wide as it can be, and the same whoever computes it.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cluster/shard_map.hpp"

namespace rkv::cluster {
namespace {

bool is_primary(const proto::ShardPart& p) { return p.role == proto::ShardRole::primary; }
bool is_backup(const proto::ShardPart& p) { return p.role == proto::ShardRole::backup; }

std::vector<std::string> ids(std::initializer_list<const char*> list) {
  std::vector<std::string> out(list.begin(), list.end());
  std::sort(out.begin(), out.end());
  return out;
}

// A plan for members that each joined once (every lease 1).
std::optional<ShardMap> plan(const std::optional<ShardMap>& last, const std::vector<std::string>& live, MapShape shape) {
  const std::vector<std::int64_t> leases(live.size(), 1);
  return plan_map(last, live, leases, shape);
}

// Every property a plan must have for the members `live`.
void expect_sound(const ShardMap& m, const std::vector<std::string>& live) {
  const std::set<std::string> alive(live.begin(), live.end());
  const std::size_t width = std::min<std::size_t>(m.replicas + 1u, live.size());
  const auto primaries = m.primaries();
  unsigned lo = ~0u;
  unsigned hi = 0;
  for (const auto& id : live) {
    const auto it = primaries.find(id);
    const unsigned n = it == primaries.end() ? 0 : it->second;
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  EXPECT_LE(hi - lo, 1u) << "primaries not balanced";
  for (const auto& s : m.shards) {
    ASSERT_EQ(s.owners.size(), width);
    EXPECT_LE(s.epoch, m.epoch);
    const std::set<std::string> distinct(s.owners.begin(), s.owners.end());
    EXPECT_EQ(distinct.size(), s.owners.size()) << "an owner twice";
    for (const auto& o : s.owners) EXPECT_TRUE(alive.count(o)) << o << " owns a shard but is not a member";
  }
  std::string why;
  const auto back = parse_map(map_value(m), why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(*back, m);
  EXPECT_FALSE(plan(m, live, MapShape{})) << "a plan is not a fixed point";
}

TEST(ShardMap, FirstMapDealsPrimariesRoundRobin) {
  const auto three = ids({"a:1", "b:1", "c:1"});
  const auto m = plan(std::nullopt, three, MapShape{64, 1});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->epoch, 1u);
  EXPECT_EQ(m->replicas, 1u);
  ASSERT_EQ(m->shards.size(), 64u);
  EXPECT_EQ(m->shards[0].owners, ids({"a:1", "b:1"}));
  EXPECT_EQ(m->shards[2].owners, (std::vector<std::string>{"c:1", "a:1"}));
  EXPECT_EQ(m->shards[3].epoch, 1u);
  expect_sound(*m, three);
  EXPECT_FALSE(plan(std::nullopt, {}, MapShape{})) << "no member, no map";
}

TEST(ShardMap, AfterAFailureEveryPrimaryHeldTheShardBefore) {
  // b's shards go to their backups; rebalancing then swaps primaries only
  // with backups, so no shard gets a primary that did not hold it, and only
  // shards whose primary changed take the new epoch.
  const auto three = ids({"a:1", "b:1", "c:1"});
  const auto m = *plan(std::nullopt, three, MapShape{12, 1});
  const auto two = ids({"a:1", "c:1"});
  const auto next = plan(m, two, MapShape{});
  ASSERT_TRUE(next);
  EXPECT_EQ(next->epoch, 2u);
  unsigned changed = 0;
  for (std::size_t i = 0; i < m.shards.size(); ++i) {
    const auto& before = m.shards[i].owners;
    const auto& after = next->shards[i].owners;
    EXPECT_NE(std::find(before.begin(), before.end(), after.front()), before.end())
        << "shard " << i << ": its new primary " << after.front() << " did not hold it";
    if (before.front() == "b:1") {
      EXPECT_EQ(after.front(), before[1]) << "shard " << i << ": not its backup";
    }
    const bool moved = after.front() != before.front();
    changed += moved ? 1 : 0;
    EXPECT_EQ(next->shards[i].epoch, moved ? 2u : 1u) << "shard " << i;
  }
  EXPECT_EQ(changed, 6u) << "b's 4, then 2 swaps to balance 8/4 into 6/6";
  expect_sound(*next, two);
}

TEST(ShardMap, AJoinTakesAFairShareWithTheFewestMoves) {
  const auto three = ids({"a:1", "b:1", "c:1"});
  const auto four = ids({"a:1", "b:1", "c:1", "d:1"});
  for (std::uint32_t replicas : {0u, 1u, 2u}) {
    const auto m = *plan(std::nullopt, three, MapShape{64, replicas});
    const auto next = plan(m, four, MapShape{});
    ASSERT_TRUE(next);
    EXPECT_EQ(next->primaries(), (std::map<std::string, std::uint32_t>{{"a:1", 16}, {"b:1", 16}, {"c:1", 16}, {"d:1", 16}}));
    unsigned moved = 0;
    for (std::size_t i = 0; i < 64; ++i) {
      if (next->shards[i].owners.front() == m.shards[i].owners.front()) continue;
      ++moved;
      EXPECT_EQ(next->shards[i].owners.front(), "d:1");
      EXPECT_EQ(next->shards[i].epoch, 2u);
      // Its old primary stays among its owners when there is room (it holds the data).
      if (replicas > 0) {
        const auto& o = next->shards[i].owners;
        EXPECT_NE(std::find(o.begin(), o.end(), m.shards[i].owners.front()), o.end()) << "shard " << i;
      }
    }
    EXPECT_EQ(moved, 16u) << "replicas " << replicas;
    expect_sound(*next, four);
  }
}

TEST(ShardMap, ShardsThatLostEveryOwnerGoToTheLeastLoaded) {
  const auto m = *plan(std::nullopt, ids({"a:1", "b:1"}), MapShape{8, 0});
  const auto next = plan(m, ids({"c:1"}), MapShape{});
  ASSERT_TRUE(next);
  for (const auto& s : next->shards) {
    EXPECT_EQ(s.owners, ids({"c:1"}));
    EXPECT_EQ(s.epoch, 2u);
  }
}

TEST(ShardMap, AMemberUnderANewLeaseIsANewIncarnation) {
  // b's lease lapsed and it joined again (lease 2): it loses every shard of
  // the old incarnation, exactly as if it had left, then takes a fair
  // share as a member that joins; only the map's incarnation is a primary.
  const auto three = ids({"a:1", "b:1", "c:1"});
  const std::vector<std::int64_t> first = {1, 1, 1};
  const auto m = *plan_map(std::nullopt, three, first, MapShape{12, 1});
  EXPECT_EQ(m.leases, (std::map<std::string, std::int64_t>{{"a:1", 1}, {"b:1", 1}, {"c:1", 1}}));
  const auto b_old = m.parts_of("b:1", 1);
  EXPECT_EQ(std::count_if(b_old.begin(), b_old.end(), is_primary), 4);
  EXPECT_EQ(std::count_if(b_old.begin(), b_old.end(), is_backup), 4) << "b:1 backs 4 others";
  for (std::size_t i = 0; i < b_old.size(); ++i) EXPECT_EQ(b_old[i].epoch, b_old[i].role == proto::ShardRole::none ? 0 : m.shards[i].epoch);
  const auto none = m.parts_of("b:1", 2);
  EXPECT_EQ(std::count(none.begin(), none.end(), proto::ShardPart{}), 12) << "another incarnation of b:1 has no part";
  const std::vector<std::int64_t> again = {1, 2, 1};
  const auto next = plan_map(m, three, again, MapShape{});
  ASSERT_TRUE(next) << "b:1 under a new lease is a change";
  EXPECT_EQ(next->leases.at("b:1"), 2);
  for (std::size_t i = 0; i < m.shards.size(); ++i) {
    if (m.shards[i].owners.front() != "b:1") continue;
    // Another primary, or b:1's new incarnation taking it back: either way a new shard epoch.
    EXPECT_EQ(next->shards[i].epoch, next->epoch) << "shard " << i;
  }
  const auto b_new = next->parts_of("b:1", 2);
  EXPECT_EQ(std::count_if(b_new.begin(), b_new.end(), is_primary), 4) << "the new incarnation takes a fair share";
  EXPECT_FALSE(plan_map(next, three, again, MapShape{})) << "a fixed point";
  EXPECT_THROW((void)plan_map(m, three, std::vector<std::int64_t>{1}, MapShape{}), std::invalid_argument);
}

TEST(ShardMap, RandomChangesKeepEveryPlanSound) {
  std::mt19937 rng(7);
  const std::vector<std::string> pool = {"h0:1", "h1:1", "h2:1", "h3:1", "h4:1", "h5:1", "h6:1"};
  for (std::uint32_t replicas : {0u, 1u, 2u}) {
    std::set<std::string> live = {"h0:1"};
    std::optional<ShardMap> m;
    for (int step = 0; step < 200; ++step) {
      const std::string& id = pool[rng() % pool.size()];
      if (live.count(id) && live.size() > 1) {
        live.erase(id);
      } else {
        live.insert(id);
      }
      const std::vector<std::string> now(live.begin(), live.end());
      const auto next = plan(m, now, MapShape{64, replicas});
      const auto again = plan(m, now, MapShape{64, replicas});
      ASSERT_EQ(next, again) << "not deterministic";
      if (next) {
        ASSERT_EQ(next->epoch, (m ? m->epoch : 0) + 1);
        m = next;
      }
      ASSERT_TRUE(m);
      expect_sound(*m, now);
    }
  }
}

TEST(ShardMap, ParsesOnlyWellFormedMaps) {
  std::string why;
  const auto m = *plan(std::nullopt, ids({"a:1", "b:1"}), MapShape{2, 1});
  EXPECT_EQ(map_value(m),
            R"({"epoch":1,"leases":{"a:1":1,"b:1":1},"replicas":1,"shards":[{"epoch":1,"owners":["a:1","b:1"]},)"
            R"({"epoch":1,"owners":["b:1","a:1"]}]})");
  const char* bad[] = {
      "",
      "[]",
      "{}",
      R"({"epoch":1,"replicas":1})",
      R"({"epoch":1,"replicas":1,"shards":[]})",
      R"({"epoch":-1,"replicas":0,"shards":[{"epoch":1,"owners":["a"]}]})",
      R"({"epoch":1,"replicas":5,"shards":[{"epoch":1,"owners":["a"]}]})",
      R"({"epoch":1,"replicas":0,"shards":[{"epoch":2,"owners":["a"]}]})",
      R"({"epoch":1,"replicas":0,"shards":[{"epoch":1,"owners":[]}]})",
      R"({"epoch":1,"replicas":0,"shards":[{"epoch":1,"owners":["a","b"]}]})",
      R"({"epoch":1,"replicas":1,"shards":[{"epoch":1,"owners":["a","a"]}]})",
      R"({"epoch":1,"replicas":1,"shards":[{"epoch":1,"owners":["a",""]}]})",
      R"({"epoch":1,"replicas":1,"shards":[{"epoch":1,"owners":["a",7]}]})",
      R"({"epoch":1,"replicas":1,"shards":[{"owners":["a"]}]})",
      R"({"epoch":1,"replicas":1,"shards":[7]})",
      R"({"epoch":"1","replicas":1,"shards":[{"epoch":1,"owners":["a"]}],"leases":{"a":1}})",
      R"({"epoch":1,"replicas":0,"shards":[{"epoch":1,"owners":["a"]}]})",
      R"({"epoch":1,"replicas":0,"shards":[{"epoch":1,"owners":["a"]}],"leases":[1]})",
      R"({"epoch":1,"replicas":0,"shards":[{"epoch":1,"owners":["a"]}],"leases":{"b":1}})",
      R"({"epoch":1,"replicas":0,"shards":[{"epoch":1,"owners":["a"]}],"leases":{"a":"1"}})",
      R"({"epoch":1,"replicas":0,"shards":[{"epoch":1,"owners":["a"]}],"leases":{"a":1.5}})",
  };
  EXPECT_TRUE(parse_map(R"({"epoch":1,"replicas":0,"shards":[{"epoch":1,"owners":["a"]}],"leases":{"a":7}})", why))
      << why;
  for (const char* b : bad) EXPECT_FALSE(parse_map(b, why)) << b;
  std::string big = R"({"epoch":1,"replicas":0,"shards":[)";
  for (std::uint32_t i = 0; i <= kMaxShards; ++i) big += std::string(i ? "," : "") + R"({"epoch":1,"owners":["a"]})";
  EXPECT_FALSE(parse_map(big + "]}", why)) << "more than kMaxShards";
}

}  // namespace
}  // namespace rkv::cluster
