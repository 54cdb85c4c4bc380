// Unit tests for kv::store::Store: set/get/erase semantics, byte accounting, view
// stability, and that GET with a string_view key does not allocate.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kv/store/store.hpp"

// Counting global allocator: lets the test prove get() never allocates.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0};
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
// noinline: once inlined, GCC pairs `new` with the free() inside and reports a
// (false) -Wmismatched-new-delete.
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace rkv::kv::store {
namespace {

TEST(Store, MissingKeyIsNotFound) {
  Store s;
  const auto r = s.get("nope");
  EXPECT_FALSE(r.found);
  EXPECT_TRUE(r.value.empty());
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.bytes(), 0u);
}

TEST(Store, SetThenGet) {
  Store s;
  EXPECT_TRUE(s.set("alpha", "one"));
  EXPECT_TRUE(s.set("beta", ""));
  auto a = s.get("alpha");
  ASSERT_TRUE(a.found);
  EXPECT_EQ(a.value, "one");
  auto b = s.get("beta");
  ASSERT_TRUE(b.found);  // an empty value is still a value
  EXPECT_EQ(b.value, "");
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(s.bytes(), 5u + 3u + 4u + 0u);
}

TEST(Store, OverwriteAdjustsBytes) {
  Store s;
  EXPECT_TRUE(s.set("k", "short"));
  EXPECT_TRUE(s.set("k", "a much longer value than before"));
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.get("k").value, "a much longer value than before");
  EXPECT_EQ(s.bytes(), 1u + 31u);
  EXPECT_TRUE(s.set("k", "x"));
  EXPECT_EQ(s.bytes(), 2u);
}

TEST(Store, Erase) {
  Store s;
  EXPECT_TRUE(s.set("a", "1"));
  EXPECT_TRUE(s.set("bb", "22"));
  EXPECT_TRUE(s.erase("a"));
  EXPECT_FALSE(s.erase("a"));
  EXPECT_FALSE(s.get("a").found);
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.bytes(), 4u);
  EXPECT_TRUE(s.erase("bb"));
  EXPECT_EQ(s.bytes(), 0u);
  EXPECT_EQ(s.size(), 0u);
}

TEST(Store, BinaryKeysAndValues) {
  Store s;
  const std::string key("a\0b", 3);
  const std::string val("\0\xff\0", 3);
  EXPECT_TRUE(s.set(key, val));
  EXPECT_FALSE(s.get("a").found);  // the NUL is part of the key
  auto r = s.get(key);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.value, val);
}

TEST(Store, ViewSurvivesOtherKeysMutating) {
  Store s;
  EXPECT_TRUE(s.set("stable", std::string(100, 'v')));
  const std::string_view v = s.get("stable").value;
  for (int i = 0; i < 5000; ++i) EXPECT_TRUE(s.set("k" + std::to_string(i), "x"));  // forces rehashes
  for (int i = 0; i < 5000; i += 2) s.erase("k" + std::to_string(i));
  EXPECT_EQ(v, std::string(100, 'v'));
  EXPECT_EQ(v.data(), s.get("stable").value.data());
}

TEST(Store, GetDoesNotAllocate) {
  Store s;
  const std::string long_key(200, 'k');  // beyond any small-string buffer
  EXPECT_TRUE(s.set(long_key, "value"));
  EXPECT_TRUE(s.set("other", "v"));
  const std::string probe = long_key;  // separate storage, same contents
  const std::string missing(300, 'm');

  g_allocs = 0;
  g_counting = true;
  const auto hit = s.get(std::string_view(probe));
  const auto miss = s.get(std::string_view(missing));
  g_counting = false;

  EXPECT_TRUE(hit.found);
  EXPECT_FALSE(miss.found);
  EXPECT_EQ(g_allocs.load(), 0);

  // Sanity check that the counter works at all.
  g_counting = true;
  std::string* heap = new std::string(long_key);
  g_counting = false;
  delete heap;
  EXPECT_GE(g_allocs.load(), 1);
}

TEST(Store, OverwriteDoesNotCopyKey) {
  Store s;
  const std::string long_key(200, 'k');
  EXPECT_TRUE(s.set(long_key, std::string(64, 'a')));
  g_allocs = 0;
  g_counting = true;
  EXPECT_TRUE(s.set(long_key, std::string_view("short")));  // fits the existing value buffer
  g_counting = false;
  EXPECT_EQ(g_allocs.load(), 0);
  EXPECT_EQ(s.get(long_key).value, "short");
}

