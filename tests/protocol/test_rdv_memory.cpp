// Arena and RegCache logic with a FakeRegistrar (no device): size classes,
// growth in chunks, top-up off the critical path, reuse after the last
// reference, limits; cache hits by containment, LRU eviction over budget,
// leases that block eviction, forget(); grantable blocks (one registration
// each, reused across grants, registered ahead by top_up, bounded).
#include <gtest/gtest.h>

#include <vector>

#include "fake_registrar.hpp"
#include "kv/server/arena.hpp"
#include "kv/client/reg_cache.hpp"

namespace rkv::kv {
namespace {

using client::RegCache;
using server::Arena;
using store::LargeValue;
using test::FakeRegistrar;

TEST(Arena, SizeClassesAndChunks) {
  FakeRegistrar reg;
  Arena arena(reg, {4096, 1u << 20, 64u << 20});
  EXPECT_EQ(arena.block_size(1), 4096u);
  EXPECT_EQ(arena.block_size(4097), 8192u);
  EXPECT_EQ(arena.block_size(1u << 20), 1u << 20);
  auto a = arena.allocate(5000);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->bytes.size(), 5000u);
  EXPECT_EQ(reg.registrations(), 1u);  // one 1 MiB chunk of 8 KiB blocks
  EXPECT_EQ(reg.last_access, verbs::Access::local_write | verbs::Access::remote_read);
  std::vector<std::shared_ptr<LargeValue>> many;
  for (int i = 0; i < 127; ++i) many.push_back(arena.allocate(8192));  // the rest of the chunk
  EXPECT_EQ(reg.registrations(), 1u);
  EXPECT_EQ(arena.stats().blocks_in_use, 128u);
  auto b = arena.allocate(8192);  // empty class: grows on demand
  EXPECT_EQ(reg.registrations(), 2u);
  EXPECT_NE(b->addr, a->addr);
  EXPECT_EQ(a->addr, reinterpret_cast<std::uint64_t>(a->bytes.data()));
  EXPECT_EQ(a->rkey, 2001u);
}

TEST(Arena, TopUpKeepsTheNextAllocationFree) {
  FakeRegistrar reg;
  Arena arena(reg, {4096, 4u << 20, 64u << 20});
  auto v1 = arena.allocate(3u << 20);  // 4 MiB class: one block per chunk
  EXPECT_EQ(reg.registrations(), 1u);
  arena.top_up();                      // after the replies are posted
  EXPECT_EQ(reg.registrations(), 2u);
  const auto before = reg.registrations();
  // Steady state: overwrite pattern (new block, then the old one freed).
  for (int i = 0; i < 10; ++i) {
    auto v2 = arena.allocate(3u << 20);
    ASSERT_TRUE(v2);
    arena.top_up();
    v1 = std::move(v2);  // old block back to the free list
    arena.top_up();
  }
  EXPECT_LE(reg.registrations() - before, 1u) << "growth only until the free list covers the pattern";
}

TEST(Arena, BlockReusedOnlyAfterTheLastReference) {
  FakeRegistrar reg;
  Arena arena(reg, {4096, 8192, 64u << 20});  // two 4 KiB blocks per chunk
  auto a = arena.allocate(4096);
  auto b = arena.allocate(4096);
  auto pin = a;  // a transfer's pin
  const auto addr = a->addr;
  a.reset();
  auto c = arena.allocate(4096);
  EXPECT_NE(c->addr, addr) << "still pinned";
  pin.reset();
  auto d = arena.allocate(4096);
  EXPECT_EQ(d->addr, addr);
  EXPECT_EQ(arena.stats().blocks_in_use, 3u);
}

TEST(Arena, MemoryBudgetBoundsItsChunksAndGetsThemBack) {
  FakeRegistrar reg;
  auto budget = std::make_shared<store::MemoryBudget>((1u << 20) + (256u << 10));  // 1.25 MiB
  {
    Arena arena(reg, {4096, 1u << 20, 64u << 20}, budget);
    auto a = arena.allocate(4096);  // one 1 MiB chunk
    ASSERT_TRUE(a);
    EXPECT_EQ(budget->used(), 1u << 20);
    std::vector<std::shared_ptr<LargeValue>> many;
    for (int i = 0; i < 255; ++i) many.push_back(arena.allocate(4096));
    // The class is empty: the next chunk is cut down to the 256 KiB left.
    auto b = arena.allocate(4096);
    ASSERT_TRUE(b);
    EXPECT_EQ(budget->used(), budget->limit());
    EXPECT_EQ(arena.stats().reserved_bytes, budget->limit());
    for (int i = 0; i < 63; ++i) many.push_back(arena.allocate(4096));
    EXPECT_TRUE(many.back());
    EXPECT_FALSE(arena.allocate(4096)) << "over the budget";
    EXPECT_FALSE(arena.allocate(1u << 20)) << "no class may grow";
    many.pop_back();
    EXPECT_TRUE(arena.allocate(4096)) << "a freed block is reused without growing";
    EXPECT_EQ(budget->used(), budget->limit());
  }
  EXPECT_EQ(budget->used(), 0u) << "the chunks went with the arena's state";
}

TEST(Arena, LimitAndRegistrationFailureGiveNull) {
  FakeRegistrar reg;
  Arena arena(reg, {4096, 1u << 20, 2u << 20});
  auto a = arena.allocate(2u << 20);
  ASSERT_TRUE(a);
  EXPECT_FALSE(arena.allocate(4096)) << "over max_bytes";
  Arena other(reg, {4096, 1u << 20, 64u << 20});
  reg.fail_next = true;
  EXPECT_FALSE(other.allocate(4096));
  EXPECT_TRUE(other.allocate(4096));
}

TEST(Arena, BlocksOutliveTheArena) {
  FakeRegistrar reg;
  std::shared_ptr<LargeValue> v;
  {
    Arena arena(reg, {});
    v = arena.allocate(10000);
  }
  EXPECT_EQ(reg.live, 1);
  v->bytes[0] = std::byte{1};  // still mapped and registered
  v.reset();
  EXPECT_EQ(reg.live, 0);
}

TEST(Arena, RecordsAreRecycledAndTheStateGoesWithTheLastBlock) {
  FakeRegistrar reg;
  std::shared_ptr<LargeValue> kept;
  {
    Arena a(reg, {});
    Arena arena(std::move(a));  // the state moves with it
    for (int i = 0; i < 3000; ++i) {  // more than the spare records kept: some are freed
      std::vector<std::shared_ptr<LargeValue>> batch;
      for (int j = 0; j < (i % 3 == 0 ? 1100 : 2); ++j) batch.push_back(arena.allocate(100));
      ASSERT_TRUE(batch.back());
      if (i == 2999) kept = batch.front();
    }
    EXPECT_EQ(arena.stats().blocks_in_use, 1u);
  }
  EXPECT_EQ(reg.live, 1) << "the kept block's chunk is still registered";
  kept->bytes[0] = std::byte{1};
  kept.reset();
  EXPECT_EQ(reg.live, 0) << "the state (and its spare records) went with the last block";
}

constexpr verbs::Access kGrantAccess =
    verbs::Access::local_write | verbs::Access::remote_read | verbs::Access::mw_bind;

TEST(Arena, GrantableBlocksAreRegistrationsOfTheirOwnReusedAcrossGrants) {
  FakeRegistrar reg;
  Arena arena(reg, {4096, 1u << 20, 64u << 20, 64u << 10, 8});
  server::GrantBlock g = arena.allocate_grantable(5000);
  ASSERT_TRUE(g.block);
  ASSERT_NE(g.registration, nullptr);
  EXPECT_EQ(reg.registrations(), 1u) << "one block registered, not its 64 KiB chunk";
  EXPECT_EQ(reg.last_access, kGrantAccess);
  EXPECT_EQ(reg.last_length, 8192u);
  EXPECT_EQ(g.block->bytes.size(), 5000u);
  EXPECT_EQ(g.block->capacity, 8192u);
  EXPECT_EQ(g.block->rkey, g.registration->rkey());
  EXPECT_EQ(g.block->lkey, g.registration->lkey());
  EXPECT_EQ(g.block->addr, g.registration->addr());
  EXPECT_EQ(g.block->addr, reinterpret_cast<std::uint64_t>(g.block->bytes.data()));

  server::GrantBlock g2 = arena.allocate_grantable(8192);
  ASSERT_TRUE(g2.block);
  EXPECT_EQ(reg.registrations(), 2u);
  EXPECT_NE(g2.block->rkey, g.block->rkey);
  EXPECT_EQ(g2.block->addr, g.block->addr + 8192) << "from the same chunk";

  auto plain = arena.allocate(8192);  // an ordinary block: a chunk of its own, no mw_bind
  ASSERT_TRUE(plain);
  EXPECT_EQ(reg.registrations(), 3u);
  EXPECT_EQ(reg.last_access, verbs::Access::local_write | verbs::Access::remote_read);
  EXPECT_EQ(arena.stats().grant_blocks, 2u);
  EXPECT_EQ(arena.stats().blocks_in_use, 3u);
  EXPECT_EQ(arena.stats().reserved_bytes, (64u << 10) + (1u << 20));

  const std::uint64_t addr = g.block->addr;
  const std::uint32_t rkey = g.block->rkey;
  const conn::Registration* r = g.registration;
  g = {};
  plain.reset();
  server::GrantBlock again = arena.allocate_grantable(6000);
  ASSERT_TRUE(again.block);
  EXPECT_EQ(again.block->addr, addr) << "the block given back is granted again";
  EXPECT_EQ(again.block->rkey, rkey);
  EXPECT_EQ(again.registration, r);
  EXPECT_EQ(reg.registrations(), 3u) << "with the registration it kept";
  EXPECT_NE(arena.allocate(8192)->rkey, rkey) << "an ordinary allocation never takes a grantable block";
}

TEST(Arena, TopUpRegistersTheNextGrantableBlockWithinTheLimit) {
  FakeRegistrar reg;
  Arena arena(reg, {4096, 1u << 20, 64u << 20, 8192, 3});  // two 4 KiB grantable blocks per chunk, 3 at most
  server::GrantBlock a = arena.allocate_grantable(4096);
  ASSERT_TRUE(a.block);
  EXPECT_EQ(reg.registrations(), 1u);
  arena.top_up();  // after the replies are posted
  EXPECT_EQ(reg.registrations(), 2u);
  server::GrantBlock b = arena.allocate_grantable(4096);
  ASSERT_TRUE(b.block);
  EXPECT_EQ(reg.registrations(), 2u) << "registered ahead by top_up";
  arena.top_up();  // grows a second chunk for the third
  server::GrantBlock c = arena.allocate_grantable(100);
  ASSERT_TRUE(c.block);
  EXPECT_EQ(reg.registrations(), 3u);
  EXPECT_EQ(arena.stats().chunks, 2u);
  arena.top_up();
  EXPECT_EQ(reg.registrations(), 3u) << "max_grant_blocks reached";
  EXPECT_FALSE(arena.allocate_grantable(4096).block);
  EXPECT_EQ(arena.allocate_grantable(4096).registration, nullptr);
  const std::uint32_t key = b.block->rkey;
  b = {};
  server::GrantBlock d = arena.allocate_grantable(4096);
  ASSERT_TRUE(d.block) << "a block given back is granted within the limit";
  EXPECT_EQ(d.block->rkey, key);
  EXPECT_TRUE(arena.allocate(4096)) << "the limit binds grantable blocks only";
}

TEST(Arena, GrantableBlocksFailCleanlyAndOutliveTheArena) {
  FakeRegistrar reg;
  auto budget = std::make_shared<store::MemoryBudget>(std::size_t{64} << 10);
  server::GrantBlock kept;
  {
    Arena arena(reg, {4096, 1u << 20, 64u << 20, 64u << 10, 100}, budget);
    reg.fail_next = true;
    EXPECT_FALSE(arena.allocate_grantable(4096).block) << "registration failed";
    EXPECT_EQ(budget->used(), 64u << 10) << "the chunk is mapped and charged; its blocks wait to be registered";
    kept = arena.allocate_grantable(4096);
    ASSERT_TRUE(kept.block);
    EXPECT_FALSE(arena.allocate_grantable(128u << 10).block) << "over the memory limit";
    EXPECT_EQ(reg.live, 1);
  }
  EXPECT_EQ(reg.live, 1) << "the kept block keeps its registration";
  kept.block->bytes[0] = std::byte{1};  // still mapped
  kept = {};
  EXPECT_EQ(reg.live, 0);
  EXPECT_EQ(budget->used(), 0u);
}

TEST(RegCache, HitByContainmentAndLru) {
  FakeRegistrar reg;
  RegCache cache(reg, 3 * 4096);
  std::vector<std::byte> a(4096), b(4096), c(4096), d(4096);
  {
    auto l1 = cache.acquire(a, verbs::Access::remote_read);
    EXPECT_EQ(l1.addr_of(a.data() + 10), reinterpret_cast<std::uint64_t>(a.data()) + 10);
    auto l2 = cache.acquire(std::span(a).subspan(100, 200), verbs::Access::remote_read);  // inside: hit
    EXPECT_EQ(l2.rkey(), l1.rkey());
    auto l3 = cache.acquire(a, verbs::Access::local_write);  // other access: miss
    EXPECT_NE(l3.rkey(), l1.rkey());
  }
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 2u);
  (void)cache.acquire(b, verbs::Access::remote_read);
  (void)cache.acquire(c, verbs::Access::remote_read);  // 4 entries > budget of 3: LRU evicted
  EXPECT_EQ(cache.stats().entries, 3u);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(reg.live, 3);
}

TEST(RegCache, LeasesBlockEvictionAndForget) {
  FakeRegistrar reg;
  RegCache cache(reg, 4096);
  std::vector<std::byte> a(4096), b(4096);
  auto la = cache.acquire(a, verbs::Access::remote_read);
  auto lb = cache.acquire(b, verbs::Access::remote_read);
  EXPECT_EQ(reg.live, 2) << "both in use: over budget but not evictable";
  la.reset();
  EXPECT_EQ(reg.live, 1) << "released and over budget: evicted";
  cache.forget(b);  // in use: dropped at release
  EXPECT_EQ(reg.live, 1);
  lb.reset();
  EXPECT_EQ(reg.live, 0);
  auto again = cache.acquire(b, verbs::Access::remote_read);
  EXPECT_EQ(cache.stats().misses, 3u) << "forgotten: registered again";
}

}  // namespace
}  // namespace rkv::kv
