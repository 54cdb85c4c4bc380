// Unit tests for the Store's time to live (kv/store/expiry.cpp): an expired
// key is gone for every lookup, expire()/ttl() answer "no key" and "no
// expiry" apart, a SET clears a TTL and a handler's write keeps it,
// expire_due() removes the due keys soonest first and a bounded number per
// call, the heap follows keys that change or go, and under a memory limit a
// write frees expired keys before it evicts or fails. Time is a test clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kv/store/store.hpp"

namespace rkv::kv::store {
namespace {

ExpireAt g_now = 1'000'000;
ExpireAt test_clock() noexcept { return g_now; }

class Expiry : public ::testing::Test {
 protected:
  void SetUp() override {
    g_now = 1'000'000;
    s_.set_clock(&test_clock);
  }
  std::uint64_t row(std::string_view name) const {
    StatRows rows;
    s_.append_stats(rows);
    for (const auto& r : rows) {
      if (r.name == name) return r.value;
    }
    ADD_FAILURE() << "no row " << name;
    return 0;
  }
  Store s_;
};

TEST_F(Expiry, AnExpiredKeyIsGoneForEveryLookup) {
  ASSERT_TRUE(s_.set("a", "1", g_now + 500));
  ASSERT_TRUE(s_.set("b", "2", g_now + 500));
  ASSERT_TRUE(s_.set("c", "3", g_now + 500));
  ASSERT_TRUE(s_.set("d", "4", g_now + 500));
  EXPECT_TRUE(s_.get("a").found);
  EXPECT_EQ(s_.get("a").expire_at, g_now + 500);
  EXPECT_EQ(s_.ttl("a"), 500);
  g_now += 499;
  EXPECT_TRUE(s_.get("a").found) << "1 ms before its time";
  EXPECT_EQ(s_.ttl("a"), 1);
  g_now += 1;
  EXPECT_FALSE(s_.get("a").found) << "at its time";
  EXPECT_FALSE(s_.ttl("b").has_value());
  EXPECT_FALSE(s_.expire("c", kNoExpiry)) << "too late to persist it";
  EXPECT_FALSE(s_.erase("d")) << "a DEL of an expired key finds nothing";
  EXPECT_EQ(s_.size(), 0u);
  EXPECT_EQ(row("expired_keys"), 4u);
  EXPECT_EQ(s_.expiring(), 0u);
  EXPECT_EQ(s_.budget()->used(), 0u) << "expired keys give their memory back";
}

TEST_F(Expiry, TtlAnswersNoKeyAndNoExpiryApart) {
  EXPECT_FALSE(s_.ttl("nope").has_value());
  ASSERT_TRUE(s_.set("k", "v"));
  EXPECT_EQ(s_.ttl("k"), -1);
  EXPECT_FALSE(s_.expire("nope", g_now + 10));
  EXPECT_TRUE(s_.expire("k", g_now + 10));
  EXPECT_EQ(s_.ttl("k"), 10);
  EXPECT_EQ(s_.expiring(), 1u);
  EXPECT_TRUE(s_.expire("k", kNoExpiry)) << "persist";
  EXPECT_EQ(s_.ttl("k"), -1);
  EXPECT_EQ(s_.expiring(), 0u);
  g_now += 1000;
  EXPECT_TRUE(s_.get("k").found);
}

TEST_F(Expiry, ASetReplacesTheTtlAndAHandlersWriteKeepsIt) {
  ASSERT_TRUE(s_.set("k", "v1", g_now + 100));
  ASSERT_TRUE(s_.set("k", "v2"));
  EXPECT_EQ(s_.ttl("k"), -1) << "a SET without a TTL clears it (as Redis' SET)";
  ASSERT_TRUE(s_.set("k", "v3", g_now + 100));
  ASSERT_TRUE(s_.set("k", "v4", kKeepExpiry));
  EXPECT_EQ(s_.ttl("k"), 100) << "kKeepExpiry (an INCR) keeps it";
  ASSERT_TRUE(s_.set("new", "v", kKeepExpiry));
  EXPECT_EQ(s_.ttl("new"), -1) << "a new key kept as it was has none";
  EXPECT_EQ(s_.expiring(), 1u);
}

TEST_F(Expiry, ExpireDueRemovesSoonestFirstAndAtMostMax) {
  std::vector<int> order(200);
  for (int i = 0; i < 200; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  for (const int i : order) ASSERT_TRUE(s_.set("k" + std::to_string(i), "v", g_now + 1 + i));
  ASSERT_TRUE(s_.set("forever", "v"));
  // Some change or go before their time: the heap must follow.
  EXPECT_TRUE(s_.erase("k10"));
  EXPECT_TRUE(s_.expire("k20", kNoExpiry));
  EXPECT_TRUE(s_.expire("k30", g_now + 1000));
  ASSERT_TRUE(s_.set("k40", "v"));
  EXPECT_EQ(s_.expiring(), 197u);
  EXPECT_EQ(s_.expire_due(1000), 0u) << "nothing is due yet";
  g_now += 100;  // k0..k99 are due, less k10, k20, k30, k40: 96
  EXPECT_EQ(s_.expire_due(50), 50u) << "at most max per call";
  EXPECT_FALSE(s_.peek("k0").found);
  EXPECT_TRUE(s_.peek("k99").found) << "the soonest went first";
  EXPECT_EQ(s_.expire_due(1000), 46u);
  EXPECT_TRUE(s_.peek("k20").found);
  EXPECT_TRUE(s_.peek("k100").found);
  g_now += 10'000;
  EXPECT_EQ(s_.expire_due(1000), 101u) << "k100..k199 and the moved k30";
  EXPECT_EQ(s_.expiring(), 0u);
  EXPECT_EQ(s_.size(), 3u);  // forever, k20, k40
  EXPECT_EQ(row("expired_keys"), 197u);
}

TEST_F(Expiry, AWriteFreesExpiredKeysBeforeItFails) {
  Store s(10 * (Store::kEntryOverhead + 5 + 100));  // noeviction
  s.set_clock(&test_clock);
  const std::string v(100, 'v');
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(s.set("key" + std::to_string(i), v, g_now + 10)) << i;
  EXPECT_FALSE(s.set("more0", v)) << "full, nothing due";
  g_now += 10;
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(s.set("more" + std::to_string(i), v)) << i;
  EXPECT_LE(s.budget()->used(), s.budget()->limit());
  EXPECT_EQ(s.size(), 10u);
}

TEST_F(Expiry, TouchCountsAsAnAccess) {
  // A key read only by one-sided readers is seen through their TOUCH hints:
  // touched between writes it outlives a fill that drops it without them.
  const std::string v(100, 'v');
  for (const bool touched : {false, true}) {
    Store s(10 * (Store::kEntryOverhead + 5 + 100), Eviction::lru);
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(s.set("key" + std::to_string(i), v));
    for (int i = 10; i < 40; ++i) {
      if (touched) {
        EXPECT_TRUE(s.touch_key("key0")) << "before write " << i;
      }
      ASSERT_TRUE(s.set("key" + std::to_string(i), v));
    }
    EXPECT_EQ(s.peek("key0").found, touched) << (touched ? "touched" : "never read");
    EXPECT_FALSE(s.touch_key("nope"));
  }
}

}  // namespace
}  // namespace rkv::kv::store