// A large value whose block reports when its last reference went (the
// server's Arena gives the block back then, and may hand it out again).
struct TrackedBlock {
  std::vector<std::byte> mem;
  bool freed = false;
  LargeRef make(char fill, std::size_t n) {
    mem.assign(n, std::byte(fill));
    auto v = std::shared_ptr<LargeValue>(new LargeValue{}, [this](LargeValue* p) {
      freed = true;
      delete p;
    });
    v->bytes = mem;
    v->capacity = n;
    return v;
  }
};

TEST(Store, EraseFreesALargeValueAtOnceWhenNothingPinsIt) {
  Store s;
  TrackedBlock b;
  EXPECT_TRUE(s.set_large("big", b.make('L', 8192)));
  EXPECT_EQ(s.bytes(), 3u + 8192u);
  EXPECT_TRUE(s.erase("big"));
  EXPECT_TRUE(b.freed) << "the Store held the only reference";
  EXPECT_FALSE(s.get("big").found);
  EXPECT_EQ(s.bytes(), 0u);
  EXPECT_EQ(s.size(), 0u);
}

TEST(Store, EraseOfAPinnedLargeValueKeepsItsBytesUntilTheTransferLetsGo) {
  Store s;
  TrackedBlock b;
  EXPECT_TRUE(s.set_large("big", b.make('L', 8192)));
  LargeRef pin = s.get("big").large;  // what a rendezvous GET (WRITE or pull) holds
  ASSERT_TRUE(pin);
  EXPECT_TRUE(s.erase("big"));
  EXPECT_FALSE(b.freed) << "a transfer still reads it: the block must not be reused yet";
  EXPECT_FALSE(s.get("big").found);
  EXPECT_EQ(pin->view(), std::string(8192, 'L'));
  pin.reset();  // the WRITE completed / the client's RELEASE arrived
  EXPECT_TRUE(b.freed);
}

TEST(Store, SetAfterEraseIsANewKey) {
  Store s;
  EXPECT_TRUE(s.set("k", "old"));
  EXPECT_TRUE(s.erase("k"));
  EXPECT_TRUE(s.set("k", "new"));
  EXPECT_EQ(s.get("k").value, "new");
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.bytes(), 4u);
}

// --- memory limit (MemoryBudget, kvd --max-memory) ---------------------------

TEST(Store, SetOverTheMemoryLimitFailsAndChangesNothing) {
  const std::size_t entry = Store::kEntryOverhead + 2 + 100;  // key "kN" + a 100-byte value
  Store s(3 * entry);
  EXPECT_TRUE(s.set("k1", std::string(100, 'a')));
  EXPECT_TRUE(s.set("k2", std::string(100, 'b')));
  EXPECT_TRUE(s.set("k3", std::string(100, 'c')));
  EXPECT_EQ(s.budget()->used(), 3 * entry);
  EXPECT_FALSE(s.set("k4", std::string(100, 'd'))) << "a fourth key is over the limit";
  EXPECT_FALSE(s.get("k4").found);
  EXPECT_FALSE(s.set("k1", std::string(101, 'A'))) << "a larger overwrite is over it too";
  EXPECT_EQ(s.get("k1").value, std::string(100, 'a')) << "the stored value is intact";
  EXPECT_TRUE(s.set("k1", std::string(50, 'x'))) << "a smaller overwrite gives memory back";
  EXPECT_EQ(s.budget()->used(), 3 * entry - 50);
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.bytes(), 6u + 250u);
  EXPECT_TRUE(s.erase("k2"));  // DEL frees its entry's charge
  EXPECT_EQ(s.budget()->used(), 2 * entry - 50);
  EXPECT_TRUE(s.set("k4", std::string(100, 'd')));
  EXPECT_EQ(s.get("k4").value, std::string(100, 'd'));
  EXPECT_EQ(s.get("k3").value, std::string(100, 'c'));
}

TEST(Store, LargeValuesChargeOnlyTheirKeyEntry) {
  Store s(Store::kEntryOverhead + 3);
  TrackedBlock b;
  EXPECT_TRUE(s.set_large("big", b.make('L', 8192))) << "the block is its arena's charge";
  EXPECT_EQ(s.budget()->used(), Store::kEntryOverhead + 3);
  EXPECT_TRUE(s.large_fits("big")) << "an overwrite charges nothing more";
  EXPECT_FALSE(s.large_fits("two"));
  TrackedBlock other;
  EXPECT_FALSE(s.set_large("two", other.make('M', 8192))) << "a second key does not fit";
  EXPECT_TRUE(other.freed) << "the refused block is not kept";
  EXPECT_EQ(s.get("big").value, std::string(8192, 'L'));
  EXPECT_TRUE(s.erase("big"));
  EXPECT_EQ(s.budget()->used(), 0u);
}

