// Unit tests for the Store's eviction (kv/store/eviction.cpp, kvd --eviction):
// writes over the memory limit succeed by dropping cold keys, never more
// memory than the limit, the key being written is never the one dropped, a
// recently read key outlives a fill under lru, a frequently read one under
// lfu, and a write that needs a block frees a block of its own size class.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kv/store/store.hpp"

namespace rkv::kv::store {
namespace {

std::string key(int i) { return "key" + std::to_string(i); }

std::uint64_t evicted(const Store& s) {
  StatRows rows;
  s.append_stats(rows);
  for (const auto& r : rows) {
    if (r.name == "evicted_keys") return r.value;
  }
  ADD_FAILURE() << "no evicted_keys row";
  return 0;
}

// Room for about ten 100-byte string values.
constexpr std::size_t kEntry = Store::kEntryOverhead + 5 + 100;
constexpr std::size_t kLimit = 10 * kEntry;

TEST(Eviction, NamesRoundTrip) {
  for (const Eviction e : {Eviction::noeviction, Eviction::lru, Eviction::lfu}) {
    EXPECT_EQ(eviction_from(to_string(e)), e);
  }
  EXPECT_FALSE(eviction_from("allkeys-lru"));
}

TEST(Eviction, NoevictionRefusesAndDropsNothing) {
  Store s(kLimit);
  int stored = 0;
  for (int i = 0; i < 100; ++i) stored += s.set(key(i), std::string(100, 'v')) ? 1 : 0;
  EXPECT_LT(stored, 100);
  EXPECT_EQ(s.size(), static_cast<std::size_t>(stored));
  EXPECT_EQ(evicted(s), 0u);
  EXPECT_TRUE(s.get(key(0)).found) << "the first keys stay; later writes were refused";
}

TEST(Eviction, LruWritesEverythingWithinTheLimitAndKeepsTheRecentlyRead) {
  Store s(kLimit, Eviction::lru);
  ASSERT_TRUE(s.set("hot", std::string(100, 'h')));
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(s.set(key(i), std::string(100, static_cast<char>('a' + i % 26)))) << "write " << i;
    EXPECT_LE(s.budget()->used(), kLimit);
    ASSERT_TRUE(s.get("hot").found) << "read before every write, it must never be the coldest (write " << i << ")";
  }
  EXPECT_GT(evicted(s), 900u);
  EXPECT_LE(s.size(), 10u);
  EXPECT_EQ(s.get(key(999)).value, std::string(100, static_cast<char>('a' + 999 % 26))) << "the last write";
  EXPECT_EQ(s.get("hot").value, std::string(100, 'h'));
}

TEST(Eviction, LruDropsAReadOnceKeyThatLfuKeeps) {
  for (const Eviction policy : {Eviction::lru, Eviction::lfu}) {
    SCOPED_TRACE(std::string(to_string(policy)));
    Store s(kLimit, policy);
    ASSERT_TRUE(s.set("often", std::string(100, 'o')));
    for (int r = 0; r < 2000; ++r) ASSERT_TRUE(s.get("often").found);  // popular, then idle
    for (int i = 0; i < 200; ++i) {
      ASSERT_TRUE(s.set(key(i), std::string(100, 'x')));
      ASSERT_TRUE(s.get(key(i)).found);  // each newcomer read once
    }
    if (policy == Eviction::lfu) {
      EXPECT_TRUE(s.get("often").found) << "its counter outweighs 200 keys read once";
    } else {
      EXPECT_FALSE(s.get("often").found) << "untouched for 400 accesses: the least recently used";
    }
  }
}

// A block source of fixed size classes with a fixed number of blocks each, as
// an arena at its memory limit: a freed block is reused by its own class only.
struct Classes {
  std::vector<std::vector<std::byte>> memory;
  std::size_t free16k = 8, free64k = 8;
  std::shared_ptr<LargeValue> allocate(std::size_t n) {
    std::size_t& free = n <= 16384 ? free16k : free64k;
    if (n > 65536 || free == 0) return nullptr;
    --free;
    const std::size_t cap = size(n);
    memory.emplace_back(cap);
    auto v = std::shared_ptr<LargeValue>(new LargeValue{}, [&free](LargeValue* p) {
      ++free;
      delete p;
    });
    v->bytes = std::span<std::byte>(memory.back()).first(n);
    v->capacity = cap;
    return v;
  }
  static std::size_t size(std::size_t n) { return n <= 16384 ? 16384 : 65536; }
};

TEST(Eviction, AWriteThatNeedsABlockFreesOneOfItsOwnClass) {
  Classes c;  // before the Store: its blocks' deleters count into it
  c.memory.reserve(1000);
  Store s(MemoryBudget::kUnlimited, Eviction::lru);
  s.attach_large_blocks([&c](std::size_t n) { return c.allocate(n); }, &Classes::size);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(s.put("small" + std::to_string(i), std::string(8000, 's')), Store::Kept::large);
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(s.put(key(i), std::string(60000, 'L')), Store::Kept::large) << "write " << i;
  }
  EXPECT_EQ(evicted(s), 32u) << "each write past the eighth freed exactly one 64 KiB block";
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(s.get("small" + std::to_string(i)).found) << "no 16 KiB block was dropped";
  EXPECT_TRUE(s.get(key(39)).found);
  s.detach();
}

TEST(Eviction, EvictingPinnedValuesFreesNoBlockUntilTheirPinsGo) {
  Classes c;  // before the Store: its blocks' deleters count into it
  c.memory.reserve(1000);
  Store s(MemoryBudget::kUnlimited, Eviction::lru);
  s.attach_large_blocks([&c](std::size_t n) { return c.allocate(n); }, &Classes::size);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(s.put(key(i), std::string(60000, 'a')), Store::Kept::large);
  const LargeRef pinned = s.get(key(0)).large;  // transfers hold every block
  std::vector<LargeRef> pins;
  for (int i = 1; i < 8; ++i) pins.push_back(s.get(key(i)).large);  // every block held
  EXPECT_EQ(s.put("new", std::string(60000, 'n')), Store::Kept::no_memory)
      << "every block is pinned: dropping keys frees none, the write fails";
  EXPECT_EQ(evicted(s), 8u) << "it tried every key (bounded)";
  pins.clear();  // the transfers end: their blocks go back
  EXPECT_EQ(s.put("new", std::string(60000, 'n')), Store::Kept::large);
  EXPECT_EQ(pinned->view(), std::string(60000, 'a')) << "a pinned value stays whole after its key went";
  s.detach();
}

}  // namespace
}  // namespace rkv::kv::store
