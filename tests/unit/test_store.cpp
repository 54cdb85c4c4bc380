// Unit tests for kv::store::Store: set/get/erase semantics, byte accounting, view
// stability, and that GET with a string_view key does not allocate.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>
#include <string>
#include <string_view>

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
  s.set("alpha", "one");
  s.set("beta", "");
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
  s.set("k", "short");
  s.set("k", "a much longer value than before");
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.get("k").value, "a much longer value than before");
  EXPECT_EQ(s.bytes(), 1u + 31u);
  s.set("k", "x");
  EXPECT_EQ(s.bytes(), 2u);
}

TEST(Store, Erase) {
  Store s;
  s.set("a", "1");
  s.set("bb", "22");
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
  s.set(key, val);
  EXPECT_FALSE(s.get("a").found);  // the NUL is part of the key
  auto r = s.get(key);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.value, val);
}

TEST(Store, ViewSurvivesOtherKeysMutating) {
  Store s;
  s.set("stable", std::string(100, 'v'));
  const std::string_view v = s.get("stable").value;
  for (int i = 0; i < 5000; ++i) s.set("k" + std::to_string(i), "x");  // forces rehashes
  for (int i = 0; i < 5000; i += 2) s.erase("k" + std::to_string(i));
  EXPECT_EQ(v, std::string(100, 'v'));
  EXPECT_EQ(v.data(), s.get("stable").value.data());
}

TEST(Store, GetDoesNotAllocate) {
  Store s;
  const std::string long_key(200, 'k');  // beyond any small-string buffer
  s.set(long_key, "value");
  s.set("other", "v");
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
  s.set(long_key, std::string(64, 'a'));
  g_allocs = 0;
  g_counting = true;
  s.set(long_key, std::string_view("short"));  // fits the existing value buffer
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
  s.set_large("big", b.make('L', 8192));
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
  s.set_large("big", b.make('L', 8192));
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
  s.set("k", "old");
  EXPECT_TRUE(s.erase("k"));
  s.set("k", "new");
  EXPECT_EQ(s.get("k").value, "new");
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.bytes(), 4u);
}

}  // namespace
}  // namespace rkv::kv::store