TEST(Store, MemoryBudgetRefusesWhatDoesNotFit) {
  MemoryBudget b(100);
  EXPECT_TRUE(b.try_charge(60));
  EXPECT_FALSE(b.try_charge(41));
  EXPECT_EQ(b.used(), 60u);
  EXPECT_EQ(b.available(), 40u);
  b.charge(50);  // forced (setup): over the limit
  EXPECT_EQ(b.available(), 0u);
  EXPECT_FALSE(b.try_charge(1));
  b.release(110);
  EXPECT_EQ(b.used(), 0u);
  EXPECT_TRUE(MemoryBudget{}.unlimited());
}

// sweep() drops every doomed key and only those, a few buckets per call,
// through the on_evict hook; a set that grows the table between calls
// (rehashing it) makes the next call sweep it all, and none is missed.
TEST(Store, SweepDropsEveryDoomedKeyInStepsAndAcrossARehash) {
  Store s;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(s.set("k" + std::to_string(i), "v"));
  const auto ends_in = [](char c) { return [c](std::string_view k) { return k.back() == c; }; };
  std::vector<std::string> gone;
  s.on_evict([&](std::string_view k) { gone.emplace_back(k); });

  Store::SweepCursor cursor;
  int calls = 1;
  for (; !s.sweep(cursor, 16, ends_in('7')); ++calls) {
    ASSERT_TRUE(s.set("n" + std::to_string(calls) + "x", "v"));  // a write between steps
  }
  EXPECT_GT(calls, 10) << "one call visited every bucket";
  EXPECT_EQ(gone.size(), 100u);

  cursor = {};
  ASSERT_FALSE(s.sweep(cursor, 16, ends_in('3')));
  // Three times as many keys: the table (load factor 1) must grow.
  for (int i = 0; i < 3000; ++i) ASSERT_TRUE(s.set("m" + std::to_string(i) + "x", "v"));
  EXPECT_TRUE(s.sweep(cursor, 16, ends_in('3'))) << "a rehashed table is swept to the end at once";
  EXPECT_EQ(gone.size(), 200u);
  EXPECT_EQ(s.dropped_keys(), 200u);
  s.for_each([&](std::string_view k, const Store::Lookup&) {
    EXPECT_TRUE(k.back() != '7' && k.back() != '3') << k;
  });
}

// visit() (a primary's catch-up walk) reaches every key with its value and
// expiry, a few buckets per call, changing nothing; a rehash between calls
// makes the next call visit the whole table, so none is missed.
TEST(Store, VisitReachesEveryKeyInStepsAndAcrossARehash) {
  constexpr ExpireAt kLater = 4'000'000'000'000;  // ms: in 2096
  Store s;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(s.set("k" + std::to_string(i), "v" + std::to_string(i), i == 5 ? kLater : kNoExpiry));
  std::set<std::string> seen;
  const Store::Visitor note = [&](std::string_view k, const Store::Lookup& e) {
    EXPECT_TRUE(e.found);
    if (k.front() == 'k') {
      EXPECT_EQ(e.value, "v" + std::string(k.substr(1))) << k;
      EXPECT_EQ(e.expire_at, k == "k5" ? kLater : kNoExpiry) << k;
    }
    seen.emplace(k);
  };
  Store::SweepCursor cursor;
  int calls = 1;
  for (; !s.visit(cursor, 16, note); ++calls) {
  }
  EXPECT_GT(calls, 10) << "one call visited every bucket";
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_EQ(s.size(), 1000u) << "a visit changes nothing";

  seen.clear();
  cursor = {};
  ASSERT_FALSE(s.visit(cursor, 16, note));
  // Three times as many keys: the table (load factor 1) must grow.
  for (int i = 0; i < 3000; ++i) ASSERT_TRUE(s.set("m" + std::to_string(i), "v"));
  EXPECT_TRUE(s.visit(cursor, 16, note)) << "a rehashed table is visited to the end at once";
  EXPECT_EQ(seen.size(), 4000u) << "no key missed across the rehash";
}

}  // namespace
}  // namespace rkv::kv::store
